#!/usr/bin/env bash
# The content check's cost (issue 20): on one page-cached ~1 GiB torch.save file (8 float32
# tensors of 128 MiB) and the same tensors as one safetensors file, `spotvisor validate
# --level full` against `--level full --content finite` (the same read, also scanned for
# NaN/Inf), beside what a user would write instead: load the file and run numpy.isfinite
# over every tensor. Prints a Markdown table (best of RUNS runs each; ratios from this run).
# Needs a python with torch, numpy and safetensors (PYTHON, default: scripts/python-env.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${BENCH_DIR:-/tmp/spotvisor-bench}"
runs="${RUNS:-3}"
bin="${SPOTVISOR:-$root/build/spotvisor}"
python="${PYTHON:-$("$root/scripts/python-env.sh" | tail -n 1)}"
mkdir -p "$work"
pt="$work/content.pt"
st="$work/content.safetensors"
if [[ ! -f "$pt" || ! -f "$st" ]]; then
  "$python" - "$pt" "$st" <<'PY'
import sys, torch, safetensors.torch
torch.manual_seed(0)
state = {f"layer{i}.weight": torch.rand(32, 1024, 1024) for i in range(8)}
torch.save(state, sys.argv[1])
safetensors.torch.save_file(state, sys.argv[2])
PY
fi
cat "$pt" "$st" >/dev/null  # page-cache them

source "$root/tests/bench/best_of.sh"

isfinite_pt='import sys, numpy, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True, mmap=True)
sys.exit(0 if all(numpy.isfinite(t.numpy()).all() for t in state.values()) else 1)'
isfinite_st='import sys, numpy, safetensors.numpy
state = safetensors.numpy.load_file(sys.argv[1])
sys.exit(0 if all(numpy.isfinite(t).all() for t in state.values()) else 1)'

t_pt_full=$(best "$bin" validate --level full "$pt")
t_pt_content=$(best "$bin" validate --level full --content finite "$pt")
t_pt_numpy=$(best "$python" -c "$isfinite_pt" "$pt")
t_st_full=$(best "$bin" validate --level full "$st")
t_st_content=$(best "$bin" validate --level full --content finite "$st")
t_st_numpy=$(best "$python" -c "$isfinite_st" "$st")
# numpy.isfinite alone, the tensors already in memory (best of the same number of runs):
# what the check costs a trainer that has just loaded the checkpoint anyway.
scan_only='import sys, time, numpy, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
best = min(
    (lambda s: (all(numpy.isfinite(t.numpy()).all() for t in state.values()), time.perf_counter() - s)[1])(
        time.perf_counter()) for _ in range(int(sys.argv[2])))
print("%.3f" % best)'
t_numpy_only=$("$python" -c "$scan_only" "$pt" "$runs")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
size=$(stat -c %s "$pt")
echo "Files: $(awk -v s="$size" 'BEGIN { printf "%.2f GiB", s / 1073741824 }') of float32 (8 x 128 MiB tensors) as torch.save and as safetensors, page-cached; best of $runs runs; $(nproc) CPUs; $("$bin" --version | head -n1); $("$python" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')."
echo
echo "| file | what | command | time (s) | vs full |"
echo "|---|---|---|---|---|"
for kind in pt st; do
  full_var="t_${kind}_full" content_var="t_${kind}_content" numpy_var="t_${kind}_numpy"
  name=$([[ $kind == pt ]] && echo "torch.save" || echo "safetensors")
  file=$([[ $kind == pt ]] && echo "content.pt" || echo "content.safetensors")
  loader=$([[ $kind == pt ]] && echo "torch.load(mmap=True)" || echo "safetensors.numpy.load_file")
  echo "| $name | spotvisor full validation | \`spotvisor validate --level full $file\` | ${!full_var} | 1.00 |"
  echo "| $name | spotvisor full + content check | \`spotvisor validate --level full --content finite $file\` | ${!content_var} | $(ratio "${!content_var}" "${!full_var}") |"
  echo "| $name | load, then numpy.isfinite on every tensor (a new Python process) | \`$loader\` + \`numpy.isfinite(t).all()\` | ${!numpy_var} | $(ratio "${!numpy_var}" "${!full_var}") |"
done
echo "| (in memory) | numpy.isfinite on every tensor already loaded, timed inside Python | \`numpy.isfinite(t).all()\` | $t_numpy_only | $(ratio "$t_numpy_only" "$t_pt_full") (vs torch.save full) |"
