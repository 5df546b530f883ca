"""A heartbeat file for spotvisor's hang detection (`health.heartbeat_file`).

spotvisor reads only the file's modification time: a pulse older than `health.hang_timeout`
means the trainer hangs. Call `beat()` once per step; it is cheap (one utime, throttled).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional, Union


class Heartbeat:
    """Touch `path` on `beat()`, at most once every `min_interval` seconds.

    With `path=None` every call is a no-op, so a trainer can call `beat()` unconditionally.
    """

    def __init__(self, path: Union[str, os.PathLike, None], min_interval: float = 0.0) -> None:
        self.path: Optional[Path] = Path(path) if path else None
        self.min_interval = float(min_interval)
        self._last: Optional[float] = None

    def beat(self) -> bool:
        """Update the file's mtime (creating it and its directory if needed).

        Returns True when the file was touched, False when throttled or disabled.
        """
        if self.path is None:
            return False
        now = time.monotonic()
        if self._last is not None and now - self._last < self.min_interval:
            return False
        try:
            os.utime(self.path)
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab"):
                pass
            os.utime(self.path)
        self._last = now
        return True
