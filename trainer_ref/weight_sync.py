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
tensor in the *engine layout* (``EngineLayout``: vLLM fuses q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj`` per its model class's ``packed_modules_mapping``, and holds a tied ``lm_head`` only as
the embedding; the trainer applies the same layout, taken from the running engine or derived from the
model's config), so dump and load fingerprints are comparable tensor by tensor. What each stage measured is recorded by ``probes.WeightSyncProbe``
(trainer side: dump, staging; generator side: transfer, load, cache reset, end-to-end lag), see
``Trainer.sync_out`` and ``VLLMGenerator._apply_update``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from probes.fingerprint import combined_fingerprint, tensor_fingerprint  # noqa: F401 - re-exported


def digest(fingerprints: dict[str, str]) -> str:
    """One digest over all per-tensor fingerprints (``probes.fingerprint.combined_fingerprint``)."""
    return combined_fingerprint(fingerprints)


def text_config(config: Any) -> Any:
    """The language model's part of an HF config (multimodal configs nest it)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def tied_aliases(model: Any) -> dict[str, str]:
    """{alias: canonical} for the tensors the model ties when its config says so
    (``tie_word_embeddings``): every later name of a shared parameter (``lm_head.weight``) mapped to
    the first (``model.embed_tokens.weight``), the rule vLLM's loader uses to skip tied names. Empty
    for an untied model, even if two of its parameters happen to share storage (the engine then holds
    both, so both are sent)."""
    cfg = getattr(model, "config", None)
    if cfg is None or not getattr(text_config(cfg), "tie_word_embeddings", False):
        return {}
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        canon = first.setdefault(id(p), name)
        if canon != name:
            out[name] = canon
    return out


def vllm_packed_modules(architectures: Iterable[str]) -> dict[str, list[str]]:
    """vLLM's ``packed_modules_mapping`` (fused module -> the checkpoint modules it stacks, in order)
    of the model class vLLM serves ``architectures`` with, read from vLLM's own model registry (imports
    vLLM: a few seconds; the trainer gets the layout from the running engine instead, see
    ``EngineLayout.from_engine``)."""
    from vllm.model_executor.models import ModelRegistry

    for arch in architectures:
        cls = ModelRegistry._try_load_model_cls(arch)
        if cls is not None:
            return {k: list(v) for k, v in getattr(cls, "packed_modules_mapping", {}).items()}
    import vllm

    raise ValueError(f"vLLM {vllm.__version__} has no model class for architectures {list(architectures)}")


@dataclass(frozen=True)
class EngineLayout:
    """How the engine holds the trainer's tensors: which it fuses and which it does not hold at all.

    ``packed``: vLLM's ``packed_modules_mapping`` of the served model class, e.g. ``{"qkv_proj":
    ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}`` for the Llama, Qwen2
    and Qwen3 families: ``X.q_proj.Y``, ``X.k_proj.Y``, ``X.v_proj.Y`` (weights and, in Qwen2,
    biases) become ``X.qkv_proj.Y``, concatenated along dim 0 in the listed order (the shard order of
    vLLM's ``QKVParallelLinear`` / ``MergedColumnParallelLinear``). Other tensors (Qwen3's
    ``q_norm`` / ``k_norm``, norms, embeddings) keep their names.
    ``aliases``: trainer tensor name -> the tensor it is tied to (``tied_aliases``); the engine holds
    only the canonical one (vLLM ties ``lm_head`` to ``embed_tokens``), so aliases are neither sent
    nor fingerprinted."""

    packed: dict[str, list[str]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_model(cls, model: Any, packed: dict[str, list[str]] | None = None) -> EngineLayout:
        """The layout of an HF model: tied names from its config, fusions from vLLM's model class for
        ``config.architectures`` (or ``packed`` when the engine already told us)."""
        if packed is None:
            cfg = model.config
            packed = vllm_packed_modules(getattr(cfg, "architectures", None) or [type(model).__name__])
        return cls({k: list(v) for k, v in packed.items()}, tied_aliases(model))

    @classmethod
    def from_engine(cls, model: Any, engine: dict[str, Any]) -> EngineLayout:
        """The trainer's layout for a running engine (``VLLMGenerator.engine_layout``): the engine's
        fusions, the trainer model's tied names; raises ``ValueError`` naming the tensors when the two
        sides would not map onto each other one to one (an architecture or config they disagree on)."""
        layout = cls.from_model(model, packed=engine["packed"])
        problems = layout.mismatch(model.state_dict().keys(), engine)
        if problems:
            raise ValueError("trainer and engine disagree on the weight layout of "
                             f"{engine.get('architecture', '?')}: " + "; ".join(problems))
        return layout

    def mismatch(self, trainer_names: Iterable[str], engine: dict[str, Any]) -> list[str]:
        """What keeps ``trainer_names`` (in this layout) from matching the engine's parameters and ties."""
        out = []
        if dict(engine.get("aliases") or {}) != self.aliases:
            out.append(f"tied tensors: trainer {self.aliases or 'none'}, engine {engine.get('aliases') or 'none'}")
        mine, theirs = set(self.names(trainer_names)), set(engine.get("params") or ())
        if mine - theirs:
            out.append(f"only in the trainer: {sorted(mine - theirs)[:5]}")
        if theirs - mine:
            out.append(f"only in the engine: {sorted(theirs - mine)[:5]}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"packed": {k: list(v) for k, v in self.packed.items()}, "aliases": dict(self.aliases)}

    def fusions(self, names: Iterable[str]) -> list[tuple[str, list[str]]]:
        """(fused engine name, [its parts in order]) for every group of ``names`` the engine fuses
        into one tensor; a group counts only when every part is present."""
        have = set(names)
        out = []
        for fused, parts in self.packed.items():
            if list(parts) == [fused]:
                continue  # already fused in the checkpoint (Phi-3 style)
            for name in sorted(have):
                segs = name.split(".")
                for i, seg in enumerate(segs):
                    if seg != parts[0]:
                        continue
                    group = [".".join(segs[:i] + [p] + segs[i + 1:]) for p in parts]
                    if all(n in have for n in group):
                        out.append((".".join(segs[:i] + [fused] + segs[i + 1:]), group))
        return out

    def sent(self, names: Iterable[str]) -> list[str]:
        """The trainer names that are sent (aliases of tied tensors left out)."""
        return sorted(n for n in names if n not in self.aliases)

    def names(self, names: Iterable[str]) -> list[str]:
        """Engine-layout names of the tensors ``names`` (trainer layout) that the engine holds."""
        out = set(self.sent(names))
        for fused, group in self.fusions(list(out)):
            out.difference_update(group)
            out.add(fused)
        return sorted(out)

    def apply(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` in the engine layout: aliases dropped, fused groups concatenated (dim 0)."""
        import torch

        out = {k: v for k, v in state.items() if k not in self.aliases}
        for fused, group in self.fusions(out):
            out[fused] = torch.cat([out.pop(n) for n in group], 0)
        return out


def engine_names(names: Iterable[str], layout: EngineLayout) -> list[str]:
    """Tensor names in the engine layout (``EngineLayout.names``)."""
    return layout.names(names)


def engine_layout(state: dict[str, Any], layout: EngineLayout) -> dict[str, Any]:
    """The state dict in the engine layout (``EngineLayout.apply``; for fingerprint comparison)."""
    return layout.apply(state)


def fingerprint_state(state: dict[str, Any], layout: EngineLayout) -> tuple[dict[str, str], dict[str, list[int]]]:
    """Per-tensor fingerprints and shapes of ``state`` in the engine layout."""
    fused = layout.apply(state)
    return {k: tensor_fingerprint(v) for k, v in fused.items()}, {k: list(v.shape) for k, v in fused.items()}


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


def dump_weights(model: Any, version: int, expected: Iterable[str] | None = None,
                 layout: EngineLayout | None = None) -> Dump:
    """Stage 1: serialise the model's state dict (safetensors bytes) and fingerprint each tensor.

    ``layout`` (default ``EngineLayout.from_model(model)``) says which tensors are tied aliases (not
    sent: the engine ties them itself) and how the engine fuses the rest (fingerprints and shapes are
    in the engine layout). ``expected``: trainer-layout names that must be in the dump (aliases of
    tied tensors are not required)."""
    from safetensors.torch import save

    t0 = time.perf_counter()
    layout = layout or EngineLayout.from_model(model)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k not in layout.aliases}
    missing = sorted(set(layout.sent(expected or ())) - set(state))
    if missing:
        raise RuntimeError(f"dump is missing tensors: {missing[:5]}")
    payload = save(state)
    fps, shapes = fingerprint_state(state, layout)
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


def engine_layout_info(llm: Any) -> dict[str, Any]:
    """How the engine holds the weights: {packed, aliases, params, architecture} (``rlobs_layout``)."""
    return llm.collective_rpc("rlobs_layout")[0]


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
