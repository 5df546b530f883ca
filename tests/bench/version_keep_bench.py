#!/usr/bin/python3
"""The cost of keeping a version of a fixed-name checkpoint (issue "scripts as they are").

A trainer stand-in saves a safetensors file of --size-mib MiB over the same path
(truncate, write: torch.save's way) --saves times; spotvisor (`checkpoints.pattern:
model.safetensors`) keeps a version of each good save. The trainer waits for each version
before it saves again, so that the copy runs alone. Reported from spotvisor's own
`event=checkpoint_version_kept` lines: the time the copy took, the bytes copied (0 for a
reflink), the method; and the disk the versions take (du) next to the file itself.

Run from the repository root after a build (Markdown on stdout):

    /usr/bin/python3 tests/bench/version_keep_bench.py [--binary build/spotvisor] \
        [--size-mib 1024] [--saves 3] [--dir DIR]

--dir picks the filesystem (a reflink needs btrfs, or XFS with reflink=1; ext4 copies).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KEPT = re.compile(r"event=checkpoint_version_kept .* bytes=(\d+) copied_bytes=(\d+) method=(\w+) ms=(\d+)")

TRAINER = r'''
import json, os, struct, sys, time
out, size, saves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
path = os.path.join(out, "model.safetensors")
header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
header += b" " * (-len(header) % 8)
chunk = os.urandom(1 << 20)
for save in range(1, saves + 1):
    with open(path, "wb") as f:  # over the same file, as torch.save does
        f.write(struct.pack("<Q", len(header)) + header)
        for _ in range(size >> 20):
            f.write(chunk)
        f.flush(); os.fsync(f.fileno())
    want = os.path.join(out, ".spotvisor-versions", "v%d" % save, "model.safetensors")
    while not os.path.exists(want):
        time.sleep(0.05)
'''


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "spotvisor"))
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--dir", default=None, help="where the checkpoint lives (default: a temp dir)")
    return p.parse_args()


def run(args, work: Path) -> str:
    (work / "ckpt").mkdir(parents=True, exist_ok=True)
    (work / "trainer.py").write_text(TRAINER)
    (work / "job.yaml").write_text(
        "job:\n  name: version-bench\n"
        f"  command: [\"/usr/bin/python3\", \"{work / 'trainer.py'}\", \"{work / 'ckpt'}\", "
        f"\"{args.size_mib << 20}\", \"{args.saves}\"]\n"
        "checkpoints:\n  dir: ./ckpt\n  pattern: \"model.safetensors\"\n  validate: structure\n"
        f"  keep: {args.saves}\n"
        "telemetry:\n  state_dir: ./state\n")
    done = subprocess.run([args.binary, "run", "--config", str(work / "job.yaml")], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        sys.exit(f"spotvisor run exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def disk_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sB1", str(path)], capture_output=True, text=True).stdout.split()[0])


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="spotvisor-version-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        log = run(args, work)
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(work)], capture_output=True, text=True).stdout.strip()
        rows = KEPT.findall(log)
        file_bytes = disk_bytes(work / "ckpt" / "model.safetensors")
        versions_bytes = disk_bytes(work / "ckpt" / ".spotvisor-versions")
    print(f"Filesystem: {fs}; file: {args.size_mib} MiB; {len(rows)} versions kept\n")
    print("| version | bytes | copied bytes | method | time (ms) | MiB/s |")
    print("|---|---|---|---|---|---|")
    for i, (size, copied, method, ms) in enumerate(rows, 1):
        rate = int(size) / (1 << 20) / max(int(ms), 1) * 1000
        print(f"| {i} | {size} | {copied} | {method} | {ms} | {rate:.0f} |")
    print(f"\nDisk: the file {file_bytes} bytes, its {len(rows)} versions {versions_bytes} bytes (du)")


if __name__ == "__main__":
    main()
