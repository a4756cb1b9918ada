"""Hermes tool calling and reasoning end to end on a tiny random Qwen3, through the official
`openai` client against a server this file starts itself (the binary, on the checkpoint in
tests/fixtures/tiny/qwen3-f32 with the Qwen3-style tokenizer and chat template of
tests/fixtures/tiny/qwen3-chat, made by scripts/oracle/make_qwen3_chat_tokenizer.py).

The template renders `tools` itself (so the Hermes format applies) and thinks (`</think>`):
tools go into the prompt through the model's own template (checked on the rendered prompt from
`/tokenize` + `/detokenize`, and by the usage of the chat request); `tool_choice="required"` and
a named function give a parsed `<tool_call>` with finish_reason `tool_calls`, streamed as a
first delta with id/type/name then argument fragments that assemble into the same call;
`enable_thinking: false` closes an empty think block in the prompt; with thinking on, a JSON
schema constraint starts after `</think>` and the reasoning goes to `reasoning_content` (the
tokenizer's `<think>`/`</think>` ids are the ones this checkpoint emits greedily, see the
script), streamed as `delta.reasoning_content`.

Usage: test_qwen3_chat.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH (only OXLLM_BINARY is used)
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import jsonschema
import openai

OXLLM = sys.argv[3]
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(REPO, "tests", "fixtures", "tiny")
MODEL = "qwen3-tiny"
TESTS = []

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 20}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
# The prompt the tokenizer's think ids were chosen for (scripts/oracle/make_qwen3_chat_tokenizer.py).
THINK_ASK = [{"role": "user", "content": "Is the answer yes? Think, then answer in JSON."}]
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "boolean"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test(fn):
    TESTS.append(fn)
    return fn


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=60).read())


def rendered(base, messages, **kw):
    """The prompt the server renders for `messages` (and its token count)."""
    ids = post(base, "/tokenize", {"model": MODEL, "messages": messages, **kw})["tokens"]
    return post(base, "/detokenize", {"model": MODEL, "tokens": ids})["prompt"], len(ids)


def check_call(choice, names):
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1, choice.message
    c = calls[0]
    assert c.type == "function" and c.id.startswith("call_") and c.function.name in names, c
    jsonschema.validate(json.loads(c.function.arguments), PARAMS[c.function.name])
    return c


def assemble_stream(stream):
    """(reasoning, content, calls, finish) from streamed deltas; a call's first delta carries
    its id, type and name, the rest argument fragments."""
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
            for t in d.tool_calls or []:
                if t.index not in calls:
                    assert t.id and t.type == "function" and t.function.name, t
                    calls[t.index] = [t.function.name, t.function.arguments or "", 0]
                else:
                    assert t.id is None and t.function.name is None, t
                    calls[t.index][1] += t.function.arguments or ""
                    calls[t.index][2] += 1
            finish = ch.finish_reason or finish
    return reasoning, content, [calls[i] for i in sorted(calls)], finish


@test
def tools_render_through_the_models_template(base, client):
    prompt, n = rendered(base, ASK, tools=TOOLS, **NO_THINKING)
    assert "# Tools" in prompt and "<tools>" in prompt and "</tools>" in prompt, prompt
    listed = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert [json.loads(line) for line in listed] == TOOLS, listed
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in prompt
    plain, _ = rendered(base, ASK, **NO_THINKING)
    assert "# Tools" not in plain and "<tools>" not in plain, plain
    # The chat request renders the same prompt.
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="auto",
                                       max_tokens=1, temperature=0, extra_body=NO_THINKING)
    assert r.usage.prompt_tokens == n, (r.usage, n)
    # A tool round trip renders as Qwen3 does: the call in the assistant turn, the result as a
    # tool_response in a user turn.
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18}'},
    ]
    turn, _ = rendered(base, history, tools=TOOLS, **NO_THINKING)
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris", "unit": "celsius"}}\n</tool_call><|im_end|>') in turn, turn
    assert '<|im_start|>user\n<tool_response>\n{"temperature": 18}\n</tool_response><|im_end|>' in turn, turn


@test
def enable_thinking_false_is_honoured_in_the_rendering(base, client):
    thinking, _ = rendered(base, ASK)
    closed, _ = rendered(base, ASK, **NO_THINKING)
    assert thinking.endswith("<|im_start|>assistant\n"), thinking
    assert closed.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), closed
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, temperature=0, extra_body=NO_THINKING)
    assert getattr(r.choices[0].message, "reasoning_content", None) is None, r.choices[0].message


@test
def required_and_named_give_a_hermes_call(base, client):
    for choice, names in [("required", {"get_weather", "get_time"}),
                          ({"type": "function", "function": {"name": "get_time"}}, {"get_time"})]:
        kw = dict(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False,
                  max_tokens=120, temperature=0, extra_body=NO_THINKING)
        whole = client.chat.completions.create(**kw).choices[0]
        call = check_call(whole, names)
        assert whole.message.content is None, whole.message
        reasoning, content, calls, finish = assemble_stream(client.chat.completions.create(stream=True, **kw))
        assert finish == "tool_calls" and content == "" and reasoning == "", (finish, content, reasoning)
        assert [c[:2] for c in calls] == [[call.function.name, call.function.arguments]], (calls, call)
        assert calls[0][2] > 3, calls  # the arguments came in fragments, token by token


@test
def constraint_starts_after_the_reasoning(base, client):
    kw = dict(model=MODEL, messages=THINK_ASK, max_tokens=120, temperature=0,
              response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}})
    whole = client.chat.completions.create(**kw).choices[0]
    reasoning = getattr(whole.message, "reasoning_content", None)
    assert reasoning and "<think>" not in reasoning and "</think>" not in reasoning, whole.message
    # The reasoning ran unconstrained (it is not JSON); the answer after </think> follows the schema.
    assert not reasoning.lstrip().startswith("{"), reasoning
    jsonschema.validate(json.loads(whole.message.content), ANSWER)
    assert whole.finish_reason == "stop", whole
    got_reasoning, content, calls, finish = assemble_stream(client.chat.completions.create(stream=True, **kw))
    assert (got_reasoning, content, calls, finish) == (reasoning, whole.message.content, [], "stop"), \
        (got_reasoning, content, whole.message)
    # Without the constraint the same greedy answer is not JSON: the schema did the shaping.
    free = client.chat.completions.create(model=MODEL, messages=THINK_ASK, max_tokens=40, temperature=0).choices[0]
    assert getattr(free.message, "reasoning_content", None) == reasoning, free.message
    try:
        json.loads(free.message.content)
        raise AssertionError(f"unconstrained answer parsed as JSON: {free.message.content!r}")
    except json.JSONDecodeError:
        pass


def start_server():
    model_dir = tempfile.mkdtemp(prefix="oxllm-qwen3-chat-")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(TINY, "qwen3-f32", name), model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TINY, "qwen3-chat", name), model_dir)
    port = free_port()
    proc = subprocess.Popen([OXLLM, "serve", "--model", model_dir, "--port", str(port), "--served-model-name", MODEL,
                             "--max-num-seqs", "4"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            return proc, base, model_dir
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode()}")
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not come up")


def main():
    proc, base, model_dir = start_server()
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    passed = failed = 0
    try:
        for fn in TESTS:
            t0 = time.time()
            try:
                fn(base, client)
                passed += 1
                print(f"ok   {fn.__name__} ({time.time() - t0:.1f}s)")
            except Exception:
                failed += 1
                print(f"FAIL {fn.__name__}")
                traceback.print_exc()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(model_dir, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
