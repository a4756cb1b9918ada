#!/usr/bin/env python3
"""Writes `tests/fixtures/tiny/llama-kquant.gguf`: a tiny random Llama whose matrices are the
k-quants of a Q4_K_M download (Q4_K layers, Q5_K `attn_v`, Q6_K `ffn_down` and tied token
embedding / output head), with inputs of 256 and 512 columns so every k-quant block fits.

No oracle: its purpose is the engine end to end on the k-quant kernels (tests/cli.rs: the same
ids on every kernel family the CPU runs, alone or batched). Random block bytes after fixed
scales (chosen so the weights average about zero), from a seeded generator: a rerun writes the
same bytes. Shape: hidden 256, 2 layers, 4 heads / 2 KV heads of 64, FFN 512, vocab 1024,
context 512, norms 1. Its tokenizer (a GGUF must carry one) is a made-up byte-level BPE: the
256 byte symbols, `<|endoftext|>` (bos / eos) and 767 merges of symbol pairs; tests feed ids.

  python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install numpy gguf==0.17.1
  /tmp/venv-gguf/bin/python scripts/oracle/make_tiny_kquant.py
"""
import pathlib

import gguf
import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CTX = 256, 2, 4, 2, 512, 1024, 512
OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/fixtures/tiny/llama-kquant.gguf"
rng = np.random.default_rng(11)
T = gguf.GGMLQuantizationType
# (block bytes, fixed header at the block's start, or at its end for Q6_K)
FORMATS = {
    # d, dmin: E[d * sc * q] = E[dmin * m] for random 6-bit scales and mins.
    T.Q4_K: (144, np.array([2.0**-10, 2.0**-7], dtype=np.float16).tobytes(), 0),
    T.Q5_K: (176, np.array([2.0**-11, 2.0**-7], dtype=np.float16).tobytes(), 0),
    # d last (offset 208); Q6_K's quants are centred by their -32.
    T.Q6_K: (210, np.array([2.0**-11], dtype=np.float16).tobytes(), 208),
}


def kquant(kind: T, rows: int, cols: int) -> np.ndarray:
    size, header, at = FORMATS[kind]
    n = cols // 256
    b = rng.integers(0, 256, size=(rows, n, size), dtype=np.uint8)
    b[:, :, at : at + len(header)] = np.frombuffer(header, dtype=np.uint8)
    return b.reshape(rows, n * size)


w = gguf.GGUFWriter(str(OUT), "llama")
w.add_context_length(CTX)
w.add_embedding_length(HIDDEN)
w.add_block_count(LAYERS)
w.add_feed_forward_length(FFN)
w.add_head_count(HEADS)
w.add_head_count_kv(KV_HEADS)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-6)
w.add_vocab_size(VOCAB)


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (byte-level BPE's alphabet)."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


symbols = byte_symbols()
pairs = [(a, b) for a in symbols[65:91] for b in symbols[97:123]][: VOCAB - 257]
tokens = symbols + ["<|endoftext|>"] + [a + b for a, b in pairs]
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("gpt2")
w.add_token_list(tokens)
w.add_token_types([1] * 256 + [3] + [1] * len(pairs))
w.add_token_merges([f"{a} {b}" for a, b in pairs])
w.add_bos_token_id(256)
w.add_eos_token_id(256)
t = kquant(T.Q6_K, VOCAB, HIDDEN)
w.add_tensor("token_embd.weight", t, raw_shape=t.shape, raw_dtype=T.Q6_K)
w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
kv = KV_HEADS * HIDDEN // HEADS
for i in range(LAYERS):
    for name in ("attn_norm", "ffn_norm"):
        w.add_tensor(f"blk.{i}.{name}.weight", np.ones(HIDDEN, dtype=np.float32))
    for name, kind, rows, cols in [
        ("attn_q", T.Q4_K, HIDDEN, HIDDEN),
        ("attn_k", T.Q4_K, kv, HIDDEN),
        ("attn_v", T.Q5_K, kv, HIDDEN),
        ("attn_output", T.Q4_K, HIDDEN, HIDDEN),
        ("ffn_gate", T.Q4_K, FFN, HIDDEN),
        ("ffn_up", T.Q4_K, FFN, HIDDEN),
        ("ffn_down", T.Q6_K, HIDDEN, FFN),
    ]:
        t = kquant(kind, rows, cols)
        w.add_tensor(f"blk.{i}.{name}.weight", t, raw_shape=t.shape, raw_dtype=kind)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", OUT)
