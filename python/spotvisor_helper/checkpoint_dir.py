"""The checkpoint directory on disk, as `Checkpointer` keeps it: which entries are committed
checkpoints (names of the job's pattern), the temp names our saves leave when their
process dies mid-way (cleaned up before the next save), and retention (the newest `keep`
stay; an old one is renamed to a temp name before it is deleted, so a crash mid-delete
never leaves a half-deleted directory under a checkpoint's name).

Temp names (atomic.py): `.tmp-<name>-<pid>` (a save under way), `.tmp-deleting-<name>-<pid>`
(retention), `.tmp-replaced-<name>-<pid>` (a committed checkpoint moved aside while the
same step was saved again).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import List, Tuple

from .atomic import TEMP_PREFIX, temp_name_for
from .fsio import fsync_dir
from .names import NamePattern


class CheckpointDir:
    """`directory` holding checkpoints named by `pattern`."""

    def __init__(self, directory: Path, pattern: NamePattern) -> None:
        self.directory = directory
        self.pattern = pattern

    def checkpoints(self) -> List[Tuple[int, Path]]:
        """Committed checkpoint directories matching the pattern, oldest step first."""
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            step = self.pattern.match(entry.name)
            if step is not None and entry.is_dir() and not entry.is_symlink():
                found.append((step, entry))
        found.sort(key=lambda item: (item[0], item[1].name))
        return found

    def remove_stale_temps(self) -> None:
        """Clean up after our own saves whose process died mid-way.

        `.tmp-<name>-<pid>` (unfinished) and `.tmp-deleting-<name>-<pid>` (retention) are
        deleted. `.tmp-replaced-<name>-<pid>` is a committed checkpoint moved aside while
        the same step was re-saved: if `<name>` is missing it is put back, else deleted.
        """
        if not self.directory.is_dir():
            return
        for entry in sorted(self.directory.iterdir()):
            name = entry.name
            if not name.startswith(TEMP_PREFIX):
                continue
            body, _, pid_text = name[len(TEMP_PREFIX):].rpartition("-")
            tag = ""
            for candidate in ("replaced-", "deleting-"):
                if body.startswith(candidate):
                    tag, body = candidate, body[len(candidate):]
            if not pid_text.isdigit() or self.pattern.match(body) is None:
                continue
            pid = int(pid_text)
            if pid == os.getpid() or _pid_alive(pid):
                continue
            final = self.directory / body
            if tag == "replaced-" and not os.path.lexists(final):
                try:
                    os.rename(entry, final)
                    fsync_dir(self.directory)
                    continue
                except OSError:
                    pass
            shutil.rmtree(entry, ignore_errors=True)

    def apply_retention(self, keep: int, just_saved: Path) -> None:
        """Keeps the newest `keep` checkpoints (0: all), never `just_saved`. Called from
        Checkpointer.save: a failure is a warning pointing at the trainer's save call."""
        if keep <= 0:
            return
        existing = self.checkpoints()
        newest_first = sorted(existing, key=lambda item: item[0], reverse=True)
        kept = {p for _, p in newest_first[:keep]} | {just_saved}
        removed = False
        for _, old in existing:
            if old in kept:
                continue
            # Rename to a temp name first: a crash mid-delete must not leave a
            # half-deleted directory that still carries a checkpoint name.
            doomed = self.directory / temp_name_for(old.name, "deleting")
            try:
                os.rename(old, doomed)
                removed = True
                shutil.rmtree(doomed)
            except OSError as e:
                warnings.warn(f"retention: could not delete old checkpoint {old}: {e}",
                              RuntimeWarning, stacklevel=3)
        if removed:
            try:
                fsync_dir(self.directory)
            except OSError as e:
                warnings.warn(f"retention: {e}", RuntimeWarning, stacklevel=3)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
