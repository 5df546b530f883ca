#!/usr/bin/env bash
# Makes (once) the pinned PyPI environment: exactly scripts/python-env.lock (torch 2.x,
# safetensors, numpy, transformers, accelerate, lightning, the wheel's build tools), every
# file checked against the lock's hashes. It lives outside the clone, in a cache directory
# keyed by the lock's hash and the interpreter's version, so a fresh clone (CI's) reuses it;
# a changed lock makes a new one. Prints the environment's python on its last line.
#   SPOTVISOR_CACHE   where environments live (default ${XDG_CACHE_HOME:-~/.cache}/spotvisor)
#   SPOTVISOR_PYTHON  the interpreter to base it on (default: python3 on PATH)
# The first run downloads about 4 GB (PyPI's torch is the CUDA build: it brings NVIDIA's
# libraries, and runs on the CPU here) and takes several minutes; later runs take a second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lock="$here/python-env.lock"
cache="${SPOTVISOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spotvisor}"

base="${SPOTVISOR_PYTHON:-python3}"
if ! "$base" -c 'import ensurepip, venv' 2>/dev/null; then
  # Debian's python3 makes environments only with python3-venv.
  base=/usr/bin/python3
  if ! "$base" -c 'import ensurepip, venv' 2>/dev/null; then
    echo "python-env: installing python3-venv" >&2
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
fi
version="$("$base" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
key="$( (cat "$lock"; echo "$version") | sha256sum | cut -c1-16)"
env_dir="$cache/pyenv-$key"

make_pinned() {
  echo "python-env: creating $env_dir from $lock (Python $version); the first time downloads about 4 GB" >&2
  "$base" -m venv "$env_dir"
  "$env_dir/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --require-hashes --no-deps \
    --only-binary :all: -r "$lock" >&2
  "$env_dir/bin/python" -m pip check >&2
}
# shellcheck source=scripts/make-once.sh
source "$here/make-once.sh"
make_once python-env "$env_dir" make_pinned
echo "$env_dir/bin/python"
