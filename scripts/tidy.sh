#!/usr/bin/env bash
# clang-tidy over every translation unit of src/ with the checks in .clang-tidy, each one an
# error. Uses its own compile database (build-tidy: configured, never built, without the
# GCC precompiled header that clang cannot read, and file by file: no unity batches).
# TIDY_JOBS files at a time (default: all cores). Exits non-zero when any check fires.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TIDY_BUILD_DIR:-$root/build-tidy}"
jobs="${TIDY_JOBS:-$(nproc)}"
tidy="$(command -v clang-tidy-14 || command -v clang-tidy)"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOTVISOR_PCH=OFF -DSPOTVISOR_UNITY=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cd "$root"
log="$build/tidy.log"
if find src -name '*.cpp' -print0 | sort -z |
    xargs -0 -n 4 -P "$jobs" "$tidy" -p "$build" --quiet >"$log" 2>&1; then
  echo "clang-tidy: $(find src -name '*.cpp' | wc -l) files, no findings"
else
  grep -E "(error|warning):" "$log" | sort -u || cat "$log"
  echo "!! clang-tidy found problems (full output: $log)"
  exit 1
fi
