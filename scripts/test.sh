#!/usr/bin/env bash
# The README's test command: sets up a fresh Debian 12 machine (scripts/setup.sh), builds
# spotvisor with warnings as errors, and runs every test — unit, integration, fault
# (tests/fault: killed supervisors, full filesystems, restart soak) and end-to-end, with
# real processes, real PyTorch and real HTTP on loopback — clang-tidy alongside, then the
# unit and integration suites again under ASan+UBSan, the hashing pool under TSan, the
# Python helper's tests, and every fuzz target briefly. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
step() { printf '\n==== %s ====\n' "$*"; }

step "setup"
scripts/setup.sh
[[ -x tests/npm/setup.sh ]] && tests/npm/setup.sh

step "build (RelWithDebInfo, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOTVISOR_WERROR=ON >/dev/null
ninja -C build -j "$jobs"

# clang-tidy parses every source again: at the lowest priority, it uses the CPU the tests
# leave idle while they wait on their child processes.
tidy_pid=""
if [[ -x scripts/tidy.sh ]]; then
  step "clang-tidy starts in the background"
  nice -n 19 scripts/tidy.sh >build/tidy.out 2>&1 &
  tidy_pid=$!
fi

step "tests: unit, integration, fault, e2e"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

if [[ -n "$tidy_pid" ]]; then
  step "clang-tidy (checks in .clang-tidy, all errors)"
  tidy_rc=0
  wait "$tidy_pid" || tidy_rc=$?
  cat build/tidy.out
  [[ $tidy_rc -eq 0 ]] || exit "$tidy_rc"
fi

step "python helper tests"
/usr/bin/python3 -m unittest discover -s tests/python

step "build (ASan+UBSan, -Werror)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSPOTVISOR_SANITIZE=ON -DSPOTVISOR_WERROR=ON >/dev/null
ninja -C build-asan -j "$jobs" spotvisor spotvisor_child_helper spotvisor_unit_tests spotvisor_integration_tests

step "tests under ASan+UBSan: unit, integration"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L 'unit|integration' --output-on-failure -j "$jobs" --timeout 600

if [[ -x scripts/tsan.sh ]]; then
  step "hashing pool under TSan"
  scripts/tsan.sh
fi

if [[ -x scripts/fuzz.sh ]]; then
  step "fuzz targets, briefly"
  FUZZ_SECONDS=${FUZZ_SECONDS:-5} scripts/fuzz.sh
fi

step "all tests passed"
