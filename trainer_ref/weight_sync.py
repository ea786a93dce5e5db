"""Weight sync from trainer to generator in five explicit stages, each a function probes can wrap.

1. ``dump_weights``      trainer side: state dict -> safetensors bytes + per-tensor fingerprints.
2. ``StagingBuffer``     a CPU staging buffer behind a lock with a sequence number; ``read`` reports
                         the sequence before and after the copy so a torn read is detectable.
3. ``transfer`` / ``receive``  Ray object store (``ray.put`` / resolve by reference), on CPU and GPU
                         alike; an NCCL / CUDA-IPC path is not implemented yet.
4. ``load_into_engine``  vLLM worker extension (``collective_rpc`` -> ``reload_weights``), returning
                         the engine-side fingerprint of every parameter to compare with the dump.
5. ``reset_cache``       prefix/KV-cache reset, confirmed by the engine's return value.

Fingerprints are ``probes.fingerprint.tensor_fingerprint`` (xxh3-64 of dtype, shape and bytes) of each
tensor in the *engine layout* (vLLM fuses q/k/v into ``qkv_proj`` and gate/up into ``gate_up_proj``;
``engine_layout`` applies the same fusion on the trainer side), so dump and load fingerprints are
comparable tensor by tensor. What each stage measured is recorded by ``probes.WeightSyncProbe``
(trainer side: dump, staging; generator side: transfer, load, cache reset, end-to-end lag), see
``Trainer.sync_out`` and ``VLLMGenerator._apply_update``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from probes.fingerprint import combined_fingerprint, tensor_fingerprint  # noqa: F401 - re-exported

_FUSED = (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
          ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")))


def digest(fingerprints: dict[str, str]) -> str:
    """One digest over all per-tensor fingerprints (``probes.fingerprint.combined_fingerprint``)."""
    return combined_fingerprint(fingerprints)


def _fusions(names: Iterable[str]) -> list[tuple[str, list[str]]]:
    """(fused engine name, [its parts in order]) for every group of ``names`` vLLM fuses into one tensor."""
    have = set(names)
    out = []
    for fused, parts in _FUSED:
        for name in sorted(k for k in have if parts[0] in k):
            prefix, suffix = name.split(parts[0])
            group = [prefix + p + suffix for p in parts]
            if all(n in have for n in group):
                out.append((prefix + fused + suffix, group))
    return out


def engine_names(names: Iterable[str]) -> list[str]:
    """Tensor names in the engine layout (the fusions of ``engine_layout``, on names only)."""
    out = set(names)
    for fused, group in _fusions(list(out)):
        out.difference_update(group)
        out.add(fused)
    return sorted(out)


def engine_layout(state: dict[str, Any]) -> dict[str, Any]:
    """The state dict with vLLM's fusions applied (for fingerprint comparison only)."""
    import torch

    out = dict(state)
    for fused, group in _fusions(state):
        out[fused] = torch.cat([out.pop(n) for n in group], 0)
    return out


@dataclass
class Dump:
    """Stage 1 result."""

    version: int
    payload: bytes
    fingerprints: dict[str, str]  # engine-layout name -> xxh64
    names: list[str]  # tensor names in the dump (trainer layout)
    seconds: float = 0.0
    shapes: dict[str, list[int]] = field(default_factory=dict)  # engine-layout name -> shape

    @property
    def nbytes(self) -> int:
        return len(self.payload)

    @property
    def digest(self) -> str:
        return digest(self.fingerprints)


def dump_weights(model: Any, version: int, expected: Iterable[str] | None = None) -> Dump:
    """Stage 1: serialise the model's state dict (safetensors bytes) and fingerprint each tensor."""
    from safetensors.torch import save

    t0 = time.perf_counter()
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # tied: the engine holds only the embedding
    missing = sorted(set(expected or ()) - set(state))
    if missing:
        raise RuntimeError(f"dump is missing tensors: {missing[:5]}")
    payload = save(state)
    fused = engine_layout(state)
    fps = {k: tensor_fingerprint(v) for k, v in fused.items()}
    shapes = {k: list(v.shape) for k, v in fused.items()}
    return Dump(version, payload, fps, sorted(state), time.perf_counter() - t0, shapes)


@dataclass
class StagingRead:
    dump: Dump
    seq_before: int
    seq_after: int
    lock_wait_s: float
    lock_hold_s: float

    @property
    def torn(self) -> bool:
        return self.seq_before != self.seq_after or self.seq_before % 2 == 1


_CHUNK = 1 << 18


class StagingBuffer:
    """Stage 2: a preallocated CPU staging buffer; writers bump ``seq`` before and after copying in
    (odd while a write is in progress), copies go chunk by chunk, like a pinned-memory staging area.
    A reader that sees ``seq`` change (or odd) during its copy got a torn read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seq = 0
        self._buf = bytearray()
        self._size = 0
        self._meta: Dump | None = None

    def write(self, dump: Dump) -> tuple[float, float]:
        """Copy a dump in; returns (lock_wait_s, lock_hold_s)."""
        t0 = time.perf_counter()
        with self._lock:
            t1 = time.perf_counter()
            self.seq += 1
            n = len(dump.payload)
            if len(self._buf) < n:
                self._buf = bytearray(n)
            src, dst = memoryview(dump.payload), memoryview(self._buf)
            for i in range(0, n, _CHUNK):
                dst[i:min(i + _CHUNK, n)] = src[i:min(i + _CHUNK, n)]
            self._size = n
            self._meta = Dump(dump.version, b"", dict(dump.fingerprints), list(dump.names), dump.seconds,
                              dict(dump.shapes))
            self.seq += 1
            return t1 - t0, time.perf_counter() - t1

    def read(self, locked: bool = True) -> StagingRead:
        """Copy the staged dump out; ``locked=False`` skips the lock (torn reads become possible)."""
        t0 = time.perf_counter()
        if locked:
            self._lock.acquire()
        t1 = time.perf_counter()
        try:
            before = self.seq
            if self._meta is None:
                raise RuntimeError("staging buffer is empty")
            m, n = self._meta, self._size
            out = bytearray(n)
            src, dst = memoryview(self._buf), memoryview(out)
            for i in range(0, n, _CHUNK):
                dst[i:min(i + _CHUNK, n)] = src[i:min(i + _CHUNK, n)]
            after = self.seq
        finally:
            if locked:
                self._lock.release()
        copy = Dump(m.version, bytes(out), dict(m.fingerprints), list(m.names), m.seconds, dict(m.shapes))
        return StagingRead(copy, before, after, t1 - t0, time.perf_counter() - t1)


def transfer(payload: bytes) -> tuple[Any, float]:
    """Stage 3 (sender): put the payload in the Ray object store; returns (ObjectRef, seconds)."""
    import ray

    t0 = time.perf_counter()
    ref = ray.put(payload)
    return ref, time.perf_counter() - t0


def receive(ref_or_payload: Any) -> tuple[bytes, float]:
    """Stage 3 (receiver): resolve the payload; returns (bytes, seconds)."""
    import ray

    t0 = time.perf_counter()
    data = ray.get(ref_or_payload) if isinstance(ref_or_payload, ray.ObjectRef) else ref_or_payload
    return bytes(data), time.perf_counter() - t0


@dataclass
class LoadResult:
    seconds: float
    tensors_present: int
    fingerprints: dict[str, str]
    mismatched: list[str]
    mem_hwm_bytes: int
    sources: dict[str, str] = field(default_factory=dict)  # name -> param | consumed | freed

    @property
    def match(self) -> bool:
        return not self.mismatched


def engine_fingerprints(llm: Any, shapes: dict[str, list[int]] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """The engine's per-tensor fingerprints and where each was read (param | consumed | freed)."""
    raw = llm.collective_rpc("rlobs_fingerprints", args=(shapes or {},))[0]
    return {k: v[0] for k, v in raw.items()}, {k: v[1] for k, v in raw.items()}


def load_into_engine(llm: Any, payload: bytes, expected: dict[str, str],
                     shapes: dict[str, list[int]] | None = None) -> LoadResult:
    """Stage 4: load weights in every worker and compare the engine fingerprints with ``expected``."""
    t0 = time.perf_counter()
    rep = llm.collective_rpc("rlobs_load_weights", args=(payload,))[0]
    fps, src = engine_fingerprints(llm, shapes)
    mism = sorted(k for k in set(expected) | set(fps) if expected.get(k) != fps.get(k))
    return LoadResult(time.perf_counter() - t0, int(rep["tensors"]), fps, mism, int(rep["max_rss_bytes"]), src)


def reset_cache(llm: Any) -> bool:
    """Stage 5: reset the prefix/KV cache; True when the engine confirms it."""
    return bool(llm.reset_prefix_cache())
