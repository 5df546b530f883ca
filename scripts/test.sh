#!/usr/bin/env bash
# The README's test command: sets up a fresh Debian 12 machine (scripts/setup.sh), checks
# the layout (.clang-format, the rooms' order), builds spotvisor with warnings as errors, and runs every test — unit, integration, fault
# (tests/fault: killed supervisors and trainers, full filesystems, flapping endpoints,
# restart soak) and end-to-end, with real processes, real PyTorch and real HTTP on
# loopback — and beside them clang-tidy, the unit and integration suites again under
# ASan+UBSan, the hashing pool under TSan, every fuzz target briefly, and what users install
# (scripts/package.sh: the portable binary, the .deb, the wheel) where they install it.
#
# Every stage runs and reports, whatever an earlier one did (a stage that needs one that
# failed says so instead of running); the end is a table of the stages with their times
# and verdicts, and the exit status is non-zero when any stage failed.
#
# A selection, for a quick loop (README: "Running part of the tests"):
#   scripts/test.sh --quick        layout, build, then the unit and integration labels
#   scripts/test.sh -L REGEX       build, then the ctest labels matching REGEX
#   scripts/test.sh -R REGEX       build, then the ctest tests whose names match REGEX
# (-L and -R combine, as in ctest). CI runs it with no arguments: everything.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
# Test time limits ×N (scripts/load-check.sh: 3); see tests/CMakeLists.txt.
scale=${SPOTVISOR_TEST_TIMEOUT_SCALE:-1}

usage() {
  sed -n '/^# A selection/,/^# (-L and -R/p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
quick=0
labels=""
regex=""
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    -L) [[ $# -ge 2 ]] || usage; labels="$2"; shift ;;
    -R) [[ $# -ge 2 ]] || usage; regex="$2"; shift ;;
    -h | --help) usage ;;
    *) echo "test.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
selected=0
[[ $quick -eq 1 || -n "$labels" || -n "$regex" ]] && selected=1
[[ $quick -eq 1 && -z "$labels" ]] && labels='^(unit|integration)$'

step() { printf '\n==== %s (%s) ====\n' "$*" "$(date -u +%H:%M:%S)"; }

# The stages' table: name, seconds, verdict, in the order they ended.
stage_names=()
stage_secs=()
stage_verdicts=()
failed_stages=0
record() {  # NAME SECONDS VERDICT
  stage_names+=("$1")
  stage_secs+=("$2")
  stage_verdicts+=("$3")
  [[ "$3" == passed ]] || failed_stages=$((failed_stages + 1))
}

# Runs stage NAME as `set -e` commands in a subshell (a failure ends the stage, not the
# command) and records it; its exit status is the stage's.
stage() {
  local name="$1" start=$SECONDS rc=0
  shift
  step "$name"
  # In the background and waited for: a subshell run as the left side of `||` would
  # ignore its own `set -e`.
  ("$@") &
  wait $! || rc=$?
  if [[ $rc -eq 0 ]]; then
    record "$name" $((SECONDS - start)) passed
  else
    echo "!! $name failed (exit $rc)"
    record "$name" $((SECONDS - start)) "failed (exit $rc)"
  fi
  return $rc
}

# A stage that cannot run because one it needs failed.
skipped() {  # NAME WHY
  step "$1"
  echo "!! not run: $2"
  record "$1" 0 "not run: $2"
}

# Waits for background stage $1 (pid), named $2, started at second $3, output in $4.
finish() {
  local rc=0
  step "$2"
  wait "$1" || rc=$?
  cat "$4"
  if [[ $rc -eq 0 ]]; then
    record "$2" $((SECONDS - $3)) passed
  else
    echo "!! $2 failed (exit $rc)"
    record "$2" $((SECONDS - $3)) "failed (exit $rc)"
  fi
  return $rc
}

table() {
  step "stages"
  local i total=$SECONDS
  printf '%-72s %7s  %s\n' "stage" "seconds" "verdict"
  for i in "${!stage_names[@]}"; do
    printf '%-72s %7s  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" "${stage_verdicts[$i]}"
  done
  printf '%-72s %7s\n' "the whole command" "$total"
  if [[ $failed_stages -eq 0 ]]; then
    echo "all stages passed"
  else
    echo "!! $failed_stages stage(s) did not pass"
  fi
}
trap table EXIT

set_up() {
  set -e
  scripts/setup.sh
  if [[ -x tests/npm/setup.sh ]]; then tests/npm/setup.sh; fi
  # PyTorch 2.x and the frameworks from PyPI (pinned, cached outside the clone), beside
  # Debian's torch 1.13: the launcher and format suites run on both; DeepSpeed (an sdist)
  # and moto's S3 server (for the tests' rclone S3 remote) in environments of their own,
  # layered on that one. Each prints its python last.
  scripts/python-env.sh | tail -n 1 >build/.torch2-python
  scripts/layered-env.sh deepspeed-env | tail -n 1 >build/.deepspeed-python
  scripts/layered-env.sh s3-env | tail -n 1 >build/.s3-python
}

layout() {
  set -e
  scripts/format.sh --check
  scripts/rooms.py
}

# -O2 as users build it, without debug info: a third less compile time, and no test needs it.
build() {
  set -e
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" \
    -DSPOTVISOR_WERROR=ON -DSPOTVISOR_TORCH2_PYTHON="$torch2_python" \
    -DSPOTVISOR_DEEPSPEED_PYTHON="$deepspeed_python" -DSPOTVISOR_S3_PYTHON="$s3_python" \
    -DSPOTVISOR_TEST_TIMEOUT_SCALE="$scale" >/dev/null
  ninja -C build -j "$jobs"
}

# The selected ctest tests (-L/-R), or with no selection every one but the package's, with
# the slow waiting ones (ctest -L beside) beside the others rather than in a -j slot.
ctests() {
  set -e
  local rc=0 select=()
  if [[ $selected -eq 1 ]]; then
    [[ -n "$labels" ]] && select+=(-L "$labels")
    [[ -n "$regex" ]] && select+=(-R "$regex")
    ctest --test-dir build "${select[@]}" --output-on-failure -j "$jobs" --timeout $((900 * scale)) \
      --output-log build/ctest.out || rc=$?
  else
    # e2e.Slurm mostly waits on slurmctld: it runs beside the others (ctest -L beside), not in a slot.
    ctest --test-dir build -L beside --output-on-failure -j "$jobs" --timeout 900 >build/beside.out 2>&1 &
    local beside_pid=$! beside_rc=0
    ctest --test-dir build -LE 'package|beside' --output-on-failure -j "$jobs" --timeout 600 \
      --output-log build/ctest.out || rc=$?
    wait "$beside_pid" || beside_rc=$?
    step "the tests beside the others (ctest -L beside)"
    cat build/beside.out
    cat build/beside.out >>build/ctest.out
    [[ $rc -ne 0 ]] || rc=$beside_rc
  fi
  if [[ $rc -ne 0 ]]; then
    # Again at the end of the stage, where a log cut in the middle still shows it.
    step "the tests that failed: the end of each one's output"
    python3 scripts/failed-tests.py build/ctest.out
  fi
  return $rc
}

# The checks that need builds of their own, in two lanes in the background while ctest runs
# (most tests wait on child processes, so the CPU is often idle): each build at the lowest
# priority, each check at the tests' own (a test must hold on a busy machine). ASan in one
# lane, the longest check; in the other what users install (dist/: the portable binary, the
# .deb, the wheel; a Debian 12 root for the .deb's test, made once and cached), TSan and the
# fuzz targets. clang for the ASan build: it compiles the sanitized Debug build in half gcc's
# time, and a second compiler's warnings are errors too.
asan_build() {
  set -e
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-14 \
    -DSPOTVISOR_SANITIZE=ON -DSPOTVISOR_WERROR=ON >/dev/null
  nice -n 19 ninja -C build-asan -j "$jobs" spotvisor spotvisor_child_helper spotvisor_unit_tests \
    spotvisor_integration_tests
}

asan_tests() {
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -L 'unit|integration' --output-on-failure -j "$jobs" --timeout 600
}

package_builds() {
  set -e
  SPOTVISOR_WERROR=ON nice -n 19 scripts/package.sh
  nice -n 19 tests/package/debian_root.sh
}

package_tests() { ctest --test-dir build -L package --output-on-failure -j "$jobs" --timeout 900; }

tsan_tests() {
  set -e
  TSAN_BUILD_ONLY=1 nice -n 19 scripts/tsan.sh
  scripts/tsan.sh
}

fuzz_briefly() {
  set -e
  FUZZ_BUILD_ONLY=1 nice -n 19 scripts/fuzz.sh
  FUZZ_SECONDS=${FUZZ_SECONDS:-5} scripts/fuzz.sh
}

# The background checks: "lane|name|function|the check it needs" (empty: none). The two
# lanes run beside each other, each check of a lane after the one before it: while ctest runs
# their builds take what CPU it leaves, and once it has ended they keep both cores busy.
background_checks=(
  "1|ASan+UBSan build (clang, -Werror)|asan_build|"
  "1|tests under ASan+UBSan: unit, integration|asan_tests|ASan+UBSan build (clang, -Werror)"
  "2|packages: the portable binary, the .deb, the wheel (-Werror)|package_builds|"
  "2|what users install: the portable binary in an empty root, the .deb in Debian 12, the wheel, the image|package_tests|packages: the portable binary, the .deb, the wheel (-Werror)"
  "2|hashing pool under TSan (its build, then its tests)|tsan_tests|"
  "2|fuzz targets, briefly (their build, then 5 s each)|fuzz_briefly|"
)

# Runs the background checks of lane $1 in turn; check i leaves its output in
# build/checks/i.out and "EXIT SECONDS" in build/checks/i.result ("skip" when the one it
# needs failed).
run_lane() {
  local i lane name fn needs start rc
  declare -A failed=()
  for i in "${!background_checks[@]}"; do
    IFS='|' read -r lane name fn needs <<<"${background_checks[$i]}"
    [[ "$lane" == "$1" ]] || continue
    if [[ -n "$needs" && -n "${failed[$needs]:-}" ]]; then
      failed[$name]=1
      echo "skip" >"build/checks/$i.result"
      continue
    fi
    start=$SECONDS
    rc=0
    # In the background and waited for, as in stage(): `set -e` holds inside.
    ("$fn") >"build/checks/$i.out" 2>&1 &
    wait $! || rc=$?
    [[ $rc -eq 0 ]] || failed[$name]=1
    echo "$rc $((SECONDS - start))" >"build/checks/$i.result"
  done
}

run_background_checks() {
  rm -rf build/checks
  mkdir -p build/checks
  run_lane 1 &
  run_lane 2 &
  wait
}

# Reports each background check as a stage of its own, once they have all ended.
report_background_checks() {
  local i lane name fn needs result rc secs
  wait "$1" || true
  for i in "${!background_checks[@]}"; do
    IFS='|' read -r lane name fn needs <<<"${background_checks[$i]}"
    result="$(cat "build/checks/$i.result" 2>/dev/null || echo "lost 0")"
    if [[ "$result" == skip ]]; then
      skipped "$name" "'$needs' failed"
      continue
    fi
    read -r rc secs <<<"$result"
    step "$name"
    cat "build/checks/$i.out" 2>/dev/null || true
    if [[ "$rc" == 0 ]]; then
      record "$name" "$secs" passed
    else
      echo "!! $name failed (exit $rc)"
      record "$name" "$secs" "failed (exit $rc)"
    fi
  done
}

mkdir -p build
if ! stage "setup" set_up; then
  skipped "everything else" "the setup failed"
  exit 1
fi
torch2_python="$(cat build/.torch2-python)"
deepspeed_python="$(cat build/.deepspeed-python)"
s3_python="$(cat build/.s3-python)"

if [[ $selected -eq 0 || $quick -eq 1 ]]; then
  stage "layout (.clang-format; rooms: no include from a room above)" layout || true
fi
if ! stage "build (-O2, -Werror)" build; then
  skipped "tests" "the build failed"
  exit 1
fi

if [[ $selected -eq 1 ]]; then
  stage "tests (ctest${labels:+ -L $labels}${regex:+ -R $regex})" ctests || true
  exit $((failed_stages > 0))
fi

# Beside the tests: clang-tidy over every source at the lowest priority, and the
# background checks above, in their two lanes.
tidy_start=$SECONDS
nice -n 19 scripts/tidy.sh >build/tidy.out 2>&1 &
tidy_pid=$!
run_background_checks >build/background-checks.out 2>&1 &
checks_pid=$!

stage "tests: unit, integration, fault, e2e, formats, frameworks, helper (and beside them: ctest -L beside)" ctests || true
finish "$tidy_pid" "clang-tidy (checks in .clang-tidy, all errors)" "$tidy_start" build/tidy.out || true
report_background_checks "$checks_pid"
exit $((failed_stages > 0))
