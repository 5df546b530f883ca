#!/usr/bin/env bash
# clang-tidy over every translation unit of src/ with the checks in .clang-tidy, each one an
# error. Uses its own compile database (build-tidy: configured, never built, without the
# GCC precompiled header that clang cannot read, and file by file: no unity batches).
# TIDY_JOBS files at a time (default: all cores). Exits non-zero when any check fires.
#
# A unit that passed is not checked again while nothing it reads changed: scripts/tidy-keys.py
# gives each unit a key (clang-tidy's version, .clang-tidy, the compile command, the contents
# of the source and of every header it includes), and the keys of units that passed are kept
# outside the clone (SPOTVISOR_CACHE, default ~/.cache/spotvisor/tidy). TIDY_CACHE=0 checks all.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TIDY_BUILD_DIR:-$root/build-tidy}"
jobs="${TIDY_JOBS:-$(nproc)}"
tidy="$(command -v clang-tidy-14 || command -v clang-tidy)"
cache="${SPOTVISOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spotvisor}/tidy"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOTVISOR_PCH=OFF -DSPOTVISOR_UNITY=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cd "$root"
mkdir -p "$cache"
log="$build/tidy.log"
: >"$log"
total="$(find src -name '*.cpp' | wc -l)"
# "KEY FILE" for the units not known to pass; a unit with no key ("none") is always checked.
"$root/scripts/tidy-keys.py" "$root" "$build/compile_commands.json" "$tidy" >"$build/tidy-keys"
[[ "$(wc -l <"$build/tidy-keys")" -eq "$total" ]] || {
  echo "!! tidy-keys.py gave $(wc -l <"$build/tidy-keys") keys for $total files (the compile database, $build, lacks some)"
  exit 1
}
while read -r key file; do
  if [[ "${TIDY_CACHE:-1}" == 1 && "$key" != none && -e "$cache/$key" ]]; then continue; fi
  printf '%s %s\n' "$key" "$file"
done <"$build/tidy-keys" >"$build/tidy-todo"
todo="$(wc -l <"$build/tidy-todo")"
# One unit per clang-tidy: a unit's key is kept only when its own run found nothing.
# shellcheck disable=SC2016
if xargs -r -n 2 -P "$jobs" sh -c 'out="$1/tidy-$(echo "$4" | tr / _).out"
    "$0" -p "$1" --quiet "$4" >"$out" 2>&1 || { cat "$out"; exit 1; }
    [ "$3" = none ] || touch "$2/$3"' "$tidy" "$build" "$cache" <"$build/tidy-todo" >"$log" 2>&1; then
  echo "clang-tidy: $total files, no findings ($todo checked, $((total - todo)) unchanged since they passed)"
else
  grep -E "(error|warning):" "$log" | sort -u || cat "$log"
  echo "!! clang-tidy found problems (full output: $log)"
  exit 1
fi
