"""Checkpoint names: the job's `checkpoints.pattern` and the temp names that never count.

Mirrors spotvisor's C++ rules exactly: `{step}` appears once and matches one or more
decimal digits (leading zeros allowed); `*` elsewhere matches any run of characters (the
leftmost run of digits that fits is the step, taken whole); the pattern must match the
whole name; a temp name (`*.tmp`, `.tmp*`, `tmp-*`, `tmp.*`, `*.orbax-checkpoint-tmp*`, `*.partial`, `*.incomplete`,
`.spotvisor-*`) is never a checkpoint, whatever the pattern says.
"""

from __future__ import annotations

import re
from typing import Optional


def _glob(text: str) -> "re.Pattern[str]":
    """`text` with `*` as any run of characters, as a regex for fullmatch."""
    return re.compile(".*".join(re.escape(part) for part in text.split("*")), re.DOTALL)


STEP_FIELD = "{step}"


def is_temp_name(name: str) -> bool:
    """True for names writers use while a checkpoint is incomplete."""
    return (
        name.endswith(".tmp")
        or name.startswith(".tmp")
        or name.startswith("tmp-")
        or name.startswith("tmp.")
        or ".orbax-checkpoint-tmp" in name
        or name.endswith(".partial")
        or name.endswith(".incomplete")
        or name.startswith(".spotvisor-")
    )


class NamePattern:
    """A checkpoint name pattern such as `ckpt_step{step}`.

    `pad` zero-pads the step when formatting (`pad=8` gives `ckpt_step00000020`);
    matching accepts any number of digits either way.
    """

    def __init__(self, pattern: str, pad: int = 0) -> None:
        if pattern.count(STEP_FIELD) != 1:
            raise ValueError(
                f"checkpoint pattern {pattern!r} must contain {STEP_FIELD} exactly once"
            )
        if "/" in pattern or pattern in (".", ".."):
            raise ValueError(f"checkpoint pattern {pattern!r} must be a single name, without '/'")
        if pad < 0:
            raise ValueError(f"pad must be >= 0, got {pad}")
        self.pattern = pattern
        self.pad = pad
        self.prefix, self.suffix = pattern.split(STEP_FIELD)
        # `*` (any run of characters) in the prefix or suffix: matched as spotvisor does.
        self._star = "*" in pattern
        self._prefix_re = _glob(self.prefix)
        self._suffix_re = _glob(self.suffix)

    def format(self, step: int) -> str:
        """The checkpoint name for `step`."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if "*" in self.pattern:
            raise ValueError(
                f"checkpoint pattern {self.pattern!r} has '*': it can match names, not make one; "
                "give the Checkpointer a pattern without '*'"
            )
        name = f"{self.prefix}{str(int(step)).zfill(self.pad)}{self.suffix}"
        if is_temp_name(name):
            raise ValueError(
                f"checkpoint pattern {self.pattern!r} yields the temp name {name!r}, "
                "which spotvisor never treats as a checkpoint"
            )
        return name

    def match(self, name: str) -> Optional[int]:
        """The step when `name` matches the whole pattern, else None (always None for temp names)."""
        if is_temp_name(name):
            return None
        if self._star:
            return self._match_star(name)
        if not (name.startswith(self.prefix) and name.endswith(self.suffix)):
            return None
        end = len(name) - len(self.suffix)
        digits = name[len(self.prefix):end]
        if len(name) < len(self.prefix) + len(self.suffix) or not digits:
            return None
        if not all("0" <= c <= "9" for c in digits):
            return None
        return int(digits)

    def __repr__(self) -> str:
        return f"NamePattern({self.pattern!r}, pad={self.pad})"

    def _match_star(self, name: str) -> Optional[int]:
        # The leftmost start of digits whose prefix fits, and the longest run of them whose
        # rest fits the suffix (as spotvisor's NamePattern::Match).
        for at, c in enumerate(name):
            if not "0" <= c <= "9" or not self._prefix_re.fullmatch(name[:at]):
                continue
            end = at
            while end < len(name) and "0" <= name[end] <= "9":
                end += 1
            for stop in range(end, at, -1):
                if self._suffix_re.fullmatch(name[stop:]):
                    return int(name[at:stop])
        return None
