#!/usr/bin/python3
"""Notice → durable: how long after a preemption notice the checkpoint saved for it is
whole on an S3 bucket (issue "durable before the VM dies").

The bucket is moto's S3 server on loopback (tests/e2e/s3_server.py; SPOTVISOR_S3_PYTHON
names the s3 environment's python, scripts/layered-env.sh s3-env), reached through rclone's
S3 backend with a bandwidth cap. The trainer (written here, stdlib only) steps until a
SIGTERM, then writes one checkpoint of --size bytes (a directory with one file, fsynced).
Two ways, --runs notices each:

- spotvisor: `checkpoints.mirror.remote` with `bandwidth: --cap`; the notice is the file
  provider's notice file (a 120 s window); durable = spotvisor's `event=mirrored` line for
  that checkpoint (its marker is written by then). The trainer also saves once on its own
  at startup, so that the planner has measured the upload before the notice: its predicted
  upload time is set beside the one observed for the notice's checkpoint.
- what a user writes instead: the same trainer, no supervisor, that after its save runs
  `rclone copy --bwlimit --cap` of the same bytes itself; durable = rclone's exit.

Times are from the notice (the notice file's creation; the SIGTERM for the bare trainer)
in the bench's own clock, read as each line arrives. Markdown on stdout. Run from the
repository root after a build:

    SPOTVISOR_S3_PYTHON=$(scripts/layered-env.sh s3-env | tail -n 1) \
        /usr/bin/python3 tests/bench/notice_durable_bench.py [--size 1GiB] [--cap 100MiB] [--runs 5] \
        [--shards N --save-rate 100MiB]

With --shards N the checkpoint is N files written in place one after the other (the shape of
torch.distributed.checkpoint and DeepSpeed; a COMMITTED file last, `checkpoints.marker`), and
--save-rate paces the save as serialization from the GPU would: spotvisor then uploads each
file as it closes, while the next is written, where by hand the upload starts after the save.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.e2e.processes import clean_env  # noqa: E402
from tests.e2e.s3_server import S3Server  # noqa: E402

TRAINER = r'''
import os, signal, subprocess, sys, time
ckpt_dir, size, shards, rate, upload = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
stop = False
def on_term(signo, frame):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
block = os.urandom(1 << 20)
def write(path, nbytes, began, done):
    # At `rate` bytes/s overall when set (a save paced by serialization), else as fast as the disk.
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
            done += n
            if rate > 0:
                ahead = began + done / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        f.flush()
        os.fsync(f.fileno())
    return done
def save(step):
    d = os.path.join(ckpt_dir, "ckpt_step%d" % step)
    began, done = time.monotonic(), 0
    if shards == 1:  # one file, the directory renamed into place
        os.makedirs(d + ".tmp", exist_ok=True)
        write(os.path.join(d + ".tmp", "blob.bin"), size, began, done)
        os.rename(d + ".tmp", d)
    else:  # written in place, a shard after the other (torch.distributed.checkpoint's shape)
        os.makedirs(d, exist_ok=True)
        for i in range(shards):
            done = write(os.path.join(d, "shard-%02d.bin" % i), size // shards, began, done)
        open(os.path.join(d, "COMMITTED"), "w").close()  # checkpoints.marker: whole from here on
    print("saved step=%d" % step, flush=True)
    return d
os.makedirs(ckpt_dir, exist_ok=True)
step = 0
if not upload:
    save(0)  # on its own, so that spotvisor measures an upload before the notice
while not stop:
    step += 1
    time.sleep(0.02)
d = save(step)
if upload:
    remote = upload[-1]  # the rclone command, then where it copies to
    subprocess.run(upload[:-1] + [d, remote + "/" + os.path.basename(d)], check=True)
    print("uploaded step=%d" % step, flush=True)
'''

SIZE_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", text)
    if not m:
        raise SystemExit(f"not a size: {text} (e.g. 1GiB)")
    return int(m.group(1)) * SIZE_UNITS.get(m.group(2) or "", 1)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "spotvisor"))
    p.add_argument("--size", default="1GiB")
    p.add_argument("--cap", default="100MiB")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--shards", type=int, default=1,
                   help="1: one file, the directory renamed into place; N: N files written in place, one after "
                        "the other (spotvisor uploads each as it closes)")
    p.add_argument("--save-rate", default="0", help="pace the save at this many bytes/s (e.g. 100MiB); 0: the disk's")
    return p.parse_args()


class Lines:
    """A process's output lines with the bench clock's time of arrival."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines, self.cond = proc, [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            with self.cond:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.monotonic(), None))
            self.cond.notify_all()

    def wait(self, regex: str, timeout: float = 600):
        pattern, end = re.compile(regex), time.monotonic() + timeout
        with self.cond:
            while True:
                for at, line in self.lines:
                    if line is not None and pattern.search(line):
                        return at, line
                if any(line is None for _, line in self.lines) or time.monotonic() > end:
                    tail = "\n".join(line or "<eof>" for _, line in self.lines[-30:])
                    raise RuntimeError(f"no line matching {regex!r}:\n{tail}")
                self.cond.wait(1)


def with_spotvisor(args, s3: S3Server, work: Path, run: int, size: int, cap: int, rate: int):
    vm = work / f"sv{run}"
    vm.mkdir()
    (vm / "trainer.py").write_text(TRAINER)
    notice = vm / "notice"
    (vm / "job.yaml").write_text(f"""job:
  name: bench
  command: ["/usr/bin/python3", "{vm / 'trainer.py'}", "{vm / 'ckpt'}", "{size}", "{args.shards}", "{rate}"]
provider:
  kind: file
  file: {notice}
  poll_interval: 100ms
  default_window: 120s
signals:
  grace: 110s
checkpoints:
  dir: ./ckpt
  pattern: "ckpt_step{{step}}"
  format: any
  validate: structure
{"  marker: COMMITTED" + chr(10) if args.shards > 1 else ""}  mirror:
    remote: "{s3.remote}/sv{run}"
    bandwidth: {cap}
    restore: false
telemetry:
  state_dir: ./state
""")
    proc = subprocess.Popen([args.binary, "run", "--config", str(vm / "job.yaml")], cwd=vm,
                            env=s3.rclone_env(clean_env()), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    out = Lines(proc)
    _, plan = out.wait(r"event=durability_(plan|at_risk) ")
    predicted = float(re.search(r" upload_s=([0-9.]+)", plan).group(1))
    notice.write_text("")
    at = time.monotonic()
    _, saved = out.wait(r"^saved step=[1-9]")
    step = re.search(r"step=(\d+)", saved).group(1)
    done, mirrored = out.wait(rf"event=mirrored name=ckpt_step{step} ")
    proc.send_signal(signal.SIGTERM)  # drained, it waits for the machine to go away: it goes
    proc.wait(timeout=600)
    observed = int(re.search(r" ms=(\d+)", mirrored).group(1)) / 1000
    s3.rclone("purge", f"{s3.remote}/sv{run}", check=False)
    shutil.rmtree(vm)  # two checkpoints of --size: five 4 GiB runs would fill the disk
    return done - at, predicted, observed


def by_hand(args, s3: S3Server, work: Path, run: int, size: int, cap: int, rate: int):
    vm = work / f"bare{run}"
    vm.mkdir()
    (vm / "trainer.py").write_text(TRAINER)
    upload = ["rclone", "copy", "-q", "--bwlimit", f"{cap}B", f"{s3.remote}/bare{run}"]
    proc = subprocess.Popen(["/usr/bin/python3", str(vm / "trainer.py"), str(vm / "ckpt"), str(size), str(args.shards),
                             str(rate), *upload],
                            env=s3.rclone_env(clean_env()), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    out = Lines(proc)
    time.sleep(0.5)  # stepping (the spotvisor runs get theirs from their startup save)
    proc.send_signal(signal.SIGTERM)
    at = time.monotonic()
    done, _ = out.wait(r"^uploaded step=")
    proc.wait(timeout=600)
    s3.rclone("purge", f"{s3.remote}/bare{run}", check=False)
    shutil.rmtree(vm)
    return done - at


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    args = parse_args()
    size, cap, rate = parse_size(args.size), parse_size(args.cap), parse_size(args.save_rate)
    with tempfile.TemporaryDirectory(prefix="spotvisor-durable-bench-") as tmp:
        work = Path(tmp)
        with S3Server(str(work / "s3")) as s3:
            sv, predicted, observed, bare = [], [], [], []
            for run in range(args.runs):
                t, p, o = with_spotvisor(args, s3, work, run, size, cap, rate)
                sv.append(t), predicted.append(p), observed.append(o)
                bare.append(by_hand(args, s3, work, run, size, cap, rate))
                print(f"run {run + 1}: spotvisor {t:.2f} s (upload predicted {p:.1f} s, took {o:.1f} s); "
                      f"by hand {bare[-1]:.2f} s", file=sys.stderr)
    shape = ("one file, renamed into place" if args.shards == 1
             else f"{args.shards} files written in place one after the other")
    paced = f", saved at {args.save_rate}/s" if rate > 0 else ""
    print(f"Notice → durable on moto's S3 server through rclone, a {args.size} checkpoint ({shape}{paced}), "
          f"`bandwidth: {args.cap}`, {args.runs} notices each (p99 of {args.runs} is the largest):\n")
    print("| | p50 (s) | p99 (s) | mean (s) |")
    print("|---|---|---|---|")
    for name, values in (("spotvisor (`mirror.remote`)", sv), ("the trainer saves, then `rclone copy` itself", bare)):
        print(f"| {name} | {pct(values, 0.5):.2f} | {pct(values, 0.99):.2f} | {statistics.mean(values):.2f} |")
    print(f"\nRatio of the p50s (spotvisor / by hand): {pct(sv, 0.5) / pct(bare, 0.5):.2f}.")
    print("\nThe planner's predicted upload (from the startup checkpoint's upload) against the notice "
          "checkpoint's observed upload, seconds:\n")
    print("| run | predicted | observed |")
    print("|---|---|---|")
    for i, (p, o) in enumerate(zip(predicted, observed)):
        print(f"| {i + 1} | {p:.1f} | {o:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
