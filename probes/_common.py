"""Shared helpers of the probes: recorder lookup, array conversion, JSON that DuckDB can read.

Probes accept plain Python sequences, numpy arrays and torch tensors alike. torch is never imported
here: a tensor is recognised by its type's module and converted with its own methods, so probes stay
usable (and cheap to import) in processes without torch.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any, Iterable

import numpy as np

import rlobs

Recorderish = Any  # rlobs.Recorder | rlobs.NoopRecorder | anything with emit/span


def recorder_or_global(recorder: Recorderish | None) -> Recorderish:
    """The recorder passed in, else the process's current one (a no-op before ``rlobs.init``)."""
    return recorder if recorder is not None else rlobs.get_recorder()


def is_tensor(x: Any) -> bool:
    """True for a torch tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x: Any, dtype: Any = np.float64) -> np.ndarray:
    """A numpy array (of ``dtype``; None keeps the dtype) from a tensor, array, scalar or sequence."""
    if is_tensor(x):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if dtype is not None and t.is_floating_point() and str(t.dtype) in ("torch.bfloat16", "torch.float16"):
            t = t.float()
        x = t.numpy()
    arr = np.asarray(x)
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


def flatten_tokens(values: Any, mask: Any = None) -> np.ndarray:
    """Flatten per-token values to a 1-D float64 array.

    ``values`` is a 1-D or 2-D array/tensor (2-D: ``(B, T)``, padded) or a list of 1-D sequences
    (ragged, one per sample). ``mask`` (same shape, truthy = real token) selects tokens of a padded
    array; it is ignored for ragged lists.
    """
    if isinstance(values, (list, tuple)) and values and not np.isscalar(values[0]):
        parts = [to_numpy(v).reshape(-1) for v in values]
        return np.concatenate(parts) if parts else np.zeros(0)
    arr = to_numpy(values)
    if mask is not None:
        m = to_numpy(mask, dtype=None).astype(bool)
        return arr[m].reshape(-1)
    return arr.reshape(-1)


def split_tokens(values: Any, mask: Any = None) -> list[np.ndarray]:
    """Per-sample 1-D float64 arrays from a ragged list or a padded ``(B, T)`` array (+ mask)."""
    if isinstance(values, (list, tuple)) and values and not np.isscalar(values[0]):
        return [to_numpy(v).reshape(-1) for v in values]
    arr = to_numpy(values)
    if arr.ndim == 1:
        return [arr]
    if mask is None:
        return [row for row in arr]
    m = to_numpy(mask, dtype=None).astype(bool)
    return [row[mrow] for row, mrow in zip(arr, m)]


def json_safe(obj: Any) -> Any:
    """Replace non-finite floats by None (strict JSON that DuckDB's json functions accept)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.floating,)):
        return json_safe(float(obj))
    if isinstance(obj, (np.integer,)):
        return int(obj)
    return obj


def dumps(obj: Any) -> str:
    """Compact, strict JSON (non-finite floats become null)."""
    return json.dumps(json_safe(obj), separators=(",", ":"), sort_keys=False, default=str)


def as_list(x: Iterable[Any] | None) -> list[Any]:
    if x is None:
        return []
    if is_tensor(x) or isinstance(x, np.ndarray):
        return to_numpy(x, dtype=None).reshape(-1).tolist()
    return list(x)


_log = logging.getLogger("probes")
_last_warned: dict[Any, float] = {}


def warn_limited(key: Any, msg: str, *args: Any, every_s: float = 60.0) -> None:
    """Log a warning at most once per ``every_s`` per key: the hot path reports bad input, never raises."""
    now = time.monotonic()
    last = _last_warned.get(key)
    if last is not None and now - last < every_s:
        return
    _last_warned[key] = now
    _log.warning(msg, *args)
