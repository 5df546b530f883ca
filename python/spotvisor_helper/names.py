"""Checkpoint names: the job's `checkpoints.pattern` and the temp names that never count.

Mirrors spotvisor's C++ rules exactly: `{step}` appears once and matches one or more
decimal digits (leading zeros allowed); the pattern must match the whole name; a temp name
(`*.tmp`, `.tmp*`, `tmp-*`, `*.orbax-checkpoint-tmp*`, `*.partial`, `*.incomplete`,
`.spotvisor-*`) is never a checkpoint, whatever the pattern says.
"""

from __future__ import annotations

from typing import Optional

STEP_FIELD = "{step}"


def is_temp_name(name: str) -> bool:
    """True for names writers use while a checkpoint is incomplete."""
    return (
        name.endswith(".tmp")
        or name.startswith(".tmp")
        or name.startswith("tmp-")
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

    def format(self, step: int) -> str:
        """The checkpoint name for `step`."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
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
