#!/usr/bin/env bash
# Usage: scripts/layered-env.sh NAME      (NAME: deepspeed-env, s3-env: scripts/NAME.lock)
# Makes (once) a virtual environment layered on the pinned one of scripts/python-env.sh (a
# .pth file puts the pinned environment's site-packages on its path, so torch, numpy,
# jinja2... are shared, not installed twice) holding exactly scripts/NAME.lock: the few
# packages the pinned environment lacks, every file checked against the lock's hashes, no
# dependency resolved here (--no-deps: the lock lists them all). Prints its python on the
# last line. The environment lives beside the pinned one as NAME-<key>, keyed by the pinned
# environment's key and the lock's content, so a changed lock or pinned environment makes
# a new one.
#   SPOTVISOR_CACHE   where environments live (default ${XDG_CACHE_HOME:-~/.cache}/spotvisor)
# What a lock may say beyond its requirements:
#   --no-binary PKG        (a pip option line) PKG is built from its sdist; everything else
#                          must be a wheel (--only-binary :all:)
#   # import: mod1, mod2   (a comment) modules imported once it is made, a check beyond
#                          pip check that the layering works
# deepspeed-env: deepspeed is on PyPI only as an sdist, built here with DS_BUILD_OPS=0 (no
# CUDA toolkit needed; the ops it uses are compiled on first use); about 3 MB and 20 s the
# first time. s3-env: moto's S3 server, about 31 MB of wheels, 11 s. Later runs take
# a second (plus the pinned environment's own check).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ $# -ne 1 || ! "$1" =~ ^[a-z0-9][a-z0-9-]*$ ]]; then
  echo "usage: $0 NAME   (makes the environment of scripts/NAME.lock, e.g. deepspeed-env, s3-env)" >&2
  exit 2
fi
name="$1"
lock="$here/$name.lock"
if [[ "$name" == python-env ]]; then
  echo "layered-env: python-env is the pinned environment itself: run scripts/python-env.sh" >&2
  exit 2
fi
if [[ ! -f "$lock" ]]; then
  echo "layered-env: no lock $lock (the locks: $(cd "$here" && ls -- *.lock | grep -vx python-env.lock | tr '\n' ' '))" >&2
  exit 2
fi
# The modules to import as a check; only names, dots and commas, as it becomes Python code.
imports="$(sed -n 's/^# import: *//p' "$lock" | head -n 1)"
if [[ -n "$imports" && ! "$imports" =~ ^[A-Za-z0-9_.,\ ]+$ ]]; then
  echo "layered-env: $lock: '# import: $imports' is not a list of module names" >&2
  exit 2
fi
cache="${SPOTVISOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spotvisor}"

pinned_python="$("$here/python-env.sh" | tail -n 1)"
pinned_dir="$(dirname "$(dirname "$pinned_python")")"
key="$( (basename "$pinned_dir"; cat "$lock") | sha256sum | cut -c1-16)"
env_dir="$cache/$name-$key"

make_layered() {
  echo "$name: creating $env_dir from $lock on $pinned_dir" >&2
  # The same interpreter as the pinned environment, so its site-packages fit; no pip or
  # setuptools of its own (they would shadow the pinned ones: the pinned pip installs here).
  local base site pinned_site
  base="$(readlink -f "$pinned_python")"
  "$base" -m venv --without-pip "$env_dir"
  site="$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  pinned_site="$("$pinned_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$pinned_site" >"$site/spotvisor-pinned-env.pth"
  # Wheels only, but for what the lock names with --no-binary. No build isolation: an sdist
  # builds with the pinned setuptools and wheel (deepspeed's setup.py also imports torch);
  # for wheels it changes nothing. DS_BUILD_OPS=0 is deepspeed's (no ops compiled ahead);
  # other builds ignore it.
  DS_BUILD_OPS=0 "$env_dir/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir \
    --require-hashes --no-deps --only-binary :all: --no-build-isolation -r "$lock" >&2
  "$env_dir/bin/python" -m pip check >&2
  if [[ -n "$imports" ]]; then
    "$env_dir/bin/python" -c "import $imports" >&2
  fi
}
# shellcheck source=scripts/make-once.sh
source "$here/make-once.sh"
make_once "$name" "$env_dir" make_layered
echo "$env_dir/bin/python"
