"""Tensor fingerprints for weight-sync verification: xxh3-64 over dtype, shape and bytes.

Works for torch tensors (any dtype, bfloat16 included, on any device) and numpy arrays; the same data
gives the same fingerprint in both. ``fingerprints(state)`` maps a state dict to per-tensor digests,
``combined_fingerprint`` folds them into one, ``compare_fingerprints`` lists the tensors that differ or
are missing. Full hashing costs about 60-140 us per MiB on these CPUs (plus a device-to-host copy for
GPU tensors); ``max_bytes`` samples evenly spaced 4 KiB blocks instead (sliced on the device first).
xxhash is used when installed, else blake2b (8-byte digest) from the standard library.

``kind="device"`` fingerprints a torch tensor where it lives: a 64-bit checksum of its bytes computed with torch
on its device (``device_checksum``), then xxh3 of dtype, shape and that checksum. On a GPU this is what a sync can
afford: full ``bytes`` fingerprints copy every byte to the host and hash it on one core, 1.0-3.0 GB/s on an H200
machine (15.5 s on the trainer and 15.9 s in the engine for an 8B bf16 model, against 0.03 s for the whole
``cuda_ipc`` staging, transfer and load); ``device`` took 0.09 s and 0.07 s there (180 GB/s;
``bench/gpu_sync_cost.py``, ``bench/results/gpu_sync_cost.json``). The two kinds give different strings for the
same tensor: both sides of a comparison must use the same kind (the GPU weight-sync paths use ``device`` on both
sides, the CPU ones ``bytes``). On the CPU ``device`` is slow (torch integer arithmetic, ~0.5 GB/s against xxh3's
~10): it is for device tensors.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from probes._common import is_tensor

try:
    import xxhash

    def _hasher() -> Any:
        return xxhash.xxh3_64()
except ImportError:  # pragma: no cover - xxhash is a declared dependency; keep working without it
    import hashlib

    def _hasher() -> Any:
        return hashlib.blake2b(digest_size=8)


# ---- fingerprints -------------------------------------------------------------------------------
SAMPLE_BLOCK = 4096


def _sample_starts(n: int, max_bytes: int) -> list[int]:
    """Start offsets of evenly spaced SAMPLE_BLOCK-byte blocks covering at most ``max_bytes`` of ``n``
    (first and last block included)."""
    k = max(max_bytes // SAMPLE_BLOCK, 2)
    last = n - SAMPLE_BLOCK
    return [i * last // (k - 1) for i in range(k)]


def _bytes_of(t: Any, max_bytes: int | None) -> tuple[str, tuple[int, ...], Any, bool]:
    """(dtype, shape, host bytes, sampled). With ``max_bytes`` and a larger tensor only evenly spaced
    blocks are taken, sliced on the tensor's device before the host copy."""
    if is_tensor(t):
        import torch

        x = t.detach().contiguous()
        dtype, shape = str(x.dtype).replace("torch.", ""), tuple(x.shape)
        flat = x.reshape(-1).view(torch.uint8) if x.numel() else torch.zeros(0, dtype=torch.uint8)
        sampled = max_bytes is not None and flat.numel() > max(max_bytes, 2 * SAMPLE_BLOCK)
        if sampled:
            flat = torch.cat([flat[s:s + SAMPLE_BLOCK] for s in _sample_starts(flat.numel(), max_bytes or 0)])
        return dtype, shape, flat.cpu().numpy().data, sampled
    arr = np.ascontiguousarray(np.asarray(t))
    flat_np = arr.reshape(-1).view(np.uint8)
    sampled = max_bytes is not None and flat_np.size > max(max_bytes, 2 * SAMPLE_BLOCK)
    if sampled:
        flat_np = np.concatenate([flat_np[s:s + SAMPLE_BLOCK] for s in _sample_starts(flat_np.size, max_bytes or 0)])
    return str(arr.dtype), tuple(arr.shape), flat_np.data, sampled


# the device checksum: sum over the byte stream's little-endian int32 words w_i of w_i * m(i) mod 2^64, with odd
# multipliers m(i) = base(i mod P) * block(i div P) (P = 2^22 words; base and block: splitmix64 outputs forced odd),
# so a change to one word changes the sum (m(i) is odd) and so do moved words. Per block of P words that is one
# multiply and one sum on the device (base is made once per device, 32 MiB), the block's multiplier applied to its
# sum. Integer arithmetic wraps the same way on every device, and a sum mod 2^64 does not depend on the order of
# the reduction: the same bytes give the same checksum on a GPU and on the CPU.
PERIOD = 1 << 22  # part of the definition, not a tuning knob: changing it changes every checksum
KINDS = ("bytes", "device")
_MASK = (1 << 64) - 1
_BASE: dict[str, Any] = {}


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _base(device: Any) -> Any:
    """The PERIOD odd multipliers on ``device`` (splitmix64 of the index, in torch's wrapping int64 arithmetic)."""
    import torch

    key = str(device)
    if key not in _BASE:
        x = torch.arange(PERIOD, dtype=torch.int64, device=device) + _signed(0x9E3779B97F4A7C15)
        x = (x ^ _srl(x, 30)) * _signed(0xBF58476D1CE4E5B9)
        x = (x ^ _srl(x, 27)) * _signed(0x94D049BB133111EB)
        _BASE[key] = (x ^ _srl(x, 31)) | 1
    return _BASE[key]


def _srl(x: Any, n: int) -> Any:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def _words(flat: Any) -> Any:
    """A uint8 tensor (length a multiple of 4) as int32 words; copies only when its offset is not 4-aligned."""
    import torch

    try:
        return flat.view(torch.int32)
    except RuntimeError:
        return flat.clone().view(torch.int32)


def device_checksum(parts: Iterable[Any]) -> int:
    """64-bit checksum (unsigned) of the concatenated bytes of torch tensors, computed on their device; the
    stream is zero-padded to whole 32-bit words. ``parts``: one tensor, or the parts of a fused tensor in order."""
    import torch

    flats = [p.detach().contiguous().reshape(-1).view(torch.uint8) for p in parts]
    flats = [f for f in flats if f.numel()]
    if any(f.numel() % 4 for f in flats[:-1]):  # a part ends inside a word: hash the concatenation instead
        flats = [torch.cat(flats)]
    sums: dict[int, Any] = {}  # block -> its sum of w_i * base(i mod P), on the device
    start = 0
    for f in flats:
        tail = f.numel() % 4
        if tail:
            f = torch.cat([f, torch.zeros(4 - tail, dtype=torch.uint8, device=f.device)])
        words, base = _words(f), _base(f.device)
        i = 0
        while i < words.numel():
            blk, off = divmod(start + i, PERIOD)
            n = min(PERIOD - off, words.numel() - i)
            part = (words[i:i + n].to(torch.int64) * base[off:off + n]).sum()
            sums[blk] = sums[blk] + part if blk in sums else part
            i += n
        start += words.numel()
    if not sums:
        return 0
    vals = torch.stack(list(sums.values())).tolist()  # one read from the device
    return sum(v * (_splitmix(blk + 0x5EED) | 1) for blk, v in zip(sums, vals)) & _MASK


def tensor_fingerprint(t: Any, max_bytes: int | None = None, kind: str = "bytes") -> str:
    """xxh3-64 (hex) of a tensor's dtype, shape and bytes.

    max_bytes: hash at most about this many bytes per tensor (evenly spaced 4 KiB blocks, sliced on the
    device before copying to the host). Catches missing, stale, mis-cast or mis-sharded tensors at a
    fraction of the cost, but can miss a change confined to bytes between the blocks; None hashes all.
    kind: ``bytes`` (the bytes hashed on the host) or ``device`` (a torch tensor's ``device_checksum``, every
    byte, on its device; ``max_bytes`` does not apply); see the module docstring.
    """
    if kind == "device":
        return device_fingerprint([t])
    if kind != "bytes":
        raise ValueError(f"fingerprint kind {kind!r}; valid: {', '.join(KINDS)}")
    dtype, shape, raw, sampled = _bytes_of(t, max_bytes)
    h = _hasher()
    h.update(f"{dtype}|{shape}|{'s' + str(max_bytes) if sampled else 'f'}|".encode())
    h.update(raw)
    return h.hexdigest()


def concat_fingerprint(parts: list[Any], kind: str = "bytes") -> str:
    """``tensor_fingerprint(torch.cat(parts, 0), kind=kind)`` of torch tensors without building the concatenation
    (full hash): how a tensor the engine fuses (q/k/v, gate/up) is fingerprinted from the trainer's parts."""
    import torch

    if kind == "device":
        return device_fingerprint(parts)
    first = parts[0]
    h = _hasher()
    h.update(f"{str(first.dtype).replace('torch.', '')}|{_cat_shape(parts)}|f|".encode())
    for p in parts:
        x = p.detach().contiguous()
        if x.numel():
            h.update(x.reshape(-1).view(torch.uint8).cpu().numpy().data)
    return h.hexdigest()


def device_fingerprint(parts: list[Any]) -> str:
    """``tensor_fingerprint(torch.cat(parts, 0), kind="device")`` without building the concatenation."""
    h = _hasher()
    h.update(f"{str(parts[0].dtype).replace('torch.', '')}|{_cat_shape(parts)}|d|".encode())
    h.update(device_checksum(parts).to_bytes(8, "little"))
    return h.hexdigest()


def _cat_shape(parts: list[Any]) -> tuple[int, ...]:
    """The shape of ``torch.cat(parts, 0)`` (one part: its own shape, a 0-d tensor's included)."""
    first = parts[0]
    return (sum(int(p.shape[0]) for p in parts), *tuple(first.shape[1:])) if len(parts) > 1 else tuple(first.shape)


def tensor_nbytes(t: Any) -> int:
    if is_tensor(t):
        return int(t.numel() * t.element_size())
    return int(np.asarray(t).nbytes)


def fingerprints(state: Mapping[str, Any], names: Iterable[str] | None = None,
                 max_bytes: int | None = None, kind: str = "bytes") -> dict[str, str]:
    """{name: fingerprint} for the tensors of a state dict (or just ``names``); see ``tensor_fingerprint``."""
    keys = list(state) if names is None else [n for n in names if n in state]
    return {k: tensor_fingerprint(state[k], max_bytes, kind) for k in keys}


def combined_fingerprint(fps: Mapping[str, str]) -> str:
    """One digest over all per-tensor fingerprints (order-independent)."""
    h = _hasher()
    for k in sorted(fps):
        h.update(f"{k}={fps[k]};".encode())
    return h.hexdigest()


def compare_fingerprints(expected: Mapping[str, str], actual: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(names whose fingerprints differ, expected names absent from ``actual``), both sorted."""
    mismatched = sorted(k for k in expected if k in actual and actual[k] != expected[k])
    missing = sorted(k for k in expected if k not in actual)
    return mismatched, missing
