"""Capture and restore every global random number generator a trainer may draw from.

Python's `random`, NumPy's legacy global generator, torch's CPU generator and every CUDA
device's generator. NumPy and torch are captured only when the trainer has imported them
(the helper never imports them just to look), and restored when the saved state has them.
"""

from __future__ import annotations

import random
import sys
import warnings
from typing import Any, Dict


def _as_tuple(value: Any) -> Any:
    """random.setstate needs tuples; some serializers turn them into lists."""
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value


def plain(value: Any) -> Any:
    """NumPy arrays and scalars as Python lists and numbers, through tuples, lists and dicts.

    A NumPy array pickles as a reference to `numpy._core` (NumPy 2) or `numpy.core` (1.x):
    a state holding one cannot be read by torch.load's default since torch 2.6
    (weights_only=True refuses that global), nor by NumPy 1.x when NumPy 2 wrote it. NumPy's
    setters take the lists back as they are."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def capture_rng_state() -> Dict[str, Any]:
    """The state of every global RNG that is in use in this process."""
    state: Dict[str, Any] = {"python": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = plain(np.random.get_state())
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any], *, source: str = "checkpoint") -> None:
    """Put every generator back where `capture_rng_state` found it.

    `source` names where the state came from, for error messages. A CUDA state saved on a
    machine with a different number of GPUs (or none) cannot be restored exactly: that is
    a warning, not an error, since refusing to resume would lose more work.
    """
    if "python" in state:
        random.setstate(_as_tuple(state["python"]))
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:
            raise ImportError(
                f"{source} holds a NumPy RNG state but NumPy cannot be imported"
            ) from None
        np.random.set_state(state["numpy"])
    if "torch" in state or "cuda" in state:
        try:
            import torch
        except ImportError:
            raise ImportError(
                f"{source} holds a torch RNG state but torch cannot be imported"
            ) from None
        if "torch" in state:
            torch.set_rng_state(state["torch"].cpu())
        if "cuda" in state:
            saved = state["cuda"]
            if torch.cuda.is_available() and torch.cuda.device_count() == len(saved):
                torch.cuda.set_rng_state_all([s.cpu() for s in saved])
            else:
                have = torch.cuda.device_count() if torch.cuda.is_available() else 0
                warnings.warn(
                    f"{source} holds CUDA RNG states for {len(saved)} device(s) but this "
                    f"machine has {have}; CUDA random streams are not restored",
                    RuntimeWarning,
                    stacklevel=2,
                )
