#!/usr/bin/env bash
# Checkpoint validation benchmark (issue 4): one page-cached ~1 GiB torch.save file;
# `spotvisor validate` (full: every entry's CRC-32) vs Python zipfile.testzip, unzip -tq and
# dd (the read limit); manifest check (XXH3-128) vs xxhsum -H3 and sha256sum; `spotvisor
# latest` in a directory of 10,000 checkpoints with cached verdicts. Prints a Markdown
# table (best of RUNS runs each). Needs /usr/bin/python3 with torch, unzip, xxhsum.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${BENCH_DIR:-/tmp/spotvisor-bench}"
runs="${RUNS:-3}"
bin="${SPOTVISOR:-}"
if [[ -z "$bin" ]]; then
  # WERROR off: GCC 12 at -O3 raises false positives (-Wrestrict) in code outside this benchmark.
  cmake -S "$root" -B "$root/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPOTVISOR_TESTS=OFF \
    -DSPOTVISOR_WERROR=OFF >/dev/null
  ninja -C "$root/build-bench" -j"${BENCH_JOBS:-2}" spotvisor >/dev/null
  bin="$root/build-bench/spotvisor"
fi
mkdir -p "$work"
file="$work/model.pt"
if [[ ! -f "$file" ]]; then
  /usr/bin/python3 - "$file" <<'PY'
import sys, torch
torch.manual_seed(0)
# 8 tensors of 128 MiB (float32) + a small optimizer-like state: ~1 GiB
state = {f"layer{i}.weight": torch.rand(32, 1024, 1024) for i in range(8)}
state["step"] = 1000
torch.save(state, sys.argv[1])
PY
fi
cat "$file" >/dev/null  # page-cache it

source "$root/tests/bench/best_of.sh"

rm -f "$file.spotvisor.manifest.json"
t_full=$(best "$bin" validate --level full "$file")
t_testzip=$(best python3 -c "import sys, zipfile; sys.exit(zipfile.ZipFile(sys.argv[1]).testzip() is not None)" "$file")
t_unzip=$(best unzip -tq "$file")
t_dd=$(best dd if="$file" of=/dev/null bs=1M)
"$bin" seal "$file" >/dev/null
t_manifest=$(best "$bin" validate --level full "$file")
rm -f "$file.spotvisor.manifest.json"
t_xxh=$(best xxhsum -H3 "$file")
t_sha=$(best sha256sum "$file")

sel="$work/many"
state="$work/state"
if [[ ! -d "$sel" ]]; then
  mkdir -p "$sel"
  /usr/bin/python3 - "$sel" <<'PY'
import io, os, sys, torch
buf = io.BytesIO(); torch.save({"w": torch.zeros(4)}, buf)
data = buf.getvalue()
for step in range(1, 10001):
    with open(os.path.join(sys.argv[1], f"step_{step:06d}.pt"), "wb") as f: f.write(data)
PY
fi
rm -rf "$state"
"$bin" checkpoints --dir "$sel" --pattern 'step_{step}.pt' --state-dir "$state" --update-cache >/dev/null || true
t_select=$(best "$bin" latest --dir "$sel" --pattern 'step_{step}.pt' --state-dir "$state")

size=$(stat -c %s "$file")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
gbps() { awk -v s="$size" -v t="$1" 'BEGIN { printf "%.1f", s / t / 1e9 }'; }
kernel=$("$bin" --version 2>/dev/null | head -n1)
echo "File: $(awk -v s="$size" 'BEGIN { printf "%.2f GiB", s / 1073741824 }') torch.save (8 x 128 MiB tensors), page-cached; best of $runs runs; $(nproc) CPUs; $kernel."
echo
echo "| what | command | time (s) | GB/s | vs spotvisor full |"
echo "|---|---|---|---|---|"
echo "| spotvisor full validation (every entry's CRC-32) | \`spotvisor validate --level full model.pt\` | $t_full | $(gbps "$t_full") | 1.00 |"
echo "| Python zipfile testzip | \`zipfile.ZipFile(f).testzip()\` | $t_testzip | $(gbps "$t_testzip") | $(ratio "$t_testzip" "$t_full")x slower |"
echo "| unzip -tq | \`unzip -tq model.pt\` | $t_unzip | $(gbps "$t_unzip") | $(ratio "$t_unzip" "$t_full")x slower |"
echo "| read limit | \`dd if=model.pt of=/dev/null bs=1M\` | $t_dd | $(gbps "$t_dd") | spotvisor takes $(ratio "$t_full" "$t_dd")x dd |"
echo "| spotvisor manifest check (XXH3-128 + ZIP structure) | \`spotvisor seal\`, then \`spotvisor validate\` | $t_manifest | $(gbps "$t_manifest") | $(ratio "$t_manifest" "$t_full") |"
echo "| xxhsum -H3 | \`xxhsum -H3 model.pt\` | $t_xxh | $(gbps "$t_xxh") | $(ratio "$t_xxh" "$t_full") |"
echo "| sha256sum | \`sha256sum model.pt\` | $t_sha | $(gbps "$t_sha") | $(ratio "$t_sha" "$t_full") |"
echo "| selection, 10,000 cached checkpoints | \`spotvisor latest --dir many --pattern 'step_{step}.pt'\` | $t_select | — | target ≤ 0.050 |"
