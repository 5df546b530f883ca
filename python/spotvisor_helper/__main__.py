"""`python -m spotvisor_helper`: inspect checkpoints written by the helper.

    python -m spotvisor_helper verify PATH...                 exit 0 when every one verifies
    python -m spotvisor_helper latest --dir D [--pattern P]   newest verified checkpoint
    python -m spotvisor_helper seal PATH                      (re)write PATH's crc32 manifest
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from .errors import SpotvisorHelperError
from .fsio import atomic_write_bytes
from .manifest import MANIFEST_NAME, build_manifest, manifest_bytes, read_manifest, verify_manifest


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spotvisor_helper")
    sub = parser.add_subparsers(dest="command", required=True)
    p_verify = sub.add_parser("verify", help="verify checkpoint directories against their manifest")
    p_verify.add_argument("paths", nargs="+")
    p_latest = sub.add_parser("latest", help="print the newest checkpoint that verifies")
    p_latest.add_argument("--dir", required=True)
    p_latest.add_argument("--pattern", default="ckpt_step{step}")
    p_seal = sub.add_parser("seal", help="write a crc32 manifest for a finished directory")
    p_seal.add_argument("path")
    args = parser.parse_args(argv)

    if args.command == "verify":
        failed = 0
        for path in args.paths:
            try:
                manifest = verify_manifest(path)
                how = ("crc32" if manifest.algorithm == "crc32"
                       else f"{manifest.algorithm}: sizes only, use `spotvisor validate` for hashes")
                print(f"good  {path}  ({len(manifest.files)} files, {how})")
            except SpotvisorHelperError as e:
                failed += 1
                print(f"bad   {e}")
        return 1 if failed else 0
    if args.command == "latest":
        from .checkpointer import Checkpointer
        try:
            latest = Checkpointer(args.dir, pattern=args.pattern).latest()
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 64
        if latest is None:
            print(f"no verified checkpoint in {args.dir} matching {args.pattern!r}", file=sys.stderr)
            return 1
        print(latest)
        return 0
    if args.command == "seal":
        root = Path(args.path)
        if not root.is_dir():
            print(f"error: {root} is not a directory", file=sys.stderr)
            return 64
        # Sealing again keeps the epoch of the manifest it replaces: who wrote it is unchanged.
        try:
            epoch = read_manifest(root).epoch
        except SpotvisorHelperError:
            epoch = None
        atomic_write_bytes(root / MANIFEST_NAME, manifest_bytes(build_manifest(root, epoch)))
        print(f"sealed {root}")
        return 0
    return 64


if __name__ == "__main__":
    sys.exit(main())
