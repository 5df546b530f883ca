#!/usr/bin/env bash
# Builds the checkpoint module — the code that hashes on a thread pool — and its tests
# with ThreadSanitizer in build-tsan, and runs them (TSAN_BUILD_ONLY=1: only builds). Exits
# non-zero on a data race.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TSAN_BUILD_DIR:-$root/build-tsan}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOTVISOR_TSAN=ON -DSPOTVISOR_WERROR=ON >/dev/null
ninja -C "$build" -j"${JOBS:-$(nproc)}" spotvisor_tsan_tests
[[ "${TSAN_BUILD_ONLY:-0}" == 1 ]] && exit 0
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir "$build" -L tsan --output-on-failure -j"${JOBS:-$(nproc)}" --timeout 300
