#!/usr/bin/env python3
"""A multi-node job's stop and restart through etcd (issue 14): three spotvisors on one
machine, one etcd member on loopback, each node's trainer a shell that sleeps until SIGTERM.
Node 0 watches a trigger file (provider.kind: file). Each trial:

  1. the trigger file appears: node 0's spotvisor logs `event=notice`, publishes the stop
     and signals its trainer; nodes 1 and 2 read the stop from their watch and signal theirs.
     Measured: node 0's notice line -> the last `signal_sent signal=SIGTERM` of the other
     nodes (the time a peer's trainer starts saving after the notice reached the first node);
  2. the file goes: node 0 resumes after provider.resume_after (1s) and the group agrees on
     the next epoch. Measured: node 0's `resume_after_notice` line -> the last node's
     `trainer_started` of that epoch (the group restart).

The alternative without coordination is not a number: the other nodes get no stop at all,
and learn of the lost peer only when their next collective fails (their work since the last
checkpoint is lost). Times come from spotvisor's own log lines (one clock, one machine).

Run from the repository root after a build:

    /usr/bin/python3 tests/bench/group_stop_bench.py --spotvisor build/spotvisor [--trials 30]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stamp(line):
    return datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def lines(path, event, extra=""):
    """The log lines of `event` (and `extra`) in `path`; none while the log is not there yet."""
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        return [line for line in f if f"event={event} " in line and extra in line]


def wait_until(predicate, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def start_etcd(work):
    """One etcd member on loopback ports, its data and log under `work`: (process, client URL)."""
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    etcd = subprocess.Popen(["etcd", "--name", "m0", "--data-dir", f"{work}/etcd", "--listen-client-urls", url,
                             "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"m0=http://127.0.0.1:{peer}"],
                            stdout=open(f"{work}/etcd.log", "wb"), stderr=subprocess.STDOUT)
    return etcd, url


def percentile(values, p):
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spotvisor", required=True)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=3)
    args = ap.parse_args()
    args.spotvisor = os.path.abspath(args.spotvisor)
    work = tempfile.mkdtemp(prefix="spotvisor-group-bench-")
    etcd, url = start_etcd(work)
    procs, logs = [], []
    trigger = f"{work}/notice"
    try:
        time.sleep(1)
        for rank in range(args.nodes):
            node = f"{work}/n{rank}"
            os.makedirs(node)
            provider = (["provider:", "  kind: file", f"  file: {json.dumps(trigger)}", "  poll_interval: 50ms",
                         "  resume_after: 1s"] if rank == 0 else ["provider:", "  kind: none"])
            with open(f"{node}/job.yaml", "w") as f:
                f.write("\n".join([
                    "job:", "  name: bench",
                    "  command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 100000 & wait\"]",
                    *provider, "signals:", "  grace: 30s", "telemetry:", "  state_dir: ./state", "  log_format: text",
                    "restart:", "  backoff: {initial: 100ms, max: 1s}", "  no_progress_limit: 0",
                    "coordination:", f"  etcd: [{json.dumps(url)}]", f"  nodes: {args.nodes}", f"  node_rank: {rank}",
                    "  lease_ttl: 5s", "  advertise: 127.0.0.1", ""]))
            log = f"{node}/spotvisor.log"
            logs.append(log)
            procs.append(subprocess.Popen([args.spotvisor, "run", "--config", f"{node}/job.yaml"], cwd=node,
                                          stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

        def started(epoch_count):
            return all(len(lines(log, "trainer_started")) >= epoch_count for log in logs)

        wait_until(lambda: started(1), 60, "the group's first start")
        stop_ms, restart_ms = [], []
        for trial in range(1, args.trials + 1):
            with open(trigger + ".tmp", "w") as f:
                f.write("bench\n")
            os.rename(trigger + ".tmp", trigger)
            wait_until(lambda: all(len(lines(log, "signal_sent", "signal=SIGTERM ")) >= trial for log in logs), 30,
                       f"trial {trial}'s stop")
            notice = stamp(lines(logs[0], "notice")[-1])
            peers = [stamp(lines(log, "signal_sent", "signal=SIGTERM ")[trial - 1]) for log in logs[1:]]
            stop_ms.append((max(peers) - notice) * 1000)
            wait_until(lambda: len(lines(logs[0], "drained")) >= trial, 30, f"trial {trial}'s drain")
            os.unlink(trigger)
            wait_until(lambda: started(trial + 1), 60, f"trial {trial}'s restart")
            resumed = stamp(lines(logs[0], "resume_after_notice")[-1])
            last_start = max(stamp(lines(log, "trainer_started")[trial]) for log in logs)
            restart_ms.append((last_start - resumed) * 1000)
        print(f"nodes={args.nodes} trials={args.trials} etcd=1 member on loopback")
        print(f"notice on node 0 -> stop signal on every other node: p50 {percentile(stop_ms, 50):.1f} ms, "
              f"p99 {percentile(stop_ms, 99):.1f} ms, max {max(stop_ms):.1f} ms, mean {statistics.mean(stop_ms):.1f} ms")
        print(f"node 0 resumes -> every node's trainer started (group restart): p50 {percentile(restart_ms, 50):.1f} ms, "
              f"p99 {percentile(restart_ms, 99):.1f} ms, max {max(restart_ms):.1f} ms")
        print(f"without coordination: 0 of the {args.trials * (args.nodes - 1)} peer trainers get a stop signal "
              "(they learn of the lost node when a collective fails)")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        etcd.kill()
        etcd.wait()


if __name__ == "__main__":
    sys.exit(main())
