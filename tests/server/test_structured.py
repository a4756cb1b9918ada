"""Structured outputs through the official `openai` client against `oxllm serve` (started by
scripts/server-tests.sh): `chat.completions.parse` with pydantic models (every answer must be
JSON valid against the model's schema, checked with `jsonschema`), n=4 with sampling, a batch
of 16 mixing constrained and unconstrained requests (the unconstrained ones must give the same
text as alone), captured plans against a second server with `--plan eager`, regex and choice
constraints (vLLM's fields), streamed = whole, and 400s naming the field for bad constraints.

Usage: test_structured.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH
"""

import datetime
import json
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from typing import List, Literal, Optional, Union

import jsonschema
import openai
from pydantic import BaseModel, Field, conint, confloat, conlist, constr

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=300)
MAX_TOKENS = 160
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


Name = constr(min_length=1, max_length=16)


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Person(BaseModel):
    name: Name
    age: conint(ge=0, le=120)


class Point(BaseModel):
    x: conint(ge=-100, le=100)
    y: conint(ge=-100, le=100)


class Line(BaseModel):
    start: Point
    end: Point


class Tags(BaseModel):
    tags: conlist(constr(max_length=10), min_length=1, max_length=3)


class Paint(BaseModel):
    color: Color
    coats: conint(ge=1, le=3)


class Rating(BaseModel):
    score: confloat(ge=0, le=5)
    verdict: Literal["good", "bad"]


class Nickname(BaseModel):
    name: Name
    nickname: Optional[Name]


class Flag(BaseModel):
    enabled: bool


class Scores(BaseModel):
    scores: conlist(conint(ge=0, le=10), min_length=2, max_length=4)


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: conint(ge=1, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Pet(BaseModel):
    pet: Union[Cat, Dog]


class Zip(BaseModel):
    code: str = Field(pattern=r"^[0-9]{5}$")


class Event(BaseModel):
    title: Name
    day: datetime.date


class Ticket(BaseModel):
    id: uuid.UUID


class Team(BaseModel):
    lead: Person
    size: conint(ge=1, le=9)


class Inventory(BaseModel):
    items: conlist(Paint, min_length=1, max_length=2)


class Temperature(BaseModel):
    celsius: confloat(ge=-50, le=60)
    unit: Literal["C"]


class Answer(BaseModel):
    answer: Literal["yes", "no", "maybe"]


class Book(BaseModel):
    title: Name
    pages: conint(ge=1, le=2000)
    rating: Optional[conint(ge=1, le=5)]


class Hex(BaseModel):
    value: str = Field(pattern=r"^#[0-9a-f]{6}$")


class Slot(BaseModel):
    start: str = Field(pattern=r"^[0-2][0-9]:[0-5][0-9]$")
    room: conint(ge=1, le=20)


class Matrix(BaseModel):
    rows: conlist(conlist(conint(ge=0, le=9), min_length=2, max_length=2), min_length=2, max_length=2)


SCHEMAS = [
    (Person, "Describe a person."),
    (Point, "Give a point."),
    (Line, "Give a line segment."),
    (Tags, "Tag a blog post about cooking."),
    (Paint, "Pick a paint."),
    (Rating, "Rate a movie."),
    (Nickname, "Name someone and maybe give a nickname."),
    (Flag, "Is dark mode enabled?"),
    (Scores, "List some scores."),
    (Pet, "Describe a pet."),
    (Zip, "Give a US zip code."),
    (Event, "Name an event and its date."),
    (Ticket, "Create a ticket id."),
    (Team, "Describe a team."),
    (Inventory, "List paint cans."),
    (Temperature, "What is the temperature?"),
    (Answer, "Will it rain?"),
    (Book, "Describe a book."),
    (Hex, "Give a colour in hex."),
    (Slot, "Book a meeting slot."),
    (Matrix, "Give a 2 by 2 matrix of digits."),
]


def messages(prompt):
    return [{"role": "user", "content": prompt + " Answer in JSON."}]


def parse(model, prompt, c=client, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", MAX_TOKENS)
    return c.chat.completions.parse(model=MODEL, messages=messages(prompt), response_format=model, **kw)


def check_choice(model, choice):
    assert choice.finish_reason == "stop", (choice.finish_reason, choice.message.content)
    text = choice.message.content
    jsonschema.validate(json.loads(text), model.model_json_schema())
    assert isinstance(choice.message.parsed, model), choice.message


def pool_map(fn, items, workers=16):
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(fn, items))


@test
def parse_twenty_one_pydantic_schemas():
    results = pool_map(lambda mp: parse(*mp), SCHEMAS)
    for (model, _), r in zip(SCHEMAS, results):
        try:
            check_choice(model, r.choices[0])
        except Exception as e:
            raise AssertionError(f"{model.__name__}: {e}") from e


@test
def n4_with_sampling_all_valid():
    r = parse(Team, "Describe a team.", n=4, temperature=1.0, seed=11)
    assert len(r.choices) == 4
    for c in r.choices:
        check_choice(Team, c)
    texts = {c.message.content for c in r.choices}
    assert len(texts) > 1, texts


FREE = ["Tell me about the sea.", "Write a short poem about rain.", "What is Rust?",
        "Name three fruits.", "How do birds fly?", "Describe a city at night.",
        "What is two plus two?", "Give me a tip for sleeping well."]


def free_chat(prompt, c=client):
    r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                  max_tokens=24, temperature=0)
    return r.choices[0].message.content


@test
def batch_of_16_mixed_leaves_unconstrained_unchanged():
    alone = [free_chat(p) for p in FREE]
    jobs = [("free", p) for p in FREE] + [("json", SCHEMAS[i]) for i in range(8)]

    def run(job):
        kind, arg = job
        if kind == "free":
            return free_chat(arg)
        return parse(*arg)

    out = pool_map(run, jobs, workers=16)
    assert out[:8] == alone, list(zip(out[:8], alone))
    for (model, _), r in zip(SCHEMAS[:8], out[8:]):
        check_choice(model, r.choices[0])


@test
def regex_and_choice_constraints():
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Give me a phone number."}],
        max_tokens=32, temperature=0.8, seed=3,
        extra_body={"structured_outputs": {"regex": r"[0-9]{3}-[0-9]{4}"}})
    text = r.choices[0].message.content
    assert len(text) == 8 and text[3] == "-" and (text[:3] + text[4:]).isdigit(), text
    for body in ({"structured_outputs": {"choice": ["Paris", "London", "Rome"]}},
                 {"guided_choice": ["Paris", "London", "Rome"]}):
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8, temperature=0, extra_body=body)
        assert r.choices[0].message.content in ("Paris", "London", "Rome"), r
        assert r.choices[0].finish_reason == "stop"
    r = client.completions.create(
        model=MODEL, prompt="The year the war ended was", max_tokens=8, temperature=0,
        extra_body={"guided_regex": r"1[89][0-9]{2}"})
    assert len(r.choices[0].text) == 4 and r.choices[0].text.isdigit(), r.choices[0].text
    r = client.completions.create(
        model=MODEL, prompt="A JSON object describing a cat:", max_tokens=64, temperature=0,
        extra_body={"response_format": {"type": "json_object"}})
    assert isinstance(json.loads(r.choices[0].text), dict), r.choices[0].text
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say yes or no."}], max_tokens=8,
        temperature=0, extra_body={"structured_outputs": {"grammar": 'start: "yes" | "no"'}})
    assert r.choices[0].message.content in ("yes", "no"), r


@test
def max_tokens_cut_is_length():
    fmt = {"type": "json_schema", "json_schema": {"name": "team", "schema": Team.model_json_schema()}}
    r = client.chat.completions.create(model=MODEL, messages=messages("Describe a team."),
                                       max_tokens=4, temperature=0, response_format=fmt)
    c = r.choices[0]
    assert c.finish_reason == "length" and c.message.content.startswith("{"), c


@test
def streamed_equals_whole():
    book = dict(Book.model_json_schema(), additionalProperties=False)
    schema = {"type": "json_schema", "json_schema": {"name": "book", "schema": book, "strict": True}}
    kw = dict(model=MODEL, messages=messages("Describe a book."), max_tokens=MAX_TOKENS,
              temperature=0, response_format=schema)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    parts = []
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
    assert "".join(parts) == whole, ("".join(parts), whole)
    jsonschema.validate(json.loads(whole), Book.model_json_schema())


def expect_400(param, says=None, **kw):
    try:
        client.chat.completions.create(model=MODEL, messages=messages("Hi."), max_tokens=8, **kw)
    except openai.BadRequestError as e:
        got = e.body.get("param") if isinstance(e.body, dict) else None
        assert got == param, (got, param, e.body)
        if says is not None:
            assert says in e.body.get("message", ""), (says, e.body)
        return
    raise AssertionError(f"expected a 400 naming {param}")


@test
def bad_constraints_are_400_naming_the_field():
    expect_400("response_format.json_schema.schema", response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}})
    expect_400("response_format.json_schema.schema", response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "no-such-format"}}})
    expect_400("response_format.json_schema", response_format={"type": "json_schema"})
    expect_400("response_format.type", response_format={"type": "xml"})
    expect_400("guided_regex", extra_body={"guided_regex": "[a-"})
    expect_400("structured_outputs.grammar", extra_body={"structured_outputs": {"grammar": "start: nothing_here"}})
    expect_400("structured_outputs.choice", extra_body={"structured_outputs": {"choice": []}})
    expect_400("guided_choice", extra_body={"guided_regex": "a", "guided_choice": ["b"]})


@test
def grammars_that_never_terminate_are_400():
    # Every prefix can continue but no output ever completes: rejected at admission instead of
    # running to max_tokens.
    expect_400("structured_outputs.grammar", "never terminates",
               extra_body={"structured_outputs": {"grammar": 'start: "a" start'}})
    expect_400("guided_grammar", "never terminates",
               extra_body={"guided_grammar": 'start: x\nx: "(" y\ny: ")" x'})
    endless = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    expect_400("response_format.json_schema.schema", "never terminates", response_format={
        "type": "json_schema", "json_schema": {"name": "endless", "schema": endless}})
    # Languages with no string at all.
    expect_400("guided_regex", "language is empty", extra_body={"guided_regex": "a[^\\s\\S]b"})
    expect_400("structured_outputs.grammar", "language is empty",
               extra_body={"structured_outputs": {"grammar": "start: A\nA: /a/ & /b/"}})
    for schema, says in [({"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
                         ({"enum": []}, "Unsatisfiable"), (False, "Unsatisfiable")]:
        expect_400("response_format.json_schema.schema", says, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    # The same shapes that can finish are served.
    r = client.chat.completions.create(
        model=MODEL, messages=messages("Say a."), max_tokens=8, temperature=0,
        extra_body={"structured_outputs": {"grammar": 'start: "a" start | "b"'}})
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "length" or (set(text[:-1]) <= {"a"} and text.endswith("b")), text


@test
def unsupported_schema_features_are_400_naming_them():
    for schema, named in [
        ({"not": {"type": "string"}}, "not"),
        ({"if": {"type": "string"}, "then": {"maxLength": 3}}, "if"),
        ({"type": "object", "dependentRequired": {"a": ["b"]}}, "dependentRequired"),
        ({"$ref": "https://example.com/remote.json"}, "$ref"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, "minimum"),
    ]:
        expect_400("response_format.json_schema.schema", named, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        expect_400("structured_outputs.json", named, extra_body={"structured_outputs": {"json": schema}})


WEATHER_TAG = {
    "type": "structural_tag",
    "structures": [
        {"begin": "<function=get_weather>", "end": "</function>", "schema": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"], "additionalProperties": False}},
        {"begin": "<function=get_time>", "end": "</function>", "schema": {
            "type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}},
            "required": ["zone"], "additionalProperties": False}},
    ],
    "triggers": ["<function="],
}


def tagged_calls(text):
    """Every `<function=` in `text` must open one of WEATHER_TAG's structures; returns them."""
    import re
    calls = []
    for at in [m.start() for m in re.finditer("<function=", text)]:
        m = re.match(r"<function=(get_weather|get_time)>(.*?)</function>", text[at:], re.S)
        assert m, ("a trigger not followed by a structure", text[at:])
        schema = next(s["schema"] for s in WEATHER_TAG["structures"] if s["begin"] == f"<function={m.group(1)}>")
        args = json.loads(m.group(2))
        jsonschema.validate(args, schema)
        calls.append((m.group(1), args))
    return calls


@test
def structural_tag_constrains_what_follows_a_trigger():
    ask = [{"role": "system", "content": "To call a tool, write <function=NAME>{JSON arguments}</function>. "
                                         "Tools: get_weather(city), get_time(zone)."},
           {"role": "user", "content": 'Repeat after me: <function=get_weather>{"city": "Paris"}</function>'}]
    found = []
    for form in ["structured_outputs", "response_format"]:
        for tag in [WEATHER_TAG, json.dumps(WEATHER_TAG)] if form == "structured_outputs" else [WEATHER_TAG]:
            kw = dict(extra_body={"structured_outputs": {"structural_tag": tag}}) if form == "structured_outputs" \
                else dict(response_format=tag)
            r = client.chat.completions.create(model=MODEL, messages=ask, max_tokens=48, temperature=0, **kw)
            text = r.choices[0].message.content
            found += tagged_calls(text)
            # Streamed, the same text.
            parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model=MODEL, messages=ask, max_tokens=48, temperature=0, stream=True, **kw) if c.choices]
            assert "".join(parts) == text, ("".join(parts), text)
    assert found, "the model never wrote a trigger: the test shows nothing"
    # A structure the tag does not allow: unconstrained, the model writes it; constrained, the
    # trigger commits it to an allowed one.
    news = [ask[0], {"role": "user", "content": 'Repeat after me: <function=get_news>{"topic": "Paris"}</function>'}]
    free = client.chat.completions.create(model=MODEL, messages=news, max_tokens=48, temperature=0)
    assert "<function=get_news>" in free.choices[0].message.content, free.choices[0].message
    r = client.chat.completions.create(model=MODEL, messages=news, max_tokens=48, temperature=0,
                                       extra_body={"structured_outputs": {"structural_tag": WEATHER_TAG}})
    assert tagged_calls(r.choices[0].message.content), r.choices[0].message
    # Free text without a trigger is left alone.
    r = client.chat.completions.create(model=MODEL, messages=messages("Say hello."), max_tokens=12, temperature=0,
                                       extra_body={"structured_outputs": {"structural_tag": WEATHER_TAG}})
    free = client.chat.completions.create(model=MODEL, messages=messages("Say hello."), max_tokens=12, temperature=0)
    assert r.choices[0].message.content == free.choices[0].message.content, (r.choices[0].message, free.choices[0].message)
    bad = dict(WEATHER_TAG, structures=[dict(WEATHER_TAG["structures"][0], begin="<tool>get_weather")])
    expect_400("structured_outputs.structural_tag.structures[0].begin", "none of the triggers",
               extra_body={"structured_outputs": {"structural_tag": bad}})
    expect_400("structured_outputs.structural_tag.triggers", extra_body={"structured_outputs": {
        "structural_tag": dict(WEATHER_TAG, triggers=[])}})
    expect_400("structured_outputs.structural_tag.structures[1].schema", extra_body={"structured_outputs": {
        "structural_tag": dict(WEATHER_TAG, structures=[WEATHER_TAG["structures"][0], dict(WEATHER_TAG["structures"][1], schema={"not": {}})])}})
    expect_400("response_format.structures", response_format={"type": "structural_tag", "triggers": ["<f"]})


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@test
def eager_plans_give_the_same_structured_output():
    port = free_port()
    proc = subprocess.Popen(
        [OXLLM, "serve", "--model", MODEL_PATH, "--port", str(port), "--served-model-name", MODEL,
         "--plan", "eager", "--max-num-seqs", "8", "--kv-cache-memory", str(128 << 20)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:
                if proc.poll() is not None:
                    raise AssertionError("eager server exited early")
                time.sleep(0.5)
        eager = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                              max_retries=0, timeout=300)
        picked = [SCHEMAS[i] for i in (0, 2, 9, 13)]
        captured = pool_map(lambda mp: parse(*mp), picked)
        eager_out = pool_map(lambda mp: parse(*mp, c=eager), picked)
        for (model, _), a, b in zip(picked, captured, eager_out):
            check_choice(model, b.choices[0])
            assert a.choices[0].message.content == b.choices[0].message.content, model.__name__
    finally:
        proc.terminate()
        proc.wait(timeout=30)


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
