"""Durable file-system primitives: fsync of files and directories, atomic file writes.

A failed fsync means the data may not be on disk: it raises, and callers must treat the
write as failed (never retry the fsync and trust the result).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Union

PathLike = Union[str, "os.PathLike[str]"]


def fsync_file(path: PathLike) -> None:
    """Flush one regular file's data and metadata to stable storage."""
    _fsync_path(path, os.O_RDONLY)


def fsync_dir(path: PathLike) -> None:
    """Flush a directory's entries (creations, renames, deletions) to stable storage."""
    _fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def _fsync_path(path: PathLike, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    except OSError as e:
        # os.fsync's own error does not name the file; the caller's message must.
        raise OSError(e.errno, f"fsync failed: {e.strerror}", os.fspath(path)) from e
    finally:
        os.close(fd)


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write `data` to `path` so that readers see the old file or the whole new one.

    Writes `.tmp-<name>-<pid>` next to `path`, fsyncs it, renames it over `path` and fsyncs
    the parent directory. Returns the final path.
    """
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: PathLike, text: str) -> Path:
    """`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write(path: PathLike, writer: Callable[[object], object]) -> Path:
    """Call `writer(binary_file)` on a temp file, then durably rename it to `path`."""
    final = Path(path)
    parent = final.parent if str(final.parent) else Path(".")
    tmp = parent / f".tmp-{final.name}-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            writer(f)
            f.flush()
        fsync_file(tmp)
        os.replace(tmp, final)
        fsync_dir(parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return final


def read_json_object(path: PathLike, limit: int, what: str) -> dict:
    """The JSON object in `path`, reading at most `limit` bytes of it. FileNotFoundError
    passes through; anything else wrong raises ValueError naming the file and `what` it is
    ("manifest", "notice file")."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} ({e.strerror})") from None
    if len(raw) > limit:
        raise ValueError(f"{path}: {what} larger than {limit} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {what} is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: {what} is not a JSON object")
    return doc
