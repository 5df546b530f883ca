#!/usr/bin/python3
"""Exact-resume benchmark of issue 5, from real `spotvisor drill` runs on the PyTorch example.

  notice  — steps lost per interruption with a notice (target 0 whenever the checkpoint
            fits the window), and the time from the notice to the resumed trainer's first
            step, split into its parts: the trainer's in-window checkpoint, the drain
            (validation), the supervisor restart and resume selection, and the trainer's
            own start (interpreter, torch import, checkpoint load, one step).
  kill    — steps lost per unannounced SIGKILL of the trainer (expected ≈ half the
            checkpoint interval), and the time from the kill to the resumed first step.

Every drill must also end `identical` (exit 0): the numbers come from runs that resumed
exactly. Steps lost are counted exactly from the drill's own supervisor log (the last
`step=N` line the interrupted trainer printed minus the step the next attempt resumed
from); the drill's table estimate (time × pace) is shown next to it. Times of spotvisor's
events come from its log timestamps; times of the trainer's lines (which carry none) are
when this script saw them appear in the log, polled every 10 ms while the drill runs.

Run from the repository root after a build (Markdown on stdout, raw rows with --json):

    /usr/bin/python3 tests/bench/resume_bench.py [--binary build/spotvisor] \
        [--notice-drills 3] [--kill-drills 4] [--interruptions 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"
TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")
ROW = re.compile(r"^\| (\d+) \| (\w+) \| ([^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|(.*)$", re.MULTILINE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "spotvisor"))
    p.add_argument("--notice-drills", type=int, default=3)
    p.add_argument("--kill-drills", type=int, default=4)
    p.add_argument("--interruptions", type=int, default=3, help="per drill")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--step-sleep", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1, help="first drill seed (each drill adds 1)")
    p.add_argument("--plain", action="store_true", help="the pure-Python trainer instead of PyTorch")
    p.add_argument("--json", default=None, help="also write the raw rows here")
    p.add_argument("--keep", action="store_true", help="keep the scratch dirs")
    return p.parse_args()


def write_job(path: Path, trainer: Path, a) -> None:
    j = json.dumps
    command = [PYTHON, str(trainer), "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
               "--steps", str(a.steps), "--checkpoint-every", str(a.checkpoint_every),
               "--step-sleep", str(a.step_sleep), "--keep", "0"]
    path.write_text("\n".join([
        "job:", "  name: resume-bench", f"  command: {j(command)}",
        '  resume_args: ["--resume_from={checkpoint}"]',
        '  env: {OMP_NUM_THREADS: "1", PYTHONUNBUFFERED: "1"}', "  result_file: ./result.txt",
        "provider: {kind: none}",
        "signals: {on_notice: SIGTERM, grace: 60s}",
        'checkpoints: {dir: ./ckpt, pattern: "ckpt_step{step}", validate: full, keep: 0}',
        "restart:", "  backoff: {initial: 100ms, max: 1s, multiplier: 2, jitter: 0}",
        "  crash_loop: {failures: 50, window: 10m}",
        "telemetry: {state_dir: ./state}", ""]))


class Tail(threading.Thread):
    """Records (wall time first seen, line) for every line appended to a file."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.lines, self.stop = path, [], threading.Event()

    def run(self):
        buf, f = "", None
        while not self.stop.is_set() or f is None:
            if f is None:
                try:
                    f = open(self.path, "r", errors="replace")
                except FileNotFoundError:
                    if self.stop.is_set():
                        return
                    time.sleep(0.01)
                    continue
            chunk = f.read()
            now = time.time()
            if chunk:
                buf += chunk
                *complete, buf = buf.split("\n")
                self.lines += [(now, line) for line in complete]
            elif self.stop.is_set():
                break
            else:
                time.sleep(0.01)
        if f:
            rest = f.read()
            now = time.time()
            buf += rest
            self.lines += [(now, line) for line in buf.split("\n") if line]
            f.close()


def stamp(line: str, seen: float) -> float:
    """spotvisor's own timestamp for its lines, else when the line was seen."""
    m = TS.match(line)
    if m:
        return dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.timezone.utc).timestamp()
    return seen


def analyse(lines, kind):
    """Per interruption: exact steps lost and the timeline, from the interrupted lane's log."""
    attempts = []   # per attempt: dict
    cur = None
    for seen, line in lines:
        t = stamp(line, seen)
        m = re.search(r"event=trainer_started attempt=(\d+) pid=\d+ resume=(\S+)", line)
        if m:
            rs = re.search(r"ckpt_step(\d+)", m.group(2))
            cur = {"attempt": int(m.group(1)), "resume_step": int(rs.group(1)) if rs else 0, "spawned": t,
                   "first_step": None, "last_step": None, "notice": None, "saved_stop": None,
                   "drained": None, "ended": None, "stop_step": None}
            attempts.append(cur)
            continue
        if cur is None:
            continue
        m = re.match(r"step=(\d+) ", line)
        if m:
            cur["last_step"] = int(m.group(1))
            if cur["first_step"] is None:
                cur["first_step"] = t
            continue
        if re.search(r"warning +spotvisor .*event=notice ", line) and cur["notice"] is None:
            cur["notice"] = t
        elif re.match(r"\[trainer\] saved step=\d+ reason=stop", line):
            cur["saved_stop"] = t
        elif re.match(r"\[trainer\] stopping step=(\d+)", line):
            cur["stop_step"] = int(re.match(r"\[trainer\] stopping step=(\d+)", line).group(1))
        elif "event=drained newest_good=" in line:
            cur["drained"] = t
        elif "event=trainer_exited" in line:
            cur["ended"] = t
    rows = []
    for prev, nxt in zip(attempts, attempts[1:]):
        # An attempt interrupted before its first step line reached only its resume point.
        reached = (prev["stop_step"] if prev["stop_step"] is not None
                   else prev["last_step"] if prev["last_step"] is not None else prev["resume_step"])
        row = {"kind": kind, "attempt": prev["attempt"], "reached": reached, "resumed_from": nxt["resume_step"],
               "steps_lost": reached - nxt["resume_step"]}
        start = prev["notice"] if kind == "notice" else prev["ended"]
        if start and nxt["first_step"]:
            row["to_first_step_s"] = nxt["first_step"] - start
            row["spawn_to_first_step_s"] = nxt["first_step"] - nxt["spawned"]
            row["to_spawn_s"] = nxt["spawned"] - start
        if kind == "notice" and prev["notice"]:
            if prev["saved_stop"]:
                row["notice_to_saved_s"] = prev["saved_stop"] - prev["notice"]
            if prev["drained"]:
                row["notice_to_drained_s"] = prev["drained"] - prev["notice"]
                row["drained_to_spawn_s"] = nxt["spawned"] - prev["drained"]
        rows.append(row)
    return rows


def run_drill(a, job: Path, kind: str, seed: int, scratch: Path):
    tail = Tail(scratch / "interrupted" / "supervisor.log")
    tail.start()
    t0 = time.time()
    proc = subprocess.run([a.binary, "drill", "--config", str(job), "--kind", kind, "--interruptions",
                           str(a.interruptions), "--seed", str(seed), "--scratch", str(scratch)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
    tail.stop.set()
    tail.join(10)
    verdict = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "?"
    table = [m.groups() for m in ROW.finditer(proc.stdout)]
    rows = analyse(tail.lines, kind)
    for row, trow in zip(rows, table):
        row["drill_steps_lost"] = trow[4].strip()
        row["drill_time_to_resume"] = trow[5].strip()
        row["seed"] = seed
    return {"kind": kind, "seed": seed, "rc": proc.returncode, "verdict": verdict, "wall_s": time.time() - t0,
            "rows": rows, "stdout": proc.stdout, "stderr": proc.stderr}


def fmt(values, unit="", digits=2):
    values = [v for v in values if v is not None]
    if not values:
        return "?"
    mean = statistics.mean(values)
    return (f"{mean:.{digits}f}{unit} (median {statistics.median(values):.{digits}f}, "
            f"min {min(values):.{digits}f}, max {max(values):.{digits}f}, n={len(values)})")


def main() -> int:
    a = parse_args()
    if not os.access(a.binary, os.X_OK):
        sys.exit(f"no spotvisor binary at {a.binary} (build first, or --binary)")
    plain = a.plain or subprocess.run([PYTHON, "-c", "import torch, numpy"], capture_output=True).returncode != 0
    trainer = REPO / "examples" / ("plain_trainer" if plain else "torch_trainer") / "train.py"
    work = Path(tempfile.mkdtemp(prefix="spotvisor-resume-bench-"))
    job = work / "job.yaml"
    write_job(job, trainer, a)
    drills = []
    seed = a.seed
    for kind, count in (("notice", a.notice_drills), ("kill", a.kill_drills)):
        for _ in range(count):
            d = run_drill(a, job, kind, seed, work / f"{kind}-{seed}")
            print(f"drill {kind} seed {seed}: {d['verdict']} (exit {d['rc']}, {d['wall_s']:.0f} s)", file=sys.stderr)
            if d["rc"] != 0:
                print(d["stdout"] + d["stderr"], file=sys.stderr)
            drills.append(d)
            seed += 1
    rows = [r for d in drills for r in d["rows"]]
    notice = [r for r in rows if r["kind"] == "notice"]
    kill = [r for r in rows if r["kind"] == "kill"]
    all_identical = all(d["rc"] == 0 and d["verdict"] == "identical" for d in drills)

    cmd = " ".join(["/usr/bin/python3", "tests/bench/resume_bench.py", "--notice-drills", str(a.notice_drills),
                    "--kill-drills", str(a.kill_drills), "--interruptions", str(a.interruptions)]
                   + (["--plain"] if a.plain else []))
    out = []
    out.append(f"Trainer: `{trainer.relative_to(REPO)}`, {a.steps} steps at {a.step_sleep} s/step, periodic "
               f"checkpoint every {a.checkpoint_every} steps; {len(drills)} drills × {a.interruptions} "
               f"interruptions at random moments (`spotvisor drill --kind notice|kill`, seeds {a.seed}–{seed - 1}); "
               f"verdicts: {', '.join(sorted(set(d['verdict'] for d in drills)))}.")
    out.append("")
    out.append("| | interruptions | steps lost per interruption (exact, from the log) | drill's estimate |")
    out.append("|---|---|---|---|")
    for name, rs in (("notice (mock AWS)", notice), ("SIGKILL, no warning", kill)):
        est = [float(r["drill_steps_lost"]) for r in rs if re.fullmatch(r"\d+", r.get("drill_steps_lost", ""))]
        out.append(f"| {name} | {len(rs)} | {fmt([r['steps_lost'] for r in rs])} | "
                   f"{fmt(est) if est else '?'} |")
    out.append("")
    out.append(f"Checkpoint interval {a.checkpoint_every} steps: an unannounced kill is expected to lose "
               f"≈ {a.checkpoint_every / 2:g} steps on average (uniform over the interval).")
    out.append("")
    out.append("| time (s) | notice | SIGKILL |")
    out.append("|---|---|---|")
    out.append(f"| interruption → resumed trainer's first step | {fmt([r.get('to_first_step_s') for r in notice])} "
               f"| {fmt([r.get('to_first_step_s') for r in kill])} |")
    out.append(f"| ⤷ notice → trainer's checkpoint saved (in the window) | "
               f"{fmt([r.get('notice_to_saved_s') for r in notice])} | — |")
    out.append(f"| ⤷ notice → drained (checkpoint validated) | {fmt([r.get('notice_to_drained_s') for r in notice])} | — |")
    out.append(f"| ⤷ drained → resumed trainer spawned (drill: SIGTERM, new `spotvisor run`, selection) | "
               f"{fmt([r.get('drained_to_spawn_s') for r in notice])} | — |")
    out.append(f"| ⤷ trainer exited → resumed trainer spawned (backoff 100 ms + selection) | — | "
               f"{fmt([r.get('to_spawn_s') for r in kill])} |")
    out.append(f"| ⤷ spawned → first step (Python, imports, checkpoint load, one step) | "
               f"{fmt([r.get('spawn_to_first_step_s') for r in notice])} | "
               f"{fmt([r.get('spawn_to_first_step_s') for r in kill])} |")
    out.append("")
    out.append(f"Command: `{cmd}`")
    print("\n".join(out))
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "drills": drills}, indent=2))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"scratch: {work}", file=sys.stderr)
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
