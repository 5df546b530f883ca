"""A stable SHA-256 of model weights, to compare runs bit for bit (`{result_file}`)."""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Mapping


def _update(h: "hashlib._Hash", name: str, value: Any) -> None:
    h.update(name.encode("utf-8") + b"\0")
    if hasattr(value, "detach") and hasattr(value, "cpu"):          # torch.Tensor
        t = value.detach().cpu().contiguous()
        h.update(f"{t.dtype}|{tuple(t.shape)}\0".encode())
        try:
            raw = t.numpy().tobytes()
        except TypeError:   # bfloat16 and friends have no NumPy dtype; widening is exact
            raw = t.float().numpy().tobytes()
        h.update(raw)
    elif hasattr(value, "tobytes") and hasattr(value, "dtype"):     # numpy.ndarray
        h.update(f"{value.dtype}|{value.shape}\0".encode())
        h.update(value.tobytes())
    elif isinstance(value, float):
        h.update(b"f64\0" + struct.pack("<d", value))
    elif isinstance(value, int) and not isinstance(value, bool):
        h.update(b"int\0" + str(value).encode())
    elif isinstance(value, (list, tuple)):
        h.update(f"seq|{len(value)}\0".encode())
        for i, item in enumerate(value):
            _update(h, str(i), item)
    else:
        raise TypeError(f"cannot digest {name!r} of type {type(value).__name__}")


def state_digest(weights: Mapping[str, Any]) -> str:
    """SHA-256 hex of a name -> tensor/array/float(s) mapping, in sorted name order.

    Names, dtypes, shapes and raw bytes all count, so two runs agree only when every
    weight is bit-identical. Works without torch or NumPy for plain floats and lists.
    """
    h = hashlib.sha256()
    for name in sorted(weights):
        _update(h, name, weights[name])
    return h.hexdigest()
