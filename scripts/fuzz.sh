#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz and runs each one for
# FUZZ_SECONDS (default 10) from its seed corpus in tests/fuzz/corpus/<target>/
# (FUZZ_BUILD_ONLY=1: only builds).
# Exits non-zero when a target crashes, leaks, times out or fails to build.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-10}"
jobs="${FUZZ_JOBS:-2}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DSPOTVISOR_FUZZ=ON -DSPOTVISOR_WERROR=ON >/dev/null
mapfile -t targets < <(cd "$root/tests/fuzz" && ls ./*_fuzz.cpp | sed 's|^\./||; s|\.cpp$||')
ninja -C "$build" -j"$jobs" "${targets[@]}"
[[ "${FUZZ_BUILD_ONLY:-0}" == 1 ]] && exit 0

failed=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"          # grows while fuzzing; the seeds stay untouched
  mkdir -p "$corpus" "$build/artifacts/$t"
  seeds=()
  [[ -d "$root/tests/fuzz/corpus/$t" ]] && seeds=("$root/tests/fuzz/corpus/$t")
  echo "== $t: ${seconds}s"
  if ! "$build/tests/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=1048576 \
      -artifact_prefix="$build/artifacts/$t/" -print_final_stats=0 "$corpus" "${seeds[@]}" \
      >"$build/$t.log" 2>&1; then
    echo "!! $t failed; see $build/$t.log and $build/artifacts/$t/"
    tail -n 30 "$build/$t.log"
    failed=1
  else
    grep -E "^#[0-9]+ *DONE" "$build/$t.log" | tail -n 1 || true
  fi
done
exit "$failed"
