"""Weight sync from trainer to generator in five explicit stages, each a function probes can wrap.

1. ``dump_weights``      trainer side: the parameters in the engine layout's order (views, no copy;
                         tied aliases left out, the parts of each fused tensor back to back) and the
                         per-tensor fingerprints of the engine layout. The first dump of a CPU model
                         moves its tensors into one flat buffer in that order (``flatten_parameters``),
                         so that staging is a single memcpy.
2. ``StagingBuffer``     ``probes.staging.StagingBuffer``: one flat buffer in shared memory (``/dev/shm``)
                         behind a lock (threading + ``flock``) and a sequence number; the trainer copies
                         the dump in (the only copy on the same-node path); a read reports the sequence
                         before and after so a torn read is detectable.
3. ``transfer`` / ``receive``  the path is chosen by ``choose_path``: ``shm`` (same node, CPU) hands the
                         engine the buffer's handle, which its workers map without a copy;
                         ``object_store`` (another node) ``ray.put``s the flat bytes and the receiver
                         copies them into its own node's staging buffer; ``cuda_ipc`` (same GPU node)
                         sends CUDA IPC handles of the trainer's GPU buckets; ``nccl`` broadcasts the
                         buckets from trainer rank 0 into the engine's workers (``trainer_ref.gpu_sync``).
4. ``load_into_engine``  vLLM worker extension (``collective_rpc`` -> ``reload_weights`` over views into the
                         mapped buffer: tensors, no safetensors bytes), returning the engine-side
                         fingerprint of every parameter to compare with the dump, and the seqlock numbers
                         of the engine's own read.
5. ``reset_cache``       prefix/KV-cache reset, confirmed by the engine's return value.

Fingerprints are ``probes.fingerprint.tensor_fingerprint`` (xxh3-64 of dtype, shape and bytes) of each
tensor in the *engine layout* (``EngineLayout``: vLLM fuses q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj`` per its model class's ``packed_modules_mapping``, and holds a tied ``lm_head`` only as
the embedding; the trainer applies the same layout, taken from the running engine or derived from the
model's config), so dump and load fingerprints are comparable tensor by tensor; a fused tensor is hashed
part by part (``concat_fingerprint``), never concatenated. On the GPU paths both sides use the ``device`` kind
(``fingerprint_kind``: a checksum computed on the GPU, not every byte copied to the host).
What each stage measured is recorded by
``probes.WeightSyncProbe`` (trainer side: dump, staging; generator side: transfer, load, cache reset,
end-to-end lag), with the bytes, bandwidth and path on every boundary, see ``Trainer.sync_out`` and
``trainer_ref.engine_update``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from probes.fingerprint import combined_fingerprint, concat_fingerprint, tensor_fingerprint
from probes.staging import StagingBuffer


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


def fingerprint_state(state: dict[str, Any], layout: EngineLayout,
                      kind: str = "bytes") -> tuple[dict[str, str], dict[str, list[int]]]:
    """Per-tensor fingerprints (of ``kind``, ``fingerprint_kind``) and shapes of ``state`` (trainer layout) in the
    engine layout."""
    out = {k: v for k, v in state.items() if k not in layout.aliases}
    fps, shapes = {}, {}
    for fused, group in layout.fusions(out):
        parts = [out.pop(n) for n in group]
        fps[fused] = concat_fingerprint(parts, kind)
        shapes[fused] = [sum(int(p.shape[0]) for p in parts), *[int(x) for x in parts[0].shape[1:]]]
    for k, v in out.items():
        fps[k], shapes[k] = tensor_fingerprint(v, kind=kind), [int(x) for x in v.shape]
    return fps, shapes


def fingerprint_kind(path: str) -> str:
    """The fingerprint kind both sides of a sync on ``path`` use: ``device`` on the GPU paths (the tensors are
    hashed where they live; hashing their bytes on the host would cost more than the whole transfer:
    ``bench/gpu_sync_cost.py``), ``bytes`` on the CPU ones (xxh3 on the host, the fastest there)."""
    return "device" if path in ("cuda_ipc", "nccl") else "bytes"


def stage_order(state: dict[str, Any], layout: EngineLayout) -> dict[str, Any]:
    """``state`` without tied aliases, ordered so that the parts of every fused tensor lie back to back
    in vLLM's shard order (in the flat staging buffer the fused tensor is then one contiguous range)."""
    out = {k: v for k, v in state.items() if k not in layout.aliases}
    ordered: dict[str, Any] = {}
    for _, group in sorted(layout.fusions(out)):
        for n in group:
            ordered[n] = out[n]
    for k in sorted(out):
        ordered.setdefault(k, out[k])
    return ordered


@dataclass
class Dump:
    """Stage 1 result: ``state`` holds the trainer's tensors (views of its parameters, stage order)."""

    version: int
    state: dict[str, Any]
    fingerprints: dict[str, str]  # engine-layout name -> xxh64
    names: list[str]  # tensor names in the dump (trainer layout)
    seconds: float = 0.0
    shapes: dict[str, list[int]] = field(default_factory=dict)  # engine-layout name -> shape
    kind: str = "bytes"  # the fingerprints' kind (fingerprint_kind)

    @property
    def nbytes(self) -> int:
        return int(sum(t.numel() * t.element_size() for t in self.state.values()))

    @property
    def payload(self) -> bytes:
        """The dump as one safetensors checkpoint (for inspection and tests; the sync never builds it)."""
        from safetensors.torch import save

        return save({k: v.contiguous() for k, v in self.state.items()})

    @property
    def digest(self) -> str:
        return digest(self.fingerprints)


def flat_offsets(state: dict[str, Any]) -> tuple[dict[str, int], int]:
    """Byte offset of each tensor of ``state`` (in its order) when laid out back to back, each aligned
    to its element size (the staging buffer's layout less its header, which is 64 bytes), and the total."""
    offs, off = {}, 0
    for k, v in state.items():
        item = max(int(v.element_size()), 1)
        off = -(-off // item) * item
        offs[k] = off
        off += int(v.numel()) * int(v.element_size())
    return offs, off


def is_flat(state: dict[str, Any]) -> bool:
    """True when the tensors of ``state`` lie in one storage exactly at ``flat_offsets`` (in order)."""
    offs, _ = flat_offsets(state)
    base = None
    for k, v in state.items():
        if v.numel() == 0:
            continue
        if not v.is_contiguous():
            return False
        if base is None:
            base = v.data_ptr() - offs[k]
        elif v.data_ptr() - offs[k] != base:
            return False
    return True


def flatten_parameters(model: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Move the model's tensors named in ``state`` (stage order; CPU) into one flat buffer laid out as
    the staging buffer lays them out (``flat_offsets``), so that staging copies them with one memcpy
    (``probes.staging._runs``) instead of one per tensor (hundreds of copies of a few MB, which glibc
    makes at about half the bandwidth of one large copy). Each ``Parameter`` keeps its identity (its
    ``.data`` becomes a view into the buffer: optimiser state, gradients and tied names are unchanged);
    buffers are replaced by views. Returns ``state`` as views of the new buffer. One copy of the model,
    once (``dump_weights`` does it on the first dump and again only if something re-allocated them)."""
    import numpy as np
    import torch

    offs, total = flat_offsets(state)
    flat = torch.from_numpy(np.empty(total, dtype=np.uint8))  # numpy asks for transparent huge pages
    out = {}
    with torch.no_grad():
        for k, v in state.items():
            nbytes = int(v.numel()) * int(v.element_size())
            dst = flat[offs[k]:offs[k] + nbytes]
            if nbytes:  # memcpy (np.copyto) rather than copy_: about twice as fast here
                np.copyto(dst.numpy(), v.contiguous().reshape(-1).view(torch.uint8).numpy())
            view = dst.view(v.dtype).view(v.shape)
            mod_name, _, leaf = k.rpartition(".")
            mod = model.get_submodule(mod_name)
            if leaf in mod._parameters and mod._parameters[leaf] is not None:
                mod._parameters[leaf].data = view
            elif leaf in mod._buffers:
                mod._buffers[leaf] = view
            else:
                raise KeyError(f"{k} is neither a parameter nor a buffer of the model")
            out[k] = view
    return out


def dump_weights(model: Any, version: int, expected: Iterable[str] | None = None,
                 layout: EngineLayout | None = None, flatten: bool = True, kind: str = "bytes") -> Dump:
    """Stage 1: the model's tensors in stage order (no copy on the CPU) and their per-tensor fingerprints.

    ``layout`` (default ``EngineLayout.from_model(model)``) says which tensors are tied aliases (not
    sent: the engine ties them itself) and how the engine fuses the rest (fingerprints and shapes are
    in the engine layout). ``expected``: trainer-layout names that must be in the dump (aliases of
    tied tensors are not required). ``flatten`` (CPU models): the first dump moves the tensors into one
    flat buffer in stage order (``flatten_parameters``, one copy of the model, timed in that dump), so
    every staging write after it is one memcpy."""
    t0 = time.perf_counter()
    layout = layout or EngineLayout.from_model(model)
    state = {k: v.detach() for k, v in model.state_dict().items() if k not in layout.aliases}
    missing = sorted(set(layout.sent(expected or ())) - set(state))
    if missing:
        raise RuntimeError(f"dump is missing tensors: {missing[:5]}")
    state = stage_order(state, layout)
    if flatten and state and all(v.device.type == "cpu" for v in state.values()) and not is_flat(state) \
            and len({v.data_ptr() for v in state.values() if v.numel()}) == sum(1 for v in state.values() if v.numel()):
        state = flatten_parameters(model, state)  # (not when two names share memory: they would be split)
    fps, shapes = fingerprint_state(state, layout, kind)
    return Dump(version, state, fps, sorted(state), time.perf_counter() - t0, shapes, kind)


# ---- paths ---------------------------------------------------------------------------------------
PATHS = ("shm", "object_store", "cuda_ipc", "nccl")


def node_id() -> str | None:
    """This process's Ray node id (None outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - no Ray context: a single process
        return None


def choose_path(device: str, trainer_node: str | None, engine_node: str | None, override: str | None = None,
                engine_device: str | None = None) -> str:
    """The transfer path: ``override`` when given (``cfg["weight_sync_path"]``), else by placement:
    GPU trainer and engine on one node -> ``cuda_ipc``, on different nodes -> ``nccl``; CPU on one node
    -> ``shm``, across nodes -> ``object_store``. An unknown node (no Ray) counts as the same node."""
    if override:
        if override not in PATHS:
            raise ValueError(f"unknown weight_sync_path {override!r}; valid: {', '.join(PATHS)}")
        return override
    same = trainer_node is None or engine_node is None or trainer_node == engine_node
    if str(device).startswith("cuda") and str(engine_device or "cuda").startswith("cuda"):
        return "cuda_ipc" if same else "nccl"
    return "shm" if same else "object_store"


def transfer(staging: StagingBuffer, path: str = "shm") -> tuple[dict[str, Any], float]:
    """Stage 3 (sender) of the CPU paths: what the engine needs to reach the staged weights; returns
    (transport, seconds). ``shm``: the buffer's handle only (the engine maps it); ``object_store``: the
    flat bytes ``ray.put`` in the object store (one copy), plus the handle's layout."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"path": path, "handle": staging.handle(), "node_id": node_id()}
    if path == "object_store":
        import ray

        out["ref"] = ray.put(staging.flat())
    elif path != "shm":
        raise ValueError(f"transfer() handles the CPU paths (shm, object_store), not {path!r}")
    return out, time.perf_counter() - t0


def receive(transport: dict[str, Any], local: StagingBuffer | None = None) -> tuple[dict[str, Any], float]:
    """Stage 3 (receiver): the handle of a staging buffer on this node holding the weights; returns
    (handle, seconds). ``shm``: the sender's buffer as is; ``object_store``: the bytes resolved from
    the object store (a zero-copy read of the local plasma copy) and copied into ``local``."""
    t0 = time.perf_counter()
    if transport["path"] == "object_store":
        import ray

        if local is None:
            raise ValueError("the object-store path needs a local staging buffer to land in")
        data = transport["ref"]
        data = ray.get(data) if isinstance(data, ray.ObjectRef) else data
        local.write_raw(transport["handle"], data)
        return local.handle(), time.perf_counter() - t0
    if transport["path"] == "nccl":
        from trainer_ref import gpu_sync

        return gpu_sync.receive_handle(transport), time.perf_counter() - t0
    return dict(transport["handle"]), time.perf_counter() - t0


LOAD_METHODS = {"shm": "rlobs_load_staged", "object_store": "rlobs_load_staged", "cuda_ipc": "rlobs_load_ipc",
                "nccl": "rlobs_nccl_receive"}


def handle_nbytes(handle: dict[str, Any]) -> int:
    """Bytes of the tensors a handle describes."""
    return int(sum(int(e[4]) for e in handle.get("entries") or ()))


# ---- engine side (torch, inside the vLLM workers) ------------------------------------------------
_MAPS: dict[tuple[str, int], Any] = {}


def mapped(handle: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Torch views (stage order) into the staging buffer named by ``handle``, mapped once per file
    (``torch.from_file`` on the tmpfs file: shared pages, no copy), and the header as int64."""
    import torch

    key = (str(handle["path"]), int(handle["size"]))
    buf = _MAPS.get(key)
    if buf is None:
        for k in [k for k in _MAPS if k[0] != key[0] and not os.path.exists(k[0])]:
            _MAPS.pop(k)  # files the sender replaced
        buf = _MAPS[key] = torch.from_file(key[0], shared=True, size=key[1], dtype=torch.uint8)
    out = {}
    for name, dtype, shape, off, nbytes in handle["entries"]:
        out[str(name)] = buf[int(off):int(off) + int(nbytes)].view(getattr(torch, dtype)).view(*shape)
    return out, buf[:16].view(torch.int64)


def fused_views(views: dict[str, Any], layout: EngineLayout) -> dict[str, list[Any]]:
    """{engine name: [its parts]} for the staged tensors (one part for tensors the engine does not fuse)."""
    out = {k: [v] for k, v in views.items() if k not in layout.aliases}
    for fused, group in layout.fusions(list(out)):
        out[fused] = [out.pop(n)[0] for n in group]
    return out


@dataclass
class LoadResult:
    seconds: float
    tensors_present: int
    fingerprints: dict[str, str]
    mismatched: list[str]
    mem_hwm_bytes: int
    sources: dict[str, str] = field(default_factory=dict)  # name -> param | consumed | freed
    seq_before: int = 0
    seq_after: int = 0
    torn: bool = False
    engine_s: float = 0.0  # reload_weights inside the worker

    @property
    def match(self) -> bool:
        return not self.mismatched


def engine_fingerprints(llm: Any, shapes: dict[str, list[int]] | None = None,
                        kind: str = "bytes") -> tuple[dict[str, str], dict[str, str]]:
    """The engine's per-tensor fingerprints (of ``kind``) and where each was read (param | consumed | freed)."""
    raw = llm.collective_rpc("rlobs_fingerprints", args=(shapes or {}, kind))[0]
    return {k: v[0] for k, v in raw.items()}, {k: v[1] for k, v in raw.items()}


def engine_layout_info(llm: Any) -> dict[str, Any]:
    """How the engine holds the weights: {packed, aliases, params, architecture, device} (``rlobs_layout``)
    and its number of workers."""
    reps = llm.collective_rpc("rlobs_layout")
    return {**reps[0], "workers": len(reps)}


def load_into_engine(llm: Any, handle: dict[str, Any], expected: dict[str, str],
                     shapes: dict[str, list[int]] | None = None, perturb: dict[str, float] | None = None,
                     method: str = "rlobs_load_staged", kind: str = "bytes") -> LoadResult:
    """Stage 4: every worker loads from the staged buffer (``handle``; for the GPU paths, their handles)
    and reports its seqlock read; then the engine fingerprints (of ``kind``, the dump's) are compared with
    ``expected``.
    ``perturb``: {name: delta} added to those tensors as loaded (the fingerprint-mismatch fault)."""
    t0 = time.perf_counter()
    rep = llm.collective_rpc(method, args=(handle, perturb or {}))[0]
    fps, src = engine_fingerprints(llm, shapes, kind)
    mism = sorted(k for k in set(expected) | set(fps) if expected.get(k) != fps.get(k))
    return LoadResult(time.perf_counter() - t0, int(rep["tensors"]), fps, mism, int(rep["max_rss_bytes"]), src,
                      int(rep.get("seq_before", 0)), int(rep.get("seq_after", 0)), bool(rep.get("torn", False)),
                      float(rep.get("engine_s", 0.0)))


def reset_cache(llm: Any) -> bool:
    """Stage 5: reset the prefix/KV cache; True when the engine confirms it."""
    return bool(llm.reset_prefix_cache())
