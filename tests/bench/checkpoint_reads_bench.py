#!/usr/bin/env python3
"""Bytes spotvisor reads per byte checkpointed (issue 13): `rchar` of the spotvisor process
(/proc/PID/io) while a trainer writes N checkpoints of a known size, with validate: full,
checkpoints.keep: 3 and every checkpoint consumer on (cadence, a command mirror, telemetry).

The trainer (a small Python script, spotvisor's child) waits until the baseline rchar is
taken, writes N files of --size-mib random bytes (temp name, then rename), then sleeps. The
count stops once every consumer has seen the last checkpoint (run.json, checkpoints.jsonl,
the mirror), before the trainer exits: a reaped child's I/O is added to its parent's.
The mirror is a command that hard-links (`ln`), so the copy itself reads nothing and what is
counted is spotvisor's own reading (validation, retention, selection).

Run from the repository root after a build; several binaries are measured in one run:

    /usr/bin/python3 tests/bench/checkpoint_reads_bench.py \\
        --spotvisor build-before/build/spotvisor --spotvisor build/spotvisor [--checkpoints 8] [--size-mib 64]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

TRAINER = r'''
import os, sys, time
ckpt, go, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(ckpt, exist_ok=True)
open(go + ".ready", "w").close()
while not os.path.exists(go):
    time.sleep(0.02)
for step in range(1, n + 1):
    tmp = os.path.join(ckpt, ".tmp-ckpt_step%d" % step)
    with open(tmp, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(ckpt, "ckpt_step%d" % step))
    time.sleep(0.5)
open(go + ".written", "w").close()
while True:
    time.sleep(1)
'''


def rchar(pid):
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            key, value = line.split(":")
            if key == "rchar":
                return int(value)
    raise RuntimeError("no rchar for pid %d" % pid)


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def measure(binary, n, size):
    with tempfile.TemporaryDirectory(prefix="reads-bench-") as tmp:
        trainer = os.path.join(tmp, "trainer.py")
        with open(trainer, "w") as f:
            f.write(TRAINER)
        remote = os.path.join(tmp, "remote")
        os.makedirs(remote)
        go = os.path.join(tmp, "go")
        job = os.path.join(tmp, "job.yaml")
        with open(job, "w") as f:
            f.write(
                "job:\n  name: reads\n  command: [%s]\n" % ", ".join(json.dumps(a) for a in
                                                                       [sys.executable, trainer, os.path.join(tmp, "ckpt"), go, str(n), str(size)])
                + "checkpoints:\n  dir: %s\n  pattern: \"ckpt_step{step}\"\n  format: any\n  validate: full\n  keep: 3\n" % os.path.join(tmp, "ckpt")
                + "  mirror:\n    restore: false\n    command: [\"ln\", \"-f\", \"{checkpoint}\", \"%s/{name}\"]\n" % remote
                + "cadence:\n  every: 1h\n"
                + "telemetry:\n  state_dir: %s\n  log_level: %s\n  metrics:\n    listen: 127.0.0.1:0\n"
                % (os.path.join(tmp, "state"), os.environ.get("BENCH_LOG_LEVEL", "info")))
        out_path = os.path.join(tmp, "out.txt")
        with open(out_path, "w") as out:
            sv = subprocess.Popen([binary, "run", "--config", job], stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for("the trainer to start", lambda: os.path.exists(go + ".ready"), 30)
            time.sleep(2.5)  # the watcher's baseline scan and the first selection are done
            before = rchar(sv.pid)
            open(go, "w").close()
            last = "ckpt_step%d" % n

            def all_seen():
                log = read_text(out_path)
                ledger = read_text(os.path.join(tmp, "state", "run.json"))
                journal = read_text(os.path.join(tmp, "state", "checkpoints.jsonl"))
                return (os.path.exists(go + ".written") and "event=mirrored name=%s " % last in log
                        and '"%s"' % last in ledger and "/%s\"" % last in journal
                        and log.count("event=checkpoint_deleted") >= n - 3)

            wait_for("every consumer to see " + last, all_seen, 60 + n * size / 50e6)
            after = rchar(sv.pid)
        except Exception:
            sys.stderr.write(read_text(out_path)[-4000:])
            raise
        finally:
            sv.send_signal(signal.SIGTERM)
            sv.wait(60)
            if os.environ.get("BENCH_LOG_TO"):  # keep spotvisor's log for a look
                with open(os.environ["BENCH_LOG_TO"], "w") as f:
                    f.write(read_text(out_path))
        checkpointed = n * size
        return after - before, checkpointed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spotvisor", action="append", required=True, help="a spotvisor binary (repeatable)")
    parser.add_argument("--checkpoints", type=int, default=8)
    parser.add_argument("--size-mib", type=int, default=64)
    args = parser.parse_args()
    size = args.size_mib << 20
    print("| spotvisor | checkpoints | bytes checkpointed | rchar | bytes read per byte checkpointed |")
    print("|---|---|---|---|---|")
    for binary in args.spotvisor:
        read, written = measure(os.path.abspath(binary), args.checkpoints, size)
        print("| %s | %d x %d MiB | %d | %d | %.2f |" % (binary, args.checkpoints, args.size_mib, written, read,
                                                        read / written))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
