#!/usr/bin/env python3
"""Supervision benchmarks of issue 2, each side by side with what a user would pick instead.

restart  — restart latency: the crashing child's exit to the next child's start (its
           main()), zero backoff; spotvisor vs `torchrun --max_restarts` on the same child.
idle     — idle cost: RSS and CPU seconds per minute of the supervisor while it supervises
           `sleep`; spotvisor vs supervisord vs torchrun.

Prints Markdown tables (with the command line) for docs/BENCHMARKS.md. Standard library
only; run from the repository root after a build:

    /usr/bin/python3 tests/bench/supervise_bench.py [--build build] [--restarts 300] [--idle-seconds 60]
    /usr/bin/python3 tests/bench/supervise_bench.py --compare BUILD... [--idle-seconds 60]   # idle A/B
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TICKS = os.sysconf("SC_CLK_TCK")


def gaps_ms(stamp_file):
    """Pairs each 'exit' with the next 'start' and returns the gaps in ms."""
    events = []
    with open(stamp_file) as f:
        for line in f:
            kind, ns = line.split()
            events.append((kind, int(ns)))
    gaps, last_exit = [], None
    for kind, ns in events:
        if kind == "exit":
            last_exit = ns
        elif kind == "start" and last_exit is not None:
            gaps.append((ns - last_exit) / 1e6)
            last_exit = None
    return gaps


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def spotvisor_restarts(build, helper, n, tmp):
    stamps = os.path.join(tmp, "sv_stamps")
    job = os.path.join(tmp, "restart.yaml")
    with open(job, "w") as f:
        f.write(f"""job:
  name: restart-bench
  command: ["{helper}", "--mode=exit", "--code=1", "--timestamps={stamps}"]
restart:
  max_restarts: {n}
  no_progress_limit: 0
  backoff: {{initial: 0, max: 0, jitter: 0}}
  crash_loop: {{failures: 0}}
telemetry:
  state_dir: {tmp}/sv-state
  log_level: error
""")
    subprocess.run([os.path.join(build, "spotvisor"), "run", "--config", job],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return gaps_ms(stamps)


def torchrun_restarts(helper, n, tmp):
    torchrun = shutil.which("torchrun")
    if not torchrun:
        return None
    stamps = os.path.join(tmp, "tr_stamps")
    subprocess.run([torchrun, "--nproc_per_node=1", f"--max_restarts={n}", "--redirects", "1", "--tee", "1",
                    "--no_python", helper, "--mode=exit", "--code=1", f"--timestamps={stamps}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=tmp)
    return gaps_ms(stamps)


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure_idle(argv, seconds, settle, env=None, cwd=None):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        time.sleep(settle)
        cpu0 = proc_cpu_seconds(proc.pid)
        time.sleep(seconds)
        cpu1 = proc_cpu_seconds(proc.pid)
        rss = proc_rss_kib(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return rss / 1024.0, (cpu1 - cpu0) * 60.0 / seconds


def idle_spotvisor(build, seconds, tmp):
    return measure_idle([os.path.join(build, "spotvisor"), "run", "--state-dir", f"{tmp}/idle-state",
                         "--log-level", "warning", "--", "/bin/sleep", "100000"], seconds, settle=2)


def idle_supervisord(seconds, tmp):
    exe = shutil.which("supervisord")
    if not exe:
        return None
    conf = os.path.join(tmp, "supervisord.conf")
    with open(conf, "w") as f:
        f.write(f"""[supervisord]
nodaemon=true
logfile={tmp}/supervisord.log
pidfile={tmp}/supervisord.pid
[program:sleep]
command=/bin/sleep 100000
autorestart=true
""")
    return measure_idle([exe, "-c", conf], seconds, settle=3)


def idle_torchrun(seconds, tmp):
    exe = shutil.which("torchrun")
    if not exe:
        return None
    return measure_idle([exe, "--nproc_per_node=1", "--redirects", "1", "--tee", "1", "--no_python",
                         "/bin/sleep", "100000"], seconds, settle=8, cwd=tmp)


def idle_compare(builds, seconds, tmp):
    """Idle RSS and CPU of several builds' spotvisor, all running at once (same machine, same
    minute): an A/B across commits (issue 25). Rows: build directory, its --version, RSS, CPU."""
    from concurrent.futures import ThreadPoolExecutor
    def one(i_build):
        i, build = i_build
        os.makedirs(f"{tmp}/ab{i}")
        return measure_idle([os.path.join(build, "spotvisor"), "run", "--state-dir", f"{tmp}/ab{i}/idle-state",
                             "--log-level", "warning", "--", "/bin/sleep", "100000"], seconds, settle=2)
    with ThreadPoolExecutor(len(builds)) as pool:
        results = list(pool.map(one, enumerate(builds)))
    rows = []
    for build, (rss, cpu) in zip(builds, results):
        version = subprocess.run([os.path.join(build, "spotvisor"), "--version"], capture_output=True,
                                 text=True).stdout.strip()
        rows.append((build, version, rss, cpu))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--restarts", type=int, default=300)
    ap.add_argument("--torchrun-restarts", type=int, default=5)
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--only", choices=["restart", "idle"], default=None)
    ap.add_argument("--compare", nargs="+", metavar="BUILD",
                    help="idle only: these builds' spotvisor side by side, nothing else")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    helper = os.path.join(build, "tests", "spotvisor_child_helper")
    cmd = "/usr/bin/python3 tests/bench/supervise_bench.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        if args.compare:
            print(f"### Idle cost while supervising `sleep`, builds side by side ({args.idle_seconds:.0f} s window)\n")
            print(f"`{cmd}`\n")
            print("| build | version | RSS | CPU s / min |")
            print("|---|---|---|---|")
            for build, version, rss, cpu in idle_compare(args.compare, args.idle_seconds, tmp):
                print(f"| {build} | {version} | {rss:.1f} MiB | {cpu:.3f} |")
            print()
            return
        if args.only in (None, "restart"):
            sv = spotvisor_restarts(build, helper, args.restarts, tmp)
            tr = torchrun_restarts(helper, args.torchrun_restarts, tmp)
            print("### Restart latency (child exit → next child's main(), zero backoff)\n")
            print(f"`{cmd}`\n")
            print("| supervisor | restarts | p50 | p90 | p99 | max | p50 ratio |")
            print("|---|---|---|---|---|---|---|")
            sv50 = statistics.median(sv)
            print(f"| spotvisor | {len(sv)} | {sv50:.2f} ms | {pct(sv, 90):.2f} ms | {pct(sv, 99):.2f} ms | "
                  f"{max(sv):.2f} ms | 1× |")
            if tr:
                tr50 = statistics.median(tr)
                print(f"| torchrun --max_restarts | {len(tr)} | {tr50:.0f} ms | {pct(tr, 90):.0f} ms | "
                      f"{pct(tr, 99):.0f} ms | {max(tr):.0f} ms | {tr50 / sv50:.0f}× slower |")
            else:
                print("| torchrun --max_restarts | not installed | | | | | |")
            print()
        if args.only in (None, "idle"):
            rows = [("spotvisor", idle_spotvisor(build, args.idle_seconds, tmp)),
                    ("supervisord", idle_supervisord(args.idle_seconds, tmp)),
                    ("torchrun", idle_torchrun(args.idle_seconds, tmp))]
            print(f"### Idle cost while supervising `sleep` ({args.idle_seconds:.0f} s window)\n")
            print(f"`{cmd}`\n")
            print("| supervisor | RSS | CPU s / min | RSS ratio |")
            print("|---|---|---|---|")
            base = rows[0][1][0]
            for name, r in rows:
                if r is None:
                    print(f"| {name} | not installed | | |")
                else:
                    print(f"| {name} | {r[0]:.1f} MiB | {r[1]:.3f} | {r[0] / base:.1f}× |")
            print()


if __name__ == "__main__":
    main()
