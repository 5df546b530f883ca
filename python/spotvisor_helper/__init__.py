"""spotvisor_helper: the trainer's side of spotvisor's contract, standard library only.

    from spotvisor_helper import Checkpointer, ResumableSampler, SignalFlags, Heartbeat

    signals = SignalFlags()                     # SIGTERM: save + exit; SIGUSR1: save + go on
    sampler = ResumableSampler(len(data), seed=0, batch_size=32)
    ckpt = Checkpointer(args.ckpt_dir, pattern="ckpt_step{step}", keep=3)
    ckpt.track(model=model, optimizer=opt, scheduler=sched, scaler=scaler, sampler=sampler)
    loaded = ckpt.resume(args.resume_from)      # or $SPOTVISOR_RESUME_FROM; None = fresh
    step = loaded.step if loaded else 0
    for batch in loader:                        # DataLoader(batch_sampler=sampler, ...)
        train_step(batch); step += 1
        stop, requested = signals.agree()       # read the flags once per step boundary
        if stop or requested or step % every == 0:
            ckpt.save(step); signals.clear_checkpoint()
        if stop:
            break

torch and NumPy are optional and never imported unless the trainer uses them. See
python/README.md for the full contract.
"""

from .atomic import atomic_checkpoint_dir, commit_dir
from .checkpointer import (
    CHECKPOINT_DIR_ENV,
    RESUME_ENV,
    Checkpointer,
    LoadedCheckpoint,
    resolve_resume_path,
)
from .digest import state_digest
from .errors import CheckpointError, ManifestError, NoticeError, SpotvisorHelperError
from .fsio import atomic_write, atomic_write_bytes, atomic_write_text, fsync_dir, fsync_file
from .heartbeat import Heartbeat
from .manifest import EPOCH_ENV, MANIFEST_NAME, build_manifest, epoch_from_env, read_manifest, verify_manifest
from .names import NamePattern, is_temp_name
from .rng import capture_rng_state, restore_rng_state
from .sampler import ResumableSampler
from .signals import NOTICE_FILE_ENV, Notice, SignalFlags, parse_signal, read_notice

__version__ = "0.1.0"

__all__ = [
    "CHECKPOINT_DIR_ENV", "EPOCH_ENV", "MANIFEST_NAME", "NOTICE_FILE_ENV", "RESUME_ENV",
    "CheckpointError", "Checkpointer", "Heartbeat", "LoadedCheckpoint", "ManifestError",
    "NamePattern", "Notice", "NoticeError", "ResumableSampler", "SignalFlags",
    "SpotvisorHelperError", "atomic_checkpoint_dir", "atomic_write", "atomic_write_bytes",
    "atomic_write_text", "build_manifest", "capture_rng_state", "commit_dir", "epoch_from_env", "fsync_dir",
    "fsync_file", "is_temp_name", "parse_signal", "read_manifest", "read_notice",
    "resolve_resume_path", "restore_rng_state", "state_digest", "verify_manifest",
]
