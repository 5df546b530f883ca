#!/usr/bin/env bash
# A fuzzing campaign: every libFuzzer target (tests/fuzz) for FUZZ_SECONDS each (default
# 600 = 10 minutes), FUZZ_JOBS targets side by side (default 1), each from its seed corpus
# plus what earlier campaigns found (build-fuzz/corpus/<target>, kept between runs). Prints
# one Markdown row per target (executions, exec/s, corpus, peak RSS, crashes) and, with
# FUZZ_RECORD=1, replaces the campaign table in docs/RELIABILITY.md with them.
# Every crash lands in build-fuzz/artifacts/<target>/; each one becomes a regression test
# (a unit test and a seed in tests/fuzz/corpus/<target>/regress-*).
# Usage: scripts/fuzz-campaign.sh [target...]      (default: every target)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-600}"
jobs="${FUZZ_JOBS:-1}"

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  mapfile -t targets < <(cd "$root/tests/fuzz" && ls ./*_fuzz.cpp | sed 's|^\./||; s|\.cpp$||')
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DSPOTVISOR_FUZZ=ON >/dev/null
ninja -C "$build" -j2 "${targets[@]}"

run_one() {
  local t=$1
  local corpus="$build/corpus/$t" seeds=()
  mkdir -p "$corpus" "$build/artifacts/$t"
  [[ -d "$root/tests/fuzz/corpus/$t" ]] && seeds=("$root/tests/fuzz/corpus/$t")
  "$build/tests/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=1048576 \
    -artifact_prefix="$build/artifacts/$t/" -print_final_stats=1 "$corpus" "${seeds[@]}" \
    >"$build/$t.campaign.log" 2>&1 || true
}

started=$(date -u +%Y-%m-%dT%H:%MZ)
running=0
for t in "${targets[@]}"; do
  echo "== $t: ${seconds}s" >&2
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

rows=""
found=0
for t in "${targets[@]}"; do
  log="$build/$t.campaign.log"
  execs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  speed=$(grep -oE '^stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  rss=$(grep -oE '^stat::peak_rss_mb: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  crashes=$(find "$build/artifacts/$t" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  found=$((found + crashes))
  rows+="| \`$t\` | $execs | $speed | $corpus | $rss | $crashes |"$'\n'
done
table="Campaign of $started: \`FUZZ_SECONDS=$seconds FUZZ_JOBS=$jobs scripts/fuzz-campaign.sh\` on $(nproc) cores.

| target | executions | exec/s | corpus files | peak RSS MiB | crashes |
|---|---:|---:|---:|---:|---:|
$rows"
printf '%s\n' "$table"

if [[ "${FUZZ_RECORD:-0}" == 1 ]]; then
  doc="$root/docs/RELIABILITY.md"
  python3 - "$doc" "$table" <<'EOF'
import sys
path, table = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- campaign:begin -->", "<!-- campaign:end -->"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + table.rstrip() + "\n" + end + tail)
EOF
  echo "recorded in $doc" >&2
fi
if ((found > 0)); then
  echo "!! $found crash(es): see $build/artifacts/*/; each becomes a regression test" >&2
  exit 1
fi
