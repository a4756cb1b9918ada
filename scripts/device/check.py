#!/usr/bin/env python3
"""The CUDA backend's checks on a GPU machine (issue 18), in one call.

Run by scripts/device-check.sh there (python3 with torch + transformers, no network, no Rust):
the `oxllm` binary built on the CPU machine is passed in. Writes `results.jsonl` (one record per
check) and logs under OUT, and prints a short summary last.

Sections (each independent: a failure is recorded and the next section runs):
  probe       the binary starts, loads the driver and NVRTC, captures and replays a plan
  tiny        tiny f32 / bf16 fixtures (tests/fixtures/tiny): greedy ids of oxllm cuda
              (captured and eager) == transformers on the same GPU (f32 arithmetic) == oxllm cpu
  invariance  the same prompts alone, in a batch of 4 and in a batch of 16 give identical ids
  bf16        random bf16 models shaped like SmolLM2-135M and Qwen3-0.6B: teacher-forced top-1
              agreement with transformers bf16 on the GPU, 4 prompts x 32 positions
  speed       `oxllm bench generate` on the Qwen3-0.6B shape (captured vs eager, batch 1/16/64),
              transformers `generate` batch 1 as the peer, copy bandwidth
  serve       `oxllm serve --backend cuda` answers the OpenAI API; `oxllm bench serve` at
              concurrency 1 / 16 / 64
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
import traceback

import torch
from transformers import AutoConfig, AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "tests", "fixtures", "tiny")
ARGS = None
RESULTS = []


def record(section, name, **fields):
    rec = {"section": section, "name": name, **fields}
    RESULTS.append(rec)
    with open(os.path.join(ARGS.out, "results.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(f"[{section}] {name}: " + json.dumps(fields)[:600], flush=True)


def run(cmd, timeout=300, log=None):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    secs = time.time() - t
    if log:
        with open(os.path.join(ARGS.out, log), "a") as f:
            f.write(f"$ {' '.join(cmd)}\n# rc={p.returncode} {secs:.1f}s\n{p.stdout}\n{p.stderr}\n")
    return p, secs


def oxllm_batch(model, prompts, max_tokens, backend, plan, tag, extra=()):
    """Greedy ids of every prompt, all in one engine (one batch file)."""
    inp = os.path.join(ARGS.work, f"in-{tag}.jsonl")
    out = os.path.join(ARGS.work, f"out-{tag}.jsonl")
    with open(inp, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt_ids": p, "max_tokens": max_tokens, "ignore_eos": True,
                                "temperature": 0}) + "\n")
    if os.path.exists(out):
        os.remove(out)
    cmd = [ARGS.bin, "generate", "--model", model, "--input", inp, "--output", out,
           "--backend", backend, "--plan", plan, "--max-num-seqs", str(max(16, len(prompts))),
           *extra]
    p, secs = run(cmd, log="oxllm.log")
    if p.returncode != 0:
        raise RuntimeError(f"oxllm {backend}/{plan} failed: {p.stderr[-1500:]}")
    rows = [json.loads(l) for l in open(out)]
    rows.sort(key=lambda r: r["index"])
    bad = [r for r in rows if "error" in r]
    if bad:
        raise RuntimeError(f"oxllm {backend}/{plan}: {bad[0]}")
    return [r["ids"] for r in rows], secs


def hf_greedy(model, ids, n):
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq], device="cuda")).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):]


def section(fn):
    def wrapped():
        t = time.time()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every section reports and the next one runs
            record(fn.__name__, "error", ok=False, error=f"{type(e).__name__}: {e}",
                   trace=traceback.format_exc()[-2000:])
        print(f"== {fn.__name__} took {time.time() - t:.1f}s", flush=True)
    return wrapped


@section
def probe():
    model = os.path.join(TINY, "qwen3-f32")
    cmd = [ARGS.bin, "generate", "--model", model, "--prompt-ids", "1,17,523", "--max-tokens",
           "8", "--json", "--ignore-eos", "--temperature", "0", "--backend", "cuda", "--timings"]
    p, secs = run(cmd, log="oxllm.log")
    record("probe", "generate", ok=p.returncode == 0, secs=round(secs, 2),
           stdout=p.stdout[-300:], stderr=p.stderr[-1500:])


def tiny_prompts(vocab):
    rng = random.Random(18)
    prompts = [[1, 17, 523, 42, 999, 42, 7, 311, 17, 1023, 0, 42]]
    for n in (5, 33, 100):
        prompts.append([rng.randrange(3, vocab) for _ in range(n)])
    return prompts


@section
def tiny():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n = 24
    for arch in ("llama-f32", "qwen2-f32", "qwen3-f32", "llama-bf16", "qwen2-bf16", "qwen3-bf16"):
        path = os.path.join(TINY, arch)
        try:
            m = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                     dtype=torch.float32).cuda().eval()
            prompts = tiny_prompts(m.config.vocab_size)
            want = [hf_greedy(m, p, n) for p in prompts]
            del m
            got = {}
            for backend, plan in (("cuda", "captured"), ("cuda", "eager"), ("cpu", "captured")):
                got[f"{backend}-{plan}"], _ = oxllm_batch(path, prompts, n, backend, plan,
                                                          f"tiny-{arch}-{backend}-{plan}")
            for k, ids in got.items():
                same = sum(a == b for a, b in zip(ids, want))
                first_diff = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
                              for a, b in zip(ids, want)]
                record("tiny", f"{arch} {k} vs transformers", ok=same == len(want),
                       prompts_equal=same, prompts=len(want), first_diff=first_diff)
            record("tiny", f"{arch} cuda captured vs cpu",
                   ok=got["cuda-captured"] == got["cpu-captured"],
                   equal=sum(a == b for a, b in zip(got["cuda-captured"], got["cpu-captured"])))
            record("tiny", f"{arch} cuda captured vs eager",
                   ok=got["cuda-captured"] == got["cuda-eager"])
        except Exception as e:  # noqa: BLE001
            record("tiny", arch, ok=False, error=f"{type(e).__name__}: {e}")


@section
def invariance():
    path = os.path.join(TINY, "qwen3-f32")
    prompts = tiny_prompts(1024)
    rng = random.Random(7)
    others = [[rng.randrange(3, 1024) for _ in range(rng.randrange(2, 60))] for _ in range(12)]
    alone = [oxllm_batch(path, [p], 24, "cuda", "captured", f"alone-{i}")[0][0]
             for i, p in enumerate(prompts)]
    four, _ = oxllm_batch(path, prompts, 24, "cuda", "captured", "batch4")
    sixteen, _ = oxllm_batch(path, others[:6] + prompts + others[6:], 24, "cuda", "captured",
                             "batch16")
    in16 = sixteen[6:10]
    record("invariance", "qwen3-f32 alone == batch of 4 == batch of 16 (cuda, captured)",
           ok=alone == four == in16, alone_vs_4=alone == four, alone_vs_16=alone == in16)


def make_random_bf16(name, cfg_kwargs, tokenizer_dir=None):
    out = os.path.join(ARGS.work, name)
    if os.path.exists(os.path.join(out, "model.safetensors")) or os.path.exists(
            os.path.join(out, "model.safetensors.index.json")):
        return out
    cfg = AutoConfig.for_model(**cfg_kwargs)
    torch.manual_seed(1234)
    with torch.device("cuda"):
        try:
            m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:
            m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    m = m.to(torch.bfloat16)
    m.save_pretrained(out)
    if tokenizer_dir:
        for f in os.listdir(tokenizer_dir):
            shutil.copy(os.path.join(tokenizer_dir, f), out)
    del m
    torch.cuda.empty_cache()
    return out


SMOL = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
            num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
            max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=100000.0,
            tie_word_embeddings=True, initializer_range=0.05, bos_token_id=1, eos_token_id=2)
QWEN3 = dict(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
             num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
             max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
             tie_word_embeddings=True, initializer_range=0.05, bos_token_id=1, eos_token_id=2)


@section
def bf16():
    for name, cfg in (("smollm2-135m-shape", SMOL), ("qwen3-0.6b-shape", QWEN3)):
        tok = os.path.join(REPO, "tests", "fixtures", "tok", "smollm2") if name.startswith(
            "smollm2") else None
        path = make_random_bf16(name, cfg, tok)
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
        rng = random.Random(99)
        seqs = []
        for _ in range(4):
            prompt = [rng.randrange(3, cfg["vocab_size"]) for _ in range(16)]
            seqs.append(prompt + hf_greedy(m, prompt, 32))
        want = []
        with torch.no_grad():
            for s in seqs:
                logits = m(torch.tensor([s], device="cuda")).logits[0].float()
                want.append([int(t) for t in torch.argmax(logits[15:47], dim=-1)])
        del m
        torch.cuda.empty_cache()
        prompts = [s[:16 + i] for s in seqs for i in range(32)]
        got, secs = oxllm_batch(path, prompts, 1, "cuda", "captured", f"tf-{name}",
                                extra=("--max-num-batched-tokens", "2048",
                                       "--kv-cache-memory", "4GiB"))
        got = [g[0] for g in got]
        flat_want = [t for w in want for t in w]
        agree = sum(a == b for a, b in zip(got, flat_want))
        record("bf16", f"{name} teacher-forced top-1 vs transformers bf16",
               ok=agree >= 0.99 * len(flat_want), agree=agree, positions=len(flat_want),
               rate=round(agree / len(flat_want), 4), secs=round(secs, 1))


@section
def speed():
    path = make_random_bf16("qwen3-0.6b-shape", QWEN3)
    bench_out = os.path.join(ARGS.out, "bench-generate.jsonl")
    for plan, sizes in (("captured", "1,16,64"), ("eager", "1,16")):
        cmd = [ARGS.bin, "bench", "generate", "--model", path, "--backend", "cuda", "--plan",
               plan, "--prompt-lens", "128,512", "--batch-sizes", sizes, "--output-len", "128",
               "--decode-prompt-len", "128", "--repeats", "1", "--threads", "8",
               "--kv-cache-memory", "8GiB", "--out",
               bench_out]
        p, secs = run(cmd, timeout=400, log="bench.log")
        record("speed", f"oxllm bench generate {plan}", ok=p.returncode == 0,
               secs=round(secs, 1), stdout=p.stdout[-2500:], stderr=p.stderr[-800:])
    # The peer: transformers generate, batch 1, same weights, bf16, same GPU.
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    ids = torch.randint(3, QWEN3["vocab_size"], (1, 128), device="cuda")
    for cache in ("static", "dynamic"):
        try:
            kw = dict(max_new_tokens=128, min_new_tokens=128, do_sample=False)
            if cache == "static":
                kw["cache_implementation"] = "static"
            m.generate(ids, **kw)
            torch.cuda.synchronize()
            t = time.time()
            m.generate(ids, **kw)
            torch.cuda.synchronize()
            secs = time.time() - t
            record("speed", f"transformers generate batch 1 ({cache} cache)", ok=True,
                   tok_s=round(128 / secs, 1), secs=round(secs, 2))
        except Exception as e:  # noqa: BLE001
            record("speed", f"transformers generate ({cache})", ok=False, error=str(e)[-500:])
    del m
    torch.cuda.empty_cache()
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    secs = (time.time() - t) / 10
    record("speed", "device copy bandwidth", ok=True, gb_s=round(2 * x.numel() / secs / 1e9, 1))
    del x, y
    torch.cuda.empty_cache()


@section
def serve():
    path = make_random_bf16("smollm2-135m-shape", SMOL,
                            os.path.join(REPO, "tests", "fixtures", "tok", "smollm2"))
    port = "18300"
    log = open(os.path.join(ARGS.out, "serve.log"), "w")
    srv = subprocess.Popen([ARGS.bin, "serve", "--model", path, "--backend", "cuda", "--port", port,
                            "--max-num-seqs", "64", "--served-model-name", "smol",
                            "--kv-cache-memory", "4GiB"],
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        import urllib.request
        url = f"http://127.0.0.1:{port}"
        for _ in range(240):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except Exception:  # noqa: BLE001
                time.sleep(0.5)
        body = json.dumps({"model": "smol", "prompt": "Hello", "max_tokens": 8,
                           "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        resp = json.loads(urllib.request.urlopen(req, timeout=60).read())
        record("serve", "completion", ok=resp["usage"]["completion_tokens"] == 8,
               text=resp["choices"][0]["text"])
        out = os.path.join(ARGS.out, "bench-serve.jsonl")
        cmd = [ARGS.bin, "bench", "serve", "--url", url, "--model", "smol", "--num-prompts", "64",
               "--input-len", "128", "--output-len", "64", "--concurrency", "1,16,64",
               "--repeats", "1", "--out", out, "--no-progress"]
        p, secs = run(cmd, timeout=300, log="bench-serve.log")
        record("serve", "bench serve c=1/16/64", ok=p.returncode == 0, secs=round(secs, 1),
               stdout=p.stdout[-2500:])
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            srv.kill()


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/oxllm-device")
    ap.add_argument("--sections", default="probe,tiny,invariance,bf16,speed,serve")
    ARGS = ap.parse_args()
    os.makedirs(ARGS.out, exist_ok=True)
    os.makedirs(ARGS.work, exist_ok=True)
    print(f"torch {torch.__version__}, GPU {torch.cuda.get_device_name(0)}", flush=True)
    for name in ARGS.sections.split(","):
        globals()[name]()
    print("\n== summary")
    for r in RESULTS:
        mark = "ok  " if r.get("ok") else "FAIL"
        extra = {k: v for k, v in r.items() if k in ("rate", "tok_s", "gb_s", "error", "secs",
                                                      "prompts_equal", "first_diff")}
        print(f"{mark} [{r['section']}] {r['name']} {json.dumps(extra)[:300]}")


if __name__ == "__main__":
    main()
