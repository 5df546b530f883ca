"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
commands on fd 3, replies and events on fd 4, each a JSON message ended by a NUL byte).
Stdlib only: no npm, no websocket.

Page(browser, path) opens a file:// URL in a fresh tab with Network, Runtime, Log and
Page enabled before the navigation, so every request the page makes, every console
message and every uncaught exception is recorded from the first byte.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Chromium:
    def __init__(self, width: int = 1440, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="spotvisor-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child: its fd 3 reads our commands, fd 4 writes to us
            # Out of the way first: either end may itself be fd 3 or 4.
            r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        args = [CHROMIUM, "--headless", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
        self.log_path = Path(self.profile) / "chromium.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=wire_fds, close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: List[Dict[str, Any]] = []

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read_message(self, timeout: float) -> Dict[str, Any]:
        end = time.monotonic() + timeout
        while b"\0" not in self._buf:
            if time.monotonic() > end:
                raise AssertionError(f"no message from chromium within {timeout:.0f}s; log:\n{self.log()}")
            ready, _, _ = select.select([self._from_child], [], [], 0.5)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise AssertionError(f"chromium closed the pipe (exit {self.proc.poll()}); log:\n{self.log()}")
                self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: Optional[Dict[str, Any]] = None, session: Optional[str] = None,
             timeout: float = 60) -> Dict[str, Any]:
        self._next_id += 1
        msg: Dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message(timeout)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float = 60) -> Dict[str, Any]:
        for e in self.events:
            if e["method"] == method and e.get("sessionId") == session:
                return e
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            e = self._read_message(end - time.monotonic())
            if "method" in e:
                self.events.append(e)
                if e["method"] == method and e.get("sessionId") == session:
                    return e
        raise AssertionError(f"no {method} within {timeout:.0f}s")

    def drain(self, seconds: float) -> None:
        """Collects the events that arrive within `seconds` (late console messages)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                e = self._read_message(max(0.1, end - time.monotonic()))
            except AssertionError:
                return
            if "method" in e:
                self.events.append(e)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""


class Page:
    """One tab, the file loaded; what it requested and what it complained about."""

    def __init__(self, browser: Chromium, path: Path, width: int = 1440, height: int = 900) -> None:
        self.browser = browser
        self.url = path.resolve().as_uri()
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        first = len(browser.events)
        self.send("Page.navigate", {"url": self.url})
        browser.wait_event("Page.loadEventFired", self.session)
        browser.drain(1.0)
        self.events = [e for e in browser.events[first:] if e.get("sessionId") == self.session]

    def send(self, method: str, params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def requests(self) -> List[str]:
        """Every URL the page asked for, the page itself and data: URLs aside."""
        urls = [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]
        return [u for u in urls if u != self.url and not u.startswith("data:")]

    def errors(self) -> List[str]:
        """Console errors and warnings, log entries of level error or warning (a CSP refusal
        is one), uncaught exceptions."""
        out = []
        for e in self.events:
            p = e["params"]
            if e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']} ({p['entry'].get('source')}): {p['entry']['text']}")
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif e["method"] == "Network.loadingFailed":
                out.append(f"load failed: {p.get('errorText')} {p.get('blockedReason', '')}")
        return out

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page (not only the viewport) as PNG."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True,
                          "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))


def main(argv: List[str]) -> int:
    """`python3 -m tests.browser.chromium PAGE.html OUT.png [WIDTHxHEIGHT]`: the viewport's
    screenshot (docs/report-html.png is the demo's report at 1280x800)."""
    if len(argv) not in (2, 3):
        print(main.__doc__)
        return 64
    width, height = map(int, (argv[2] if len(argv) == 3 else "1280x800").split("x"))
    browser = Chromium(width, height)
    try:
        page = Page(browser, Path(argv[0]), width, height)
        problems = page.requests() + page.errors()
        shot = page.send("Page.captureScreenshot", {"format": "png"})
        Path(argv[1]).write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.close()
    for p in problems:
        print(f"warning: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
