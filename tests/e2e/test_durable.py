"""End-to-end: checkpoints that outlive the machine. The real spotvisor mirrors them with
`checkpoints.mirror.remote` (it runs rclone itself) to a real S3-protocol server (moto's,
tests/e2e/s3_server.py), and "a new VM" (an empty checkpoint dir and state dir, the same
remote) resumes from what is there.

A checkpoint counts as on the remote only once its marker
`<remote>/.spotvisor-complete/<name>.json` is there: written after the last byte went up
and the sizes listed back matched. These cases check that claim from outside, against a
real S3 client and server, each with a server of its own:

- test_notices_each_end_durable_and_a_new_vm_resumes_exactly: NOTICES spot notices in a
  row, each on a VM of its own at a random moment (a seeded random.Random;
  SPOTVISOR_E2E_SEED repeats a run). The trainer saves on the stop signal; the machine goes
  away (SIGTERM, exit 75) at once or a moment after the drain. Before the process has
  ended, the notice's checkpoint (the newest the trainer saved) is on the remote, whole,
  with its marker, uploaded before the notice's deadline; run.json and report.json name it
  as the notice's checkpoint and say when it went up. The next VM restores exactly that one
  and continues. A last VM runs to the end: the uninterrupted run's result.
- test_killed_mid_upload_never_restores_a_torn_copy_and_the_upload_completes_after_restart:
  spotvisor SIGKILLed while a 4 MiB checkpoint (tests/e2e/durable_trainer.py) is going up
  at 1 MiB/s: part of it is on the remote, no marker, and rclone died with spotvisor. A new
  VM restores the older marked checkpoint, never the torn one. The same VM rebooted (the
  disk survived) uploads the torn checkpoint again, whole, with its marker, and ends with
  the uninterrupted result.
- test_server_errors_then_recovers: the server answers 503 to everything for a while:
  uploads fail (`event=mirror_failed`) and leave no marker; once it recovers later
  checkpoints get theirs, and a new VM restores the newest and ends exactly.
- test_when_it_does_not_fit_the_planner_warns_and_a_new_vm_loses_exactly_what_the_report_says:
  a 1 MiB checkpoint at 128 KiB/s (8 s up) against a 5 s warning window. After the first
  upload, before any notice, spotvisor logs `event=durability_at_risk` with its advice, and
  `spotvisor status` says AT RISK. A notice then comes: the trainer saves, the upload of
  that checkpoint is cut at the deadline, and the report says per notice that the planner
  predicted it would not fit, that it did not, which step a new VM resumes from (the newest
  marked one) and how many steps that loses. A new VM resumes from exactly that step and
  ends with the uninterrupted result.
- test_server_crash_mid_upload_leaves_no_torn_marker_and_uploads_resume: the server is
  SIGKILLed while a checkpoint is part way up, and a new one comes up on the same port (moto
  keeps objects in memory: it starts empty). The cut upload fails or is retried by rclone;
  either way uploads resume on the new server, every marker there is for a whole checkpoint,
  the stop's checkpoint goes up at the end, and a new VM resumes from it exactly.
- test_stalled_server_at_exit_is_bounded_by_the_notice_deadline: the server stalls
  (SIGSTOP) right after an upload (while its retention runs), then a notice comes whose
  deadline is 6 s away; mirror.timeout is an hour.
  spotvisor gives the stuck upload until the deadline, no longer (`event=mirror_abandoned`),
  and exits. Once the server is back, the next start uploads what was left.

Run (from the repository root):
  SPOTVISOR_BINARY=build/spotvisor SPOTVISOR_S3_PYTHON="$(scripts/layered-env.sh s3-env | tail -n 1)" \\
    /usr/bin/python3 -m unittest -v tests.e2e.test_durable
Without SPOTVISOR_S3_PYTHON it fails (it does not skip): ctest runs it only when it is set.
"""

from __future__ import annotations

import calendar
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from tests.e2e.s3_server import S3Server
from tests.e2e.support import (REPO, SLOW, E2ECase, Supervisor, clean_env, parse_fields,
                               trainer_strays)
from tests.e2e.torch_env import PYTHON

PLAIN_TRAINER = REPO / "examples" / "plain_trainer" / "train.py"
DURABLE_TRAINER = Path(__file__).resolve().parent / "durable_trainer.py"
PREFIX = "job"                       # the job's folder in the bucket
COMPLETE = f"{PREFIX}/.spotvisor-complete"
# Notices in a row in the first case, each on a new VM (about 3 s a cycle on an idle 2-core
# machine; see the timing it prints).
NOTICES = 20
PLAIN_STEPS = 600
# rclone's defaults retry a 503 for minutes (longer than 2 minutes for one copyto): one try
# each, so that a failing server shows as a failed upload within seconds.
FEW_RETRIES = ["--retries", "1", "--low-level-retries", "1"]
# The durable trainer: 4 shards of 1 MiB (+ model.pt) a checkpoint, one every 30 steps.
DURABLE_ARGS = ["--steps", "120", "--checkpoint-every", "30", "--shards", "4", "--shard-mib", "1"]

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z\s")


def timed_events(text: str, name: str) -> List[Tuple[float, int, Dict[str, str]]]:
    """Every `event=NAME` line of a spotvisor text log: (its time as Unix seconds, its line
    number, its fields)."""
    out = []
    for i, line in enumerate(text.splitlines()):
        if " spotvisor " not in line or not re.search(rf"\bevent={re.escape(name)}(\s|$)", line):
            continue
        m = _STAMP.match(line)
        if not m:
            continue
        t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float(m.group(2) or 0)
        out.append((t, i, parse_fields(line)))
    return out


def tree(path: Path) -> Dict[str, int]:
    """The files under a checkpoint directory: relative path -> size."""
    return {str(f.relative_to(path)): f.stat().st_size for f in sorted(path.rglob("*")) if f.is_file()}


def step_of(name: str) -> int:
    m = re.fullmatch(r"ckpt_step(\d+)", name)
    if not m:
        raise AssertionError(f"{name!r} is not a checkpoint name")
    return int(m.group(1))


def rclone_children(pid: int) -> List[str]:
    """The command lines of the rclone processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "rclone" in cmd:
            out.append(cmd.strip())
    return out


class RemoteSupervisor(Supervisor):
    """`spotvisor run` with the environment that points rclone's remote `s3test` at the test's
    server (Supervisor itself uses clean_env(), which has no remote)."""

    def __init__(self, binary: str, config: Path, log: Path, env: Dict[str, str]) -> None:
        self.log_path = log
        self.config = config
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([binary, "run", "--config", str(config)], cwd=config.parent, env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


class Durable(E2ECase):
    # rclone too: a spotvisor that exited by itself must leave no upload running.
    trainer_names = (str(PLAIN_TRAINER), str(DURABLE_TRAINER), "rclone")

    def setUp(self) -> None:
        super().setUp()
        self.s3 = S3Server(str(self.dir / "s3"))
        self.s3.__enter__()
        self.addCleanup(self.s3.__exit__, None, None, None)

    # -- VMs ---------------------------------------------------------------------------
    def new_vm(self, name: str) -> Path:
        """A new machine: a directory with nothing in it (no checkpoints, no state)."""
        vm = self.dir / name
        vm.mkdir()
        return vm

    def write_job(self, vm: Path, command: Sequence[str], *, bandwidth: str = "1MiB", keep: int = 3,
                  rclone_flags: Sequence[str] = (), safety_margin: Optional[str] = None,
                  window: Optional[str] = None) -> Path:
        """The job file of one VM: a notice is `vm/notice.json` appearing (the file provider,
        with the deadline in it); the mirror is the server's bucket, folder PREFIX."""
        j = json.dumps
        lines = [
            "# written by tests/e2e/test_durable.py",
            "job:",
            "  name: e2e-durable",
            f"  command: {j([str(c) for c in command])}",
            '  resume_args: ["--resume_from={checkpoint}"]',
            "  workdir: .",
            f"  env: {j({'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'})}",
            "  success_exit_codes: [0]",
            '  result_file: "./result.txt"',
            "provider:",
            "  kind: file",
            f"  file: {j(str(vm / 'notice.json'))}",
            "  poll_interval: 100ms",
            *([f"  safety_margin: {safety_margin}"] if safety_margin else []),
            *([f"  default_window: {window}"] if window else []),
            "signals:",
            "  on_notice: SIGTERM",
            "  grace: 30s",
            "checkpoints:",
            "  dir: ./ckpt",
            '  pattern: "ckpt_step{step}"',
            "  validate: full",
            f"  keep: {keep}",
            "  mirror:",
            f"    remote: {j(f'{self.s3.remote}/{PREFIX}')}",
            f"    bandwidth: {bandwidth}",
            # Never what ends an upload here: a notice's deadline, a kill or a failure does.
            "    timeout: 1h",
            f"    rclone_flags: {j(list(rclone_flags))}",
            "restart:",
            "  max_restarts: 5",
            "  backoff: {initial: 100ms, max: 1s, multiplier: 2, jitter: 0}",
            "telemetry:",
            "  state_dir: ./state",
            "  log_format: text",
        ]
        path = vm / "job.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def plain_command(self, step_sleep: float) -> List[str]:
        return [PYTHON, str(PLAIN_TRAINER), "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
                "--steps", str(PLAIN_STEPS), "--checkpoint-every", "25", "--keep", "0",
                "--step-sleep", str(step_sleep)]

    def durable_command(self, step_sleep: float, args: Sequence[str] = DURABLE_ARGS) -> List[str]:
        return [PYTHON, str(DURABLE_TRAINER), "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
                *args, "--step-sleep", str(step_sleep)]

    def start(self, job: Path, name: str) -> RemoteSupervisor:
        env = self.s3.rclone_env(clean_env())
        sv = RemoteSupervisor(self.binary, job, job.parent / f"{name}.log", env)
        self._supervisors.append(sv)
        return sv

    def reference(self, argv: Sequence[str]) -> str:
        """The trainer run directly, uninterrupted, without spotvisor or a mirror: its result."""
        work = self.dir / "reference"
        work.mkdir(exist_ok=True)
        argv = [a.replace("{checkpoint_dir}", str(work / "ckpt")).replace("{result_file}", str(work / "result.txt"))
                for a in argv]
        proc = subprocess.run(argv, cwd=work, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600 * SLOW)
        self.assertEqual(proc.returncode, 0, f"the uninterrupted run failed:\n{proc.stdout[-3000:]}")
        return (work / "result.txt").read_text().strip()

    def write_notice(self, vm: Path, deadline_unix: float) -> None:
        """A stop notice through the file provider, its deadline in it (written atomically)."""
        tmp = vm / "notice.json.tmp"
        tmp.write_text(json.dumps({"deadline": deadline_unix, "kind": "terminate"}))
        os.replace(tmp, vm / "notice.json")

    def wait_until(self, probe, timeout: float, what: str, sv: Optional[Supervisor] = None):
        end = time.monotonic() + timeout * SLOW
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > end:
                self.fail(f"no {what} within {timeout * SLOW:.0f} s" + (f"; log {sv.log_path}:\n{sv.tail()}" if sv else ""))
            time.sleep(0.1)

    # -- the remote --------------------------------------------------------------------
    def remote(self) -> Tuple[Dict[str, Dict[str, int]], Dict[str, dict]]:
        """What the bucket holds under PREFIX: {checkpoint name: {relative path: size}} and
        {checkpoint name: its marker's JSON}."""
        files = self.s3.list_files(PREFIX)
        checkpoints: Dict[str, Dict[str, int]] = {}
        markers: Dict[str, dict] = {}
        for path, size in files.items():
            rel = path[len(PREFIX) + 1:]
            if path.startswith(COMPLETE + "/"):
                name = rel.split("/", 1)[1]
                self.assertTrue(name.endswith(".json"), f"not a marker: {path}")
                text = self.s3.rclone("cat", f"{self.s3.remote}/{path}").stdout
                markers[name[:-len(".json")]] = json.loads(text)
            else:
                name, _, inner = rel.partition("/")
                checkpoints.setdefault(name, {})[inner] = size
        return checkpoints, markers

    def assert_whole_on_remote(self, local: Path, sv: Optional[Supervisor] = None) -> dict:
        """The checkpoint directory `local` is on the remote with its marker, file for file,
        and the marker says what it holds."""
        name = local.name
        checkpoints, markers = self.remote()
        log = f"; log {sv.log_path}:\n{sv.tail()}" if sv else ""
        self.assertIn(name, markers, f"no marker for {name} on the remote{log}")
        files = tree(local)
        if not files and sv and any(Path(e.get("path", "")).name == name for e in sv.events("checkpoint_deleted")):
            # Pruned by checkpoints.keep since it went up (on a busy machine the trainer saved
            # on meanwhile): the remote copy is held to its marker, written from the local one.
            files = checkpoints.get(name) or {}
        self.assertEqual(checkpoints.get(name), files, f"{name} on the remote differs from {local}{log}")
        marker = markers[name]
        self.assertEqual((marker["name"], marker["step"], marker["bytes"], marker["files"], marker["directory"]),
                         (name, step_of(name), sum(files.values()), len(files), True), marker)
        return marker

    def assert_every_marker_whole(self) -> Dict[str, dict]:
        """Each marker's checkpoint is on the remote with the bytes and files it says."""
        checkpoints, markers = self.remote()
        for name, marker in markers.items():
            files = checkpoints.get(name, {})
            self.assertEqual((sum(files.values()), len(files)), (marker["bytes"], marker["files"]),
                             f"the marker of {name} says {marker}, the remote holds {files}")
        return markers

    def assert_restored(self, sv: Supervisor, vm: Path, step: Optional[int], timeout: float = 120) -> None:
        """The VM's first attempt starts from the mirror's checkpoint of `step` (None: the mirror
        had none and it starts from scratch)."""
        started = sv.wait_event("trainer_started", timeout)
        restored = sv.events("mirror_restored")
        if step is None:
            self.assertEqual(restored, [], f"log {sv.log_path}:\n{sv.tail()}")
            self.assertEqual(started["resume"], "none", started)
            return
        self.assertEqual([int(e["step"]) for e in restored], [step], f"log {sv.log_path}:\n{sv.tail()}")
        path = vm / "ckpt" / f"ckpt_step{step}"
        self.assertEqual(started["resume"], str(path), started)
        sv.wait_for(rf"^\[trainer\] resumed from={re.escape(str(path))} step={step}\b", 60)

    def torn_after(self, step: int) -> Optional[str]:
        """A checkpoint newer than `step` with some of its files on the remote and no marker."""
        checkpoints, markers = self.remote()
        later = [n for n in checkpoints if n not in markers and step_of(n) > step]
        return later[0] if later else None

    def stop_and_check_its_checkpoint_went_up(self, sv: Supervisor, vm: Path) -> Tuple[int, Dict[str, dict]]:
        """The machine is stopped (SIGTERM, exit 75): the trainer's stop checkpoint is whole on
        the remote before spotvisor ends, it is the newest marked one, and every marker there
        is for a whole checkpoint. Returns its step and the markers."""
        sv.signal(signal.SIGTERM)
        self.assert_exit(sv, 75, 120)
        stop = int(re.findall(r"^\[trainer\] saved step=(\d+) reason=stop", sv.text(), re.M)[-1])
        self.assert_whole_on_remote(vm / "ckpt" / f"ckpt_step{stop}", sv)
        markers = self.assert_every_marker_whole()
        self.assertEqual(max(m["step"] for m in markers.values()), stop, markers)
        return stop, markers

    def new_vm_ends_exactly(self, command: Sequence[str], step: int, expected: str, timeout: float = 300) -> None:
        """A new VM (an empty disk) restores the checkpoint of `step` from the bucket, resumes
        from it and ends with `expected`, the uninterrupted run's result."""
        b = self.new_vm("vm-b")
        svb = self.start(self.write_job(b, command), "spotvisor")
        self.assert_restored(svb, b, step)
        self.assert_exit(svb, 0, timeout)
        self.assertEqual(self.result_of(b), expected, "the result differs from the uninterrupted run's")

    # -- 1 ---------------------------------------------------------------------------
    def test_notices_each_end_durable_and_a_new_vm_resumes_exactly(self):
        seed = int(os.environ.get("SPOTVISOR_E2E_SEED", time.time_ns() % 1_000_000))
        rng = random.Random(seed)
        print(f"\n[durable] SPOTVISOR_E2E_SEED={seed}", file=sys.stderr, flush=True)
        expected = self.reference(self.plain_command(0))
        step: Optional[int] = None        # what the previous VM's notice saved
        cycles: List[float] = []
        after_exit_line = 0               # uploads that ended after the `event=exit` line (still inside the process)
        for k in range(NOTICES):
            began = time.monotonic()
            vm = self.new_vm(f"vm{k:02d}")
            sv = self.start(self.write_job(vm, self.plain_command(0.05)), "spotvisor")
            self.assert_restored(sv, vm, step)
            # A random moment once it trains.
            sv.wait_for(r"^step=\d+ loss=", 60, after=sv.text().find("event=trainer_started"))
            time.sleep(rng.uniform(0, 0.8))
            deadline = time.time() + rng.uniform(8, 15)
            self.write_notice(vm, deadline)
            saved = sv.wait_for(r"^\[trainer\] saved step=(\d+) reason=stop path=(\S+)", 60)
            saved_step = int(saved.group(1))
            self.assertLess(saved_step, PLAIN_STEPS, "the run ended before the notice")
            if step is not None:
                self.assertGreater(saved_step, step, "no progress on this VM")
            drained = sv.wait_event("drained", 60, lambda e: "newest_good" in e)
            self.assertEqual((drained["newest_good"], drained["step"]), (saved.group(2), str(saved_step)), drained)
            # The machine goes away: at once after the drain, or a moment later.
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0, 1.0))
            sv.signal(signal.SIGTERM)
            self.assert_exit(sv, 75, 60)
            ended = time.time()
            self.assertLess(ended, deadline, f"VM {k}: spotvisor still ran at the notice's deadline:\n{sv.tail()}")
            log = sv.text()

            # The notice's checkpoint is the newest the trainer saved.
            ckpt = vm / "ckpt" / f"ckpt_step{saved_step}"
            saves = [int(s) for s in re.findall(r"^\[trainer\] saved step=(\d+)", log, re.M)]
            self.assertEqual(max(saves), saved_step, saves)
            self.assertEqual(max(step_of(p.name) for p in (vm / "ckpt").glob("ckpt_step*")), saved_step)
            # It went up before spotvisor's process ended, and before the deadline.
            mirrored = [(t, i) for t, i, e in timed_events(log, "mirrored") if e["name"] == ckpt.name]
            self.assertEqual(len(mirrored), 1, f"VM {k}: {ckpt.name} mirrored {len(mirrored)} times; log "
                                               f"{sv.log_path}:\n{sv.tail()}")
            mirrored_at, mirrored_line = mirrored[0]
            self.assertLessEqual(mirrored_at, deadline, f"VM {k}: uploaded after the deadline:\n{sv.tail()}")
            for bad in ("mirror_failed", "mirror_abandoned", "mirror_restore_skipped", "mirror_restore_failed"):
                if k > 0 or bad != "mirror_restore_skipped":
                    self.assertEqual(sv.events(bad), [], f"VM {k}: log {sv.log_path}:\n{sv.tail()}")
            # ... with its marker, file for file.
            self.assert_whole_on_remote(ckpt, sv)

            # The run record and the report: the notice, its deadline, its checkpoint.
            record = json.loads((vm / "state" / "run.json").read_text())
            self.assertEqual(len(record["notices"]), 1, record["notices"])
            notice = record["notices"][0]
            # The checkpoint saved for the notice, not one that landed just before it.
            self.assertEqual((notice["checkpoint"], notice["step"], notice["outcome"]),
                             (ckpt.name, saved_step, "saved"),
                             f"VM {k}: run.json's notice {notice}; event=notice_saved {sv.events('notice_saved')}; "
                             f"log {sv.log_path}")
            self.assertIsNotNone(notice["deadline_ms"], notice)
            self.assertLess(abs(notice["deadline_ms"] / 1000 - deadline), 1.0, (notice, deadline))
            # The upload ended before the process did, so the record and the report say when:
            # inside the deadline.
            self.assertIsNotNone(notice["mirrored_ms"], f"VM {k}: {ckpt.name} went up, run.json does not say "
                                                        f"when: {notice}")
            self.assertLessEqual(notice["mirrored_ms"], notice["deadline_ms"], notice)
            report = json.loads((vm / "state" / "report.json").read_text())["notices"][0]
            self.assertIsNotNone(report["mirrored_after_s"], report)
            self.assertLessEqual(report["mirrored_after_s"], report["warning_s"], report)
            exit_line = [i for _, i, e in timed_events(log, "exit") if e.get("code") == "75"]
            self.assertEqual(len(exit_line), 1, log)
            after_exit_line += mirrored_line > exit_line[0]
            step = saved_step
            cycles.append(time.monotonic() - began)

        # The last VM runs to the end (faster: the result does not depend on the pace).
        vm = self.new_vm("vm-last")
        sv = self.start(self.write_job(vm, self.plain_command(0)), "spotvisor")
        self.assert_restored(sv, vm, step)
        self.assert_exit(sv, 0, 120)
        self.assertEqual(self.result_of(vm), expected, "the result differs from the uninterrupted run's")
        # Retention on the remote (checkpoints.keep 3) left only whole, marked checkpoints.
        markers = self.assert_every_marker_whole()
        self.assertLessEqual(len(markers), 3, markers)
        self.assertEqual(max(m["step"] for m in markers.values()), PLAIN_STEPS, markers)
        print(f"\n[durable] {NOTICES} notices, a VM each: {sum(cycles):.1f} s, {sum(cycles) / len(cycles):.2f} s a "
              f"cycle (min {min(cycles):.2f}, max {max(cycles):.2f}); {after_exit_line} uploads ended while "
              f"spotvisor waited at its exit", file=sys.stderr, flush=True)

    # -- 2 ---------------------------------------------------------------------------
    def test_killed_mid_upload_never_restores_a_torn_copy_and_the_upload_completes_after_restart(self):
        expected = self.reference(self.durable_command(0))
        # 4 MiB a checkpoint at 1 MiB/s, one file at a time: each upload takes about 4 s,
        # and a checkpoint comes every 6 s (30 steps of 0.2 s).
        flags = ["--transfers", "1"]
        a = self.new_vm("vm-a")
        job_a = self.write_job(a, self.durable_command(0.2), rclone_flags=flags)
        sv = self.start(job_a, "spotvisor-1")
        older = int(sv.wait_event("mirrored", 180)["step"])
        name = self.wait_until(lambda: self.torn_after(older), 120, "later checkpoint part way up", sv)
        sv.kill()   # SIGKILL: the machine is gone, no warning
        local = a / "ckpt" / name
        self.assertEqual(max(step_of(p.name) for p in (a / "ckpt").glob("ckpt_step*")), step_of(name),
                         "the torn upload is not the newest checkpoint on the disk")
        # Its rclone died with spotvisor (die_with_parent), like the trainer: nothing goes on
        # uploading without a marker to follow.
        self.wait_until(lambda: not trainer_strays(a, ["rclone", str(DURABLE_TRAINER)]), 30,
                        "end of rclone and the trainer after spotvisor's SIGKILL")
        checkpoints, markers = self.remote()
        self.assertNotIn(name, markers, f"{name} has a marker, yet its upload was cut short")
        self.assertLess(sum(checkpoints[name].values()), sum(tree(local).values()),
                        f"{name} was whole on the remote before the kill: {checkpoints[name]}")
        newest_marked = max(step_of(n) for n in markers)
        self.assertLess(newest_marked, step_of(name))
        print(f"\n[durable] killed with {name} part way up: {checkpoints[name]}; newest marked: "
              f"ckpt_step{newest_marked}", file=sys.stderr, flush=True)

        # A new VM restores the newest marked checkpoint, never the torn one.
        b = self.new_vm("vm-b")
        svb = self.start(self.write_job(b, self.durable_command(0.2), rclone_flags=flags), "spotvisor")
        self.assert_restored(svb, b, newest_marked)
        self.assertNotIn(name, svb.text(), "the new VM looked at a checkpoint without a marker")
        self.assertFalse((b / "ckpt" / name).exists())
        svb.kill()  # it goes away too, before it saves anything of its own
        self.wait_until(lambda: not trainer_strays(b, ["rclone", str(DURABLE_TRAINER)]), 30, "the new VM's end")

        # The first VM boots again with its disk: it resumes from its newest checkpoint (the
        # mirror has nothing newer) and uploads it, whole this time, while the trainer runs.
        sv2 = self.start(job_a, "spotvisor-2")
        started = sv2.wait_event("trainer_started", 120)
        self.assertEqual(started["resume"], str(local), started)
        self.assertEqual(sv2.events("mirror_restored"), [], sv2.tail())
        mirrored = sv2.wait_event("mirrored", 180, lambda e: e["name"] == name)
        self.assertEqual(mirrored["step"], str(step_of(name)), mirrored)
        self.assert_whole_on_remote(local, sv2)
        self.assert_exit(sv2, 0, 300)
        self.assertEqual(self.result_of(a), expected, "the result differs from the uninterrupted run's")
        self.assertEqual(sv2.events("mirror_failed"), [], sv2.tail())
        # In the end: only whole, marked checkpoints, the last one among them.
        checkpoints, markers = self.remote()
        self.assert_every_marker_whole()
        self.assertEqual(sorted(checkpoints), sorted(markers), "a checkpoint without its marker was left behind")
        self.assertIn("ckpt_step120", markers)

    # -- 3 ---------------------------------------------------------------------------
    def test_server_errors_then_recovers(self):
        expected = self.reference(self.plain_command(0))
        a = self.new_vm("vm-a")
        # A checkpoint every 25 steps of 0.05 s.
        sv = self.start(self.write_job(a, self.plain_command(0.05), rclone_flags=FEW_RETRIES), "spotvisor")
        first = sv.wait_event("mirrored", 120)
        self.s3.fail_with(503)
        failed = sv.wait_event("mirror_failed", 120, lambda e: step_of(e["name"]) > int(first["step"]))
        self.assertIn("rclone", failed["error"], failed)
        # A second checkpoint fails too: the failures go on while the server does.
        sv.wait_event("mirror_failed", 120, lambda e: e["name"] != failed["name"])
        failed_names = {e["name"] for e in sv.events("mirror_failed")}
        self.s3.stop_failing()
        # Nothing that failed has a marker (so no restore can start from it).
        checkpoints, markers = self.remote()
        self.assertFalse(failed_names & set(markers), (failed_names, markers))
        self.assert_every_marker_whole()
        latest_failed = max(step_of(n) for n in failed_names)
        recovered = sv.wait_event("mirrored", 120, lambda e: int(e["step"]) > latest_failed)
        self.assert_whole_on_remote(a / "ckpt" / recovered["name"], sv)
        # The machine is stopped: the trainer's stop checkpoint goes up before spotvisor ends.
        stop, markers = self.stop_and_check_its_checkpoint_went_up(sv, a)
        unmarked = {n: f for n, f in self.remote()[0].items() if n not in markers}
        print(f"\n[durable] failed uploads: {sorted(failed_names)}; left without a marker: {unmarked}",
              file=sys.stderr, flush=True)

        # A new VM restores the newest, and the run ends as if never interrupted.
        self.new_vm_ends_exactly(self.plain_command(0), stop, expected, timeout=120)

    # -- 5 ---------------------------------------------------------------------------
    def test_when_it_does_not_fit_the_planner_warns_and_a_new_vm_loses_exactly_what_the_report_says(self):
        # 4 shards of 0.25 MiB (+ model.pt) a checkpoint, one every 30 steps of 0.1 s.
        args = ["--steps", "600", "--checkpoint-every", "30", "--shards", "4", "--shard-mib", "0.25"]
        expected = self.reference(self.durable_command(0, args))
        a = self.new_vm("vm-a")
        job = self.write_job(a, self.durable_command(0.1, args), bandwidth="128KiB", window="5s", safety_margin="1s")
        sv = self.start(job, "spotvisor")
        # The first upload measures the rate: from then on the planner knows it does not fit.
        risk = sv.wait_event("durability_at_risk", 120)
        self.assertEqual(risk["window_s"], "5.0", risk)
        self.assertLess(float(risk["margin_s"]), 0, risk)
        self.assertIn("upload rate", risk["advice"], risk)
        first = sv.events("mirrored")
        self.assertGreaterEqual(len(first), 1, sv.tail())
        status = subprocess.run([self.binary, "status", "--config", str(job)], cwd=a, capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("  planner: ", status.stdout)
        self.assertIn(": AT RISK by ", status.stdout)
        # A notice, its deadline the window away: the trainer saves, the upload cannot make it.
        deadline = time.time() + 5
        self.write_notice(a, deadline)
        saved = sv.wait_for(r"^\[trainer\] saved step=(\d+) reason=stop", 60)
        saved_step = int(saved.group(1))
        sv.wait_event("drained", 60, lambda e: "newest_good" in e)
        sv.signal(signal.SIGTERM)   # the machine goes away
        self.assert_exit(sv, 75, 60)
        log = sv.text()
        notice_line = [i for _, i, _ in timed_events(log, "notice")]
        risk_line = [i for _, i, _ in timed_events(log, "durability_at_risk")]
        self.assertTrue(notice_line and risk_line and risk_line[0] < notice_line[0],
                        f"no durability_at_risk before the notice; log {sv.log_path}:\n{sv.tail()}")
        abandoned = sv.events("mirror_abandoned")
        self.assertEqual(len(abandoned), 1, sv.tail())
        self.assertIn(f"ckpt_step{saved_step}", abandoned[0]["uploading"].split(","), abandoned)
        _, markers = self.remote()
        self.assertNotIn(f"ckpt_step{saved_step}", markers)
        self.assert_every_marker_whole()
        durable = max(m["step"] for m in markers.values())
        self.assertLess(durable, saved_step)

        # The report: predicted and observed, what a new VM resumes from and the steps it loses.
        report = json.loads((a / "state" / "report.json").read_text())["notices"][0]
        self.assertEqual((report["checkpoint"], report["step"]), (f"ckpt_step{saved_step}", saved_step), report)
        d = report["durability"]
        self.assertEqual((d["predicted_in_window"], d["observed_in_window"], d["observed_after_s"]),
                         (False, False, None), report)
        self.assertGreater(d["predicted_after_s"], report["warning_s"], report)
        self.assertEqual(d["new_vm_resumes_from_step"], durable, (report, sorted(markers)))
        self.assertEqual(d["steps_lost_on_a_new_vm"], saved_step - durable, report)
        md = (a / "state" / "report.md").read_text()
        self.assertIn(f"(too late) | not durable (too late) | {durable} | {saved_step - durable} |", md)
        print(f"\n[durable] it does not fit: saved step {saved_step} at the notice, {durable} on the mirror at the "
              f"deadline: {saved_step - durable} steps lost on a new VM", file=sys.stderr, flush=True)

        # A new VM resumes from exactly that step and ends as if never interrupted.
        self.new_vm_ends_exactly(self.durable_command(0, args), durable, expected)

    # -- 6 ---------------------------------------------------------------------------
    def test_server_crash_mid_upload_leaves_no_torn_marker_and_uploads_resume(self):
        # 4 MiB a checkpoint at 1 MiB/s, one file at a time (as in case 2), for a minute:
        # time for the crash, the restart and an upload after it before the trainer ends.
        args = ["--steps", "300", "--checkpoint-every", "30", "--shards", "4", "--shard-mib", "1"]
        expected = self.reference(self.durable_command(0, args))
        a = self.new_vm("vm-a")
        sv = self.start(self.write_job(a, self.durable_command(0.2, args), rclone_flags=["--transfers", "1"]),
                        "spotvisor")
        first = int(sv.wait_event("mirrored", 180)["step"])
        name = self.wait_until(lambda: self.torn_after(first), 120, "a later checkpoint part way up", sv)
        self.s3.crash()
        self.s3.restart()
        # Uploads go on against the new server: the cut one (retried by rclone, or failed)
        # or the next one, whole and marked.
        resumed = sv.wait_event("mirrored", 180, lambda e: int(e["step"]) >= step_of(name))
        self.assert_whole_on_remote(a / "ckpt" / resumed["name"], sv)
        self.assert_every_marker_whole()
        stop, _ = self.stop_and_check_its_checkpoint_went_up(sv, a)
        print(f"\n[durable] server crashed with {name} part way up; after its restart {resumed['name']} went up; "
              f"failed uploads: {[e['name'] for e in sv.events('mirror_failed')]}", file=sys.stderr, flush=True)

        self.new_vm_ends_exactly(self.durable_command(0, args), stop, expected)

    # -- 4 ---------------------------------------------------------------------------
    def test_stalled_server_at_exit_is_bounded_by_the_notice_deadline(self):
        a = self.new_vm("vm-a")
        # The grace is capped at the deadline less 2 s: time enough for the trainer's save.
        job = self.write_job(a, self.plain_command(0.05), safety_margin="2s")
        sv = self.start(job, "spotvisor-1")
        # The mirror works; the stall comes right after an upload, while its retention runs
        # (a stall may come at any moment, and each upload is followed by its retention).
        sv.wait_event("mirrored", 120)
        self.s3.pause()
        deadline = time.time() + 6
        self.write_notice(a, deadline)
        saved = sv.wait_for(r"^\[trainer\] saved step=(\d+) reason=stop", 60)
        name = f"ckpt_step{saved.group(1)}"
        sv.wait_event("drained", 60, lambda e: "newest_good" in e)
        sv.signal(signal.SIGTERM)   # the machine goes away; its upload hangs on the stalled server
        try:
            rc = sv.proc.wait(max(1.0, deadline + 15 - time.time()) * SLOW)
        except subprocess.TimeoutExpired:
            stuck = rclone_children(sv.pid)
            self.fail(f"spotvisor still ran 15 s after the notice's deadline (mirror.timeout is 1h); its rclone "
                      f"processes: {stuck}; log {sv.log_path}:\n{sv.tail()}")
        ended = time.time()
        log = sv.text()
        self.assertEqual(rc, 75, f"log {sv.log_path}:\n{sv.tail()}")
        # It waited for the upload until the deadline, not less.
        self.assertGreater(ended, deadline - 1.0, f"ended {deadline - ended:.1f} s before the deadline:\n{sv.tail()}")
        abandoned = [e for _, _, e in timed_events(log, "mirror_abandoned")]
        self.assertEqual(len(abandoned), 1, log)
        self.assertIn(name, abandoned[0]["uploading"].split(","), abandoned)
        self.assertIn("the stop notice's deadline passed", abandoned[0]["detail"], abandoned)
        self.assertEqual([e for e in sv.events("mirrored") if e["name"] == name], [], sv.tail())
        self.s3.resume()
        checkpoints, markers = self.remote()
        self.assertNotIn(name, markers, "a marker for an upload that was abandoned")
        self.assert_every_marker_whole()

        # The notice is gone once the machine is back: the next start uploads what was left.
        (a / "notice.json").unlink()
        sv2 = self.start(job, "spotvisor-2")
        started = sv2.wait_event("trainer_started", 120)
        self.assertEqual(started["resume"], str(a / "ckpt" / name), started)
        sv2.wait_event("mirrored", 120, lambda e: e["name"] == name)
        self.assert_whole_on_remote(a / "ckpt" / name, sv2)
        sv2.signal(signal.SIGTERM)
        self.assert_exit(sv2, 75, 120)


if __name__ == "__main__":
    unittest.main()
