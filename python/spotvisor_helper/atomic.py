"""Crash-safe commit of one checkpoint directory.

Protocol (the contract spotvisor relies on): the payload is written into a temp directory
`<checkpoints.dir>/.tmp-<name>-<pid>` on the same file system; every file is fsynced; the
manifest (`spotvisor.manifest.json`, CRC-32 of every file) is written last and fsynced; the
temp directory is fsynced; it is renamed to its final name; the parent is fsynced. A crash
at any moment leaves either no directory with the final name or a complete, verifiable
one; temp names are never treated as checkpoints. Any failed fsync fails the save.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator, Optional

from .errors import CheckpointError, ManifestError
from .fsio import fsync_dir, fsync_file
from .manifest import MANIFEST_NAME, build_manifest, epoch_from_env, manifest_bytes

TEMP_PREFIX = ".tmp-"


def temp_name_for(final_name: str, tag: str = "") -> str:
    """The temp name used while `final_name` is written (`.tmp-<name>-<pid>`)."""
    middle = f"{tag}-" if tag else ""
    return f"{TEMP_PREFIX}{middle}{final_name}-{os.getpid()}"


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _fsync_tree(root: Path) -> None:
    """fsync every file, then every directory bottom-up (the root last)."""
    directories = []
    for dirpath, _dirnames, filenames in os.walk(root):
        directories.append(Path(dirpath))
        for name in filenames:
            fsync_file(Path(dirpath) / name)
    for directory in reversed(directories):
        fsync_dir(directory)


def ensure_dir(path: Path) -> None:
    """Create `path` (and parents) durably when it does not exist yet."""
    if path.is_dir():
        return
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    path.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_dir(created.parent)


def commit_dir(tmp: Path, final: Path, marker: Optional[str] = None) -> Path:
    """Seal the filled temp directory `tmp` and rename it to `final` durably.

    If `final` already exists it is replaced: moved aside to a temp name first, deleted
    after the new one is in place. Raises CheckpointError naming `final` on any failure;
    `tmp` is left for the caller to remove. The manifest records $SPOTVISOR_EPOCH when set
    (a value that is not a non-negative integer is refused: ManifestError naming it).
    """
    parent = final.parent
    epoch = _epoch_for(final)
    try:
        _fsync_tree(tmp)
        if marker:
            marker_path = tmp / marker
            marker_path.write_bytes(b"committed\n")
            fsync_file(marker_path)
        manifest_path = tmp / MANIFEST_NAME
        with open(manifest_path, "wb") as f:
            f.write(manifest_bytes(build_manifest(tmp, epoch)))
        fsync_file(manifest_path)
        fsync_dir(tmp)
        replaced = None
        if os.path.lexists(final):
            replaced = parent / temp_name_for(final.name, "replaced")
            _remove_tree(replaced)
            os.rename(final, replaced)
        try:
            os.rename(tmp, final)
        except OSError:
            if replaced is not None:
                os.rename(replaced, final)
            raise
        fsync_dir(parent)
    except OSError as e:
        raise CheckpointError(f"saving checkpoint {final} failed: {e}") from e
    if replaced is not None:
        _remove_tree(replaced)
    return final


def _epoch_for(final: Path) -> Optional[int]:
    try:
        return epoch_from_env()
    except ManifestError as e:
        raise ManifestError(f"saving checkpoint {final} refused: {e}") from None


@contextlib.contextmanager
def atomic_checkpoint_dir(final: os.PathLike, marker: Optional[str] = None) -> Iterator[Path]:
    """Yield a temp directory to fill; on a clean exit commit it to `final` (see module doc).

    On an exception the temp directory is removed and the exception propagates; `final` is
    untouched. `marker` (optional) names a commit-marker file written just before the
    manifest (and listed in it) for jobs that configure `checkpoints.marker`.

        with atomic_checkpoint_dir("/ckpt/ckpt_step100") as tmp:
            torch.save(state, tmp / "state.pt")
    """
    final = Path(final).absolute()
    parent = final.parent
    _epoch_for(final)  # refused before the trainer writes anything, not after
    try:
        ensure_dir(parent)
    except OSError as e:
        raise CheckpointError(
            f"saving checkpoint {final} failed: cannot create the directory {parent}: {e}"
        ) from e
    tmp = parent / temp_name_for(final.name)
    try:
        _remove_tree(tmp)
        tmp.mkdir()
    except OSError as e:
        raise CheckpointError(
            f"saving checkpoint {final} failed: cannot create the temp directory {tmp}: {e}"
        ) from e
    try:
        yield tmp
        commit_dir(tmp, final, marker)
    finally:
        # After a successful commit tmp no longer exists; after a failure it is junk.
        try:
            _remove_tree(tmp)
        except OSError:
            pass
