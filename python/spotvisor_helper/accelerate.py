"""Hugging Face `accelerate` under spotvisor: an atomic `save_state` named by the step.

    flags = SignalFlags()                                    # first: SIGTERM/SIGUSR1 handled
    step = load_state(accelerator, args.resume_from)         # after prepare(); 0 = fresh
    ...                                                      # at the end of every step:
    stop, requested = flags.agree()                          # the same answer on every rank
    if stop or requested or step % args.save_every == 0:
        save_state(accelerator, args.checkpoint_dir, step); flags.clear_checkpoint()
    if stop: break

with, in the job file, `resume_args: ["--resume-from", "{checkpoint}"]` and
`checkpoints: {dir: <checkpoint_dir>, pattern: "step-{step}"}`.

`accelerator.save_state(dir)` writes its files one after the other (model.safetensors,
optimizer.bin, scheduler.bin, then each rank its random_states_<rank>.pkl, then
custom_checkpoint_<i>.pkl) with no marker at the end, and each rank writes its own file
without waiting for the others: a directory killed between two files holds only whole
files and looks like a checkpoint. `save_state` here writes into `.tmp-step-N` (a temp name,
never a checkpoint to spotvisor), waits for every rank, and rank 0 seals it (fsync, a
spotvisor manifest with the CRC-32 of every file) and renames it to `step-N`: a crash leaves
a complete `step-N` or none. `ProjectConfiguration(automatic_checkpoint_naming=True)` is no
use here: its `checkpoint_<i>` counts saves, restarts from 0 in every process, and
`load_state()` takes the newest directory whatever its state.

The step comes back from the directory's name. Every rank must see the same directory (one
machine, or a shared file system), as for accelerate's own load_state. Importing this
module without accelerate installed fails with a message that says what to install.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Optional, Union

try:
    import accelerate as _accelerate  # noqa: F401  # the message below, not an AttributeError later
except ImportError as e:  # pragma: no cover - exercised by the test without accelerate
    raise ImportError(
        "spotvisor_helper.accelerate needs Hugging Face accelerate (pip install accelerate); "
        f"importing it failed: {e}"
    ) from e

from .atomic import commit_dir
from .checkpointer import resolve_resume_path
from .errors import CheckpointError
from .names import NamePattern

PathArg = Union[str, "os.PathLike[str]"]
PATTERN = "step-{step}"


def save_state(accelerator: Any, checkpoint_dir: PathArg, step: int, *, pattern: str = PATTERN) -> Path:
    """`accelerator.save_state()` into `<checkpoint_dir>/<pattern with step>`, atomically.

    Call on every rank at the same step (after `SignalFlags.agree()`). Returns the
    checkpoint's path once it is complete on disk, on every rank. Raises CheckpointError
    naming the checkpoint when sealing it fails.
    """
    name = NamePattern(pattern).format(step)
    final = Path(checkpoint_dir).absolute() / name
    tmp = final.parent / f".tmp-{name}"  # the same on every rank: they all write into it
    if accelerator.is_main_process:
        final.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)  # left by a save that was killed
        tmp.mkdir()
    accelerator.wait_for_everyone()
    accelerator.save_state(output_dir=str(tmp))
    accelerator.wait_for_everyone()  # every rank's random_states_<rank>.pkl is written
    if accelerator.is_main_process:
        commit_dir(tmp, final)
    accelerator.wait_for_everyone()
    return final


def load_state(accelerator: Any, checkpoint: Optional[PathArg] = None, *, pattern: str = PATTERN) -> int:
    """Load `checkpoint` (default `$SPOTVISOR_RESUME_FROM`) into the prepared objects and
    return its step; 0, loading nothing, when there is none (a fresh start)."""
    path = resolve_resume_path(checkpoint)
    if path is None:
        return 0
    step = NamePattern(pattern).match(path.name)
    if step is None:
        raise CheckpointError(f"checkpoint {path}: its name does not match {pattern!r}, so its step is unknown")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: no such directory")
    accelerator.load_state(str(path))
    return step
