"""Write a Qwen3-style tokenizer and chat template for the tiny random Qwen3 checkpoint
(tests/fixtures/tiny/qwen3-f32, vocabulary 1024) into tests/fixtures/tiny/qwen3-chat/.

The checkpoint has random weights and no tokenizer; the server tests of tool calling and
reasoning (tests/server/test_qwen3_chat.py) need one that speaks Qwen3's chat format:
ChatML turns, `<think>`/`</think>` and `<tool_call>`/`</tool_call>` as added (non-special)
tokens, and a template that renders `tools` Hermes-style and honours `enable_thinking`.

Tokenizer: byte-level BPE (GPT-2 byte alphabet, so every string encodes) whose merges are
learned here, deterministically, from the template's own fixed texts and some JSON, so a prompt
with two tools fits the checkpoint's 512 positions. Ids: 0-6 the added tokens, then the 256
bytes, then the merges, then two-letter tokens no encoding produces, up to id 1023.

`<think>` and `</think>` take ids that the checkpoint's greedy decoding of the test's thinking
prompt (THINK_PROMPT, rendered without tools) emits first and 13 tokens in (THINK_IDS, found
with `oxllm generate --prompt-ids ... --temperature 0 --json` on the rendered prompt). Neither
id's former token occurs in that prompt, so the swap leaves the prompt's ids, and so the
greedy ids, unchanged: a random model opens and closes its reasoning, and a constraint can be
seen to start after `</think>`.

Pure Python, no dependencies: python3 scripts/oracle/make_qwen3_chat_tokenizer.py
"""

import json
import os
from collections import Counter

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "fixtures", "tiny", "qwen3-chat")
VOCAB = 1024
THINK_PROMPT = "Is the answer yes? Think, then answer in JSON."
THINK_IDS = {"<think>": 173, "</think>": 943}

ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<tool_call>", False),
    ("</tool_call>", False),
]

# Written for transformers' rendering (trim_blocks, lstrip_blocks): every newline is spelled.
TEMPLATE = r"""{%- set system = messages[0].content if messages and messages[0].role == 'system' else none %}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if system %}{{- system + '\n\n' }}{% endif %}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{% endfor %}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif system %}
{{- '<|im_start|>system\n' + system + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.reasoning_content %}{{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}{% endif %}
{%- if message.content %}{{- message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
{%- if not loop.first or message.content %}{{- '\n' }}{% endif %}
{{- '<tool_call>\n{"name": ' + (call.function.name | tojson) + ', "arguments": ' + (call.function.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{% endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\n' }}{% endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{% endif %}
{%- endif %}
"""

# Text the merges are learned from: the template's fixed parts and typical tool JSON.
CORPUS = [
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n",
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tools>\n',
    '{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city.", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, '
    '"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], '
    '"additionalProperties": false}}}',
    '{"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone.", '
    '"parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, '
    '"required": ["zone"], "additionalProperties": false}}}',
    "What is the weather in Paris? Think about it, then answer in JSON. The answer is yes.\n",
    "system user assistant tool_response You are a helpful assistant.\n",
]


def byte_alphabet():
    """GPT-2's reversible map from bytes to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


def pretokenize(text):
    """Words as the tokenizer's ByteLevel pre-tokenizer splits them (approximately: a space
    joins the word after it); merges only need to be useful, not exhaustive."""
    words, cur = [], ""
    for ch in text:
        if cur and (ch == " " or ch == "\n" or (ch.isalnum() != cur[-1].isalnum() and cur.strip())):
            words.append(cur)
            cur = ""
        cur += ch
    if cur:
        words.append(cur)
    return words


def learn_merges(n_merges, alphabet):
    counts = Counter()
    for text in CORPUS:
        for w in pretokenize(text):
            counts[tuple(alphabet[b] for b in w.encode())] += 1
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for word, c in counts.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        merged = Counter()
        for word, c in counts.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += c
        counts = merged
    return merges


def main():
    alphabet = byte_alphabet()
    vocab = {}
    for i, (tok, _) in enumerate(ADDED):
        vocab[tok] = i
    for b in range(256):
        vocab[alphabet[b]] = len(vocab)
    merges = learn_merges(VOCAB - len(vocab), alphabet)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    # The checkpoint's logits span 1024 ids: the rest are two-letter tokens that no encoding
    # produces but every decoding can spell (a random model samples them).
    letters = "abcdefghijklmnopqrstuvwxyz"
    pads = (a + b for a in letters for b in letters)
    while len(vocab) < VOCAB:
        t = next(pads)
        if t not in vocab:
            vocab[t] = len(vocab)
    assert len(vocab) == VOCAB, len(vocab)
    for tag, new_id in THINK_IDS.items():
        # Swap the tag with the token at its chosen id (see the module docs).
        other = next(t for t, i in vocab.items() if i == new_id)
        vocab[other], vocab[tag] = vocab[tag], new_id
    added = [
        {"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
        for t, special in ADDED
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
            "merges": [[a, b] for a, b in merges],
        },
    }
    config = {
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "chat_template": TEMPLATE,
    }
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(vocab)} tokens, {len(merges)} merges, <think> = {vocab['<think>']}, </think> = {vocab['</think>']}")


if __name__ == "__main__":
    main()
