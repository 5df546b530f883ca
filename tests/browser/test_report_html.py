"""`spotvisor report --html` in a real browser (issue 24).

A REAL run: `spotvisor run` under the mock AWS metadata server with the pure-Python example
trainer, over three machine sessions: in the first, a corrupt checkpoint appears (judged by
the watcher) and the trainer is killed (a restart: the new attempt resumes from the newest
good checkpoint), then the first preemption (a torn checkpoint left from before the run is
rejected and quarantined when the first resume point is chosen); the second
session is preempted too; the third runs to the end. Then `spotvisor report STATE --html`
is rendered by Debian's headless `chromium` (tests/browser/chromium.py: the DevTools
protocol over a pipe) to a screenshot, and the DOM is checked against the report's JSON:
as many attempt bars, notice markers and checkpoint ticks (by verdict) as it lists; no
network request; no console error, CSP refusal or failed load; the run's strings escaped.
A doctored copy of the page (one outside image) must be caught by the same checks.

Environment: SPOTVISOR_BINARY (ctest sets it); SPOTVISOR_REPORT_SCREENSHOT=PATH also keeps
the screenshot there; SPOTVISOR_E2E_KEEP=1 keeps the work dir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import unittest
from pathlib import Path

from tests.browser.chromium import CHROMIUM, Chromium, Page
from tests.e2e.support import REPO, E2ECase, clean_env

PLAIN_TRAINER = REPO / "examples" / "plain_trainer" / "train.py"
LABEL = '<b>ml</b> & "ops" \'x\''  # must come out as text, never as markup


class ReportHtml(E2ECase):
    needs_torch = False

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        if not os.access(CHROMIUM, os.X_OK):
            raise AssertionError(f"no chromium at {CHROMIUM}: scripts/setup.sh installs Debian's chromium")

    def write_job(self, endpoint: str) -> Path:
        j = json.dumps
        command = ["/usr/bin/python3", str(PLAIN_TRAINER), "--ckpt-dir", "{checkpoint_dir}", "--result-file",
                   "{result_file}", "--steps", "150", "--checkpoint-every", "10", "--step-sleep", "0.1", "--keep", "0"]
        path = self.dir / "job.yaml"
        path.write_text("\n".join([
            "job:", "  name: html-report", f"  command: {j(command)}", '  resume_args: ["--resume_from={checkpoint}"]',
            f"  env: {j({'PYTHONUNBUFFERED': '1'})}", "  result_file: ./result.txt", f"  labels: {{team: {j(LABEL)}}}",
            "provider:", "  kind: aws", f"  endpoint: {j(endpoint)}", "  poll_interval: 200ms",
            "signals:", "  on_notice: SIGTERM", "  grace: 30s",
            "checkpoints:", "  dir: ./ckpt", '  pattern: "ckpt_step{step}"', "  validate: full", "  keep: 0",
            "restart:", "  max_restarts: 5", "  backoff: {initial: 300ms, max: 1s, multiplier: 2, jitter: 0}",
            "telemetry:", "  state_dir: ./state", "  log_format: text", ""]))
        return path

    def preempt_and_stop(self, sv, mock, offset: int) -> None:
        """A preemption notice; the trainer saves and exits; the drained supervisor is
        stopped as the machine goes away (exit 75); the next boot sees no notice."""
        mock.preempt(deadline_in_s=25)
        sv.wait_for(r"event=drained ", 90, after=offset)
        sv.signal(signal.SIGTERM)
        self.assert_exit(sv, 75)
        mock.clear()

    def real_run(self) -> Path:
        mock = self.mock("aws")
        job = self.write_job(mock.url)
        # Left by an earlier run: rejected when the first resume point is chosen (quarantined).
        (self.dir / "ckpt").mkdir()
        (self.dir / "ckpt" / "ckpt_step999").write_bytes(b"\x00torn\n" * 64)
        sv = self.supervise(job, "run1")
        sv.wait_for(r"^\[trainer\] saved step=10 reason=periodic", 120)
        # A checkpoint that is not one: the watcher judges it corrupt.
        (self.dir / "ckpt" / "ckpt_step15").write_bytes(b"\x00garbage, not a checkpoint\n" * 64)
        sv.wait_event("checkpoint_seen", 60, lambda e: e.get("verdict") == "corrupt")
        os.kill(self.trainer_pid(sv, 1), signal.SIGKILL)  # a crash: restarted after the backoff
        sv.wait_event("trainer_started", 60, lambda e: e.get("attempt") == "2")
        mark = len(sv.text())
        sv.wait_for(r"^\[trainer\] saved step=\d+ reason=periodic", 120, after=mark)
        self.preempt_and_stop(sv, mock, mark)

        sv = self.supervise(job, "run2")
        sv.wait_event("trainer_started", 60)
        sv.wait_for(r"^\[trainer\] saved step=\d+ reason=periodic", 120)
        self.preempt_and_stop(sv, mock, 0)

        sv = self.supervise(job, "run3")
        self.assert_exit(sv, 0)
        return self.dir / "state"

    def spotvisor(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.binary, *args], env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=60)

    def count(self, page: Page, selector: str) -> int:
        return page.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length")

    def assert_clean(self, page: Page) -> None:
        self.assertEqual(page.requests(), [], "the report made network requests")
        self.assertEqual(page.errors(), [], "the browser reported errors")

    def test_report_of_a_real_run(self) -> None:
        state = self.real_run()
        js = self.spotvisor("report", str(state), "--json")
        self.assertEqual(js.returncode, 0, js.stderr)
        report = json.loads(js.stdout)
        t = report["timeline"]
        self.assertEqual(len(t["attempts"]), len(report["attempts"]))
        self.assertEqual([a["outcome"] for a in report["attempts"]][-1], "done")
        self.assertGreaterEqual(len(t["attempts"]), 4, report["attempts"])  # killed, preempted, preempted, done
        self.assertEqual(len(t["notices"]), 2)
        verdicts = [c["verdict"] for c in t["checkpoints"]]
        self.assertEqual(verdicts.count("corrupt"), 1, t["checkpoints"])
        self.assertEqual(verdicts.count("quarantined"), 1, t["checkpoints"])
        self.assertEqual(verdicts.count("good"), report["checkpoints"]["good"])
        kinds = [g["kind"] for g in t["gaps"]]
        self.assertEqual(kinds.count("stopping"), 2, t["gaps"])
        self.assertGreaterEqual(kinds.count("backoff"), 1, t["gaps"])

        html = self.dir / "report.html"
        out = self.spotvisor("report", str(state), "--html", str(html))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(str(html), out.stderr)
        self.assertEqual(out.stdout, "")
        text = html.read_text()
        self.assertIn('http-equiv="Content-Security-Policy"', text)
        self.assertNotIn("<script", text.lower())

        browser = Chromium()
        try:
            page = Page(browser, html)
            self.assert_clean(page)
            self.assertEqual(self.count(page, ".attempt-bar"), len(t["attempts"]))
            self.assertEqual(self.count(page, ".notice-marker"), len(report["notices"]))
            self.assertEqual(self.count(page, ".notice-window"), len(report["notices"]))  # AWS gives a deadline
            self.assertEqual(self.count(page, ".ckpt-tick"), len(t["checkpoints"]))
            for verdict in ("good", "corrupt", "quarantined"):
                self.assertEqual(self.count(page, f'.ckpt-tick[data-verdict="{verdict}"]'), verdicts.count(verdict))
            self.assertEqual(self.count(page, '.gap-bar[data-kind="stopping"]'), 2)
            self.assertEqual(self.count(page, ".step-line"), 1)
            self.assertEqual(self.count(page, "table.attempts tr"), 1 + len(report["attempts"]))
            self.assertEqual(self.count(page, "table.notices tr"), 1 + len(report["notices"]))
            # Hover texts with exact times on every bar.
            titles = page.evaluate("Array.from(document.querySelectorAll('.attempt-bar > title'), t => t.textContent)")
            self.assertEqual(len(titles), len(t["attempts"]))
            for title in titles:
                self.assertRegex(title, r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z to ")
            # The label is text: shown as written, no element made of it.
            self.assertIn(LABEL, page.evaluate("document.body.innerText"))
            self.assertEqual(self.count(page, "td b, th b"), 0)
            self.assertEqual(page.evaluate("document.title"), "Run report: html-report")
            # Laptop screen: the timeline fits the width, no sideways scrolling.
            self.assertLessEqual(page.evaluate("document.documentElement.scrollWidth"), 1440)
            shot = self.dir / "report.png"
            page.screenshot(shot)
            self.assertEqual(shot.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
            if os.environ.get("SPOTVISOR_REPORT_SCREENSHOT"):
                shutil.copyfile(shot, os.environ["SPOTVISOR_REPORT_SCREENSHOT"])

            # The checks can fail: one outside image in a copy of the page is seen twice over.
            doctored = self.dir / "doctored.html"
            doctored.write_text(text.replace("<body>", '<body><img src="http://127.0.0.1:9/tracker.png">', 1))
            bad = Page(browser, doctored)
            self.assertEqual(bad.requests(), ["http://127.0.0.1:9/tracker.png"])
            self.assertTrue(any("Content Security Policy" in e for e in bad.errors()), bad.errors())

            # Side by side with a baseline (here the same run): both runs drawn.
            both = self.dir / "compare.html"
            out = self.spotvisor("report", str(state), "--baseline", str(state), "--html", str(both))
            self.assertEqual(out.returncode, 0, out.stderr)
            pair = Page(browser, both)
            self.assert_clean(pair)
            self.assertEqual(self.count(pair, "section.run"), 2)
            self.assertEqual(self.count(pair, ".attempt-bar"), 2 * len(t["attempts"]))
            self.assertEqual(self.count(pair, "table.comparison tr"), 1 + len(json.loads(self.spotvisor(
                "report", str(state), "--baseline", str(state), "--json").stdout)["rows"]))
        finally:
            browser.close()

        # A file that cannot be written is an error naming it.
        nowhere = self.dir / "no-such-dir" / "r.html"
        out = self.spotvisor("report", str(state), "--html", str(nowhere))
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn(str(nowhere), out.stderr)


if __name__ == "__main__":
    unittest.main()
