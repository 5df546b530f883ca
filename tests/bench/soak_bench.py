#!/usr/bin/python3
"""Soak benchmarks of issue 8, each printed as a Markdown table for docs/BENCHMARKS.md.

restarts — 3000 crash-restarts with 1 ms backoff (a trainer that exits at once with a
           failure code): spotvisor's open file descriptors and RSS sampled along the way
           must stay flat.
poll     — a long run (10 minutes by default) supervising `sleep` with the AWS watcher
           polling `spotvisor mock-metadata` every second: spotvisor's CPU seconds and RSS,
           side by side with the curl loop from the providers' docs doing the same polls.
flap     — the same against `mock-metadata --flap 2s` (healthy, dropped, silent, garbage,
           503, not HTTP in turn) for 10 minutes by default: notices (must be none), log
           lines, CPU and RSS, side by side with the curl loop, which takes every 200 for a
           notice.

Standard library only; run from the repository root after a build:

    /usr/bin/python3 tests/bench/soak_bench.py [--build build] [--restarts 3000] [--poll-seconds 600]
        [--flap-seconds 600] [--only restarts|poll|flap]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def group_cpu_seconds(pid):
    """CPU of `pid` and its waited-for children (a shell loop's curls)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def restarts(binary, helper, work, count):
    d = os.path.join(work, "restarts")
    os.makedirs(d)
    job = {"job": {"name": "soak", "command": [helper, "--mode=exit", "--code=3"]},
           "restart": {"max_restarts": count * 10, "no_progress_limit": 0,
                       "crash_loop": {"failures": 0, "window": "10m"},
                       "backoff": {"initial": "1ms", "max": "1ms", "multiplier": 1, "jitter": 0}},
           "telemetry": {"state_dir": os.path.join(d, "state")}}
    with open(os.path.join(d, "job.yaml"), "w") as f:
        json.dump(job, f)
    sv = subprocess.Popen([binary, "run", "--config", os.path.join(d, "job.yaml")],
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"))
    attempts = os.path.join(d, "state", "attempts.jsonl")
    samples, marks = [], [100] + list(range(500, count + 1, 500))
    start = time.monotonic()
    try:
        for mark in marks:
            while lines(attempts) < mark:
                if sv.poll() is not None:
                    sys.exit(f"spotvisor exited early ({sv.returncode}); see {d}/log")
                time.sleep(0.05)
            samples.append((mark, fds(sv.pid), rss_mib(sv.pid), cpu_seconds(sv.pid), time.monotonic() - start))
    finally:
        sv.send_signal(signal.SIGTERM)
        sv.wait(30)
    return samples


def start_mock(binary, d, *extra):
    """`spotvisor mock-metadata --provider aws` on a free port (written to d/port); (process, url)."""
    port_file = os.path.join(d, "port")
    mock = subprocess.Popen([binary, "mock-metadata", "--provider", "aws", "--listen", "127.0.0.1:0",
                             "--port-file", port_file, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(port_file):
        time.sleep(0.01)
    with open(port_file) as f:
        return mock, f"http://127.0.0.1:{int(f.read())}"


def poll(binary, work, seconds):
    d = os.path.join(work, "poll")
    os.makedirs(d)
    mock, url = start_mock(binary, d)
    try:
        job = {"job": {"name": "poll", "command": ["/bin/sleep", str(seconds + 60)]},
               "provider": {"kind": "aws", "endpoint": url, "poll_interval": "1s"},
               "telemetry": {"state_dir": os.path.join(d, "state")}}
        with open(os.path.join(d, "job.yaml"), "w") as f:
            json.dump(job, f)
        loop = ('TOKEN=$(curl -sf -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 21600" {u}/latest/api/token); '
                'while ! curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" {u}/latest/meta-data/spot/instance-action '
                '>/dev/null; do sleep 1; done').format(u=url)
        sv = subprocess.Popen([binary, "run", "--config", os.path.join(d, "job.yaml")],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"))
        sh = subprocess.Popen(["/bin/sh", "-c", loop], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(5)  # started, first polls done
            sv0, rss0 = cpu_seconds(sv.pid), rss_mib(sv.pid)
            sh0 = group_cpu_seconds(sh.pid)
            time.sleep(seconds)
            sv_cpu, sv_rss = cpu_seconds(sv.pid) - sv0, rss_mib(sv.pid)
            sh_cpu = group_cpu_seconds(sh.pid) - sh0
        finally:
            sh.kill()
            sh.wait(10)
            sv.send_signal(signal.SIGTERM)
            sv.wait(30)
        return {"seconds": seconds, "sv_cpu": sv_cpu, "sv_rss0": rss0, "sv_rss": sv_rss, "sh_cpu": sh_cpu}
    finally:
        mock.send_signal(signal.SIGTERM)
        mock.wait(10)


def flap(binary, work, seconds):
    d = os.path.join(work, "flap")
    os.makedirs(d)
    mock, url = start_mock(binary, d, "--flap", "2s")
    try:
        job = {"job": {"name": "flap", "command": ["/bin/sleep", str(seconds + 60)]},
               "provider": {"kind": "aws", "endpoint": url, "poll_interval": "1s", "request_timeout": "1s"},
               "telemetry": {"state_dir": os.path.join(d, "state")}}
        with open(os.path.join(d, "job.yaml"), "w") as f:
            json.dump(job, f)
        hits = os.path.join(d, "curl-notices")
        # The docs' loop, counting instead of stopping: every answer curl -f accepts is "a notice".
        loop = ('n=0; while true; do TOKEN=$(curl -sf -m 1 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 21600" '
                '{u}/latest/api/token); if curl -sf -m 1 -H "X-aws-ec2-metadata-token: $TOKEN" '
                '{u}/latest/meta-data/spot/instance-action >/dev/null; then n=$((n+1)); echo $n > {h}; fi; '
                'sleep 1; done').format(u=url, h=hits)
        log = os.path.join(d, "log")
        sv = subprocess.Popen([binary, "run", "--config", os.path.join(d, "job.yaml")],
                              stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        sh = subprocess.Popen(["/bin/sh", "-c", loop], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(5)
            sv0, rss0 = cpu_seconds(sv.pid), rss_mib(sv.pid)
            time.sleep(seconds)
            sv_cpu, sv_rss = cpu_seconds(sv.pid) - sv0, rss_mib(sv.pid)
            alive = sv.poll() is None
        finally:
            sh.kill()
            sh.wait(10)
            sv.send_signal(signal.SIGTERM)
            sv.wait(30)
        with open(log) as f:
            text = f.read().splitlines()
        try:
            with open(hits) as f:
                curl_notices = int(f.read().strip() or 0)
        except FileNotFoundError:
            curl_notices = 0
        return {"seconds": seconds, "sv_cpu": sv_cpu, "sv_rss0": rss0, "sv_rss": sv_rss, "alive": alive,
                "notices": sum("event=notice " in l for l in text), "lines": len(text),
                "endpoint_lines": sum("event=endpoint_" in l for l in text), "curl_notices": curl_notices}
    finally:
        mock.send_signal(signal.SIGTERM)
        mock.wait(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--restarts", type=int, default=3000)
    ap.add_argument("--poll-seconds", type=float, default=600)
    ap.add_argument("--flap-seconds", type=float, default=600)
    ap.add_argument("--only", choices=["restarts", "poll", "flap"], default=None)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    binary, helper = os.path.join(build, "spotvisor"), os.path.join(build, "tests", "spotvisor_child_helper")
    for exe in (binary, helper):
        if not os.access(exe, os.X_OK):
            sys.exit(f"missing {exe}: build first (ninja -C {a.build} spotvisor spotvisor_child_helper)")
    if not shutil.which("curl"):
        sys.exit("curl is needed for the polling baseline")
    work = tempfile.mkdtemp(prefix="spotvisor-soak-")
    cmd = "/usr/bin/python3 tests/bench/soak_bench.py " + " ".join(sys.argv[1:])
    try:
        if a.only in (None, "restarts"):
            report_restarts(restarts(binary, helper, work, a.restarts), a.restarts, cmd)
        if a.only in (None, "poll") and a.poll_seconds > 0:
            report_poll(poll(binary, work, a.poll_seconds), cmd)
        if a.only in (None, "flap") and a.flap_seconds > 0:
            report_flap(flap(binary, work, a.flap_seconds), cmd)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report_restarts(samples, count, cmd):
    print(f"### {count} crash-restarts, 1 ms backoff\n")
    print(f"`{cmd}`\n")
    print("| restarts | open fds | RSS | spotvisor CPU s | wall s |")
    print("|---|---|---|---|---|")
    for mark, n, rss, cpu, wall in samples:
        print(f"| {mark} | {n} | {rss:.1f} MiB | {cpu:.2f} | {wall:.1f} |")
    first, last = samples[0], samples[-1]
    print(f"\nFrom restart {first[0]} to {last[0]}: descriptors {first[1]} → {last[1]}, "
          f"RSS {first[2]:.1f} → {last[2]:.1f} MiB.\n")


def report_poll(p, cmd):
        print(f"### {p['seconds'] / 60:.0f} minutes polling the mock AWS metadata service every second\n")
        print(f"`{cmd}`\n")
        print("| poller | CPU s per minute | RSS | CPU ratio |")
        print("|---|---|---|---|")
        per_min = 60 / p["seconds"]
        base = max(p["sv_cpu"] * per_min, 1e-9)
        print(f"| spotvisor run (aws watcher, supervising `sleep`) | {p['sv_cpu'] * per_min:.3f} | "
              f"{p['sv_rss0']:.1f} → {p['sv_rss']:.1f} MiB | 1× |")
        print(f"| curl loop, sleep 1 (the loop alone, no supervision) | {p['sh_cpu'] * per_min:.3f} | — | "
              f"{p['sh_cpu'] * per_min / base:.1f}× |")
        print()


def report_flap(p, cmd):
    span = f"{p['seconds'] / 60:.0f} minutes" if p["seconds"] >= 120 else f"{p['seconds']:.0f} seconds"
    print(f"### {span} against a flapping metadata service (`mock-metadata --flap 2s`)\n")
    print(f"`{cmd}`\n")
    print("| poller | false notices | log lines | CPU s per minute | RSS |")
    print("|---|---|---|---|---|")
    per_min = 60 / p["seconds"]
    print(f"| spotvisor run (aws watcher, supervising `sleep`) | {p['notices']} | {p['lines']} "
          f"({p['endpoint_lines']} endpoint) | {p['sv_cpu'] * per_min:.3f} | "
          f"{p['sv_rss0']:.1f} → {p['sv_rss']:.1f} MiB |")
    print(f"| curl loop (`curl -sf` = notice), sleep 1 | {p['curl_notices']} | — | — | — |")
    print(f"\nspotvisor {'kept supervising' if p['alive'] else 'EXITED'}; "
          f"{p['curl_notices']} of the curl loop's polls took a broken answer for a notice.\n")


main()
