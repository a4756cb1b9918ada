#!/usr/bin/env bash
# Validates the Kubernetes manifests offline: renders each kustomization under deploy/kubernetes
# with `kubectl kustomize` (or the standalone `kustomize`), validates the built-in kinds against
# the Kubernetes JSON schemas bundled in the PyPI package kubernetes-validate (strict: unknown
# fields fail), checks the custom resources (InferencePool, HTTPRoute, ServiceMonitor) for the
# fields their CRDs require, and checks that the pieces fit together (selectors, ports, probes,
# grace periods). Tools go into a virtual environment under the oxllm cache. Exits nonzero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OXLLM_CACHE:-$HOME/.cache/oxllm}"
VENV="$CACHE/venv-deploy"
KV_VERSION=1.37.0
if ! "$VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KV_VERSION"; then
  python3 -m venv "$VENV" || { echo "python3 -m venv failed: install python3-venv (apt-get install python3-venv)" >&2; exit 1; }
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION" pyyaml
fi
if command -v kubectl >/dev/null; then
  render() { kubectl kustomize "$1"; }
elif command -v kustomize >/dev/null; then
  render() { kustomize build "$1"; }
else
  echo "neither kubectl nor kustomize found: install kubectl (https://kubernetes.io/docs/tasks/tools/)" >&2
  exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for k in deploy/kubernetes/*/kustomization.yaml; do
  dir=$(dirname "$k")
  name=$(basename "$dir")
  render "$dir" >"$out/$name.yaml"
  # Custom resources have no bundled schema (a warning); check_manifests.py checks them.
  "$VENV/bin/kubernetes-validate" --strict --quiet --no-warn "$out/$name.yaml" || { echo "$dir: schema validation failed" >&2; exit 1; }
  "$VENV/bin/python" tests/deploy/check_manifests.py "$out/$name.yaml" || { echo "$dir: manifest checks failed" >&2; exit 1; }
  echo "ok $dir" >&2
done
