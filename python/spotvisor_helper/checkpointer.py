"""Save and resume the full training state, one crash-safe directory per checkpoint.

    ckpt = Checkpointer(args.ckpt_dir, pattern="ckpt_step{step}", keep=3)
    ckpt.track(model=model, optimizer=opt, scheduler=sched, scaler=scaler, sampler=sampler)
    loaded = ckpt.resume(args.resume_from)      # None on a fresh start
    step = loaded.step if loaded else 0
    ...
    ckpt.save(step)                              # at a step boundary

A checkpoint is `<dir>/<pattern with the step>/` holding `state.pt` (torch.save, when the
trainer has imported torch) or `state.pkl` (pickle, otherwise), plus the manifest written
by `atomic_checkpoint_dir`. The state holds every tracked object's state, the step, the
trainer's `extra` values and the RNG state of every rank (Python `random`, NumPy, torch
CPU, CUDA). Under torch.distributed, `save` is collective (call it on every rank at the
same step); rank 0 writes; every rank gets the same result or the same error.

The resume path comes from the argument (spotvisor's `resume_args`) or else from
`$SPOTVISOR_RESUME_FROM`; neither means a fresh start. Loading first verifies the
manifest (sizes and CRC-32 of every file) and names the checkpoint and file on failure.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .atomic import atomic_checkpoint_dir
from .checkpoint_dir import CheckpointDir
from .errors import CheckpointError, ManifestError
from .manifest import verify_manifest
from .names import NamePattern
from .rng import capture_rng_state, plain, restore_rng_state

RESUME_ENV = "SPOTVISOR_RESUME_FROM"
CHECKPOINT_DIR_ENV = "SPOTVISOR_CHECKPOINT_DIR"
STATE_TORCH = "state.pt"
STATE_PICKLE = "state.pkl"
STATE_FORMAT = "spotvisor-helper-state"
STATE_VERSION = 1

PathArg = Union[str, "os.PathLike[str]"]


def resolve_resume_path(arg: Optional[PathArg] = None) -> Optional[Path]:
    """The checkpoint to resume from: `arg` if given, else `$SPOTVISOR_RESUME_FROM`, else None."""
    if arg:
        return Path(arg)
    env = os.environ.get(RESUME_ENV)
    return Path(env) if env else None


def _dist() -> Any:
    """torch.distributed when the trainer has initialized it, else None."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def _get_object_state(obj: Any) -> Any:
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        return obj.state_dict()
    if isinstance(obj, random.Random):
        return obj.getstate()
    if hasattr(obj, "get_state") and hasattr(obj, "set_state"):    # torch.Generator, RandomState
        return plain(obj.get_state())
    if hasattr(obj, "bit_generator"):                               # numpy.random.Generator
        return plain(obj.bit_generator.state)
    raise TypeError(f"cannot checkpoint {type(obj).__name__}")


def _set_object_state(obj: Any, state: Any) -> None:
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        obj.load_state_dict(state)
    elif isinstance(obj, random.Random):
        obj.setstate(state)
    elif hasattr(obj, "get_state") and hasattr(obj, "set_state"):
        obj.set_state(state)
    elif hasattr(obj, "bit_generator"):
        obj.bit_generator.state = state
    else:
        raise TypeError(f"cannot restore {type(obj).__name__}")


def _supports_state(obj: Any) -> bool:
    return ((hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))
            or isinstance(obj, random.Random)
            or (hasattr(obj, "get_state") and hasattr(obj, "set_state"))
            or hasattr(obj, "bit_generator"))


@dataclass
class LoadedCheckpoint:
    """What `resume` / `load` found."""
    path: Path                        # the checkpoint directory
    step: int                         # the step it was saved at
    extra: Dict[str, Any]             # the trainer's own values passed to save(extra=...)
    restored: Tuple[str, ...] = ()    # tracked objects whose state was loaded into them
    rng_restored: bool = False        # whether the global RNGs were put back
    state: Dict[str, Any] = field(default_factory=dict, repr=False)   # the raw payload


class Checkpointer:
    """Crash-safe checkpoints of everything a trainer needs to resume exactly.

    directory: `checkpoints.dir` of the job (default `$SPOTVISOR_CHECKPOINT_DIR`).
    pattern:   `checkpoints.pattern`, `{step}` once; `pad` zero-pads the step.
    keep:      after each save keep this many newest checkpoints (0 = all); older ones
               are deleted only after the new one is committed, never the one just saved.
    format:    "auto" (torch.save if the trainer imported torch, else pickle), "torch",
               or "pickle".
    save_rng:  store the global RNG states (all ranks) with every checkpoint.
    verify:    check the manifest (sizes, CRC-32) before loading.
    marker:    optional commit-marker file name (for jobs setting `checkpoints.marker`).
    """

    def __init__(
        self,
        directory: Optional[PathArg] = None,
        pattern: str = "ckpt_step{step}",
        keep: int = 0,
        *,
        pad: int = 0,
        format: str = "auto",
        save_rng: bool = True,
        verify: bool = True,
        marker: Optional[str] = None,
    ) -> None:
        if directory is None:
            directory = os.environ.get(CHECKPOINT_DIR_ENV) or None
            if directory is None:
                raise ValueError(f"no checkpoint directory given and ${CHECKPOINT_DIR_ENV} is not set")
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        if format not in ("auto", "torch", "pickle"):
            raise ValueError(f"format must be 'auto', 'torch' or 'pickle', got {format!r}")
        self.directory = Path(directory).absolute()
        self.pattern = NamePattern(pattern, pad=pad)
        self.keep = keep
        self.format = format
        self.save_rng = save_rng
        self.verify = verify
        self.marker = marker
        self.last_saved_step: Optional[int] = None
        self.resumed_from: Optional[LoadedCheckpoint] = None
        self._tracked: Dict[str, Any] = {}
        self._dir = CheckpointDir(self.directory, self.pattern)

    # --- what is saved --------------------------------------------------------------
    def track(self, **objects: Any) -> "Checkpointer":
        """Register objects by name: anything with state_dict()/load_state_dict() (model,
        optimizer, scheduler, GradScaler, ResumableSampler), a random.Random, a
        torch.Generator, or a NumPy Generator/RandomState. Returns self."""
        for name, obj in objects.items():
            if not _supports_state(obj):
                raise TypeError(
                    f"cannot track {name!r}: {type(obj).__name__} has no state_dict()/"
                    "load_state_dict() (or RNG get/set state)"
                )
            self._tracked[name] = obj
        return self

    @property
    def tracked(self) -> Tuple[str, ...]:
        return tuple(self._tracked)

    def path_for(self, step: int) -> Path:
        """The final path of the checkpoint for `step` (what spotvisor calls `{checkpoint}`)."""
        return self.directory / self.pattern.format(step)

    # --- saving ---------------------------------------------------------------------
    def _resolved_format(self) -> str:
        if self.format != "auto":
            return self.format
        return "torch" if sys.modules.get("torch") is not None else "pickle"

    def save(self, step: int, *, extra: Optional[Mapping[str, Any]] = None) -> Path:
        """Durably write the checkpoint for `step`; returns its path.

        Raises CheckpointError (naming the checkpoint) when anything fails, including an
        fsync: a failed save never leaves a directory with the final name behind.
        """
        dist = _dist()
        rank = dist.get_rank() if dist else 0
        world = dist.get_world_size() if dist else 1
        rng_states: Optional[List[Any]] = None
        if self.save_rng:
            mine = capture_rng_state()
            if dist:
                rng_states = [None] * world
                dist.all_gather_object(rng_states, mine)
            else:
                rng_states = [mine]
        path = self.path_for(step)
        error: Optional[BaseException] = None
        if rank == 0:
            payload = {
                "format": STATE_FORMAT,
                "version": STATE_VERSION,
                "step": int(step),
                "world_size": world,
                "objects": {name: _get_object_state(obj) for name, obj in self._tracked.items()},
                "rng": rng_states,
                "extra": dict(extra or {}),
            }
            try:
                self._write(path, payload)
            except CheckpointError as e:
                error = e
            except Exception as e:   # a serializer's own error: name the checkpoint
                error = CheckpointError(f"saving checkpoint {path} failed: {e}")
                error.__cause__ = e
        if dist:
            outcome = [None if error is None else str(error)]
            dist.broadcast_object_list(outcome, src=0)
            if rank != 0 and outcome[0] is not None:
                error = CheckpointError(outcome[0])
        if error is not None:
            raise error
        self.last_saved_step = int(step)
        if rank == 0:
            self._dir.apply_retention(self.keep, path)
        return path

    def _write(self, path: Path, payload: Dict[str, Any]) -> None:
        self._dir.remove_stale_temps()
        fmt = self._resolved_format()
        with atomic_checkpoint_dir(path, marker=self.marker) as tmp:
            if fmt == "torch":
                import torch
                torch.save(payload, tmp / STATE_TORCH)
            else:
                with open(tmp / STATE_PICKLE, "wb") as f:
                    pickle.dump(payload, f, protocol=4)

    # --- listing --------------------------------------------------------------------
    def checkpoints(self) -> List[Tuple[int, Path]]:
        """Committed checkpoint directories matching the pattern, oldest step first."""
        return self._dir.checkpoints()

    def latest(self, *, verify: bool = True) -> Optional[Path]:
        """The newest checkpoint whose manifest verifies (or simply the newest one)."""
        for _, path in reversed(self.checkpoints()):
            if not verify:
                return path
            try:
                verify_manifest(path)
                return path
            except ManifestError:
                continue
        return None

    # --- loading --------------------------------------------------------------------
    def load(self, path: PathArg) -> LoadedCheckpoint:
        """Verify and read a checkpoint without touching any tracked object."""
        root = Path(path)
        if not root.exists():
            raise CheckpointError(f"checkpoint {root} does not exist")
        if not root.is_dir():
            raise CheckpointError(f"checkpoint {root} is not a directory")
        if self.verify:
            verify_manifest(root)
        torch_file, pickle_file = root / STATE_TORCH, root / STATE_PICKLE
        if torch_file.exists() and pickle_file.exists():
            raise CheckpointError(f"checkpoint {root} holds both {STATE_TORCH} and {STATE_PICKLE}")
        try:
            if torch_file.exists():
                payload = _torch_load(torch_file)
            elif pickle_file.exists():
                with open(pickle_file, "rb") as f:
                    payload = pickle.load(f)
            else:
                raise CheckpointError(
                    f"checkpoint {root} has neither {STATE_TORCH} nor {STATE_PICKLE}"
                )
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"cannot read checkpoint {root}: {e}") from e
        if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
            raise CheckpointError(f"checkpoint {root} was not written by spotvisor_helper")
        if payload.get("version") != STATE_VERSION:
            raise CheckpointError(
                f"checkpoint {root} has state version {payload.get('version')!r}, "
                f"this helper reads {STATE_VERSION}"
            )
        step = int(payload["step"])
        named_step = self.pattern.match(root.name)
        if named_step is not None and named_step != step:
            raise CheckpointError(
                f"checkpoint {root} is named for step {named_step} but holds step {step}"
            )
        return LoadedCheckpoint(path=root, step=step, extra=dict(payload.get("extra") or {}),
                                state=payload)

    def resume(
        self,
        path: Optional[PathArg] = None,
        *,
        restore_rng: bool = True,
        exclude: Iterable[str] = (),
        strict: bool = True,
    ) -> Optional[LoadedCheckpoint]:
        """Load the checkpoint to resume from into the tracked objects; None = fresh start.

        `path` is the resume argument (None: `$SPOTVISOR_RESUME_FROM`). `exclude` names
        tracked objects to leave alone; `restore_rng=False` leaves the global RNGs alone.
        With `strict`, a tracked object missing from the checkpoint is an error.
        Under torch.distributed every rank calls this and gets its own RNG state back.
        """
        resolved = resolve_resume_path(path)
        if resolved is None:
            return None
        loaded = self.load(resolved)
        objects = loaded.state.get("objects") or {}
        skip = set(exclude)
        unknown = skip - set(self._tracked)
        if unknown:
            raise ValueError(f"exclude names objects that are not tracked: {sorted(unknown)}")
        restored = []
        for name, obj in self._tracked.items():
            if name in skip:
                continue
            if name not in objects:
                if strict:
                    raise CheckpointError(
                        f"checkpoint {loaded.path} has no state for {name!r} "
                        f"(it holds: {', '.join(sorted(objects)) or 'nothing'})"
                    )
                continue
            try:
                _set_object_state(obj, objects[name])
            except Exception as e:
                raise CheckpointError(
                    f"checkpoint {loaded.path}: cannot restore {name!r}: {e}"
                ) from e
            restored.append(name)
        rng_restored = False
        rng_states = loaded.state.get("rng")
        if restore_rng and rng_states:
            restore_rng_state(self._rng_for_this_rank(loaded.path, rng_states),
                              source=f"checkpoint {loaded.path}")
            rng_restored = True
        loaded.restored = tuple(restored)
        loaded.rng_restored = rng_restored
        self.last_saved_step = loaded.step
        self.resumed_from = loaded
        return loaded

    @staticmethod
    def _rng_for_this_rank(path: Path, rng_states: List[Any]) -> Any:
        dist = _dist()
        rank = dist.get_rank() if dist else 0
        world = dist.get_world_size() if dist else 1
        if len(rng_states) != world:
            warnings.warn(
                f"checkpoint {path} was saved by {len(rng_states)} rank(s), this run has "
                f"{world}; rank {rank} restores the RNG state of rank "
                f"{rank % len(rng_states)}, so the random streams will not match exactly",
                RuntimeWarning,
                stacklevel=3,
            )
        return rng_states[rank % len(rng_states)]


def _torch_load(path: Path) -> Any:
    import inspect

    import torch
    # The state holds Python and NumPy RNG states, so it is not "weights only"; newer torch
    # defaults weights_only to True, older torch has no such parameter.
    if "weights_only" in inspect.signature(torch.load).parameters:
        return torch.load(path, map_location="cpu", weights_only=False)
    return torch.load(path, map_location="cpu")
