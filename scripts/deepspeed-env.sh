#!/usr/bin/env bash
# Makes (once) the DeepSpeed environment: a virtual environment layered on the pinned one of
# scripts/python-env.sh (a .pth file puts the pinned environment's site-packages on its path,
# so torch, numpy, pydantic... are shared, not installed twice) holding exactly
# scripts/deepspeed-env.lock: deepspeed and the few dependencies the pinned environment lacks,
# every file checked against the lock's hashes. DeepSpeed is on PyPI only as a source
# distribution: it is built here with DS_BUILD_OPS=0 (no CUDA toolkit needed; the ops it
# uses are compiled on first use) and without build isolation, since its setup.py imports
# torch. The environment lives beside the pinned one, keyed by the pinned environment's key
# and this lock's hash; prints its python on the last line.
#   SPOTVISOR_CACHE   where environments live (default ${XDG_CACHE_HOME:-~/.cache}/spotvisor)
# The first run downloads about 3 MB and builds the sdist (about 20 s here); later runs take
# a second (plus the pinned environment's own check).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lock="$here/deepspeed-env.lock"
cache="${SPOTVISOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spotvisor}"

pinned_python="$("$here/python-env.sh" | tail -n 1)"
pinned_dir="$(dirname "$(dirname "$pinned_python")")"
key="$( (basename "$pinned_dir"; cat "$lock") | sha256sum | cut -c1-16)"
env_dir="$cache/deepspeed-env-$key"

mkdir -p "$cache"
exec 9>"$cache/deepspeed-env.lock"
flock 9
if [[ ! -f "$env_dir/.complete" ]]; then
  rm -rf "$env_dir"
  echo "deepspeed-env: creating $env_dir from $lock on $pinned_dir" >&2
  start=$(date +%s)
  # The same interpreter as the pinned environment, so its site-packages fit; no pip or
  # setuptools of its own (they would shadow the pinned ones: the pinned pip installs here).
  base="$(readlink -f "$pinned_python")"
  "$base" -m venv --without-pip "$env_dir"
  site="$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  pinned_site="$("$pinned_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$pinned_site" >"$site/spotvisor-pinned-env.pth"
  # Wheels only, but for deepspeed itself (an sdist); no build isolation: its build imports
  # torch and uses the pinned setuptools and wheel.
  DS_BUILD_OPS=0 "$env_dir/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir \
    --require-hashes --no-deps --only-binary :all: --no-binary deepspeed --no-build-isolation \
    -r "$lock" >&2
  "$env_dir/bin/python" -m pip check >&2
  "$env_dir/bin/python" -c 'import deepspeed, torch' >&2
  touch "$env_dir/.complete"
  echo "deepspeed-env: ready in $(($(date +%s) - start)) s" >&2
fi
exec 9>&-
echo "$env_dir/bin/python"
