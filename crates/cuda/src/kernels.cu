// oxllm's CUDA kernels, compiled at start-up by NVRTC for the running GPU.
//
// Every kernel computes each output row from that row's inputs alone, with a reduction order
// fixed by the row's own shape, so a row's bits do not depend on which rows share its batch.
// Half floats are converted with PTX `cvt` so no header is needed.

typedef unsigned int u32;
typedef unsigned short u16;
#define INFINITY __int_as_float(0x7f800000)

__device__ __forceinline__ float bf16_to_f32(u16 v) { return __uint_as_float(((u32)v) << 16); }
__device__ __forceinline__ float f16_to_f32(u16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < warps ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  float t = total;
  __syncthreads();
  return t;
}

extern "C" __global__ void embed_f32(const u32* tokens, const float* table, float* out, int hidden,
                                     int vocab) {
  u32 id = tokens[blockIdx.x];
  float* o = out + (size_t)blockIdx.x * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x)
    o[j] = id < (u32)vocab ? table[(size_t)id * hidden + j] : 0.0f;
}

extern "C" __global__ void embed_bf16(const u32* tokens, const u16* table, float* out, int hidden,
                                      int vocab) {
  u32 id = tokens[blockIdx.x];
  float* o = out + (size_t)blockIdx.x * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x)
    o[j] = id < (u32)vocab ? bf16_to_f32(table[(size_t)id * hidden + j]) : 0.0f;
}

// out[row] = x[src] / sqrt(mean(x[src]^2) + eps) * w, src = indices ? indices[row] : row.
extern "C" __global__ void rms_norm(const float* x, const u32* indices, int src_rows, const float* w,
                                    float* out, int cols, float eps) {
  int row = blockIdx.x;
  u32 src = indices ? indices[row] : (u32)row;
  float* o = out + (size_t)row * cols;
  if (src >= (u32)src_rows) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) o[j] = 0.0f;
    return;
  }
  const float* xr = x + (size_t)src * cols;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) ss += xr[j] * xr[j];
  ss = block_sum(ss);
  float scale = 1.0f / sqrtf(ss / (float)cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) o[j] = xr[j] * scale * w[j];
}

// out[r, n] = sum_k x[r, k] * W[n, k] (+ bias[n]); one warp per column n, rows in groups of
// ROWS, each lane accumulating its own k-slices in order, then a fixed butterfly.
#define ROWS 8
template <bool BF16>
__device__ void matmul_impl(const float* x, const void* wv, const float* bias, float* out, int m,
                            int n, int k) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (warp >= n) return;
  bool vec = (k % 8) == 0;
  int kv = vec ? k : 0;
  for (int r0 = 0; r0 < m; r0 += ROWS) {
    float acc[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) acc[i] = 0.0f;
    for (int c = lane * 8; c < kv; c += 32 * 8) {
      float wf[8];
      if (BF16) {
        uint4 p = *(const uint4*)((const u16*)wv + (size_t)warp * k + c);
        u32 words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
          wf[2 * e] = __uint_as_float(words[e] << 16);
          wf[2 * e + 1] = __uint_as_float(words[e] & 0xffff0000u);
        }
      } else {
        const float4* p = (const float4*)((const float*)wv + (size_t)warp * k + c);
        float4 a = p[0], b = p[1];
        wf[0] = a.x; wf[1] = a.y; wf[2] = a.z; wf[3] = a.w;
        wf[4] = b.x; wf[5] = b.y; wf[6] = b.z; wf[7] = b.w;
      }
#pragma unroll
      for (int i = 0; i < ROWS; i++) {
        if (r0 + i < m) {
          const float4* xp = (const float4*)(x + (size_t)(r0 + i) * k + c);
          float4 a = xp[0], b = xp[1];
          float s = acc[i];
          s = fmaf(a.x, wf[0], s); s = fmaf(a.y, wf[1], s); s = fmaf(a.z, wf[2], s);
          s = fmaf(a.w, wf[3], s); s = fmaf(b.x, wf[4], s); s = fmaf(b.y, wf[5], s);
          s = fmaf(b.z, wf[6], s); s = fmaf(b.w, wf[7], s);
          acc[i] = s;
        }
      }
    }
    for (int c = kv + lane; c < k; c += 32) {
      float wf = BF16 ? bf16_to_f32(((const u16*)wv)[(size_t)warp * k + c])
                      : ((const float*)wv)[(size_t)warp * k + c];
#pragma unroll
      for (int i = 0; i < ROWS; i++)
        if (r0 + i < m) acc[i] = fmaf(x[(size_t)(r0 + i) * k + c], wf, acc[i]);
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
      float s = warp_sum(acc[i]);
      if (lane == 0 && r0 + i < m) out[(size_t)(r0 + i) * n + warp] = s + (bias ? bias[warp] : 0.0f);
    }
  }
}

extern "C" __global__ void matmul_bf16(const float* x, const u16* w, const float* bias, float* out,
                                       int m, int n, int k) {
  matmul_impl<true>(x, w, bias, out, m, n, k);
}

extern "C" __global__ void matmul_f32(const float* x, const float* w, const float* bias, float* out,
                                      int m, int n, int k) {
  matmul_impl<false>(x, w, bias, out, m, n, k);
}

// Per (row, head): optional RMSNorm over the head with qn / kn, then RoPE at the row's position.
// Heads [0, n_heads) are q's, [n_heads, n_heads + n_kv_heads) k's. head_dim <= 512.
extern "C" __global__ void qk_norm_rope(float* q, float* k, const u32* positions, int n_heads,
                                        int n_kv_heads, int head_dim, const float* qn,
                                        const float* kn, float eps, const float* inv_freq,
                                        int rotary_dim, int split_half) {
  __shared__ float h[512];
  int row = blockIdx.x, head = blockIdx.y;
  bool is_q = head < n_heads;
  float* base = is_q ? q + ((size_t)row * n_heads + head) * head_dim
                     : k + ((size_t)row * n_kv_heads + (head - n_heads)) * head_dim;
  const float* w = is_q ? qn : kn;
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) h[j] = base[j];
  __syncthreads();
  if (w) {
    float ss = 0.0f;
    for (int j = threadIdx.x; j < head_dim; j += blockDim.x) ss += h[j] * h[j];
    ss = block_sum(ss);
    float scale = 1.0f / sqrtf(ss / (float)head_dim + eps);
    for (int j = threadIdx.x; j < head_dim; j += blockDim.x) h[j] = h[j] * scale * w[j];
    __syncthreads();
  }
  float pos = (float)positions[row];
  int half = rotary_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float angle = pos * inv_freq[i];
    float c = cosf(angle), s = sinf(angle);
    int ia = split_half ? i : 2 * i, ib = split_half ? i + half : 2 * i + 1;
    float a = h[ia], b = h[ib];
    base[ia] = a * c - b * s;
    base[ib] = a * s + b * c;
  }
  for (int j = rotary_dim + threadIdx.x; j < head_dim; j += blockDim.x) base[j] = h[j];
}

extern "C" __global__ void store_kv_f32(const int* slots, const float* k, const float* v,
                                        float* kc, float* vc, int width, long long cap) {
  int row = blockIdx.x;
  int s = slots[row];
  if (s < 0 || (long long)s >= cap) return;
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    kc[(size_t)s * width + j] = k[(size_t)row * width + j];
    vc[(size_t)s * width + j] = v[(size_t)row * width + j];
  }
}

extern "C" __global__ void store_kv_f16(const int* slots, const float* k, const float* v, u16* kc,
                                        u16* vc, int width, long long cap) {
  int row = blockIdx.x;
  int s = slots[row];
  if (s < 0 || (long long)s >= cap) return;
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    kc[(size_t)s * width + j] = f32_to_f16(k[(size_t)row * width + j]);
    vc[(size_t)s * width + j] = f32_to_f16(v[(size_t)row * width + j]);
  }
}

__device__ __forceinline__ float load_kv(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load_kv(const u16* p, size_t i) { return f16_to_f32(p[i]); }

// Causal paged attention, one block of 4 warps per (row, q head). Each warp takes every 4th key
// with an online softmax, lanes own D/32 dims; the warps merge in a fixed order. Rows past
// query_start_loc[n_seqs] (padding) are zeroed.
template <int D, typename T>
__device__ void attention_impl(const float* q, const T* kc, const T* vc, const u32* qsl,
                               const u32* seq_lens, const u32* tables, int n_seqs, int stride,
                               int block_size, int n_heads, int n_kv_heads, float scale,
                               float* out) {
  const int E = (D + 31) / 32;
  __shared__ float sm_m[4], sm_l[4];
  __shared__ float sm_acc[4][D];
  int row = blockIdx.x, head = blockIdx.y;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* o = out + ((size_t)row * n_heads + head) * D;
  int seq = -1;
  for (int i = 0; i < n_seqs; i++)
    if ((u32)row >= qsl[i] && (u32)row < qsl[i + 1]) { seq = i; break; }
  if (seq < 0) {
    for (int j = threadIdx.x; j < D; j += blockDim.x) o[j] = 0.0f;
    return;
  }
  int ctx = (int)seq_lens[seq] - (int)(qsl[seq + 1] - (u32)row) + 1;
  int kv_head = head / (n_heads / n_kv_heads);
  int width = n_kv_heads * D;
  float qv[E], acc[E];
  const float* qr = q + ((size_t)row * n_heads + head) * D;
#pragma unroll
  for (int e = 0; e < E; e++) {
    int d = lane + 32 * e;
    qv[e] = d < D ? qr[d] * scale : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = warp; j < ctx; j += 4) {
    u32 block = tables[(size_t)seq * stride + j / block_size];
    size_t slot = (size_t)block * block_size + (j % block_size);
    size_t off = slot * width + (size_t)kv_head * D;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++)
      if (lane + 32 * e < D) dot = fmaf(qv[e], load_kv(kc, off + lane + 32 * e), dot);
    dot = warp_sum(dot);
    float m_new = fmaxf(m, dot);
    float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
    float p = expf(dot - m_new);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < E; e++)
      if (lane + 32 * e < D) acc[e] = fmaf(p, load_kv(vc, off + lane + 32 * e), acc[e] * corr);
    m = m_new;
  }
  if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
#pragma unroll
  for (int e = 0; e < E; e++)
    if (lane + 32 * e < D) sm_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float mx = fmaxf(fmaxf(sm_m[0], sm_m[1]), fmaxf(sm_m[2], sm_m[3]));
  float wsc[4], total = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; w++) {
    wsc[w] = sm_m[w] == -INFINITY ? 0.0f : expf(sm_m[w] - mx);
    total += sm_l[w] * wsc[w];
  }
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; w++) s += sm_acc[w][j] * wsc[w];
    o[j] = s / total;
  }
}

#define ATTENTION(D, T, NAME)                                                                     \
  extern "C" __global__ void NAME(const float* q, const T* kc, const T* vc, const u32* qsl,       \
                                  const u32* seq_lens, const u32* tables, int n_seqs, int stride, \
                                  int block_size, int n_heads, int n_kv_heads, float scale,       \
                                  float* out) {                                                   \
    attention_impl<D, T>(q, kc, vc, qsl, seq_lens, tables, n_seqs, stride, block_size, n_heads,   \
                         n_kv_heads, scale, out);                                                 \
  }
ATTENTION(16, float, attention_d16_f32)
ATTENTION(32, float, attention_d32_f32)
ATTENTION(64, float, attention_d64_f32)
ATTENTION(96, float, attention_d96_f32)
ATTENTION(128, float, attention_d128_f32)
ATTENTION(256, float, attention_d256_f32)
ATTENTION(16, u16, attention_d16_f16)
ATTENTION(32, u16, attention_d32_f16)
ATTENTION(64, u16, attention_d64_f16)
ATTENTION(96, u16, attention_d96_f16)
ATTENTION(128, u16, attention_d128_f16)
ATTENTION(256, u16, attention_d256_f16)

extern "C" __global__ void add_in_place(float* acc, const float* x, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

extern "C" __global__ void silu_mul(float* gate, const float* up, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
