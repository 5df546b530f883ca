#!/usr/bin/env bash
# The load check (docs/RELIABILITY.md): runs the timing-sensitive tests — the ctest labels
# integration, fault, e2e and frameworks — while stress-ng keeps the machine as busy as a
# user's is when a compiler, data loaders and other jobs run beside training: a CPU hog on
# every core, a memory thrasher, and a disk writer with a syncer. Not part of CI (it takes
# about twice the time of those labels); run it before resolving an issue that touches timing.
#
#   scripts/load-check.sh [RUNS] [LABELS]    (default: 1 run; 'integration|fault|e2e|frameworks')
#
# Each run is `scripts/test.sh -L LABELS` (setup, build, those tests) with the load beside it;
# the load starts before the build and stops with the run (and by itself after 3 hours). The
# end is one line per run (seconds, verdict, failed tests) and the machine's load average,
# and the exit status is non-zero when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-1}"
labels="${2:-integration|fault|e2e|frameworks}"
cores="$(nproc)"

if ! command -v stress-ng >/dev/null 2>&1; then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends stress-ng >/dev/null
fi

# Everything takes longer under this load; a test's time limit guards against hangs, so
# the limits are tripled (tests/CMakeLists.txt), while what each test waits for inside it
# stays as it is. A load check's build configures with this scale; the next plain run of
# scripts/test.sh configures it back to 1.
export SPOTVISOR_TEST_TIMEOUT_SCALE=3

mkdir -p build
summary=()
failed=0
for run in $(seq 1 "$runs"); do
  work="$(mktemp -d /tmp/spotvisor-load.XXXXXX)"
  # CPU on every core, one process touching memory, one writing files and one syncing them.
  stress-ng --cpu "$cores" --vm 1 --vm-bytes 512M --hdd 1 --hdd-bytes 256M --io 1 \
    --temp-path "$work" --timeout 3h --quiet &
  load_pid=$!
  start=$SECONDS
  rc=0
  scripts/test.sh -L "$labels" 2>&1 | tee "build/load-check-$run.out" || rc=$?
  loadavg="$(cut -d' ' -f1-3 /proc/loadavg)"
  # Only the process started here (its workers end with it).
  kill -TERM "$load_pid" 2>/dev/null || true
  wait "$load_pid" 2>/dev/null || true
  rm -rf "$work"
  seconds=$((SECONDS - start))
  failures="$(grep -E '^\s+[0-9]+ - ' "build/load-check-$run.out" | sed -E 's/^\s+[0-9]+ - //' | tr '\n' ' ' || true)"
  if [[ $rc -eq 0 ]]; then
    summary+=("run $run: ${seconds} s, passed")
  else
    summary+=("run $run: ${seconds} s, FAILED: ${failures:-see build/load-check-$run.out}")
    failed=1
  fi
  summary+=("  load average (1, 5, 15 min) at its end: $loadavg")
done

printf '\n==== load check: %s run(s) of ctest -L %s beside stress-ng (%s cores) ====\n' "$runs" "$labels" "$cores"
printf '%s\n' "${summary[@]}"
exit "$failed"
