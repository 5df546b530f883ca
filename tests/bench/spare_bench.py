#!/usr/bin/env python3
"""A node lost from a two-node group (issue 23): with a hot spare, against waiting for a
replacement VM. One etcd member on loopback; each node is a spotvisor whose trainer is a shell
that sleeps until SIGTERM (the group's mechanics, not torch's start-up). Each trial has its
own job name (its own keys in etcd):

  spare        three spotvisors for `nodes: 2, spares: 1`, `node_rank: auto`. Rank 0's node
               vanishes (SIGKILL to its spotvisor and its trainer: a VM gone without a
               notice). Its lease lapses after lease_ttl; the spare takes the rank on the
               delete and the survivor, stopped by the same lapse, starts with it.
  replacement  two spotvisors for `nodes: 2`. The same loss; a new spotvisor with the same job
               file (a replacement VM) starts `--boot` seconds after the loss and takes rank 0.

Measured from spotvisor's own log lines (one clock, one machine): the loss -> both ranks'
trainers started again (the group trains again), and the survivor's idle node-seconds (its
trainer's stop -> its next start). A spare is a node billed while it waits: the last line
says what that costs against what it saves. The spare trials run one after another; the
replacement trials, which mostly wait for the boot, run side by side.

Run from the repository root after a build:

    /usr/bin/python3 tests/bench/spare_bench.py --spotvisor build/spotvisor [--trials 10] [--boot 60]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from group_stop_bench import lines, stamp, start_etcd  # the same etcd and log lines

LEASE_TTL_S = 3



def field(line, key):
    for part in line.split():
        if part.startswith(key + "="):
            return part[len(key) + 1:]
    return None


def wait_until(predicate, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


class Node:
    """One spotvisor with its own dir; `vanish` kills it and its trainer, as a lost VM."""

    def __init__(self, binary, job_file, log):
        self.log = log
        self.proc = subprocess.Popen([binary, "run", "--config", job_file], cwd=os.path.dirname(job_file),
                                     stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def trainer_pids(self):
        return [int(field(line, "pid")) for line in lines(self.log, "trainer_started")]

    def vanish(self):
        self.proc.kill()
        self.proc.wait(10)
        for pid in self.trainer_pids():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in self.trainer_pids():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def job_file(work, trial, node, url, spares, nodes=2, more=()):
    """A node's job: a sleeping trainer, `nodes` ranks, `more` extra coordination lines."""
    d = f"{work}/{trial}/{node}"
    os.makedirs(d, exist_ok=True)
    path = f"{d}/job.yaml"
    with open(path, "w") as f:
        f.write("\n".join([
            "job:", f"  name: {trial}",
            "  command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 100000 & wait\"]",
            "provider:", "  kind: none", "signals:", "  grace: 30s",
            "telemetry:", "  state_dir: ./state", "  log_format: text",
            "restart:", "  backoff: {initial: 100ms, max: 1s}", "  no_progress_limit: 0",
            "coordination:", f"  etcd: [{json.dumps(url)}]", f"  nodes: {nodes}", f"  spares: {spares}",
            "  node_rank: auto", f"  lease_ttl: {LEASE_TTL_S}s", "  join_timeout: 10m", "  advertise: 127.0.0.1",
            *more, ""]))
    return path


def rank_of(node):
    joined = lines(node.log, "group_joined")
    return int(field(joined[-1], "rank")) if joined else None


def trial(binary, work, url, name, spares, boot):
    """One loss; returns (seconds to both trainers started, survivor's idle seconds)."""
    logs = lambda n: f"{work}/{name}/n{n}/spotvisor.log"  # noqa: E731
    count = 3 if spares else 2
    nodes = []
    try:
        for n in range(count):
            nodes.append(Node(binary, job_file(work, name, f"n{n}", url, spares), logs(n)))
            if n < 2:  # the first two take ranks 0 and 1, in order
                wait_until(lambda: rank_of(nodes[-1]) == n, 30, f"{name}: node {n} joined")
        wait_until(lambda: all(lines(x.log, "trainer_started") for x in nodes[:2]), 60, f"{name}: first start")
        if spares:
            wait_until(lambda: lines(nodes[2].log, "spare_waiting"), 30, f"{name}: the spare waits")
        lost_at = time.time()
        nodes[0].vanish()
        survivor = nodes[1]
        if not spares:
            time.sleep(max(0.0, lost_at + boot - time.time()))
            nodes.append(Node(binary, job_file(work, name, "n2", url, spares), logs(2)))
        newcomer = nodes[2]
        wait_until(lambda: len(lines(survivor.log, "trainer_started")) >= 2 and lines(newcomer.log, "trainer_started"),
                   boot + 60, f"{name}: the group trains again")
        restarted = max(stamp(lines(survivor.log, "trainer_started")[1]), stamp(lines(newcomer.log, "trainer_started")[0]))
        # The survivor's GPU does no work from the loss on (its collectives wait for the lost
        # peer), whatever its spotvisor knows: idle until its next start.
        idle = stamp(lines(survivor.log, "trainer_started")[1]) - lost_at
        return restarted - lost_at, idle
    finally:
        for x in nodes:
            x.stop()


def lost_node_setup(name):
    """The arguments both lost-node benches take: (args, the spotvisor's path, a work dir)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spotvisor", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--boot", type=float, default=60.0, help="the replacement VM's boot, seconds")
    args = ap.parse_args()
    return args, os.path.abspath(args.spotvisor), tempfile.mkdtemp(prefix=f"spotvisor-{name}-bench-")


def summary(values):
    s = sorted(values)
    return f"p50 {statistics.median(s):.2f} s, max {s[-1]:.2f} s (min {s[0]:.2f} s, n={len(s)})"


def main():
    args, binary, work = lost_node_setup("spare")
    etcd, url = start_etcd(work)
    try:
        time.sleep(1)
        spare = [trial(binary, work, url, f"spare{t}", 1, 0) for t in range(args.trials)]
        replaced = [None] * args.trials
        errors = []

        def run(t):
            try:
                replaced[t] = trial(binary, work, url, f"replacement{t}", 0, args.boot)
            except Exception as e:  # noqa: BLE001 - said below, and the run fails
                errors.append(f"replacement{t}: {e}")

        threads = [threading.Thread(target=run, args=(t,)) for t in range(args.trials)]
        for th in threads:
            th.start()
            time.sleep(0.5)
        for th in threads:
            th.join()
        if errors:
            raise SystemExit("\n".join(errors))
        print(f"two-node group, lease_ttl {LEASE_TTL_S}s, node lost by SIGKILL (no notice), {args.trials} trials each, "
              f"etcd 1 member on loopback; work dir {work}")
        print(f"loss -> both trainers started again: with a spare: {summary([s for s, _ in spare])}")
        print(f"loss -> both trainers started again: replacement booting in {args.boot:g} s: "
              f"{summary([s for s, _ in replaced])}")
        print(f"survivor idle node-seconds per lost node: with a spare {summary([i for _, i in spare])}; "
              f"waiting for the replacement {summary([i for _, i in replaced])}")
        ratio = statistics.median([s for s, _ in replaced]) / statistics.median([s for s, _ in spare])
        print(f"ratio (replacement / spare, p50 of the time to train again): {ratio:.1f}x; the spare itself is one "
              "node billed for the whole run, idle unless a node is lost")
    finally:
        etcd.kill()
        etcd.wait()


if __name__ == "__main__":
    sys.exit(main())
