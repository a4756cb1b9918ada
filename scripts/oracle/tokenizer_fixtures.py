#!/usr/bin/env python3
"""Tokenizer oracle: writes the fixtures that `crates/tok` is tested against.

How to run (from the repository root):

    scripts/fetch-model.sh                      # once: puts the SmolLM2 GGUF in ~/.cache/oxllm/models
    python3 scripts/oracle/tokenizer_fixtures.py

The script makes (or reuses) its own virtual environment at `$HOME/.cache/oxllm/venv-tok`
with transformers, tokenizers, gguf, numpy, sentencepiece and protobuf (no torch), and re-runs
itself inside it. Override the model with `OXLLM_TOK_GGUF=/path/to/file.gguf`.

What it writes:

* `tests/fixtures/tok/smollm2_encodings.json`: for every corpus string, the ids transformers
  produces with and without special tokens, and its decode of those ids (with and without
  skipping special tokens), plus the BOS/EOS facts of the file.
* `tests/fixtures/tok/smollm2/tokenizer.json`: the tokenizer transformers builds from the GGUF,
  saved only when it is smaller than 3 MB, so the Rust `from_file` path is tested on it too.

The reference is transformers' GGUF tokenizer path (`PreTrainedTokenizerFast.from_pretrained(dir,
gguf_file=...)`), which calls `get_gguf_tokenizer` / `convert_gguf_tokenizer`. transformers 5.x
imports torch at the top of its GGUF reader module even though the tokenizer path never uses
it, so a do-nothing `torch` stand-in is placed in `sys.modules` after transformers is imported
(transformers itself still sees that torch is not installed). No tensor is ever loaded.
"""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

VENV = Path.home() / ".cache" / "oxllm" / "venv-tok"
PACKAGES = [
    "transformers==5.24.0",
    "tokenizers==0.23.3",
    "gguf==0.19.0",
    "numpy",
    "sentencepiece",
    "protobuf",
    "jinja2",
]
REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "tok"
DEFAULT_GGUF = Path.home() / ".cache" / "oxllm" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_TOKENIZER_JSON = 3 * 1024 * 1024


def ensure_venv() -> None:
    """Re-run this script with the venv's interpreter, creating the venv first if needed."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PACKAGES], check=True)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


CORPUS = [
    # plain English, the known fact first
    "The capital of France is",
    "Hello, world!",
    "hello world",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    "",
    " ",
    "a",
    # contractions and punctuation
    "I'm sure you'll see they've done what we'd said, isn't it? It's John's.",
    "DON'T SHOUT, I'LL LEAVE",
    "Wait... what?! (Really) [yes] {no} <maybe> \"quoted\" 'single' `tick`",
    "e.g. i.e. etc. -- em—dash – en-dash; colon: semicolon;",
    "~!@#$%^&*()_+-=[]{}|\\:;\"'<>,.?/",
    # digits and numbers
    "12345",
    "3.14159265358979323846",
    "The year 2024 had 366 days and 8784 hours.",
    "1,000,000 and 1_000_000 and 0x1F and 1e-9",
    "Call +1 (555) 123-4567 before 09:30.",
    "99999999999999999999999999999999",
    # whitespace runs, tabs and newlines
    "two  spaces   three    four",
    "tab\there\t\tdouble tab",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "windows\r\nline endings\r\n",
    "  \t  mixed \n\t whitespace  \n",
    "trailing newlines\n\n",
    # code
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "const add = (a, b) => a + b; // arrow function\nconsole.log(add(1, 2));",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<div class=\"row\"><span>&nbsp;x &lt; y</span></div>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "for i in range(10):\n\tprint(i)  # tabs",
    # unicode in several scripts
    "Café naïve résumé façade über straße",
    "Привет, мир! Как дела?",
    "你好，世界！今天天气很好。",
    "こんにちは世界、カタカナとひらがな。",
    "안녕하세요 세계",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "Γειά σου Κόσμε",
    "ṩ̃ combining: e\u0301 a\u0308 n\u0303",
    "math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ ≈ π ≠ ∞",
    # emoji, including ZWJ sequences, skin tones and flags
    "I love 🦀 and 🐍!",
    "👍🏽 thumbs up",
    "family: 👨‍👩‍👧‍👦 and 🏳️‍🌈",
    "flags 🇫🇷🇯🇵 keycap 1️⃣",
    "😀😃😄😁😆😅😂🤣",
    # special tokens written in the text
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|>",
    "not special: <|im_start or im_end|> <im_start>",
    # misc
    "URL: https://example.com/path?q=1&r=two#frag",
    "email: someone@example.org",
    "CamelCaseIdentifier snake_case_identifier kebab-case-id",
    "ALL CAPS SENTENCE WITH NUMBERS 123",
    "a" * 64,
    "The quick brown fox jumps over the lazy dog. " * 4,
]


def main() -> None:
    ensure_venv()

    import transformers  # noqa: F401  (must come before the torch stand-in)

    stand_in = types.ModuleType("torch")

    class _Unused:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("the tokenizer oracle never loads tensors")

    stand_in.__getattr__ = lambda name: _Unused
    sys.modules.setdefault("torch", stand_in)

    import tokenizers
    from transformers import PreTrainedTokenizerFast

    gguf = Path(os.environ.get("OXLLM_TOK_GGUF", DEFAULT_GGUF))
    if not gguf.is_file():
        sys.exit(f"missing {gguf}: run scripts/fetch-model.sh first")

    tok = PreTrainedTokenizerFast.from_pretrained(str(gguf.parent), gguf_file=gguf.name)

    entries = []
    for text in CORPUS:
        with_special = tok(text, add_special_tokens=True)["input_ids"]
        without_special = tok(text, add_special_tokens=False)["input_ids"]
        entries.append(
            {
                "text": text,
                "ids": with_special,
                "ids_no_special": without_special,
                "decoded": tok.decode(with_special, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
            }
        )

    assert entries[0]["ids"] == [504, 3575, 282, 4649, 314], entries[0]["ids"]

    fixture = {
        "generator": "scripts/oracle/tokenizer_fixtures.py",
        "model_file": gguf.name,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "bos_token": tok.bos_token,
        "bos_id": tok.bos_token_id,
        "eos_token": tok.eos_token,
        "eos_id": tok.eos_token_id,
        "add_bos": bool(getattr(tok, "add_bos_token", False)),
        "vocab_size": len(tok),
        "entries": entries,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / "smollm2_encodings.json"
    out.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(entries)} entries)")

    serialized = tok.backend_tokenizer.to_str(pretty=False)
    tj = OUT_DIR / "smollm2" / "tokenizer.json"
    if len(serialized.encode("utf-8")) < MAX_TOKENIZER_JSON:
        tj.parent.mkdir(parents=True, exist_ok=True)
        tj.write_text(serialized, encoding="utf-8")
        print(f"wrote {tj}")
    else:
        print(f"tokenizer.json is {len(serialized)} bytes, not saved (the Rust test builds it from the GGUF)")


if __name__ == "__main__":
    main()
