"""The official `openai` Python client against a running `oxllm serve` (started by
scripts/server-tests.sh): completions, chat, streaming chat, n, stop, logprobs, seeds, usage,
errors, and a greedy completion equal to `oxllm generate` on the same prompt.

Usage: test_openai_client.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH
Prints one line per test and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import json
import subprocess
import sys
import traceback

import openai

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def models_list():
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL], ids


@test
def greedy_completion_equals_oxllm_generate():
    prompt = "The capital of France is"
    r = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.object == "text_completion" and r.id.startswith("cmpl-"), r
    c = r.choices[0]
    assert c.index == 0 and c.finish_reason == "length", c
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 16, r.usage
    out = subprocess.run(
        [OXLLM, "generate", "--model", MODEL_PATH, "--prompt", prompt, "--max-tokens", "16",
         "--temperature", "0", "--ignore-eos", "--json", "--threads", "1"],
        check=True, capture_output=True, text=True,
    ).stdout
    expected = json.loads(out.strip().splitlines()[-1])["text"]
    assert c.text == expected, (c.text, expected)


@test
def chat_whole_and_streamed_agree():
    r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=24, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-"), r
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content, msg
    assert r.choices[0].finish_reason in ("stop", "length")
    stream = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    parts, finish, usage, roles = [], None, None, set()
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.add(ch.delta.role)
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    assert "".join(parts) == msg.content, ("".join(parts), msg.content)
    assert roles == {"assistant"} and finish == r.choices[0].finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens
    assert usage.prompt_tokens == r.usage.prompt_tokens


@test
def n_choices_with_a_seed_reproduce():
    kw = dict(model=MODEL, messages=CHAT, max_tokens=12, temperature=1.0, n=3, seed=42)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    ta = [c.message.content for c in a.choices]
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert ta == [c.message.content for c in b.choices], "same seed, same answers"
    assert len(set(ta)) > 1, ta
    c = client.chat.completions.create(**{**kw, "seed": 43, "n": 1})
    d = client.chat.completions.create(**{**kw, "seed": 43, "n": 1})
    assert c.choices[0].message.content == d.choices[0].message.content


@test
def stop_strings():
    full = client.completions.create(
        model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=16, temperature=0
    ).choices[0].text
    assert " 8" in full, full
    r = client.completions.create(
        model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=16, temperature=0, stop=[" 8", "zzz"]
    )
    assert r.choices[0].text == full[: full.index(" 8")], (r.choices[0].text, full)
    assert r.choices[0].finish_reason == "stop"


@test
def logprobs_both_shapes():
    r = client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=3
    )
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and len(lp.text_offset) == 4
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and 1 <= len(top) <= 3
        assert abs(max(top.values()) - l) < 1e-4
    r = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert bytes(t.bytes) == t.token.encode()


@test
def streaming_completion_with_usage():
    parts, usage = [], None
    for chunk in client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.usage:
            usage = chunk.usage
        parts.extend(c.text for c in chunk.choices)
    whole = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=10, temperature=0)
    assert "".join(parts) == whole.choices[0].text
    assert usage.completion_tokens == whole.usage.completion_tokens


@test
def errors_are_raised_as_openai_errors():
    try:
        client.completions.create(model=MODEL, prompt="x", temperature=-1)
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "temperature", e.body
    try:
        client.chat.completions.create(model="not-" + MODEL, messages=CHAT)
        raise AssertionError("no error")
    except openai.NotFoundError as e:
        assert e.status_code == 404, e


def main():
    passed = failed = 0
    for fn in TESTS:
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
