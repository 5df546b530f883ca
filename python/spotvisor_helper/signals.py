"""Signal flags and the preemption notice, the trainer's side of spotvisor's contract.

spotvisor sends (configurable, these are the defaults):
  SIGUSR1  "checkpoint at the next step boundary and keep going"
  SIGTERM  "checkpoint at the next step boundary and exit" (a notice, or a shutdown)
  SIGKILL  when the grace window is over.
On a notice it also writes `$SPOTVISOR_NOTICE_FILE` atomically: JSON with at least `kind`,
`provider`, `deadline` (ISO-8601 UTC, or null when unknown) and `action`.

The handlers only set flags; the training loop looks at them at step boundaries, which is
the only place a consistent checkpoint can be taken.
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .errors import NoticeError
from .fsio import read_json_object

NOTICE_FILE_ENV = "SPOTVISOR_NOTICE_FILE"
MAX_NOTICE_BYTES = 64 * 1024

SignalSpec = Union[int, str, signal.Signals, None]


def parse_signal(spec: SignalSpec) -> Optional[int]:
    """`SIGTERM`, `TERM`, `15` or `signal.SIGTERM` -> 15; None -> None."""
    if spec is None:
        return None
    if isinstance(spec, int):
        return int(spec)
    text = str(spec).strip().upper()
    if text.isdigit():
        return int(text)
    name = text if text.startswith("SIG") else "SIG" + text
    try:
        return int(getattr(signal.Signals, name))
    except AttributeError:
        raise ValueError(f"unknown signal {spec!r}") from None


def parse_deadline(text: str, *, source: str = "notice") -> _dt.datetime:
    """Parse an ISO-8601 time (`2017-09-18T08:22:00Z`); a time without a zone is UTC."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        when = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise NoticeError(f"{source}: deadline {text!r} is not an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.astimezone(_dt.timezone.utc)


@dataclass(frozen=True)
class Notice:
    """A preemption notice as spotvisor wrote it."""
    kind: str                               # e.g. "preemption", "maintenance", "shutdown"
    provider: Optional[str]                 # e.g. "aws", "gcp", "file", "signal"
    deadline: Optional[_dt.datetime]        # UTC; None when the provider gave none
    action: Optional[str]                   # e.g. "terminate", "stop"
    path: Path                              # the file it came from
    raw: Dict[str, Any] = field(default_factory=dict, compare=False)

    def seconds_left(self, now: Optional[_dt.datetime] = None) -> Optional[float]:
        """Seconds until the deadline (negative once past), None when unknown."""
        if self.deadline is None:
            return None
        now = now or _dt.datetime.now(_dt.timezone.utc)
        return (self.deadline - now).total_seconds()


def _optional_str(doc: Dict[str, Any], key: str, path: Path) -> Optional[str]:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise NoticeError(f"{path}: {key!r} must be a string or null, got {value!r}")
    return value


def read_notice(path: Union[str, os.PathLike, None] = None) -> Optional[Notice]:
    """Read the notice file (default: `$SPOTVISOR_NOTICE_FILE`).

    None when no path is configured or the file does not exist (no notice yet). Raises
    NoticeError naming the file when it exists but is not a valid notice.
    """
    if path is None:
        path = os.environ.get(NOTICE_FILE_ENV) or None
        if path is None:
            return None
    notice_path = Path(path)
    try:
        doc = read_json_object(notice_path, MAX_NOTICE_BYTES, "notice file")
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise NoticeError(str(e)) from None
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise NoticeError(f"{notice_path}: notice has no 'kind'")
    deadline_text = doc.get("deadline")
    if deadline_text is not None and not isinstance(deadline_text, str):
        raise NoticeError(f"{notice_path}: 'deadline' must be an ISO-8601 string or null")
    deadline = (parse_deadline(deadline_text, source=str(notice_path))
                if deadline_text else None)
    return Notice(
        kind=kind,
        provider=_optional_str(doc, "provider", notice_path),
        deadline=deadline,
        action=_optional_str(doc, "action", notice_path),
        path=notice_path,
        raw=doc,
    )


class SignalFlags:
    """Install handlers that set `stop_requested` / `checkpoint_requested`.

        signals = SignalFlags()                    # SIGTERM = stop, SIGUSR1 = checkpoint
        ...                                        # at every step boundary:
        stop, requested = signals.agree()          # read once (and agreed across ranks)
        if stop or requested:
            ckpt.save(step); signals.clear_checkpoint()
        if stop:
            break

    Read the flags once per boundary: checking `stop_requested` again after deciding not
    to save loses work when the signal lands in between.

    `notice` / `checkpoint` take a number, a name ("SIGTERM", "TERM") or None (not
    handled). Install from the main thread, as early as possible: before the handler is in
    place, a signal has its default action, which for SIGUSR1 kills the process. Handlers
    only set flags; `uninstall()` (or leaving a `with` block) puts the previous ones back.
    """

    def __init__(
        self,
        notice: SignalSpec = signal.SIGTERM,
        checkpoint: SignalSpec = signal.SIGUSR1,
        *,
        notice_file: Union[str, os.PathLike, None] = None,
        install: bool = True,
    ) -> None:
        self.notice_signal = parse_signal(notice)
        self.checkpoint_signal = parse_signal(checkpoint)
        if self.notice_signal is not None and self.notice_signal == self.checkpoint_signal:
            raise ValueError(f"notice and checkpoint signals must differ (both {self.notice_signal})")
        self._notice_file = notice_file
        self._stop = False
        self._checkpoint = False
        self._checkpoint_signals = 0        # checkpoint signals handled so far
        self._checkpoint_signals_agreed: Optional[int] = None  # ... as of the last agree()
        self._copy_owed = False             # the last agree() saved on a peer's copy of a request
        self._received: List[int] = []
        self._previous: Dict[int, Any] = {}
        if install:
            self.install()

    # --- handlers -------------------------------------------------------------------
    def _handle(self, signum: int, _frame: Any) -> None:
        if signum == self.notice_signal:
            self._stop = True
        elif signum == self.checkpoint_signal:
            self._checkpoint = True
            self._checkpoint_signals += 1
        if len(self._received) < 64:
            self._received.append(signum)

    def install(self) -> "SignalFlags":
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("SignalFlags must be installed from the main thread")
        for signum in (self.notice_signal, self.checkpoint_signal):
            if signum is not None and signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._handle)
                # The handler only sets a flag: restart system calls it interrupts. The
                # kernel may run it on any thread, and a gloo/NCCL I/O thread whose read()
                # fails with EINTR in the middle of a collective can leave the ranks hung.
                signal.siginterrupt(signum, False)
        return self

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def shielded(self):
        """Context manager: the signals are blocked in this thread meanwhile, and threads
        started inside (gloo's and NCCL's I/O threads, from `init_process_group` and the DDP
        constructor) keep them blocked for good; on leaving, a signal that came meanwhile is
        handled. A signal that lands on such a thread interrupts its socket calls (EINTR),
        which fails or hangs the collective, so wrap the process-group set-up:

            with signals.shielded():
                dist.init_process_group("gloo")
                model = DistributedDataParallel(model)
        """
        import contextlib

        mask = {s for s in (self.notice_signal, self.checkpoint_signal) if s is not None}

        @contextlib.contextmanager
        def block():
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, mask)
            try:
                yield self
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return block()

    def __enter__(self) -> "SignalFlags":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    # --- flags ----------------------------------------------------------------------
    @property
    def stop_requested(self) -> bool:
        """A stop signal arrived: save at the next step boundary, then exit."""
        return self._stop

    @property
    def checkpoint_requested(self) -> bool:
        """A checkpoint signal arrived and no save has cleared it yet."""
        return self._checkpoint

    @property
    def save_requested(self) -> bool:
        """Either flag: a checkpoint should be taken at this step boundary."""
        return self._stop or self._checkpoint

    @property
    def received(self) -> Tuple[int, ...]:
        """Signals seen so far, oldest first (at most 64 recorded)."""
        return tuple(self._received)

    def request_stop(self) -> None:
        self._stop = True

    def request_checkpoint(self) -> None:
        self._checkpoint = True

    def clear_checkpoint(self) -> None:
        """Call after a successful save; a stop request stays set, and so does a checkpoint
        signal that arrived after the last `agree()` (it asks for the next save), except
        this rank's own copy of the request the save answers: when the ranks agreed on a
        save that this rank's flags did not ask for, the first checkpoint signal after the
        `agree()` is that copy, come late (one request reaches the ranks at different
        moments), not a new request."""
        agreed = self._checkpoint_signals_agreed
        later = 0 if agreed is None else self._checkpoint_signals - agreed
        if self._copy_owed and later > 0:
            later -= 1
        self._copy_owed = False
        self._checkpoint = later > 0

    def agree(self) -> Tuple[bool, bool]:
        """(stop, checkpoint), agreed by every rank when torch.distributed is initialized.

        Signals reach ranks at slightly different moments, so each rank might see a flag
        at a different step. Call this at every step boundary on every rank: any rank's
        flag becomes every rank's flag (an all-reduce with MAX), so all ranks save the
        same step and stop together. Without torch.distributed it just reads the flags.
        """
        self._checkpoint_signals_agreed = self._checkpoint_signals
        self._copy_owed = False
        stop, checkpoint = self._stop, self._checkpoint
        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch is not None else None
        if dist is not None and dist.is_available() and dist.is_initialized():
            flags = torch.tensor([int(stop), int(checkpoint)], dtype=torch.int32)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            # A save this rank's flags did not ask for was asked by a peer's copy of a request
            # whose copy here has not been handled yet: it comes during the save, and the
            # save answers it (see clear_checkpoint).
            self._copy_owed = bool(flags[1].item()) and not checkpoint
            stop, checkpoint = bool(flags[0].item()), bool(flags[1].item())
            # Return what every rank agreed, never the local flags read again: a signal
            # handled on this rank after the all-reduce would make it alone save (or stop)
            # while the others train on, and the ranks hang in mismatched collectives. Such
            # a signal stays set and every rank acts on it at the next boundary.
            self._stop = self._stop or stop
            self._checkpoint = self._checkpoint or checkpoint
        return stop, checkpoint

    # --- notice ---------------------------------------------------------------------
    def notice(self) -> Optional[Notice]:
        """The notice spotvisor wrote (`$SPOTVISOR_NOTICE_FILE`), or None if none yet."""
        return read_notice(self._notice_file)

    def deadline(self) -> Optional[_dt.datetime]:
        """The notice's deadline (UTC), or None when there is no notice or no deadline."""
        notice = self.notice()
        return notice.deadline if notice is not None else None

    def seconds_left(self) -> Optional[float]:
        """Seconds until the notice's deadline, or None when unknown."""
        notice = self.notice()
        return notice.seconds_left() if notice is not None else None
