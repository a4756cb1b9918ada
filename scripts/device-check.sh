#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in one call (issue 18): correctness against
# transformers on the same GPU, batch invariance, eager vs captured, speed, and the server.
#
#   scripts/device-check.sh OUT_DIR [OXLLM_BINARY] [SECTIONS]
#
# Needs there: an NVIDIA driver, NVRTC (the CUDA toolkit's or a pip `nvidia-cuda-nvrtc`),
# python3 with torch and transformers. No Rust: the binary is built on the CPU machine
# (`cargo build --release --bin oxllm`, stripped) and carried over. SECTIONS is a comma list of
# probe,tiny,invariance,bf16,speed,serve (default: all). Results: OUT_DIR/results.jsonl.
set -uo pipefail
out=${1:?usage: scripts/device-check.sh OUT_DIR [OXLLM_BINARY] [SECTIONS]}
bin=${2:-target/release/oxllm}
sections=${3:-probe,tiny,invariance,bf16,speed,serve}
mkdir -p "$out"
cd "$(dirname "$0")/.."
# NVRTC: the toolkit's, else the pip wheel's next to torch.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import nvidia, os; [print(os.path.join(p, s, "lib")) for p in nvidia.__path__ for s in os.listdir(p)]' 2>/dev/null); do
  if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NVRTC from $d"
    break
  fi
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
echo "glibc needed by the binary: $(objdump -T "$bin" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1); here: $(ldd --version | head -1)"
chmod +x "$bin"
"$bin" --version || { echo "the binary does not start here"; exit 1; }
PYTHONUNBUFFERED=1 python3 scripts/device/check.py --bin "$bin" --out "$out" --sections "$sections"
