#!/usr/bin/env python3
"""A random-weight Llama-family GGUF too large for any L3 cache, for decode-scaling benchmarks
where batch 1 is bound by DRAM bandwidth (issue 21 item 3 on hosts whose L3 holds SmolLM2-135M).

Shape of SmolLM2-1.7B (hidden 2048, 24 layers, 32 heads, FFN 8192, vocab 49152, tied
embeddings): layer matrices Q4_1 (random nibbles, scale 2^-8, min -2^-5), token embedding /
output head Q8_0, norms 1. About 1.1 GB. Only speed is measured on it (its tokens are noise);
the tokenizer is SmolLM2's (same vocabulary), copied from its GGUF. The bytes are drawn from
a seeded generator, so a rerun writes the same file.

  python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install numpy gguf==0.17.1
  /tmp/venv-gguf/bin/python scripts/bench/make_dram_model.py OUT.gguf $(scripts/fetch-model.sh)

A Q4_K_M copy (Q4_K / Q6_K layers, Q6_K head: the common download's formats; docs/BENCHMARKS.md
sitting 13) comes from llama.cpp's own tool, built beside llama-bench:
  llama-quantize --allow-requantize OUT.gguf OUT-q4_k_m.gguf Q4_K_M 2
"""
import sys

import gguf
import numpy as np

HIDDEN, LAYERS, HEADS, FFN, VOCAB, CTX = 2048, 24, 32, 8192, 49152, 8192
OUT, TOKENIZER_FROM = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(7)


def blocks(rows: int, cols: int, block_bytes: int, header: bytes) -> np.ndarray:
    """`rows x cols` weights as quantized blocks of 32: random payload after a fixed header."""
    n = cols // 32
    b = rng.integers(0, 256, size=(rows, n, block_bytes), dtype=np.uint8)
    b[:, :, : len(header)] = np.frombuffer(header, dtype=np.uint8)
    return b.reshape(rows, n * block_bytes)


def q4_1(rows: int, cols: int) -> np.ndarray:
    header = np.array([2.0**-8, -(2.0**-5)], dtype=np.float16).tobytes()
    return blocks(rows, cols, 20, header)


def q8_0(rows: int, cols: int) -> np.ndarray:
    return blocks(rows, cols, 34, np.array([2.0**-9], dtype=np.float16).tobytes())


w = gguf.GGUFWriter(OUT, "llama")
w.add_context_length(CTX)
w.add_embedding_length(HIDDEN)
w.add_block_count(LAYERS)
w.add_feed_forward_length(FFN)
w.add_head_count(HEADS)
w.add_head_count_kv(HEADS)
w.add_rope_freq_base(130000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_vocab_size(VOCAB)
for key, field in gguf.GGUFReader(TOKENIZER_FROM).fields.items():
    if not key.startswith("tokenizer."):
        continue
    value = field.contents()
    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        w.add_array(key, value)
    elif kind == gguf.GGUFValueType.STRING:
        w.add_string(key, value)
    elif kind == gguf.GGUFValueType.BOOL:
        w.add_bool(key, value)
    elif kind == gguf.GGUFValueType.UINT32:
        w.add_uint32(key, value)
    elif kind == gguf.GGUFValueType.INT32:
        w.add_int32(key, value)
Q4_1, Q8_0 = gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0
t = q8_0(VOCAB, HIDDEN)
w.add_tensor("token_embd.weight", t, raw_shape=t.shape, raw_dtype=Q8_0)
w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
for i in range(LAYERS):
    for name in ("attn_norm", "ffn_norm"):
        w.add_tensor(f"blk.{i}.{name}.weight", np.ones(HIDDEN, dtype=np.float32))
    for name, rows, cols in [
        ("attn_q", HIDDEN, HIDDEN),
        ("attn_k", HIDDEN, HIDDEN),
        ("attn_v", HIDDEN, HIDDEN),
        ("attn_output", HIDDEN, HIDDEN),
        ("ffn_gate", FFN, HIDDEN),
        ("ffn_up", FFN, HIDDEN),
        ("ffn_down", HIDDEN, FFN),
    ]:
        t = q4_1(rows, cols)
        w.add_tensor(f"blk.{i}.{name}.weight", t, raw_shape=t.shape, raw_dtype=Q4_1)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", OUT)
