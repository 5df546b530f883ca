"""spotvisor's checkpoint manifest: `spotvisor.manifest.json` inside a checkpoint directory.

The format is shared with the C++ validator and with `spotvisor seal`; keep it exactly:

    {"format": "spotvisor-manifest", "version": 1, "algorithm": "crc32",
     "files": [{"path": "state.pt", "size": 123, "hash": "1a2b3c4d"}]}

An optional `"epoch": N` (after "algorithm") names the group start whose trainer wrote the
checkpoint: the helper writes it whenever spotvisor set `SPOTVISOR_EPOCH`, and spotvisor
never resumes from a checkpoint of an epoch the group had already left (fencing).

`path` is relative with `/` separators, never absolute, never containing `..`; the manifest
does not list itself; `hash` is zlib's CRC-32 as 8 lowercase hex digits (`spotvisor seal`
writes `"algorithm": "xxh3-128"` instead, which this stdlib-only module can check by size
only). Files are listed sorted by path.
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from .errors import ManifestError
from .fsio import read_json_object

MANIFEST_NAME = "spotvisor.manifest.json"
MANIFEST_FORMAT = "spotvisor-manifest"
MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
EPOCH_ENV = "SPOTVISOR_EPOCH"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ManifestEntry:
    path: str   # relative, '/'-separated
    size: int   # bytes
    hash: str   # algorithm-specific lowercase hex


@dataclass(frozen=True)
class Manifest:
    algorithm: str                 # "crc32" (this helper) or "xxh3-128" (spotvisor seal)
    files: Tuple[ManifestEntry, ...]
    epoch: Optional[int] = None    # the epoch that wrote it; None: not recorded


def epoch_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The epoch spotvisor gave this trainer ($SPOTVISOR_EPOCH); None when it is not set.

    Anything else than a non-negative decimal integer is refused (ManifestError naming the
    variable): a checkpoint that claims no epoch, or a wrong one, would defeat fencing.
    """
    env = os.environ if environ is None else environ
    raw = env.get(EPOCH_ENV)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit():
        raise ManifestError(
            f"{EPOCH_ENV}={raw!r} is not a non-negative integer (spotvisor sets it to the "
            f"group's epoch; unset it outside spotvisor)")
    return int(raw)


def crc32_file(path: os.PathLike) -> str:
    """zlib CRC-32 of a file as 8 lowercase hex digits."""
    crc = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
    return f"{crc & 0xFFFFFFFF:08x}"


def list_payload_files(directory: os.PathLike) -> List[str]:
    """Every regular file under `directory` (relative, '/'-separated, sorted), manifest excluded.

    Symlinks and special files are refused: a checkpoint must be plain files only.
    """
    root = Path(directory)
    found: List[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in list(dirnames) + filenames:
            full = Path(dirpath) / name
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                raise ManifestError(f"{full}: symlinks are not allowed inside a checkpoint")
            if name in dirnames:
                continue
            if not stat.S_ISREG(mode):
                raise ManifestError(f"{full}: not a regular file")
            rel = full.relative_to(root).as_posix()
            if rel != MANIFEST_NAME:
                found.append(rel)
    found.sort()
    return found


def build_manifest(directory: os.PathLike, epoch: Optional[int] = None) -> Dict[str, object]:
    """The manifest document for the files currently in `directory` (CRC-32 of each),
    with `epoch` when given (see epoch_from_env)."""
    root = Path(directory)
    files = []
    for rel in list_payload_files(root):
        full = root / rel
        files.append({"path": rel, "size": full.stat().st_size, "hash": crc32_file(full)})
    document: Dict[str, object] = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "algorithm": "crc32",
    }
    if epoch is not None:
        document["epoch"] = epoch
    document["files"] = files
    return document


def manifest_bytes(document: Dict[str, object]) -> bytes:
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")


def _check_relative_path(manifest: Path, rel: object) -> str:
    if not isinstance(rel, str) or not rel:
        raise ManifestError(f"{manifest}: a file entry has no path")
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        raise ManifestError(f"{manifest}: unsafe path {rel!r} (absolute, '..', or empty part)")
    if rel == MANIFEST_NAME:
        raise ManifestError(f"{manifest}: the manifest must not list itself")
    return rel


def read_manifest(directory: os.PathLike) -> Manifest:
    """Parse and structurally check the manifest of a checkpoint directory."""
    manifest = Path(directory) / MANIFEST_NAME
    try:
        doc = read_json_object(manifest, MAX_MANIFEST_BYTES, "manifest")
    except FileNotFoundError:
        raise ManifestError(f"{manifest}: missing (the checkpoint was never committed)") from None
    except ValueError as e:
        raise ManifestError(str(e)) from None
    if doc.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{manifest}: format is {doc.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    if doc.get("version") != MANIFEST_VERSION:
        raise ManifestError(f"{manifest}: unsupported version {doc.get('version')!r}")
    algorithm = doc.get("algorithm")
    if algorithm not in ("crc32", "xxh3-128"):
        raise ManifestError(f"{manifest}: unknown algorithm {algorithm!r}")
    epoch = doc.get("epoch")
    if "epoch" in doc and (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0):
        raise ManifestError(f"{manifest}: 'epoch' is {epoch!r}, not a non-negative integer")
    files = doc.get("files")
    if not isinstance(files, list):
        raise ManifestError(f"{manifest}: 'files' is not a list")
    hash_len = 8 if algorithm == "crc32" else 32
    entries: List[ManifestEntry] = []
    seen = set()
    for item in files:
        if not isinstance(item, dict):
            raise ManifestError(f"{manifest}: a file entry is not an object")
        rel = _check_relative_path(manifest, item.get("path"))
        if rel in seen:
            raise ManifestError(f"{manifest}: {rel!r} is listed twice")
        seen.add(rel)
        size, digest = item.get("size"), item.get("hash")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"{manifest}: {rel!r} has an invalid size {size!r}")
        if (not isinstance(digest, str) or len(digest) != hash_len
                or any(c not in "0123456789abcdef" for c in digest)):
            raise ManifestError(f"{manifest}: {rel!r} has an invalid {algorithm} hash {digest!r}")
        entries.append(ManifestEntry(rel, size, digest))
    return Manifest(algorithm, tuple(entries), epoch)


def verify_manifest(directory: os.PathLike, *, check_hashes: bool = True) -> Manifest:
    """Check every listed file's size and (for crc32) hash; check nothing extra is present.

    Raises ManifestError naming the checkpoint and the first offending file. Returns the
    manifest on success. An `xxh3-128` manifest (from `spotvisor seal`) is checked by size
    only, since the standard library has no XXH3.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ManifestError(f"{root}: not a checkpoint directory")
    manifest = read_manifest(root)
    entries = manifest.files
    listed = {e.path for e in entries}
    for rel in list_payload_files(root):
        if rel not in listed:
            raise ManifestError(f"{root}: file {rel!r} is not listed in {MANIFEST_NAME}")
    for entry in entries:
        full = root / entry.path
        try:
            size = full.stat().st_size
        except FileNotFoundError:
            raise ManifestError(f"{root}: listed file {entry.path!r} is missing") from None
        if size != entry.size:
            raise ManifestError(
                f"{root}: {entry.path!r} is {size} bytes, the manifest says {entry.size}"
            )
        if check_hashes and manifest.algorithm == "crc32":
            actual = crc32_file(full)
            if actual != entry.hash:
                raise ManifestError(
                    f"{root}: {entry.path!r} has CRC-32 {actual}, the manifest says {entry.hash}"
                )
    return manifest
