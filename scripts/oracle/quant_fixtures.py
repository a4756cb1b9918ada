#!/usr/bin/env python3
"""Reference fixtures for oxllm-kernels' quant module, produced by the `gguf` Python package.

How to run (from the repository root; the script creates its own venv when needed):

    python3 scripts/oracle/quant_fixtures.py            # venv at /work/venv-quant (or $QUANT_VENV)

If `gguf`/`numpy` are not importable, the script creates the venv (`python3 -m venv`),
`pip install gguf numpy` into it and re-executes itself there. Output goes to
tests/fixtures/quant/ (overwritten; deterministic for a given gguf/numpy version).

Files written, all little-endian, one pair (or triple) per type:
  <type>.q.bin    the encoded row(s) (raw GGML block bytes, or raw f16/bf16 values)
  <type>.f32.bin  gguf-py's dequantization of <type>.q.bin (f32)
  act_q8_0.src.f32.bin / act_q8_0.q.bin  random f32 input and gguf-py's Q8_0 quantization of it
Q4_0/Q4_1/Q8_0 data are gguf-py quantizations of seeded random floats; K-quant blocks are random
bytes with sane f16 scales (gguf-py can only dequantize K-quants).
"""
import os
import subprocess
import sys
from pathlib import Path

VENV = Path(os.environ.get("QUANT_VENV", "/work/venv-quant"))

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize, dequantize
except ImportError:
    if os.environ.get("QUANT_FIXTURES_REEXEC"):
        raise
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.check_call([sys.executable, "-m", "venv", str(VENV)])
        subprocess.check_call([str(py), "-m", "pip", "install", "-q", "gguf", "numpy"])
    env = dict(os.environ, QUANT_FIXTURES_REEXEC="1")
    os.execve(str(py), [str(py), *sys.argv], env)

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "quant"
rng = np.random.default_rng(20240611)


def f16_bytes(lo, hi, n):
    return rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)


def write(name, q, f):
    (OUT / f"{name}.q.bin").write_bytes(np.ascontiguousarray(q).tobytes())
    (OUT / f"{name}.f32.bin").write_bytes(np.ascontiguousarray(f, dtype="<f4").tobytes())


def main():
    OUT.mkdir(parents=True, exist_ok=True)

    # Float formats: random values plus a few specials (no NaN: payload handling is not compared).
    x = (rng.standard_normal(96) * 4).astype(np.float32)
    x[:6] = [0.0, -0.0, 65504.0, 6.0e-8, -1.0e-5, 1.0]
    h = x.astype(np.float16)
    write("f16", h.view(np.uint8), dequantize(h.view(np.uint8), T.F16))
    b = quantize(x * 1000, T.BF16)
    write("bf16", b, dequantize(b, T.BF16))

    # Legacy formats: quantize seeded random rows, then dequantize.
    for name, t in (("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q8_0", T.Q8_0)):
        src = (rng.standard_normal(4 * 32) * rng.uniform(0.01, 3)).astype(np.float32)
        src[:32] += 1.5  # a block with an offset (exercises Q4_1's min)
        q = quantize(src, t)
        write(name, q, dequantize(q, t))

    # K-quants: random bytes, sane f16 scales.
    nb = 4
    blk = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
    blk[:, 0:2] = f16_bytes(0.001, 0.1, nb)
    blk[:, 2:4] = f16_bytes(0.001, 0.1, nb)
    write("q4_k", blk, dequantize(blk.reshape(-1), T.Q4_K))

    blk = rng.integers(0, 256, size=(nb, 176), dtype=np.uint8)
    blk[:, 0:2] = f16_bytes(0.001, 0.1, nb)
    blk[:, 2:4] = f16_bytes(0.001, 0.1, nb)
    write("q5_k", blk, dequantize(blk.reshape(-1), T.Q5_K))

    blk = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
    blk[:, 208:210] = f16_bytes(0.001, 0.1, nb)
    write("q6_k", blk, dequantize(blk.reshape(-1), T.Q6_K))

    # Activation quantization: Q8_0 of random f32 (with an all-zero block and exact ties).
    src = (rng.standard_normal(8 * 32) * 2).astype(np.float32)
    src[32:64] = 0.0
    src[64:96] = np.arange(32, dtype=np.float32) - 15.5  # amax 15.5 → scale 127/15.5
    src[96] = 127.0
    src[97:128] = np.arange(31, dtype=np.float32) * 0.5 - 7.5  # id == 1: x.5 ties
    (OUT / "act_q8_0.src.f32.bin").write_bytes(src.astype("<f4").tobytes())
    (OUT / "act_q8_0.q.bin").write_bytes(quantize(src, T.Q8_0).tobytes())

    from importlib.metadata import version
    print(f"gguf {version('gguf')}, numpy {np.__version__}: wrote {OUT}")


if __name__ == "__main__":
    main()
