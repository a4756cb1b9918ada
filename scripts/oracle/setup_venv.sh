#!/usr/bin/env bash
# Creates the oracle virtualenv (outside the repo) and installs pinned versions of
# torch / transformers & co. Idempotent: re-running only installs what is missing or differs.
# Note: torch from PyPI is the CUDA build (~5.6 GB); it runs fine on CPU.
set -euo pipefail
VENV="${OXLLM_ORACLE_VENV:-$HOME/.cache/oxllm/venv-oracle}"
PINS=(
  torch==2.15.0
  transformers==5.24.0
  tokenizers==0.23.3
  safetensors==0.8.0
  gguf==0.19.0
  accelerate==1.16.0
  numpy==2.4.6
)
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
# Skip pip entirely when every pin is already satisfied.
missing=0
for p in "${PINS[@]}"; do
  name="${p%%==*}"; want="${p##*==}"
  have=$("$VENV/bin/python" -c "import importlib.metadata as m,sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null || true)
  [ "$have" = "$want" ] || missing=1
done
if [ "$missing" = 1 ]; then
  "$VENV/bin/pip" install --quiet "${PINS[@]}"
fi
echo "$VENV/bin/python"
