#!/usr/bin/env bash
# clang-format over every C++ file of src/, include/ and tests/ (never tests/fuzz/corpus),
# new files not yet added to git included, with the repository's .clang-format, using
# Debian's clang-format 14 so everyone formats alike. No arguments: formats the files in
# place. --check: changes nothing, lists every file that differs and exits 1 if there is one.
# Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
fmt="$(command -v clang-format-14 || true)"
if [[ -z "$fmt" ]]; then
  echo "!! clang-format-14 not found (Debian: apt-get install clang-format-14)" >&2
  exit 2
fi
mode="${1:-}"
if [[ -n "$mode" && "$mode" != --check ]]; then
  echo "usage: scripts/format.sh [--check]" >&2
  exit 2
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'include/*.cpp' 'tests/*.cpp' \
  'tests/*.hpp' ':!:tests/fuzz/corpus/*' | sort)
if [[ "$mode" != --check ]]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 16 -P "${JOBS:-2}" "$fmt" -i --style=file
  echo "clang-format: formatted ${#files[@]} files"
  exit 0
fi
# --dry-run names each file that would change (file:line:col: error: ...); one batch at a
# time, so that no two processes interleave their lines.
mapfile -t differ < <(printf '%s\0' "${files[@]}" |
  xargs -0 -n 64 "$fmt" --style=file --dry-run --Werror --ferror-limit=1 2>&1 |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: \(error\|warning\): code should be clang-formatted.*$/\1/p' | sort -u)
if [[ ${#differ[@]} -gt 0 ]]; then
  printf '%s\n' "${differ[@]}"
  echo "!! clang-format: ${#differ[@]} of ${#files[@]} files differ from .clang-format (scripts/format.sh fixes them)"
  exit 1
fi
echo "clang-format: ${#files[@]} files, all formatted"
