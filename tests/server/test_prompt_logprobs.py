"""Prompt logprobs through the official `openai` client (issue 20): `echo` with `logprobs` on
/v1/completions puts the prompt tokens first in `choices[].logprobs` (the first token's logprob
and alternatives null), vLLM's `prompt_logprobs: k` adds `choices[].prompt_logprobs` (None
first, then token id -> {logprob, rank, decoded_token}); `max_tokens: 0` scores the prompt
alone, as lm-evaluation-harness asks. Checked against the server's own teacher-forced
predictions (the prefix as a prompt, one greedy token with its top alternatives), cold and
warm in the prefix cache, streamed and whole; bad values are 400s naming the field.

Usage: test_prompt_logprobs.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH
Prints one line per test and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import json
import struct
import sys
import traceback
import urllib.request
import uuid

import openai

BASE, MODEL = sys.argv[1:3]
CLIENT = openai.OpenAI(base_url=BASE, api_key="unused", max_retries=0, timeout=300)

TEXT = (
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg combined movable metal type, oil-based inks and a wooden press adapted from "
    "wine making. Within fifty years printers worked in more than two hundred cities."
)


def f32(x):
    """`x` as the engine's f32 (token_logprobs are written as f32, top_logprobs as f64)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def tokenize(text):
    body = json.dumps({"model": MODEL, "prompt": text}).encode()
    root = BASE[: -len("/v1")]
    req = urllib.request.Request(
        root + "/tokenize", data=body, headers={"Content-Type": "application/json"}
    )
    return json.load(urllib.request.urlopen(req, timeout=60))["tokens"]


def score(prompt, k=1, **extra):
    """A prompt-only scoring request: echo, logprobs k, max_tokens 0."""
    return CLIENT.completions.create(
        model=MODEL, prompt=prompt, echo=True, logprobs=k, max_tokens=0, temperature=0, **extra
    )


def echo_with_max_tokens_zero_scores_the_prompt():
    ids = tokenize(TEXT)
    r = score(ids)
    c = r.choices[0]
    lp = c.logprobs
    assert c.finish_reason == "length", c.finish_reason
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(ids), r.usage
    assert c.text == TEXT, repr(c.text)
    assert len(lp.tokens) == len(ids) == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert "".join(lp.tokens) == TEXT, lp.tokens[:8]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(t) == 1 for t in lp.top_logprobs[1:])
    assert lp.text_offset[0] == 0
    offsets = [sum(len(t) for t in lp.tokens[:i]) for i in range(len(ids))]
    assert lp.text_offset == offsets, (lp.text_offset[:5], offsets[:5])


def prompt_logprobs_equal_teacher_forced_predictions():
    ids = tokenize(TEXT)
    lp = score(ids, k=5).choices[0].logprobs
    for pos in [1, 2, 9, 16, 17, len(ids) - 1]:
        forced = CLIENT.completions.create(
            model=MODEL, prompt=ids[:pos], max_tokens=1, temperature=0, logprobs=5,
            extra_body={"ignore_eos": True},
        ).choices[0].logprobs
        assert forced.top_logprobs[0] == lp.top_logprobs[pos], (
            pos, forced.top_logprobs[0], lp.top_logprobs[pos])
        own = forced.top_logprobs[0].get(lp.tokens[pos])
        if own is not None:
            assert f32(own) == f32(lp.token_logprobs[pos]), (pos, own, lp.token_logprobs[pos])


def cold_and_warm_prompts_score_the_same():
    # A fresh prefix, so the first request is cold whatever ran before.
    text = f"[{uuid.uuid4()}] " + TEXT
    ids = tokenize(text)
    cold = score(ids, k=3, extra_body={"prompt_logprobs": 3}).choices[0]
    for _ in range(2):
        plain = CLIENT.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0)
    cached = plain.usage.prompt_tokens_details.cached_tokens
    assert cached >= 64, f"the prompt is not in the prefix cache ({cached} cached tokens)"
    warm = score(ids, k=3, extra_body={"prompt_logprobs": 3}).choices[0]
    assert warm.logprobs.token_logprobs == cold.logprobs.token_logprobs
    assert warm.logprobs.top_logprobs == cold.logprobs.top_logprobs
    assert warm.model_extra["prompt_logprobs"] == cold.model_extra["prompt_logprobs"]


def vllm_prompt_logprobs_field():
    ids = tokenize(TEXT)
    c = CLIENT.completions.create(
        model=MODEL, prompt=ids, max_tokens=2, temperature=0, echo=True, logprobs=2,
        extra_body={"prompt_logprobs": 2},
    ).choices[0]
    plp = c.model_extra["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    for pos in range(1, len(ids)):
        entries = plp[pos]
        own = entries[str(ids[pos])]
        assert own["logprob"] == c.logprobs.token_logprobs[pos], pos
        assert own["decoded_token"] == c.logprobs.tokens[pos]
        assert 2 <= len(entries) <= 3, entries
        best = max(e["logprob"] for e in entries.values())
        assert own["rank"] >= 1 and (own["rank"] == 1) == (own["logprob"] == best), entries
        decoded = {e["decoded_token"] for e in entries.values()}
        assert decoded >= set(c.logprobs.top_logprobs[pos]), pos
    # The prompt's lists come first, then the 2 generated tokens'.
    assert len(c.logprobs.tokens) == len(ids) + 2
    assert c.logprobs.text_offset[len(ids)] == len(TEXT)
    # Without echo the field alone is returned and the text is the completion only.
    c2 = CLIENT.completions.create(
        model=MODEL, prompt=ids, max_tokens=2, temperature=0,
        extra_body={"prompt_logprobs": 0},
    ).choices[0]
    assert c2.logprobs is None and not c2.text.startswith(TEXT)
    plp0 = c2.model_extra["prompt_logprobs"]
    assert [e and list(e) for e in plp0[1:]] == [[str(i)] for i in ids[1:]]
    assert [e[str(i)]["logprob"] for e, i in zip(plp0[1:], ids[1:])] == \
        c.logprobs.token_logprobs[1:len(ids)]


def streamed_echo_carries_prompt_logprobs():
    ids = tokenize(TEXT)
    whole = CLIENT.completions.create(
        model=MODEL, prompt=ids, max_tokens=3, temperature=0, echo=True, logprobs=1,
        extra_body={"ignore_eos": True},
    ).choices[0]
    chunks = list(CLIENT.completions.create(
        model=MODEL, prompt=ids, max_tokens=3, temperature=0, echo=True, logprobs=1, stream=True,
        extra_body={"ignore_eos": True},
    ))
    first = chunks[0].choices[0]
    assert first.text == TEXT and first.logprobs.token_logprobs[0] is None
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    tokens, values = [], []
    for c in chunks:
        if c.choices and c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            values += c.choices[0].logprobs.token_logprobs
    assert text == whole.text
    assert tokens == whole.logprobs.tokens and values == whole.logprobs.token_logprobs


def bad_values_are_400s_naming_the_field():
    cases = [
        ({"prompt_logprobs": -1}, "prompt_logprobs"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 0, "logprobs": 1}, "max_tokens"),  # logprobs without echo scores nothing
    ]
    for fields, param in cases:
        body = {"model": MODEL, "prompt": "Hello", **fields}
        try:
            CLIENT.post("/completions", body=body, cast_to=object)
        except openai.BadRequestError as e:
            assert e.body.get("param") == param, (fields, e.body)
        else:
            raise AssertionError(f"{fields} was accepted")


def main():
    passed = failed = 0
    for fn in [
        echo_with_max_tokens_zero_scores_the_prompt,
        prompt_logprobs_equal_teacher_forced_predictions,
        cold_and_warm_prompts_score_the_same,
        vllm_prompt_logprobs_field,
        streamed_echo_carries_prompt_logprobs,
        bad_values_are_400s_naming_the_field,
    ]:
        try:
            fn()
            passed += 1
            print(f"ok   {fn.__name__}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}\n{traceback.format_exc()}", flush=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
