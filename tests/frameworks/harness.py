"""What the framework tests share: the uninterrupted run beside the test's, and the loop of
notices (one per attempt) with the save-on-notice rate it measures.

Each framework test (test_hf, test_lightning, test_accelerate, test_deepspeed) runs its
example under the real spotvisor with the mock AWS metadata server, preempts every attempt
at a random moment and checks what that framework must show; what every notice must end
with is checked here once: the attempt recorded `preempted`, spotvisor judged a newer
checkpoint good (its drained validation) before the trainer exited, written inside the
two-minute warning, the next attempt resumed from it, and at the end the weights equal the
uninterrupted run's, bit for bit.
"""

from __future__ import annotations

import re
import statistics
import sys
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tests.e2e.support import E2ECase, MockMetadata, Supervisor, clean_env, read_attempts

WINDOW_S = 120  # AWS's two-minute warning


def rank_lines(text: str, tag: str, what: str) -> List[Dict[str, str]]:
    """An example's `[tag] rank=R ... <what> ...` lines, as key=value fields."""
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in text.splitlines()
            if line.startswith(f"[{tag}] ") and f" {what}" in line]


def wait_until(case: E2ECase, probe, timeout: float, poll: float = 0.05):
    """`probe()`'s first true value, polled every `poll` seconds for `timeout` at most."""
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        case.assertLess(time.monotonic(), end, f"timed out waiting for {probe}")
        time.sleep(poll)


class Reference:
    """The uninterrupted run, without spotvisor, beside the test's (it mostly sleeps), in a
    directory of its own: `argv` writes its checkpoints and its result.txt there. Its output
    goes to reference.log there, shown when it fails. It is the test's oracle, not what is
    tested: when it fails (a port taken on a loaded machine) it runs once more, alone, in a
    fresh directory, and says so."""

    def __init__(self, case: E2ECase, argv: Sequence[object], env: Optional[Dict[str, str]] = None) -> None:
        self.case, self.argv, self.env = case, [str(a) for a in argv], env or {}
        self.proc, self.work = self._start(case.dir / "reference")

    def _start(self, work: Path):
        work.mkdir()
        with open(work / "reference.log", "wb") as log:
            proc = subprocess.Popen(self.argv, cwd=work, env=clean_env({"OMP_NUM_THREADS": "1", **self.env}),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.case.addCleanup(proc.kill)
        return proc, work

    def result(self) -> str:
        """The run's result (its weights' digest) once it exited 0."""
        if self.proc.wait(600) != 0:
            print(f"\n[reference] the uninterrupted run exited {self.proc.returncode}; once more, alone "
                  f"(its output: {self.work / 'reference.log'}):\n"
                  f"{(self.work / 'reference.log').read_text(errors='replace')[-2000:]}", file=sys.stderr)
            self.proc, self.work = self._start(self.case.dir / "reference-again")
            log = self.work / "reference.log"
            self.case.assertEqual(self.proc.wait(600), 0, f"the uninterrupted run failed twice; {log}:\n"
                                                          f"{log.read_text(errors='replace')[-4000:]}")
        return (self.work / "result.txt").read_text().strip()


class Notices:
    """One run under spotvisor, preempted once per attempt."""

    def __init__(self, case: E2ECase, sv: Supervisor, mock: MockMetadata, *, label: str,
                 steps: int) -> None:
        self.case, self.sv, self.mock = case, sv, mock
        self.label, self.steps = label, steps
        self.last_step = 0
        self.noticed = 0.0
        self.ended: Dict[str, str] = {}  # the last attempt_ended event
        self.saved_after: List[float] = []  # seconds from each notice to its checkpoint written

    def started(self, attempt: int, resume: Optional[Path] = None) -> Dict[str, str]:
        """Waits for the attempt's start; from the second on, it resumes from `resume`."""
        start = self.sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt))
        if attempt > 1 and resume is not None:
            self.case.assertEqual(start.get("resume"), str(resume), f"attempt {attempt}: resumed from the notice's save")
        return start

    def preempt(self, attempt: int) -> int:
        """The notice; returns the step of the newer checkpoint spotvisor judged good once the
        attempt ended `preempted`. The caller then says when that checkpoint was written
        (`saved`) and withdraws the notice (`clear`)."""
        self.noticed = time.time()
        self.mock.preempt()
        ended = self.sv.wait_event("attempt_ended", 120, lambda e: e.get("attempt") == str(attempt))
        self.case.assertEqual(ended["outcome"], "preempted", f"attempt {attempt}: {ended}\n{self.sv.tail()}")
        self.ended = ended
        drained = self.sv.wait_event("drained", 120,
                                     lambda e: e.get("step", "none").isdigit() and int(e["step"]) > self.last_step)
        step = int(drained["step"])
        self.case.assertLess(step, self.steps, "the run ended before the notice: make it longer")
        return step

    def ranks_started(self, tag: str, offset: int) -> Dict[str, str]:
        """Waits for both ranks' `[tag] rank=R pid=P start` lines after `offset` (their
        handlers are in place); rank -> pid."""
        for rank in (0, 1):
            self.sv.wait_for(rf"^\[{tag}\] rank={rank} pid=\d+ start", 120, after=offset)
        return {e["rank"]: e["pid"] for e in rank_lines(self.sv.text()[offset:], tag, "start")}

    def assert_both_ranks_saved(self, tag: str, offset: int, step: int, started: Dict[str, str]) -> None:
        """The notice went to the two workers (`started`), not to the launcher, and both
        saved `step` (`[tag] rank=R ... saved step=N` after `offset`)."""
        term = [e for e in self.sv.events("signal_sent") if e.get("signal") == "SIGTERM"][-1]
        self.case.assertEqual(term["target"], "workers", term)
        self.case.assertEqual(sorted(term["workers"].split(",")), sorted(started.values()), (term, started))
        saved = rank_lines(self.sv.text()[offset:], tag, "saved")
        self.case.assertEqual(sorted((e["rank"], e["step"]) for e in saved if e["step"] == str(step)),
                              [("0", str(step)), ("1", str(step))], saved)

    def saved(self, step: int, written: float) -> None:
        """The notice's checkpoint (`step`) was written at `written` (a file's mtime)."""
        self.saved_after.append(written - self.noticed)
        self.case.assertLess(self.saved_after[-1], WINDOW_S, "saved outside the two-minute warning")
        self.last_step = step
        self.mock.clear()

    def finish(self, reference: Reference, extra: str = "") -> None:
        """The run exits 0 with one preempted attempt per notice and none failed, ending with
        the uninterrupted run's weights; prints the rate and the times."""
        notices = len(self.saved_after)
        self.case.assert_exit(self.sv, 0, 600)
        attempts = read_attempts(self.case.dir / "state")
        self.case.assertEqual(sum(a["outcome"] == "preempted" for a in attempts), notices, attempts)
        self.case.assertFalse([a for a in attempts if a["outcome"] == "failed"], attempts)
        self.case.assertEqual(self.case.result_of(), reference.result(),
                              f"resumed {notices} times: not the uninterrupted run's weights")
        print(f"\n[{self.label}] save on notice: {notices}/{notices} saved and judged good in the window; "
              f"notice to saved checkpoint p50 {statistics.median(self.saved_after):.2f}s "
              f"max {max(self.saved_after):.2f}s (mock poll interval 200ms){extra}")
