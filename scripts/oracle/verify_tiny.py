#!/usr/bin/env python3
"""Reload every tests/fixtures/tiny/* checkpoint from disk (fresh process) and check that the
committed oracle.json / *.f32 files reproduce. Run by make_tiny.py; can be run on its own:
  $HOME/.cache/oxllm/venv-oracle/bin/python scripts/oracle/verify_tiny.py
"""
import glob
import json
import os
import struct
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
from make_tiny import OUT, run_oracle  # noqa: E402


def st_dtypes(d):
    dts = set()
    for f in glob.glob(os.path.join(d, "*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
        dts |= {v["dtype"] for k, v in hdr.items() if k != "__metadata__"}
    return dts


def main():
    dirs = sorted(d for d in glob.glob(os.path.join(OUT, "*")) if os.path.isdir(d))
    # Hybrid / MoE fixtures come from make_hybrid.py (their own format: logit row subsets).
    dirs = [d for d in dirs
            if json.load(open(os.path.join(d, "oracle.json"))).get("generator") != "make_hybrid.py"]
    assert dirs, OUT
    for d in dirs:
        name = os.path.basename(d)
        o = json.load(open(os.path.join(d, "oracle.json")))
        want = {"float32": {"F32"}, "bfloat16": {"BF16"}}[o["weights_dtype"]]
        assert st_dtypes(d) == want, (name, st_dtypes(d))
        if name.endswith("-sharded"):
            idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
            assert len(set(idx["weight_map"].values())) >= 2, "expected 2+ shards"
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        for blk in (o, o["single_token"]):
            r = run_oracle(model, blk["prompt_ids"])
            pl = blk["prompt_logits"]
            ref = np.fromfile(os.path.join(d, pl["file"]), dtype="<f4").reshape(pl["shape"])
            diff = float(np.abs(ref - r["prompt_logits"]).max())
            assert diff < 1e-5, (name, diff)
            assert r["greedy_ids"] == blk["greedy_ids"], (name, r["greedy_ids"], blk["greedy_ids"])
            assert blk["min_margin"] >= 0.01, (name, blk["min_margin"])
        print(f"verify {name}: ok (prompt logits max diff {diff:.2e})", flush=True)
    # The sharded copy must hold exactly the llama-f32 weights.
    a = AutoModelForCausalLM.from_pretrained(os.path.join(OUT, "llama-f32"), dtype=torch.float32)
    b = AutoModelForCausalLM.from_pretrained(os.path.join(OUT, "llama-f32-sharded"), dtype=torch.float32)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    print("verify: all tiny fixtures reproduce", flush=True)


if __name__ == "__main__":
    main()
