"""lm-evaluation-harness against `oxllm serve` (run by scripts/server-tests.sh, which passes
BASE_URL MODEL OXLLM_BINARY MODEL_PATH): scripts/lm-eval.sh (lm_eval's `local-completions`, the
server's own tokenizer through /tokenizer_info, /tokenize and /detokenize) runs the local
multiple-choice task (loglikelihood) and the local generate_until task against the shared
server, with per-sample logs. Then, for every logged request:

- the loglikelihood lm_eval reports equals the sum of the continuation tokens' log
  probabilities the engine gives through vLLM's `prompt_logprobs` field (a different request
  path from lm_eval's `echo` + `logprobs`), over the same token split lm_eval makes (context
  tokens, then the rest of context + continuation);
- its `is_greedy` flag agrees with greedy generation from the context (the engine's argmax
  path, not its scoring path);
- the accuracies it prints follow from those values (argmax of the choices, raw and
  length-normalised);
- each generate_until answer equals the official `openai` client's greedy completion of the
  same prompt with the same stops and length.

Prints one line per check and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.request

import openai

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = BASE_URL.removesuffix("/v1")
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def post(path, body):
    req = urllib.request.Request(SERVER + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def tokenize(text):
    return post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]


def split(context, continuation):
    """lm_eval's context/continuation split (TemplateAPI._encode_pair): trailing spaces of the
    context move to the continuation; the continuation is whatever the whole adds."""
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = tokenize(context + continuation)
    ctx = tokenize(context)
    return whole[:len(ctx)], whole[len(ctx):]


def engine_loglikelihood(ctx, cont):
    out = post("/v1/completions", {"model": MODEL, "prompt": ctx + cont, "max_tokens": 1,
                                   "temperature": 0, "prompt_logprobs": 0})
    values = out["choices"][0]["prompt_logprobs"]
    total = 0.0
    for pos, tok in enumerate(cont, start=len(ctx)):
        total += values[pos][str(tok)]["logprob"]
    return total


def main():
    out_dir = tempfile.mkdtemp(prefix="oxllm-lm-eval-")
    env = dict(os.environ, URL=SERVER, MODEL=MODEL, OUT=out_dir)
    run = subprocess.run([os.path.join(ROOT, "scripts", "lm-eval.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    check("scripts/lm-eval.sh runs lm_eval to the end", run.returncode == 0,
          (run.stdout + run.stderr)[-2000:])
    results = glob.glob(os.path.join(out_dir, "*", "results_*.json"))
    mc_files = glob.glob(os.path.join(out_dir, "*", "samples_oxllm_mc_*.jsonl"))
    gen_files = glob.glob(os.path.join(out_dir, "*", "samples_oxllm_gen_*.jsonl"))
    check("results and per-sample logs were written", results and mc_files and gen_files,
          str(os.listdir(out_dir)))
    if not (results and mc_files and gen_files):
        return
    reported = json.load(open(results[0]))["results"]
    mc = [json.loads(line) for line in open(mc_files[0])]
    gen = [json.loads(line) for line in open(gen_files[0])]
    check("every document of both tasks was evaluated", len(mc) == 8 and len(gen) == 4,
          f"{len(mc)} {len(gen)}")

    client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0)
    worst, greedy_ok, greedy_seen = 0.0, True, set()
    acc, acc_norm = [], []
    for doc in mc:
        lls = []
        for i, arg in enumerate(doc["arguments"].values()):
            context, continuation = arg["arg_0"], arg["arg_1"]
            ll_lm, greedy_lm = doc["resps"][i][0]
            ll_lm, greedy_lm = float(ll_lm), greedy_lm in (True, "True")
            ctx, cont = split(context, continuation)
            ll = engine_loglikelihood(ctx, cont)
            worst = max(worst, abs(ll - ll_lm))
            lls.append(ll)
            # Greedy decoding from the context reproduces the continuation iff every one of its
            # tokens is the argmax where it stands (compared as text: /detokenize of the ids).
            g = client.completions.create(model=MODEL, prompt=ctx, max_tokens=len(cont),
                                          temperature=0, extra_body={"ignore_eos": True})
            is_greedy = g.choices[0].text == post("/detokenize", {"tokens": cont})["prompt"]
            greedy_seen.add(is_greedy)
            greedy_ok &= is_greedy == greedy_lm
        gold = doc["doc"]["answer"]
        lens = [len(c) for c in doc["doc"]["choices"]]
        acc.append(float(max(range(len(lls)), key=lambda j: lls[j]) == gold))
        # acc_norm divides by the continuation's length in characters (with its leading space).
        norm = [ll / (n + 1) for ll, n in zip(lls, lens)]
        acc_norm.append(float(max(range(len(norm)), key=lambda j: norm[j]) == gold))
    check("lm_eval's loglikelihoods equal the engine's prompt log probabilities",
          worst < 1e-4, f"largest difference {worst:.2e}")
    print(f"     largest |lm_eval - engine| loglikelihood difference: {worst:.2e}")
    check("is_greedy agrees with greedy generation from the context, both ways",
          greedy_ok and greedy_seen == {True, False}, f"kinds seen {greedy_seen}")
    r = reported["oxllm_mc"]
    check("the reported acc follows from the engine's values",
          math.isclose(r["acc,none"], sum(acc) / len(acc)), f"{r['acc,none']} vs {acc}")
    check("the reported acc_norm follows from the engine's values",
          math.isclose(r["acc_norm,none"], sum(acc_norm) / len(acc_norm)),
          f"{r['acc_norm,none']} vs {acc_norm}")

    same = True
    for doc in gen:
        arg = doc["arguments"]["gen_args_0"]
        kw = arg["arg_1"]
        want = client.completions.create(model=MODEL, prompt=tokenize(arg["arg_0"]),
                                         max_tokens=kw["max_gen_toks"], temperature=0,
                                         stop=kw["until"]).choices[0].text
        same &= doc["resps"][0][0] == want
    check("generate_until answers equal the openai client's greedy completions", same)
    em = reported["oxllm_gen"]["exact_match,first_word"]
    check("the generate_until score is the mean of its per-sample scores",
          math.isclose(em, sum(d["exact_match"] for d in gen) / len(gen)))
    print(f"     scores: oxllm_mc acc {r['acc,none']:.3f} acc_norm {r['acc_norm,none']:.3f}, "
          f"oxllm_gen exact_match {em:.3f}")


if __name__ == "__main__":
    main()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
