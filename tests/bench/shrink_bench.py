#!/usr/bin/env python3
"""A node lost from a three-node group whose replacement boots in 60 s (issue 23): the GPU
node-seconds the group spends idle, with `min_nodes: 2` (it shrinks after `shrink_after`
and grows back when the replacement comes) against without (it waits for the replacement).
One etcd member on loopback; each node is a spotvisor whose trainer is a shell that sleeps
until SIGTERM (the group's mechanics, not torch's start-up). Each trial has its own job name
(its own keys in etcd); the trials, which mostly wait for the boot, run side by side.

A trial: three spotvisors (`node_rank: auto`, lease_ttl 3 s) train; rank 0's node vanishes
(SIGKILL to its spotvisor and its trainer: a VM gone without a notice); a new spotvisor with
the same job file starts `--boot` seconds later and takes rank 0; the trial ends when all
three trainers run again. Idle node-seconds, from spotvisor's own log lines (one clock):
each survivor from the loss to its next trainer start (its collectives wait for the lost
peer), plus every later gap between its trainer's end and its next start (the growth's
restart), plus the replacement's wait from its start to its trainer's. The lost node and
the replacement's boot are not counted: neither is a GPU of the group.

Run from the repository root after a build:

    /usr/bin/python3 tests/bench/shrink_bench.py --spotvisor build/spotvisor [--trials 10] [--boot 60]
"""
import statistics
import sys
import threading
import time

from group_stop_bench import lines, stamp, start_etcd  # the same etcd and log lines
from spare_bench import Node, job_file, lost_node_setup, rank_of, summary, wait_until

SHRINK_AFTER_S = 10


def idle_seconds(log, since, until):
    """The node's seconds without a running trainer in [since, until]: from `since` (the
    loss, or the node's own start) to the first trainer start after it, then every attempt's
    end to the next start."""
    starts = sorted(t for t in map(stamp, lines(log, "trainer_started")) if t >= since)
    ends = sorted(t for t in map(stamp, lines(log, "attempt_ended")) if t >= since)
    idle, free_from = 0.0, since
    for start in starts:
        if start > until:
            break
        if free_from is not None:
            idle += start - free_from
        later = [e for e in ends if e > start]
        free_from = later[0] if later else None
    return idle


def trial(binary, work, url, name, shrink, boot):
    """One loss; returns (idle node-seconds, seconds from the loss to the whole group training)."""
    more = ["  min_nodes: 2", f"  shrink_after: {SHRINK_AFTER_S}s"] if shrink else []
    logs = lambda n: f"{work}/{name}/n{n}/spotvisor.log"  # noqa: E731
    nodes = []
    try:
        for n in range(3):
            nodes.append(Node(binary, job_file(work, name, f"n{n}", url, 0, 3, more), logs(n)))
            wait_until(lambda: rank_of(nodes[-1]) == n, 30, f"{name}: node {n} joined")
        wait_until(lambda: all(lines(x.log, "trainer_started") for x in nodes), 60, f"{name}: first start")
        lost_at = time.time()
        nodes[0].vanish()
        time.sleep(max(0.0, lost_at + boot - time.time()))
        booted = time.time()
        nodes.append(Node(binary, job_file(work, name, "n3", url, 0, 3, more), logs(3)))
        survivors, newcomer = nodes[1:3], nodes[3]

        def whole():
            if not lines(newcomer.log, "trainer_started"):
                return False
            last = stamp(lines(newcomer.log, "trainer_started")[-1])
            return all(lines(s.log, "trainer_started") and stamp(lines(s.log, "trainer_started")[-1]) >= booted
                       for s in survivors) and last >= booted

        wait_until(whole, 120, f"{name}: the whole group trains again")
        until = max(stamp(lines(x.log, "trainer_started")[-1]) for x in nodes[1:])
        idle = sum(idle_seconds(s.log, lost_at, until) for s in survivors) + idle_seconds(newcomer.log, booted, until)
        return idle, until - lost_at
    finally:
        for x in nodes:
            x.stop()


def main():
    args, binary, work = lost_node_setup("shrink")
    etcd, url = start_etcd(work)
    try:
        time.sleep(1)
        results = {}
        errors = []

        def run(kind, t):
            try:
                results[(kind, t)] = trial(binary, work, url, f"{kind}{t}", kind == "shrink", args.boot)
            except Exception as e:  # noqa: BLE001 - said below, and the run fails
                errors.append(f"{kind}{t}: {e}")

        threads = [threading.Thread(target=run, args=(kind, t)) for t in range(args.trials)
                   for kind in ("shrink", "wait")]
        for th in threads:
            th.start()
            time.sleep(0.5)
        for th in threads:
            th.join()
        if errors:
            raise SystemExit("\n".join(errors))
        shrink = [results[("shrink", t)] for t in range(args.trials)]
        wait = [results[("wait", t)] for t in range(args.trials)]
        print(f"three-node group, lease_ttl 3s, node lost by SIGKILL (no notice), replacement boots in {args.boot:g} s, "
              f"{args.trials} trials each side by side, etcd 1 member on loopback; work dir {work}")
        print(f"idle GPU node-seconds per lost node: min_nodes 2, shrink_after {SHRINK_AFTER_S}s: "
              f"{summary([i for i, _ in shrink])}")
        print(f"idle GPU node-seconds per lost node: min_nodes off (waits for the replacement): "
              f"{summary([i for i, _ in wait])}")
        print(f"loss -> the whole group trains again: shrinking {summary([w for _, w in shrink])}; "
              f"waiting {summary([w for _, w in wait])}")
        ratio = statistics.median([i for i, _ in wait]) / statistics.median([i for i, _ in shrink])
        print(f"ratio (idle node-seconds, waiting / shrinking, p50): {ratio:.1f}x")
    finally:
        etcd.kill()
        etcd.wait()


if __name__ == "__main__":
    sys.exit(main())
