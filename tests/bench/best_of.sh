# Sourced by the shell benchmarks: `best CMD...` prints the best wall time in seconds of
# $runs runs of CMD (its output discarded); a failing run stops the benchmark.
best() {
  local b=""
  for _ in $(seq "$runs"); do
    local s e
    s=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "command failed: $*" >&2; exit 1; }
    e=$(date +%s%N)
    local t=$((e - s))
    if [[ -z "$b" || $t -lt $b ]]; then b=$t; fi
  done
  awk -v ns="$b" 'BEGIN { printf "%.3f", ns / 1e9 }'
}
