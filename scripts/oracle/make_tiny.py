#!/usr/bin/env python3
"""Generate tiny random checkpoints (Llama, Qwen2, Qwen3) plus float32 oracle outputs.

Writes, under tests/fixtures/tiny/:
  <arch>-f32/            config.json, generation_config.json, model.safetensors (f32),
                         oracle.json, prompt_logits.f32, single_logits.f32
  <arch>-bf16/           same, weights stored as bf16 (oracle computed on the bf16 weights upcast to f32)
  llama-f32-sharded/     llama-f32 weights split in several shards + model.safetensors.index.json

Run with the oracle venv (see scripts/oracle/setup_venv.sh):
  $HOME/.cache/oxllm/venv-oracle/bin/python scripts/oracle/make_tiny.py
See tests/fixtures/tiny/README.md for the formats.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "fixtures", "tiny")

VOCAB = 1024
PROMPT_IDS = [1, 17, 523, 42, 999, 42, 7, 311, 17, 1023, 0, 42]  # repeated 42 and 17, edge ids 0 / 1023
SINGLE_PROMPT_IDS = [300]
N_NEW = 32
MIN_MARGIN = 0.01
WEIGHT_STD = 0.15  # sharp init so logits are far from tied
NORM_LO, NORM_HI = 0.6, 1.4  # RMSNorm weights ~ U(0.6, 1.4)
BIAS_STD = 0.3  # Qwen2 q/k/v biases

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
    use_cache=True,
)

ARCHS = {
    # name: (model class, config, first seed to try)
    "llama": (
        LlamaForCausalLM,
        lambda: LlamaConfig(**COMMON, rope_theta=10000.0, tie_word_embeddings=False),
        1000,
    ),
    "qwen2": (
        Qwen2ForCausalLM,
        lambda: Qwen2Config(**COMMON, rope_theta=1000000.0, tie_word_embeddings=False,
                            use_sliding_window=False),
        2000,
    ),
    "qwen3": (
        Qwen3ForCausalLM,
        # head_dim (32) independent of hidden_size / num_heads (16); tied embeddings.
        lambda: Qwen3Config(**COMMON, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True,
                            attention_bias=False, use_sliding_window=False),
        3000,
    ),
}


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head is not listed separately
            if name.endswith("norm.weight"):  # input/post_attention/final norm, q_norm, k_norm
                p.copy_(torch.rand(p.shape, generator=g) * (NORM_HI - NORM_LO) + NORM_LO)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * BIAS_STD)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * WEIGHT_STD)


def bf16_roundtrip(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def margins_of(logits):
    """logits [n, vocab] f32 -> (top2 values [n,2], top2 ids [n,2], margin [n], logsumexp [n])"""
    v, i = torch.topk(logits, 2, dim=-1)
    return v, i, (v[:, 0] - v[:, 1]), torch.logsumexp(logits, dim=-1)


@torch.no_grad()
def run_oracle(model, prompt):
    """Greedy generation via generate() (KV cache) + cross-check against one no-cache full forward."""
    inp = torch.tensor([prompt], dtype=torch.long)
    prompt_logits = model(inp, use_cache=False).logits[0].float()
    out = model.generate(
        inp,
        attention_mask=torch.ones_like(inp),
        do_sample=False,
        max_new_tokens=N_NEW,
        min_new_tokens=N_NEW,
        eos_token_id=None,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    greedy = out.sequences[0, len(prompt):].tolist()
    assert len(greedy) == N_NEW, greedy
    step_logits = torch.stack([l[0].float() for l in out.logits])  # [N_NEW, vocab]
    # Full no-cache forward over prompt + greedy[:-1]: logits at the last len(prompt)-1+k position
    # must predict greedy[k].
    full = torch.tensor([prompt + greedy[:-1]], dtype=torch.long)
    full_logits = model(full, use_cache=False).logits[0].float()[len(prompt) - 1:]
    assert full_logits.argmax(-1).tolist() == greedy, "cached vs full-forward greedy mismatch"
    assert torch.equal(step_logits.argmax(-1), full_logits.argmax(-1))
    max_diff = (step_logits - full_logits).abs().max().item()
    top2_v, top2_i, marg, lse = margins_of(step_logits)
    _, _, marg_full, _ = margins_of(full_logits)
    return dict(
        prompt_ids=prompt,
        prompt_logits=prompt_logits.numpy().astype("<f4"),
        greedy_ids=greedy,
        greedy_margins=[float(x) for x in marg],
        greedy_top2_ids=top2_i.tolist(),
        greedy_top2_logits=top2_v.tolist(),
        greedy_logsumexp=[float(x) for x in lse],
        min_margin=float(min(marg.min(), marg_full.min())),
        cache_vs_full_max_abs_diff=max_diff,
    )


def build(arch, seed, bf16):
    cls, mkcfg, _ = ARCHS[arch]
    cfg = mkcfg()
    model = cls(cfg)
    init_weights(model, seed)
    if bf16:
        bf16_roundtrip(model)
    model.config._attn_implementation = "eager"
    return model.eval()


def write_fixture(dirname, model, save_dtype, seed, res_main, res_single, shard_size=None):
    d = os.path.join(OUT, dirname)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    m = model if save_dtype == torch.float32 else model.to(save_dtype)
    kw = {"max_shard_size": shard_size} if shard_size else {}
    m.save_pretrained(d, **kw)
    model.to(torch.float32)
    # transformers 5 writes RoPE theta only under "rope_parameters"; most hub configs carry the
    # legacy top-level "rope_theta". Write both (same value) so either reader gets it right.
    cp = os.path.join(d, "config.json")
    with open(cp) as f:
        cfg = json.load(f)
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    with open(cp, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    def block(res, fname):
        res = dict(res)
        logits = res.pop("prompt_logits")
        logits.tofile(os.path.join(d, fname))
        res["prompt_logits"] = {
            "file": fname,
            "dtype": "f32",
            "byte_order": "little",
            "layout": "row-major",
            "shape": list(logits.shape),
        }
        return res

    oracle = {
        "arch": cfg["architectures"][0],
        "weights_dtype": "float32" if save_dtype == torch.float32 else "bfloat16",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "seed": seed,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        **block(res_main, "prompt_logits.f32"),
        "single_token": block(res_single, "single_logits.f32"),
    }
    with open(os.path.join(d, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1)
        f.write("\n")
    return d


def main():
    summary = {}
    for arch, (_, _, seed0) in ARCHS.items():
        seed = seed0
        while True:
            results = {}
            ok = True
            for bf16 in (False, True):
                model = build(arch, seed, bf16)
                r1 = run_oracle(model, PROMPT_IDS)
                r2 = run_oracle(model, SINGLE_PROMPT_IDS)
                results[bf16] = (model, r1, r2)
                if min(r1["min_margin"], r2["min_margin"]) < MIN_MARGIN:
                    ok = False
                    break
            if ok:
                break
            print(f"{arch}: seed {seed} rejected (margin < {MIN_MARGIN})", flush=True)
            seed += 1
        for bf16, (model, r1, r2) in results.items():
            name = f"{arch}-{'bf16' if bf16 else 'f32'}"
            write_fixture(name, model, torch.bfloat16 if bf16 else torch.float32, seed, r1, r2)
            mm = min(r1["min_margin"], r2["min_margin"])
            summary[name] = dict(seed=seed, min_margin=mm, greedy=r1["greedy_ids"][:8],
                                 cache_diff=max(r1["cache_vs_full_max_abs_diff"],
                                                r2["cache_vs_full_max_abs_diff"]))
            print(f"{name}: seed {seed} min margin {mm:.4f}", flush=True)
            if arch == "llama" and not bf16:
                write_fixture("llama-f32-sharded", model, torch.float32, seed, r1, r2,
                              shard_size="300KB")
    # Verify in a fresh process: reload every fixture from disk and compare.
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "verify_tiny.py")],
                   check=True)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
