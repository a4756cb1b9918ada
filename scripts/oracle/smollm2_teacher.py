#!/usr/bin/env python3
"""Teacher-forced float32 reference for the real SmolLM2-135M-Instruct Q4_1 GGUF.

transformers loads the GGUF (dequantizing every tensor to float32, un-permuting Q/K) and runs
ONE eager forward over ~350 tokens of varied text. Writes tests/fixtures/smollm2/teacher.json
(top-10 logits + logsumexp per position, greedy continuations). See scripts/oracle/README.md.

  bash scripts/oracle/setup_venv.sh
  $HOME/.cache/oxllm/venv-oracle/bin/python scripts/oracle/smollm2_teacher.py
"""
import hashlib
import json
import os
import subprocess

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "fixtures", "smollm2", "teacher.json")
TOP_K = 10
N_NEW = 32

TEXT = """The lighthouse keeper climbed the spiral stairs every evening at dusk, counting each of the 117 steps out of habit. From the gallery she could see the fishing boats returning, their lamps bobbing like fireflies against the dark water. Nobody had asked her to keep the log, yet she wrote in it faithfully: wind, weather, and the names of the ships.

def fibonacci(n: int) -> list[int]:
    \"\"\"Return the first n Fibonacci numbers.\"\"\"
    seq = [0, 1]
    while len(seq) < n:
        seq.append(seq[-1] + seq[-2])
    return seq[:n]

print(fibonacci(10))  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]
<|im_start|>user
How many minutes are there in a week?<|im_end|>
<|im_start|>assistant
A week has 7 days, each day has 24 hours, and each hour has 60 minutes, so 7 * 24 * 60 = 10,080 minutes.<|im_end|>
Shopping list for Saturday:
1. Eggs (a dozen)
2. Whole-wheat bread
3. 2.5 kg of potatoes
4. Olive oil, extra virgin
- Remember: the store closes at 18:30!

In 1969, Apollo 11 landed on the Moon; the lunar module Eagle touched down at 20:17 UTC on July 20. Pi is approximately 3.14159, and e is about 2.71828. The quick brown fox jumps over the lazy dog."""

CAPITAL_PROMPT = "The capital of France is"
CAPITAL_IDS = [504, 3575, 282, 4649, 314]
CHAT_PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def gguf_path():
    p = os.path.join(os.environ.get("OXLLM_CACHE", os.path.expanduser("~/.cache/oxllm")),
                     "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        p = subprocess.run(["bash", os.path.join(REPO, "scripts", "fetch-model.sh")],
                           check=True, capture_output=True, text=True).stdout.strip()
    return p


def llama_cpp_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf permute(): split-half (NeoX) rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check_dequant(path, model):
    """Cross-check transformers' GGUF dequantization (and Q/K un-permute) against gguf-py."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    cfg = model.config
    layer = model.model.layers[0].self_attn
    deq = lambda n: dequantize(t[n].data, t[n].tensor_type).astype(np.float32)  # noqa: E731
    v = deq("blk.0.attn_v.weight")
    assert np.array_equal(v, layer.v_proj.weight.detach().numpy()), "v_proj dequant mismatch"
    q_hf = layer.q_proj.weight.detach().numpy()
    k_hf = layer.k_proj.weight.detach().numpy()
    assert np.array_equal(llama_cpp_permute(q_hf, cfg.num_attention_heads), deq("blk.0.attn_q.weight"))
    assert np.array_equal(llama_cpp_permute(k_hf, cfg.num_key_value_heads), deq("blk.0.attn_k.weight"))
    emb = deq("token_embd.weight")
    assert np.array_equal(emb, model.model.embed_tokens.weight.detach().numpy())
    return {n: t[n].tensor_type.name for n in ("token_embd.weight", "blk.0.attn_q.weight",
                                               "blk.0.ffn_down.weight", "blk.0.attn_norm.weight")}


@torch.no_grad()
def greedy(model, ids):
    inp = torch.tensor([ids], dtype=torch.long)
    out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                         max_new_tokens=N_NEW, min_new_tokens=N_NEW, eos_token_id=None,
                         pad_token_id=2, output_logits=True, return_dict_in_generate=True)
    gen = out.sequences[0, len(ids):].tolist()
    step = torch.stack([l[0].float() for l in out.logits])
    full = model(torch.tensor([ids + gen[:-1]]), use_cache=False).logits[0, len(ids) - 1:].float()
    assert full.argmax(-1).tolist() == gen, "cached vs full-forward greedy mismatch"
    v = torch.topk(step, 2, dim=-1).values
    vf = torch.topk(full, 2, dim=-1).values
    margins = (v[:, 0] - v[:, 1])
    return gen, [float(x) for x in margins], float(min(margins.min(), (vf[:, 0] - vf[:, 1]).min()))


def main():
    path = gguf_path()
    d, name = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    assert tok(CAPITAL_PROMPT).input_ids == CAPITAL_IDS, tok(CAPITAL_PROMPT).input_ids
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tensor_types = check_dequant(path, model)

    ids = tok(TEXT).input_ids
    assert 300 <= len(ids) <= 400, len(ids)
    assert ids[0] != tok.bos_token_id  # GGUF says add_bos_token false: no BOS is prepended
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].float()
    top_v, top_i = torch.topk(logits, TOP_K, dim=-1)
    lse = torch.logsumexp(logits, dim=-1)

    chat_ids = tok(CHAT_PROMPT).input_ids
    g1, m1, mm1 = greedy(model, CAPITAL_IDS)
    g2, m2, mm2 = greedy(model, chat_ids)

    with open(path, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    res = {
        "model": name,
        "gguf_sha256": sha,
        "gguf_tensor_types": tensor_types,
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "bos_added": False,
        "text": TEXT,
        "ids": ids,
        "top_k": TOP_K,
        "top_ids": top_i.tolist(),
        "top_logits": top_v.tolist(),
        "logsumexp": [float(x) for x in lse],
        "greedy": [
            {"prompt": CAPITAL_PROMPT, "prompt_ids": CAPITAL_IDS, "greedy_ids": g1,
             "greedy_text": tok.decode(g1), "greedy_margins": m1, "min_margin": mm1},
            {"prompt": CHAT_PROMPT, "prompt_ids": chat_ids, "greedy_ids": g2,
             "greedy_text": tok.decode(g2), "greedy_margins": m2, "min_margin": mm2},
        ],
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(res, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {len(ids)} positions; tensor types {tensor_types}")
    for g in res["greedy"]:
        print(repr(g["prompt"]), g["prompt_ids"], "->", g["greedy_ids"], repr(g["greedy_text"]),
              "min margin", round(g["min_margin"], 4))


if __name__ == "__main__":
    main()
