#!/usr/bin/env bash
# The README's test command: sets up a fresh Debian 12 machine (scripts/setup.sh), checks
# the layout (.clang-format, the rooms' order), builds spotvisor with warnings as errors, and runs every test — unit, integration, fault
# (tests/fault: killed supervisors and trainers, full filesystems, flapping endpoints,
# restart soak) and end-to-end, with real processes, real PyTorch and real HTTP on
# loopback — clang-tidy alongside, then the unit and integration suites again under
# ASan+UBSan, the hashing pool under TSan, the Python helper's tests, every fuzz target
# briefly, and what users install (scripts/package.sh: the portable binary, the .deb, the
# wheel) where they install it. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
step() { printf '\n==== %s (%s) ====\n' "$*" "$(date -u +%H:%M:%S)"; }

# Waits for background job $1 (named $2), shows its output file $3, fails like it did.
finish() {
  local rc=0
  wait "$1" || rc=$?
  cat "$3"
  if [[ $rc -ne 0 ]]; then
    echo "!! $2 failed (exit $rc)"
    exit "$rc"
  fi
}

step "setup"
scripts/setup.sh
[[ -x tests/npm/setup.sh ]] && tests/npm/setup.sh
# PyTorch 2.x and the frameworks from PyPI (pinned, cached outside the clone), beside
# Debian's torch 1.13: the launcher and format suites run on both.
torch2_python="$(scripts/python-env.sh | tail -n 1)"
# DeepSpeed (an sdist) in an environment of its own, layered on that one.
deepspeed_python="$(scripts/deepspeed-env.sh | tail -n 1)"

step "layout (.clang-format; rooms: no include from a room above)"
scripts/format.sh --check
scripts/rooms.py

# -O2 as users build it, without debug info: a third less compile time, and no test needs it.
step "build (-O2, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" \
  -DSPOTVISOR_WERROR=ON -DSPOTVISOR_TORCH2_PYTHON="$torch2_python" \
  -DSPOTVISOR_DEEPSPEED_PYTHON="$deepspeed_python" >/dev/null
ninja -C build -j "$jobs"

# Most tests wait on child processes, so the CPU is often idle while they run. At the
# lowest priority (the tests keep theirs) two jobs use it meanwhile: clang-tidy over every
# source, and the sanitizer and fuzz builds, one after the other.
step "background: clang-tidy; package.sh, ASan+UBSan, TSan and fuzz builds (nice 19)"
nice -n 19 scripts/tidy.sh >build/tidy.out 2>&1 &
tidy_pid=$!
(
  set -e
  # What users install (dist/: the portable binary, the .deb, the wheel), tested after the
  # rest (ctest -L package); a Debian 12 root for the .deb's test, made once and cached.
  SPOTVISOR_WERROR=ON nice -n 19 scripts/package.sh
  nice -n 19 tests/package/debian_root.sh
  # clang for this build: it compiles the sanitized Debug build in half gcc's time, and a
  # second compiler's warnings are errors too.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-14 \
    -DSPOTVISOR_SANITIZE=ON -DSPOTVISOR_WERROR=ON >/dev/null
  nice -n 19 ninja -C build-asan -j "$jobs" spotvisor spotvisor_child_helper spotvisor_unit_tests \
    spotvisor_integration_tests
  TSAN_BUILD_ONLY=1 nice -n 19 scripts/tsan.sh
  FUZZ_BUILD_ONLY=1 nice -n 19 scripts/fuzz.sh
) >build/sanitizer-builds.out 2>&1 &
builds_pid=$!

# e2e.Slurm mostly waits on slurmctld: it runs beside the others (ctest -L beside), not in a slot.
step "tests: unit, integration, fault, e2e (and beside them: ctest -L beside)"
ctest --test-dir build -L beside --output-on-failure -j "$jobs" --timeout 900 >build/beside.out 2>&1 &
beside_pid=$!
tests_rc=0
ctest --test-dir build -LE 'package|beside' --output-on-failure -j "$jobs" --timeout 600 \
  --output-log build/ctest.out || tests_rc=$?
if [[ $tests_rc -ne 0 ]]; then
  # Again at the end, where a log cut in the middle still shows it.
  step "the tests that failed: the end of each one's output"
  python3 scripts/failed-tests.py build/ctest.out
fi
finish "$beside_pid" "the tests beside the others (ctest -L beside)" build/beside.out
[[ $tests_rc -eq 0 ]] || exit "$tests_rc"

step "python helper tests (torch 1.13: Debian's python3; torch 2.x: the PyPI environment)"
/usr/bin/python3 -m unittest discover -s tests/python
"$torch2_python" -m unittest discover -s tests/python

step "clang-tidy (checks in .clang-tidy, all errors)"
finish "$tidy_pid" clang-tidy build/tidy.out

step "sanitizer and fuzz builds (-Werror)"
finish "$builds_pid" "the sanitizer and fuzz builds" build/sanitizer-builds.out

step "what users install: the portable binary in an empty root, the .deb in Debian 12, the wheel, the image"
ctest --test-dir build -L package --output-on-failure -j "$jobs" --timeout 900

step "tests under ASan+UBSan: unit, integration"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L 'unit|integration' --output-on-failure -j "$jobs" --timeout 600

step "hashing pool under TSan"
scripts/tsan.sh

step "fuzz targets, briefly"
FUZZ_SECONDS=${FUZZ_SECONDS:-5} scripts/fuzz.sh

step "all tests passed"
