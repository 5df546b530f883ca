"""Which PyTorch the e2e trainers run with, and how torchrun is spelled for it.

SPOTVISOR_E2E_TORCH_PYTHON is the interpreter that runs every trainer and torchrun (default:
Debian's /usr/bin/python3 with python3-torch 1.13). ctest's e2e.torch2.* entries point it at
the pinned PyPI environment (scripts/python-env.sh, torch 2.x). The test runner itself may be
another python: it only starts subprocesses.

When SPOTVISOR_E2E_TORCH_PYTHON is set, CI asked for that torch: a class whose python lacks
torch, gloo or NumPy fails instead of skipping, and so does one whose torch's major version
is not SPOTVISOR_E2E_TORCH_MAJOR (when set), so a misconfigured path cannot pass the torch 2
entries on torch 1.13.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import List, Optional

DEBIAN_PYTHON = "/usr/bin/python3"
PYTHON = os.environ.get("SPOTVISOR_E2E_TORCH_PYTHON") or DEBIAN_PYTHON
REQUIRED = bool(os.environ.get("SPOTVISOR_E2E_TORCH_PYTHON"))
REQUIRED_MAJOR = os.environ.get("SPOTVISOR_E2E_TORCH_MAJOR", "")


def _probe(code: str, timeout: float = 300) -> Optional[str]:
    """stdout of `PYTHON -c code`, or None when it fails."""
    try:
        proc = subprocess.run([PYTHON, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


# The installed distribution's metadata: no torch import (which takes seconds), so this
# costs a tenth of a second at import time.
TORCH_VERSION = _probe("import importlib.metadata as m; print(m.version('torch'))", 60) or ""


def _torchrun() -> List[str]:
    # Debian's python3-torch installs /usr/bin/torchrun; a venv's torchrun sits beside its
    # python (not resolved: the venv's python is a symlink to the base interpreter).
    program = "torchrun" if PYTHON == DEBIAN_PYTHON else str(Path(PYTHON).parent / "torchrun")
    if not TORCH_VERSION or TORCH_VERSION.split(".")[0] in ("0", "1"):
        # torch 1.13's --standalone always puts the agent's rendezvous store on port 29400: a
        # second launcher at once (another test, another checkout's run) joins the first one's
        # store and loses it when that one exits (RendezvousConnectionError, Broken pipe).
        # What --standalone means, on a port of the kernel's choosing (torch 2.x's own
        # --standalone says localhost:0).
        standalone = ["--rdzv_backend=c10d", f"--rdzv_endpoint={STANDALONE_HOST}:0"]
        # torch 1.13 under Python 3.11: the default --redirects 0 trips its enum handling.
        return [program, *standalone, "--nproc_per_node=2", "--redirects", "1", "--tee", "1", "--monitor_interval", "0.5"]
    # 2.x: exactly as users type it.
    return [program, "--standalone", "--nproc_per_node=2", "--monitor_interval", "0.5"]


# The agent's rendezvous store for a one-node torchrun (see _torchrun).
STANDALONE_HOST = "127.0.0.1"
# Plain torchrun as users type it: one node, two workers, the rendezvous store on a free port
# (torch 2.x's --standalone; on 1.13 spelled out), so any number may run at once.
TORCHRUN = _torchrun()


def _fail_or_skip(reason: str) -> None:
    import unittest
    if REQUIRED:
        raise AssertionError(f"SPOTVISOR_E2E_TORCH_PYTHON={PYTHON}: {reason}")
    raise unittest.SkipTest(reason)


def torch_missing_reason() -> Optional[str]:
    """None when PYTHON (which runs every trainer) has torch and NumPy of the wanted version."""
    if not os.access(PYTHON, os.X_OK):
        return f"{PYTHON} not found (the trainers run with Debian's python3 and python3-torch)"
    if _probe("import torch, numpy") is None:
        return (f"{PYTHON} cannot import torch and NumPy "
                f"(Debian: apt-get install python3-torch python3-numpy; PyPI: scripts/python-env.sh)")
    if REQUIRED_MAJOR and TORCH_VERSION.split(".")[0] != REQUIRED_MAJOR:
        return f"{PYTHON} has torch {TORCH_VERSION or '(none)'}, not torch {REQUIRED_MAJOR}.x"
    return None


def torchrun_missing_reason() -> Optional[str]:
    if _probe("import torch.distributed as d, torch.distributed.run; "
              "assert d.is_available() and d.is_gloo_available()") is None:
        return f"torchrun with the gloo backend is not available to {PYTHON}"
    if PYTHON != DEBIAN_PYTHON and not os.access(TORCHRUN[0], os.X_OK):
        return f"no {TORCHRUN[0]} beside {PYTHON}"
    return None


def require_torch() -> None:
    """Skips the calling class without torch, or fails it when CI asked for this torch."""
    reason = torch_missing_reason()
    if reason:
        _fail_or_skip(reason)


def require_torchrun() -> None:
    reason = torchrun_missing_reason()
    if reason:
        _fail_or_skip(reason)


def torch_fingerprint() -> bytes:
    """What identifies the trainers' torch for the reference digest cache: the interpreter
    (path and version) and the torch distribution's version, so digests of torch 1.13 and
    torch 2.x (or two Pythons) never share a cache entry."""
    who = _probe("import sys; print(sys.version)", 60) or ""
    return hashlib.sha256(f"{PYTHON}\0{who}\0{TORCH_VERSION}".encode()).digest()
