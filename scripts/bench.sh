#!/usr/bin/env bash
# Runs every benchmark (tests/bench/) against one build and rewrites docs/BENCHMARKS.md:
# each table comes from one run of its script, side by side with the alternative a user
# would pick, with the command that produced it.
#
#   scripts/bench.sh              the full runs (about 52 minutes on 2 cores)
#   QUICK=1 scripts/bench.sh      fewer trials (a few minutes; for a smoke check)
#   BUILD=DIR scripts/bench.sh    use DIR/spotvisor (default: build/, built if missing)
#   OUT=FILE scripts/bench.sh     write FILE instead of docs/BENCHMARKS.md
#
# Needs the test dependencies (scripts/setup.sh): torch for the validation and resume
# benchmarks, supervisor for the idle comparison, curl for the notice-loop baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD:-build}
out=${OUT:-docs/BENCHMARKS.md}
quick=${QUICK:-0}
py=/usr/bin/python3

if [[ ! -x "$build/spotvisor" || ! -x "$build/tests/spotvisor_child_helper" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C "$build" spotvisor spotvisor_child_helper
fi
bin=$(realpath "$build/spotvisor")

if [[ "$quick" == 1 ]]; then
  supervise=(--restarts 50 --torchrun-restarts 2 --idle-seconds 10)
  notice=(--trials 10 --baseline-trials 5)
  resume=(--notice-drills 1 --kill-drills 1 --interruptions 2)
  soak=(--restarts 500 --poll-seconds 30 --flap-seconds 30)
  validate_runs=1
else
  supervise=(--restarts 300 --torchrun-restarts 5 --idle-seconds 60)
  notice=(--trials 50 --baseline-trials 20)
  resume=(--notice-drills 3 --kill-drills 4 --interruptions 3)
  soak=(--restarts 3000 --poll-seconds 600)
  validate_runs=3
fi

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
section() { printf '\n## %s\n\n' "$1" >>"$tmp"; }
# Runs a benchmark, its command line first; its Markdown goes into the page.
bench() {
  printf '```\n%s\n```\n\n' "$*" >>"$tmp"
  echo "== $*" >&2
  "$@" >>"$tmp"
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cat >"$tmp" <<EOF
# Benchmarks

Written by \`scripts/bench.sh\`$([[ "$quick" == 1 ]] && echo " (QUICK=1: fewer trials)") on $(date -u +%Y-%m-%d):
$(nproc) CPUs ($cpu), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo),
$(. /etc/os-release && echo "$PRETTY_NAME"), spotvisor $("$bin" --version 2>/dev/null | head -n1 || echo "?").
Every table is one run of the command above it, side by side with the alternative a user
would pick, as a ratio from that same run. Timings are never asserted in tests. The
machine may have been shared with other work: compare the ratios, not the absolute times.
EOF

section "Supervision: restart latency and idle cost (issue 2)"
bench "$py" tests/bench/supervise_bench.py --build "$build" "${supervise[@]}"

section "Preemption notice to signal (issue 3)"
bench tests/bench/notice_latency_bench.sh --build "$build" "${notice[@]}"

section "Checkpoint validation (issue 4)"
bench env SPOTVISOR="$bin" RUNS="$validate_runs" tests/bench/checkpoint_validate_bench.sh

section "Exact resume: steps lost and time to resume (issue 5)"
bench "$py" tests/bench/resume_bench.py --binary "$bin" "${resume[@]}"

section "Soak: crash-restarts, a long poll, a flapping endpoint (issue 8)"
bench "$py" tests/bench/soak_bench.py --build "$build" "${soak[@]}"

section "torchrun: the time workers get to save (issue 11)"
bench "$py" tests/bench/torchrun_grace_bench.py --build "$build" --grace 90

section "Bytes read per byte checkpointed (issue 13)"
bench "$py" tests/bench/checkpoint_reads_bench.py --spotvisor "$bin"

mv "$tmp" "$out"
trap - EXIT
echo "wrote $out" >&2
