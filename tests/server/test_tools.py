"""Tool calling through the official `openai` client against `oxllm serve` on SmolLM2 (whose
template knows no tools, so the generic format applies: tools in the system message, a call
is one JSON object): required and named calls always parse and validate against the
function's parameters, a round trip with a `tool` message, streamed tool-call deltas equal the
whole response's calls, and 400s for bad tool definitions or choices.

Usage: test_tools.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH
"""

import json
import sys
import time
import traceback

import jsonschema
import openai

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=300)
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


def test(fn):
    TESTS.append(fn)
    return fn


def check_calls(choice, names):
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert calls, choice.message
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_"), c
        assert c.function.name in names, c.function.name
        jsonschema.validate(json.loads(c.function.arguments), PARAMS[c.function.name])
    return calls


@test
def required_always_gives_valid_calls():
    for seed in range(3):
        r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                           max_tokens=96, temperature=0.9, seed=seed)
        check_calls(r.choices[0], {"get_weather", "get_time"})


@test
def named_function_is_the_one_called():
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=96, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=False)
    calls = check_calls(r.choices[0], {"get_time"})
    assert len(calls) == 1


@test
def round_trip_with_a_tool_message():
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=96, temperature=0, parallel_tool_calls=False)
    call = check_calls(r.choices[0], {"get_weather", "get_time"})[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    r2 = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, tool_choice="none",
                                        max_tokens=32, temperature=0)
    c = r2.choices[0]
    assert c.finish_reason in ("stop", "length") and c.message.content and not c.message.tool_calls, c


def assemble(stream):
    """Tool calls from `delta.tool_calls` chunks: the first chunk of a call carries its id, type
    and name, later ones only argument fragments. Returns (calls, fragment counts, finish)."""
    got, fragments, finish = {}, {}, None
    for chunk in stream:
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                if d.index not in got:
                    assert d.id and d.id.startswith("call_") and d.type == "function" and d.function.name, d
                    got[d.index] = {"id": d.id, "name": d.function.name, "arguments": d.function.arguments or ""}
                    fragments[d.index] = 0
                else:
                    assert d.id is None and d.function.name is None, d
                    got[d.index]["arguments"] += d.function.arguments or ""
                    fragments[d.index] += 1
            finish = ch.finish_reason or finish
    return [got[i] for i in sorted(got)], [fragments[i] for i in sorted(fragments)], finish


@test
def streamed_tool_calls_equal_whole():
    for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
        kw = dict(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=96, temperature=0)
        whole = client.chat.completions.create(**kw).choices[0]
        calls = check_calls(whole, {"get_weather", "get_time"})
        got, fragments, finish = assemble(client.chat.completions.create(stream=True, **kw))
        assert finish == "tool_calls", finish
        assert [(c.function.name, c.function.arguments) for c in calls] == \
            [(g["name"], g["arguments"]) for g in got], (calls, got)
        # Token by token: the arguments arrive in several fragments, not at the choice's end.
        assert all(f > 3 for f in fragments), fragments


@test
def auto_and_none_answer_in_text_or_calls():
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none",
                                       max_tokens=16, temperature=0)
    assert not r.choices[0].message.tool_calls and r.choices[0].message.content
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=64, temperature=0)
    c = r.choices[0]
    if c.message.tool_calls:
        check_calls(c, {"get_weather", "get_time"})
    else:
        assert c.message.content is not None and c.finish_reason in ("stop", "length"), c


def expect_400(param, **kw):
    try:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, **kw)
    except openai.BadRequestError as e:
        got = e.body.get("param") if isinstance(e.body, dict) else None
        assert got == param, (got, param, e.body)
        return
    raise AssertionError(f"expected a 400 naming {param}")


@test
def bad_tools_are_400_naming_the_field():
    expect_400("tool_choice.function.name", tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": "nope"}})
    expect_400("tools[0].function", tools=[{"type": "function"}])
    expect_400("tools[0].type", tools=[{"type": "retrieval", "function": {"name": "x"}}])
    expect_400("tools[1].function.parameters", tools=[WEATHER, {"type": "function", "function": {"name": "x", "parameters": 3}}])
    expect_400("tools[0].function.parameters", tools=[{"type": "function", "function": {"name": "x", "parameters": {"type": "strin"}}}],
               tool_choice="required")
    expect_400("tool_choice", tools=TOOLS, tool_choice="sometimes")
    # Malformed definitions are caught under `auto` too, each naming its field.
    expect_400("tools[1].function.parameters", tools=[WEATHER, {"type": "function", "function": {
        "name": "x", "parameters": {"type": "object", "properties": {"a": {"type": "strin"}}}}}])
    expect_400("tools[0].function.parameters", tools=[{"type": "function", "function": {
        "name": "x", "parameters": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}])
    expect_400("tools[0].function.name", tools=[{"type": "function", "function": {"name": "has space"}}])
    expect_400("tools[0].function.name", tools=[{"type": "function", "function": {"parameters": {}}}])
    expect_400("tools[1].function.name", tools=[WEATHER, WEATHER])
    expect_400("tools[0].function.description", tools=[{"type": "function", "function": {"name": "x", "description": 3}}])
    expect_400("tools", tools={"not": "a list"})
    expect_400("tool_choice.function.name", tools=TOOLS, tool_choice={"type": "function", "function": {}})
    expect_400("tool_choice", tool_choice="required")
    expect_400("tool_choice", tools=TOOLS, tool_choice="required", response_format={"type": "json_object"})


def main():
    passed = failed = 0
    for fn in TESTS:
        t0 = time.time()
        try:
            fn()
            passed += 1
            print(f"ok   {fn.__name__} ({time.time() - t0:.1f}s)")
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
