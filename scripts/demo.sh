#!/usr/bin/env bash
# The demo (README, command one): a real PyTorch trainer on a "spot VM" is preempted
# through spotvisor's mock AWS metadata server, checkpoints inside the warning window,
# spotvisor uploads that checkpoint to the "bucket" (an rclone remote; here rclone's local
# backend in a directory outside the VM, the same markers and restore as on S3), the VM
# goes away with its disk, and a new VM with an empty disk resumes from the bucket. The
# final weights are compared with an uninterrupted run of the same job: identical, or the
# demo fails (exit 1). It ends by writing the first VM's run report as one HTML page (the
# notice's checkpoint on the bucket inside the window) and printing its path.
#
#   scripts/demo.sh                 installs (scripts/setup.sh), builds build/spotvisor, runs
#
# Non-interactive (CI=true, no stdin), as root on a fresh Debian 12 or with sudo. Without
# torch for /usr/bin/python3 it runs the pure-Python example trainer instead. Once built,
# a rerun takes well under a minute on 2 cores.
#
# Environment: SPOTVISOR_DEMO_SKIP_SETUP=1 (skip scripts/setup.sh),
# SPOTVISOR_BUILD_DIR=DIR (build there instead of build/),
# SPOTVISOR_BINARY=PATH (use this spotvisor, build nothing),
# SPOTVISOR_DEMO_DIR=DIR (work dir; default a new one under $TMPDIR),
# SPOTVISOR_DEMO_PLAIN=1 (use the pure-Python trainer even when torch is there).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=/usr/bin/python3

if [[ -t 1 && -z "${CI:-}" ]]; then B=$'\e[1m'; G=$'\e[32m'; R=$'\e[31m'; N=$'\e[0m'; else B=; G=; R=; N=; fi
chapter() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
say() { printf '   %s\n' "$*"; }
# Shows log lines (timestamps and the job field trimmed, long lines cut), indented.
show() { sed -E 's/^[0-9T:.-]+Z +//; s/ job=demo / /; s/argv=.*/argv=.../' | cut -c1-170 | sed 's/^/     | /'; }
die() { printf '\n%sdemo failed: %s%s\n' "$R" "$*" "$N" >&2; exit 1; }

# Polls FILE for an extended regex, up to SECONDS; the match on stdout.
wait_line() {
  local file=$1 regex=$2 seconds=$3 pid=${4:-}
  local end=$((SECONDS + seconds))
  while ((SECONDS < end)); do
    if grep -E -m1 -- "$regex" "$file" 2>/dev/null; then return 0; fi
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      grep -E -m1 -- "$regex" "$file" 2>/dev/null && return 0
      tail -n 30 "$file" >&2
      die "spotvisor exited before a line matching '$regex' ($file)"
    fi
    sleep 0.1
  done
  tail -n 30 "$file" >&2
  die "no line matching '$regex' within ${seconds}s ($file)"
}

http_post() {   # URL: POST with an empty body, no proxies (stdlib only)
  "$PY" -c 'import sys, urllib.request as u
o = u.build_opener(u.ProxyHandler({}))
o.open(u.Request(sys.argv[1], data=b"", method="POST"), timeout=10).read()' "$1"
}

# ---------------------------------------------------------------------------------------
chapter "Setup and build"
if [[ "${SPOTVISOR_DEMO_SKIP_SETUP:-0}" != 1 ]]; then
  scripts/setup.sh </dev/null
fi
if [[ -n "${SPOTVISOR_BINARY:-}" ]]; then
  SV=$(realpath "$SPOTVISOR_BINARY")
  say "using $SV (SPOTVISOR_BINARY; nothing built)"
else
  BUILD=${SPOTVISOR_BUILD_DIR:-build}
  cmake_log=$(mktemp)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo </dev/null >"$cmake_log" 2>&1 ||
    { cat "$cmake_log" >&2; rm -f "$cmake_log"; die "cmake failed"; }
  rm -f "$cmake_log"
  ninja -C "$BUILD" spotvisor </dev/null
  SV=$(realpath "$BUILD/spotvisor")
fi

if [[ "${SPOTVISOR_DEMO_PLAIN:-0}" != 1 ]] && "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
  TRAINER=$ROOT/examples/torch_trainer/train.py
  WHAT="the PyTorch example (MLP with dropout, AdamW, StepLR, shuffled DataLoader; CPU)"
else
  TRAINER=$ROOT/examples/plain_trainer/train.py
  if [[ "${SPOTVISOR_DEMO_PLAIN:-0}" == 1 ]]; then
    WHAT="the pure-Python example (SPOTVISOR_DEMO_PLAIN=1; same contract as the PyTorch one)"
  else
    WHAT="the pure-Python example (no torch for $PY: the fallback trainer, same contract)"
  fi
fi

W=${SPOTVISOR_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/spotvisor-demo.XXXXXX")}
mkdir -p "$W"
rm -rf "$W/vm1" "$W/vm2" "$W/bucket" "$W/reference" "$W"/*.log "$W/result.txt" "$W/mock.port"
mkdir -p "$W/bucket"
MOCK_PID= SV_PID=
cleanup() {
  [[ -n "$SV_PID" ]] && kill -KILL "$SV_PID" 2>/dev/null || true
  [[ -n "$MOCK_PID" ]] && kill -TERM "$MOCK_PID" 2>/dev/null || true
}
trap cleanup EXIT

# The cloud: spotvisor's faithful fake of the AWS instance metadata service (IMDSv2).
"$SV" mock-metadata --provider aws --listen 127.0.0.1:0 --port-file "$W/mock.port" \
  </dev/null >"$W/mock.log" 2>&1 &
MOCK_PID=$!
for _ in $(seq 300); do [[ -s "$W/mock.port" ]] && break; sleep 0.1; done
[[ -s "$W/mock.port" ]] || { cat "$W/mock.log" >&2; die "the mock metadata server did not start"; }
URL="http://127.0.0.1:$(cat "$W/mock.port")"

cat >"$W/job.yaml" <<EOF
# The demo job: $WHAT
job:
  name: demo
  command: ["$PY", "$TRAINER", "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
            "--steps", "60", "--checkpoint-every", "20", "--step-sleep", "0.1", "--keep", "0"]
  resume_args: ["--resume_from={checkpoint}"]
  env: {OMP_NUM_THREADS: "1", PYTHONUNBUFFERED: "1"}
  result_file: ./result.txt
provider:
  kind: aws
  endpoint: $URL              # the mock; on a real spot VM this line is left out
  poll_interval: 500ms
signals:
  on_notice: SIGTERM          # the trainer: save at the next step, exit
  grace: 60s                  # capped by the notice's deadline
checkpoints:
  dir: ./ckpt
  pattern: "ckpt_step{step}"
  validate: full              # every byte: ZIP CRC-32s and the manifest
  keep: 3
  mirror:
    remote: ":local:$W/bucket"   # on a real VM: s3:my-bucket/jobs (rclone's config names it)
    bandwidth: 20MiB
telemetry:
  state_dir: ./state
EOF
# Each VM has its own disk: its checkpoint and state dirs.
vm() { printf -- '--checkpoint-dir %s/%s/ckpt --state-dir %s/%s/state' "$W" "$1" "$W" "$1"; }

say "trainer:   $WHAT"
say "job file:  $W/job.yaml (60 steps, periodic checkpoint every 20 steps)"
say "cloud:     mock AWS metadata at $URL"
say "bucket:    $W/bucket (an rclone remote that outlives the VM)"

# ---------------------------------------------------------------------------------------
chapter "1. The reference: the same job, never interrupted"
t0=$SECONDS
"$SV" run --config "$W/job.yaml" --provider none --no-mirror --checkpoint-dir "$W/reference/ckpt" \
  --state-dir "$W/reference/state" --result-file "$W/reference/result.txt" \
  </dev/null >"$W/reference.log" 2>&1 || { tail -n 30 "$W/reference.log" >&2; die "the reference run failed"; }
REFERENCE=$(cat "$W/reference/result.txt")
say "finished in $((SECONDS - t0)) s; SHA-256 of the final weights:"
say "  $REFERENCE"

# ---------------------------------------------------------------------------------------
chapter "2. The spot run on VM 1: spotvisor run --config job.yaml"
# shellcheck disable=SC2046
"$SV" run --config "$W/job.yaml" $(vm vm1) </dev/null >"$W/run1.log" 2>&1 &
SV_PID=$!
wait_line "$W/run1.log" 'event=trainer_started' 60 "$SV_PID" | show
wait_line "$W/run1.log" '^\[trainer\] saved step=20 reason=periodic' 180 "$SV_PID" | show
wait_line "$W/run1.log" '^step=3[0-9] ' 60 "$SV_PID" >/dev/null
say "... training, step 30 of 60 ..."

chapter "3. The cloud reclaims the VM: AWS posts a spot interruption notice (2 min warning)"
http_post "$URL/__spotvisor/preempt"
say "POST $URL/__spotvisor/preempt (the mock now answers /latest/meta-data/spot/instance-action)"
wait_line "$W/run1.log" 'warning +spotvisor .*event=notice ' 30 "$SV_PID" | show
say "spotvisor forwards it to the trainer's process group and writes the notice file:"
wait_line "$W/run1.log" 'event=stopping ' 30 "$SV_PID" | show
for _ in $(seq 100); do [[ -s "$W/vm1/state/notice.json" ]] && break; sleep 0.1; done
sed 's/^/     | /' "$W/vm1/state/notice.json" 2>/dev/null || true

chapter "4. The trainer checkpoints inside the window and exits"
saved=$(wait_line "$W/run1.log" '^\[trainer\] saved step=[0-9]+ reason=stop' 90 "$SV_PID")
printf '%s\n' "$saved" | show
stopping=$(wait_line "$W/run1.log" '^\[trainer\] stopping step=' 30 "$SV_PID")
printf '%s\n' "$stopping" | show
STOP_STEP=$(sed -E 's/.*saved step=([0-9]+).*/\1/' <<<"$saved")
REACHED=$(sed -E 's/.*stopping step=([0-9]+).*/\1/' <<<"$stopping")

chapter "5. spotvisor validates that checkpoint byte for byte and uploads it to the bucket"
wait_line "$W/run1.log" 'event=drained newest_good=' 90 "$SV_PID" | show
wait_line "$W/run1.log" "event=mirrored name=ckpt_step$STOP_STEP " 90 "$SV_PID" | show
say "the checkpoints spotvisor sees now (DURABLE: on the bucket):"
# shellcheck disable=SC2046
"$SV" checkpoints --config "$W/job.yaml" $(vm vm1) </dev/null | sed 's/^/     | /'
say "the bucket: each checkpoint, and the marker written after its last byte:"
(cd "$W/bucket" && ls -d ckpt_step* .spotvisor-complete/* | sed 's/^/     | /')

chapter "6. The VM goes away, and its disk with it (AWS terminate deletes the root volume)"
kill -TERM "$SV_PID"
rc=0
wait "$SV_PID" || rc=$?
SV_PID=
say "spotvisor exited $rc (75 = stopped, resumable)"
((rc == 75)) || die "expected exit 75, got $rc"
[[ -e "$W/result.txt" ]] && die "a stopped trainer wrote a result"
"$SV" report "$W/vm1/state" --html "$W/report.html" </dev/null >/dev/null 2>"$W/report-html.log" ||
  { cat "$W/report-html.log" >&2; die "spotvisor report --html failed"; }
"$SV" report "$W/vm1/state" </dev/null >"$W/report-vm1.md" 2>>"$W/report-html.log" || die "spotvisor report failed"
rm -rf "$W/vm1"
say "VM 1's checkpoints and state are gone ($W/vm1 deleted); its run report was kept: $W/report.html"

# ---------------------------------------------------------------------------------------
chapter "7. A new VM with an empty disk: spotvisor run --config job.yaml"
http_post "$URL/__spotvisor/clear"
rc=0
# shellcheck disable=SC2046
"$SV" run --config "$W/job.yaml" $(vm vm2) </dev/null >"$W/run2.log" 2>&1 || rc=$?
grep -E 'event=(mirror_restored|checkpoint_rejected|trainer_started)' "$W/run2.log" | show
grep -E '^\[trainer\] (resumed|done)' "$W/run2.log" | show
((rc == 0)) || { tail -n 30 "$W/run2.log" >&2; die "the resumed run exited $rc"; }
grep -q "event=mirror_restored .*step=$STOP_STEP " "$W/run2.log" ||
  die "the new VM did not restore the checkpoint written in the window (ckpt_step$STOP_STEP) from the bucket"
grep -q "^\[trainer\] resumed from=$W/vm2/ckpt/ckpt_step$STOP_STEP step=$STOP_STEP " "$W/run2.log" ||
  die "the trainer did not resume from the checkpoint written in the window (restored as $W/vm2/ckpt/ckpt_step$STOP_STEP)"
RESUMED=$(cat "$W/result.txt")

# ---------------------------------------------------------------------------------------
chapter "8. Verdict"
say "uninterrupted run:      $REFERENCE"
say "preempted and resumed:  $RESUMED"
say "the trainer stopped at step $REACHED on VM 1; VM 2 resumed from step $STOP_STEP: $((REACHED - STOP_STEP)) steps lost"
say "work dir (logs, checkpoints, state, run report): $W"
IDENTICAL=0
if [[ "$RESUMED" == "$REFERENCE" ]]; then
  IDENTICAL=1
  printf '\n%sidentical to an uninterrupted run%s\n' "$G$B" "$N"
else
  printf '\n%sdiffer: the resumed run is NOT identical to an uninterrupted run%s\n' "$R$B" "$N"
fi

# ---------------------------------------------------------------------------------------
chapter "9. VM 1's run report: spotvisor report STATE_DIR --html report.html"
say "the notice: its checkpoint judged good, then on the bucket, and the time left to the deadline:"
grep -E -A2 '^\| received ' "$W/report-vm1.md" | sed 's/^/     | /'
say "one self-contained file (inline SVG and CSS, no script, opens offline): the timeline with"
say "the notice and its warning window, the checkpoints, goodput, the tables"
printf '\n   %s%s%s\n' "$B" "$W/report.html" "$N"
((IDENTICAL == 1)) || exit 1
