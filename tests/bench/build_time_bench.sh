#!/usr/bin/env bash
# Fresh-build time, the core compiled file by file (-DSPOTVISOR_UNITY=OFF, as before) against
# unity batches (the default), side by side in one run, on all cores, without ccache.
#   tests/bench/build_time_bench.sh [binary|all] [build type]
# binary: `ninja spotvisor` (what demo.sh and a user's install build); all: every target the
# test command's main build makes (tests included). Default: binary RelWithDebInfo. The type
# `test` is the test command's: RelWithDebInfo at -O2 without debug information.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
what=${1:-binary}
type=${2:-RelWithDebInfo}
case $what in binary) target=spotvisor ;; all) target=all ;; *) echo "usage: $0 [binary|all] [type]" >&2; exit 64 ;; esac
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export CCACHE_DISABLE=1

build() {  # $1 name, $2 unity ON/OFF; prints seconds
  local dir=$scratch/$1
  local flags=(-DCMAKE_BUILD_TYPE="$type")
  if [ "$type" = test ]; then
    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
  fi
  cmake -S "$here" -B "$dir" -G Ninja "${flags[@]}" -DSPOTVISOR_UNITY="$2" \
    -DSPOTVISOR_TESTS=$([ "$what" = all ] && echo ON || echo OFF) >/dev/null
  local start end
  start=$(date +%s.%N)
  ninja -C "$dir" -j "$(nproc)" "$target" >"$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

files=$(find "$here/src" -name '*.cpp' | wc -l)
before=$(build file-by-file OFF)
after=$(build unity ON)
printf 'fresh build (%s, %s, %s cores, %s sources in src/)\n' "$what" "$type" "$(nproc)" "$files"
printf '  file by file : %7.1f s\n  unity batches: %7.1f s\n  ratio        : %7.2fx faster\n' \
  "$before" "$after" "$(echo "$before / $after" | bc -l)"
