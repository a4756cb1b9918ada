//! [`Gpu`] emulated on the host: device memory as byte vectors at made-up addresses, captures
//! as recorded launch lists, and each kernel of `kernels.cu` re-stated in Rust with the same
//! thread layout and reduction order (warp sums as the same butterfly). It lets the backend's
//! host side run, and be checked against the CPU backend, where there is no GPU; it is not a
//! fast path. (Transcendentals come from Rust's `f32`, so its bits may differ from a GPU's in the
//! last place.)

use std::collections::HashMap;

use crate::gpu::{Arg, DevPtr, Gpu};
use crate::kernel_sigs::signature;

#[derive(Default)]
pub struct HostGpu {
    memory: HashMap<DevPtr, Vec<u8>>,
    next: DevPtr,
    recording: Option<Vec<Launch>>,
    graphs: Vec<Vec<Launch>>,
}

#[derive(Clone)]
struct Launch {
    kernel: &'static str,
    grid: (u32, u32),
    args: Vec<Arg>,
}

impl HostGpu {
    pub fn new() -> HostGpu {
        HostGpu {
            next: 0x7000_0000_0000,
            ..HostGpu::default()
        }
    }
}

fn rf32(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}
fn ru32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}
fn ri32(b: &[u8], i: usize) -> i32 {
    ru32(b, i) as i32
}
fn ru16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}
fn wf32(b: &mut [u8], i: usize, v: f32) {
    b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
}
fn wu16(b: &mut [u8], i: usize, v: u16) {
    b[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
}
fn bf16(v: u16) -> f32 {
    f32::from_bits((v as u32) << 16)
}

/// A warp's `__shfl_xor_sync` butterfly sum, as lane 0 ends with it.
fn warp_sum(mut v: [f32; 32]) -> f32 {
    for o in [16, 8, 4, 2, 1] {
        let prev = v;
        for (i, x) in v.iter_mut().enumerate() {
            *x = prev[i] + prev[i ^ o];
        }
    }
    v[0]
}

/// `block_sum` of `kernels.cu` over per-thread partials (a multiple of 32 threads).
fn block_sum(partials: &[f32]) -> f32 {
    let warps: Vec<f32> = partials
        .chunks(32)
        .map(|w| warp_sum(std::array::from_fn(|i| w.get(i).copied().unwrap_or(0.0))))
        .collect();
    warp_sum(std::array::from_fn(|i| {
        warps.get(i).copied().unwrap_or(0.0)
    }))
}

/// The arguments of one launch, typed.
struct Args<'a>(&'a [Arg]);

impl Args<'_> {
    fn p(&self, i: usize) -> DevPtr {
        match self.0[i] {
            Arg::Ptr(p) => p,
            _ => 0,
        }
    }
    fn i(&self, i: usize) -> usize {
        match self.0[i] {
            Arg::I32(v) => v.max(0) as usize,
            Arg::I64(v) => v.max(0) as usize,
            _ => 0,
        }
    }
    fn f(&self, i: usize) -> f32 {
        match self.0[i] {
            Arg::F32(v) => v,
            _ => 0.0,
        }
    }
}

impl HostGpu {
    fn buf(&self, p: DevPtr) -> Result<&[u8], String> {
        self.memory
            .get(&p)
            .map(|v| v.as_slice())
            .ok_or_else(|| format!("no device allocation at {p:#x}"))
    }

    /// Runs `f` with the allocation at `p` taken out for writing and the rest readable.
    fn with_out<R>(
        &mut self,
        p: DevPtr,
        f: impl FnOnce(&HostGpu, &mut [u8]) -> Result<R, String>,
    ) -> Result<R, String> {
        let mut out = self
            .memory
            .remove(&p)
            .ok_or_else(|| format!("no device allocation at {p:#x}"))?;
        let r = f(self, &mut out);
        self.memory.insert(p, out);
        r
    }

    fn run(&mut self, l: &Launch) -> Result<(), String> {
        let a = Args(&l.args);
        let rows = l.grid.0 as usize;
        match l.kernel {
            "embed_f32" | "embed_bf16" => {
                let bf = l.kernel == "embed_bf16";
                let (h, vocab) = (a.i(3), a.i(4));
                self.with_out(a.p(2), |g, out| {
                    let (tok, table) = (g.buf(a.p(0))?, g.buf(a.p(1))?);
                    for r in 0..rows {
                        let id = ru32(tok, r) as usize;
                        for j in 0..h {
                            let v = match (id < vocab, bf) {
                                (false, _) => 0.0,
                                (true, true) => bf16(ru16(table, id * h + j)),
                                (true, false) => rf32(table, id * h + j),
                            };
                            wf32(out, r * h + j, v);
                        }
                    }
                    Ok(())
                })
            }
            "rms_norm" => {
                let (src_rows, cols, eps) = (a.i(2), a.i(5), a.f(6));
                self.with_out(a.p(4), |g, out| {
                    let (x, w) = (g.buf(a.p(0))?, g.buf(a.p(3))?);
                    let idx = if a.p(1) == 0 {
                        None
                    } else {
                        Some(g.buf(a.p(1))?)
                    };
                    for r in 0..rows {
                        let src = idx.map_or(r, |b| ru32(b, r) as usize);
                        if src >= src_rows {
                            (0..cols).for_each(|j| wf32(out, r * cols + j, 0.0));
                            continue;
                        }
                        let xr = |j: usize| rf32(x, src * cols + j);
                        let partial: Vec<f32> = (0..256)
                            .map(|t| (t..cols).step_by(256).fold(0.0, |s, j| s + xr(j) * xr(j)))
                            .collect();
                        let scale = 1.0 / (block_sum(&partial) / cols as f32 + eps).sqrt();
                        for j in 0..cols {
                            wf32(out, r * cols + j, xr(j) * scale * rf32(w, j));
                        }
                    }
                    Ok(())
                })
            }
            "matmul_bf16" | "matmul_f32" => {
                let bf = l.kernel == "matmul_bf16";
                let (m, n, k) = (a.i(4), a.i(5), a.i(6));
                self.with_out(a.p(3), |g, out| {
                    let (x, w) = (g.buf(a.p(0))?, g.buf(a.p(1))?);
                    let bias = if a.p(2) == 0 {
                        None
                    } else {
                        Some(g.buf(a.p(2))?)
                    };
                    let wv = |i: usize| if bf { bf16(ru16(w, i)) } else { rf32(w, i) };
                    let kv = if k % 8 == 0 { k } else { 0 };
                    for col in 0..n {
                        for r in 0..m {
                            let lanes: [f32; 32] = std::array::from_fn(|lane| {
                                let mut acc = 0f32;
                                let mut c = lane * 8;
                                while c < kv {
                                    for e in 0..8 {
                                        acc = rf32(x, r * k + c + e)
                                            .mul_add(wv(col * k + c + e), acc);
                                    }
                                    c += 256;
                                }
                                let mut c = kv + lane;
                                while c < k {
                                    acc = rf32(x, r * k + c).mul_add(wv(col * k + c), acc);
                                    c += 32;
                                }
                                acc
                            });
                            let b = bias.map_or(0.0, |b| rf32(b, col));
                            wf32(out, r * n + col, warp_sum(lanes) + b);
                        }
                    }
                    Ok(())
                })
            }
            "qk_norm_rope" => {
                let (nh, nkv, hd) = (a.i(3), a.i(4), a.i(5));
                let (eps, rot, split) = (a.f(8), a.i(10), a.i(11) != 0);
                let heads = l.grid.1 as usize;
                let mut q = self.memory.remove(&a.p(0)).ok_or("no q")?;
                let r = self.with_out(a.p(1), |g, k| {
                    let pos = g.buf(a.p(2))?;
                    let freq = g.buf(a.p(9))?;
                    for row in 0..rows {
                        for head in 0..heads {
                            let is_q = head < nh;
                            let (buf, base, wp): (&mut [u8], usize, DevPtr) = if is_q {
                                (&mut q, (row * nh + head) * hd, a.p(6))
                            } else {
                                (&mut *k, (row * nkv + head - nh) * hd, a.p(7))
                            };
                            let mut h: Vec<f32> = (0..hd).map(|j| rf32(buf, base + j)).collect();
                            if wp != 0 {
                                let w = g.buf(wp)?;
                                let partial: Vec<f32> = (0..128)
                                    .map(|t| (t..hd).step_by(128).fold(0.0, |s, j| s + h[j] * h[j]))
                                    .collect();
                                let scale = 1.0 / (block_sum(&partial) / hd as f32 + eps).sqrt();
                                for (j, v) in h.iter_mut().enumerate() {
                                    *v = *v * scale * rf32(w, j);
                                }
                            }
                            let p = ru32(pos, row) as f32;
                            let half = rot / 2;
                            for i in 0..half {
                                let angle = p * rf32(freq, i);
                                let (c, s) = (angle.cos(), angle.sin());
                                let (ia, ib) = if split {
                                    (i, i + half)
                                } else {
                                    (2 * i, 2 * i + 1)
                                };
                                let (x, y) = (h[ia], h[ib]);
                                wf32(buf, base + ia, x * c - y * s);
                                wf32(buf, base + ib, x * s + y * c);
                            }
                            for (j, &v) in h.iter().enumerate().skip(rot) {
                                wf32(buf, base + j, v);
                            }
                        }
                    }
                    Ok(())
                });
                self.memory.insert(a.p(0), q);
                r
            }
            "store_kv_f32" | "store_kv_f16" => {
                let half = l.kernel == "store_kv_f16";
                let (width, cap) = (a.i(5), a.i(6));
                let mut kc = self.memory.remove(&a.p(3)).ok_or("no k cache")?;
                let r = self.with_out(a.p(4), |g, vc| {
                    let (slots, k, v) = (g.buf(a.p(0))?, g.buf(a.p(1))?, g.buf(a.p(2))?);
                    for row in 0..rows {
                        let s = ri32(slots, row);
                        if s < 0 || s as usize >= cap {
                            continue;
                        }
                        for j in 0..width {
                            let (kv, vv) = (rf32(k, row * width + j), rf32(v, row * width + j));
                            let at = s as usize * width + j;
                            if half {
                                wu16(&mut kc, at, half::f16::from_f32(kv).to_bits());
                                wu16(vc, at, half::f16::from_f32(vv).to_bits());
                            } else {
                                wf32(&mut kc, at, kv);
                                wf32(vc, at, vv);
                            }
                        }
                    }
                    Ok(())
                });
                self.memory.insert(a.p(3), kc);
                r
            }
            name if name.starts_with("attention_d") => self.attention(l, &a),
            "add_in_place" | "silu_mul" => {
                let n = a.i(2);
                let silu = l.kernel == "silu_mul";
                self.with_out(a.p(0), |g, acc| {
                    let x = g.buf(a.p(1))?;
                    for i in 0..n {
                        let (y, v) = (rf32(acc, i), rf32(x, i));
                        let r = if silu {
                            y / (1.0 + (-y).exp()) * v
                        } else {
                            y + v
                        };
                        wf32(acc, i, r);
                    }
                    Ok(())
                })
            }
            other => Err(format!("the host emulator has no kernel {other}")),
        }
    }

    fn attention(&mut self, l: &Launch, a: &Args<'_>) -> Result<(), String> {
        let d: usize = l.kernel["attention_d".len()..]
            .split('_')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or("bad attention kernel name")?;
        let half = l.kernel.ends_with("_f16");
        let (n_seqs, stride, bs, nh, nkv, scale) =
            (a.i(6), a.i(7), a.i(8), a.i(9), a.i(10), a.f(11));
        let rows = l.grid.0 as usize;
        self.with_out(a.p(12), |g, out| {
            let (q, kc, vc) = (g.buf(a.p(0))?, g.buf(a.p(1))?, g.buf(a.p(2))?);
            let (qsl, lens, tables) = (g.buf(a.p(3))?, g.buf(a.p(4))?, g.buf(a.p(5))?);
            let kvv = |b: &[u8], i: usize| {
                if half {
                    half::f16::from_bits(ru16(b, i)).to_f32()
                } else {
                    rf32(b, i)
                }
            };
            let e_count = d.div_ceil(32);
            for row in 0..rows {
                for head in 0..nh {
                    let o = (row * nh + head) * d;
                    let seq = (0..n_seqs)
                        .find(|&i| (row as u32) >= ru32(qsl, i) && (row as u32) < ru32(qsl, i + 1));
                    let Some(seq) = seq else {
                        (0..d).for_each(|j| wf32(out, o + j, 0.0));
                        continue;
                    };
                    let ctx = ru32(lens, seq) as i64 - (ru32(qsl, seq + 1) as i64 - row as i64) + 1;
                    let kv_head = head / (nh / nkv);
                    let width = nkv * d;
                    let qv = |lane: usize, e: usize| {
                        let dd = lane + 32 * e;
                        if dd < d {
                            rf32(q, (row * nh + head) * d + dd) * scale
                        } else {
                            0.0
                        }
                    };
                    let mut sm = [(f32::NEG_INFINITY, 0f32); 4];
                    let mut sacc = vec![vec![0f32; d]; 4];
                    for (w, (m_out, l_out)) in sm.iter_mut().enumerate() {
                        let (mut m, mut lsum) = (f32::NEG_INFINITY, 0f32);
                        let mut acc = vec![0f32; d];
                        let mut j = w as i64;
                        while j < ctx {
                            let ju = j as usize;
                            let block = ru32(tables, seq * stride + ju / bs) as usize;
                            let slot = block * bs + ju % bs;
                            let off = slot * width + kv_head * d;
                            let lanes: [f32; 32] = std::array::from_fn(|lane| {
                                let mut dot = 0f32;
                                for e in 0..e_count {
                                    if lane + 32 * e < d {
                                        dot =
                                            qv(lane, e).mul_add(kvv(kc, off + lane + 32 * e), dot);
                                    }
                                }
                                dot
                            });
                            let dot = warp_sum(lanes);
                            let m_new = m.max(dot);
                            let corr = if m == f32::NEG_INFINITY {
                                0.0
                            } else {
                                (m - m_new).exp()
                            };
                            let p = (dot - m_new).exp();
                            lsum = lsum * corr + p;
                            for (dd, x) in acc.iter_mut().enumerate() {
                                *x = p.mul_add(kvv(vc, off + dd), *x * corr);
                            }
                            m = m_new;
                            j += 4;
                        }
                        *m_out = m;
                        *l_out = lsum;
                        sacc[w] = acc;
                    }
                    let mx = sm.iter().fold(f32::NEG_INFINITY, |a, s| a.max(s.0));
                    let wsc = sm.map(|(m, _)| {
                        if m == f32::NEG_INFINITY {
                            0.0
                        } else {
                            (m - mx).exp()
                        }
                    });
                    let total = (0..4).fold(0f32, |t, w| t + sm[w].1 * wsc[w]);
                    for (j, col) in (0..d).map(|j| (j, sacc.iter().map(move |a| a[j]))) {
                        let s = col.zip(wsc).fold(0f32, |s, (a, w)| s + a * w);
                        wf32(out, o + j, s / total);
                    }
                }
            }
            Ok(())
        })
    }
}

impl Gpu for HostGpu {
    fn describe(&self) -> String {
        "host emulator of the CUDA kernels".into()
    }

    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, String> {
        if self.recording.is_some() {
            return Err("allocation inside a capture".into());
        }
        let ptr = self.next;
        self.next += (bytes as u64).div_ceil(256) * 256 + 4096;
        self.memory.insert(ptr, vec![0; bytes.max(1)]);
        Ok(ptr)
    }

    fn free(&mut self, ptr: DevPtr) {
        self.memory.remove(&ptr);
    }

    fn upload(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), String> {
        if self.recording.is_some() {
            return Err("host-to-device copy inside a capture".into());
        }
        let buf = self.memory.get_mut(&dst).ok_or("upload to no allocation")?;
        let n = src.len();
        buf.get_mut(..n)
            .ok_or("upload past the allocation")?
            .copy_from_slice(src);
        Ok(())
    }

    fn download(&mut self, src: DevPtr, dst: &mut [u8]) -> Result<(), String> {
        if self.recording.is_some() {
            return Err("device-to-host copy inside a capture".into());
        }
        let buf = self.memory.get(&src).ok_or("download from no allocation")?;
        dst.copy_from_slice(buf.get(..dst.len()).ok_or("download past the allocation")?);
        Ok(())
    }

    fn launch(
        &mut self,
        kernel: &'static str,
        grid: (u32, u32),
        _block: u32,
        args: &[Arg],
    ) -> Result<(), String> {
        let sig = signature(kernel).ok_or_else(|| format!("unknown kernel {kernel}"))?;
        let matches = sig.len() == args.len()
            && sig.chars().zip(args).all(|(c, a)| {
                matches!(
                    (c, a),
                    ('p', Arg::Ptr(_))
                        | ('i', Arg::I32(_))
                        | ('l', Arg::I64(_))
                        | ('f', Arg::F32(_))
                )
            });
        if !matches {
            return Err(format!(
                "{kernel} launched with {args:?}, its parameters are {sig}"
            ));
        }
        let l = Launch {
            kernel,
            grid,
            args: args.to_vec(),
        };
        match &mut self.recording {
            Some(rec) => {
                rec.push(l);
                Ok(())
            }
            None => self.run(&l),
        }
    }

    fn begin_capture(&mut self) -> Result<(), String> {
        self.recording = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&mut self) -> Result<usize, String> {
        let rec = self.recording.take().ok_or("no capture in progress")?;
        self.graphs.push(rec);
        Ok(self.graphs.len() - 1)
    }

    fn launch_graph(&mut self, graph: usize) -> Result<(), String> {
        let launches = self.graphs.get(graph).ok_or("no such graph")?.clone();
        for l in &launches {
            self.run(l)?;
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), String> {
        Ok(())
    }
}
