"""vLLM worker extension: in-place weight reload and weight fingerprints, run inside the workers.

Passed to vLLM as ``worker_extension_cls="trainer_ref.vllm_ext.WeightSyncExtension"``; the methods
become callable through ``llm.collective_rpc(name, args=...)``. Arguments travel serialised (tensors
would arrive as Python lists), so the weights never travel as arguments: ``rlobs_load_staged`` gets the
plain-JSON handle of the trainer's shared-memory staging buffer (``probes.staging.StagingBuffer``),
maps it once (``torch.from_file(shared=True)`` on the tmpfs file) and feeds views into it, tensors
without a copy or a parse, to ``model_runner.reload_weights(weights_iterator=...)`` (vLLM 0.32's
in-place reload, ``vllm/model_executor/model_loader/reload/inplace.py``: checkpoint-format names, so
the model's own ``load_weights`` fuses q/k/v). The read is a seqlock reader: shared ``flock`` on the
file for the whole load, sequence number before and after. The GPU paths (``rlobs_load_ipc``,
``rlobs_nccl_*``) are in ``trainer_ref.gpu_sync``'s extension mixin.

Fingerprints: each parameter's bytes are hashed where the engine keeps them. vLLM on the CPU packs
linear weights for oneDNN and frees the original parameter (``numel() == 0``); for those tensors
the fingerprint is the one of the tensor the engine consumed during the last reload (source
``consumed``), so a corrupted transfer is still caught; on a GPU every parameter is read back
(source ``param``). Vocabulary-padded tensors are compared on the unpadded rows.

Layout: ``rlobs_layout`` reports how this engine holds the weights, read from the model vLLM built
(its class's ``packed_modules_mapping``, the parameters it ties, e.g. ``lm_head`` to
``embed_tokens`` under ``tie_word_embeddings``, and its parameter names); the trainer dumps and
fingerprints in that layout (``trainer_ref.weight_sync.EngineLayout``) and checks at start that its
tensors map onto exactly these parameters.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from trainer_ref.gpu_sync import GpuSyncMixin


class WeightSyncExtension(GpuSyncMixin):
    """Mixed into vLLM's worker class."""

    def _rlobs_layout(self) -> Any:
        from trainer_ref.weight_sync import EngineLayout

        model = self.model_runner.model  # type: ignore[attr-defined]
        first: dict[int, str] = {}
        aliases: dict[str, str] = {}
        for name, p in model.named_parameters(remove_duplicate=False):  # tied: one Parameter, two names
            canon = first.setdefault(id(p), name)
            if canon != name:
                aliases[name] = canon
        packed = getattr(type(model), "packed_modules_mapping", None) or {}
        return EngineLayout({k: list(v) for k, v in packed.items()}, aliases)

    def rlobs_layout(self) -> dict[str, Any]:
        """{packed, aliases, params, architecture}: how this engine holds the model's weights."""
        model = self.model_runner.model  # type: ignore[attr-defined]
        dev = next((str(p.device) for p in model.parameters()), "cpu")
        return {**self._rlobs_layout().to_dict(), "params": sorted(n for n, _ in model.named_parameters()),
                "architecture": type(model).__name__, "device": dev}

    def _rlobs_reload(self, state: dict[str, Any], perturb: dict[str, float] | None) -> dict[str, Any]:
        """Load ``state`` (trainer layout, tensors) in place; keep the fingerprints of what was consumed
        for the parameters the CPU backend frees after packing (they cannot be read back)."""
        from trainer_ref.weight_sync import concat_fingerprint, fused_views

        for name, delta in (perturb or {}).items():
            if name in state:
                state[name] = state[name] + float(delta)
        model = self.model_runner.model  # type: ignore[attr-defined]
        freed = {n for n, p in model.named_parameters() if p.numel() == 0}
        parts = fused_views(state, self._rlobs_layout())
        self._rlobs_consumed = {k: concat_fingerprint(v) for k, v in parts.items() if k in freed}
        t0 = time.perf_counter()
        self.model_runner.reload_weights(weights_iterator=iter(state.items()))  # type: ignore[attr-defined]
        return {"tensors": len(state), "engine_s": time.perf_counter() - t0,
                "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

    def rlobs_load_staged(self, handle: dict[str, Any], perturb: dict[str, float] | None = None) -> dict[str, Any]:
        """Load from the shared-memory staging buffer ``handle`` names, under its shared lock."""
        import fcntl

        from trainer_ref.weight_sync import mapped

        views, hdr = mapped(handle)
        fd = os.open(handle["path"], os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            before = int(hdr[0])
            rep = self._rlobs_reload(dict(views), perturb)
            after = int(hdr[0])
        finally:
            os.close(fd)  # releases the lock
        return {**rep, "seq_before": before, "seq_after": after, "torn": before != after or before % 2 == 1}

    def rlobs_fingerprints(self, shapes: dict[str, list[int]] | None = None, kind: str = "bytes") -> dict[str, list[str]]:
        """{name: [xxh64, source]} for every parameter (source: param | consumed | freed); ``kind``: the dump's
        (``weight_sync.fingerprint_kind``). The consumed ones (vLLM on the CPU, which frees packed parameters) are
        ``bytes`` fingerprints: the GPU paths, the only ones using ``device``, never meet a freed parameter."""
        from trainer_ref.weight_sync import tensor_fingerprint

        consumed = getattr(self, "_rlobs_consumed", {})
        model = self.model_runner.model  # type: ignore[attr-defined]
        out: dict[str, list[str]] = {}
        for name, p in model.named_parameters():
            if p.numel() == 0:
                out[name] = [consumed[name], "consumed"] if name in consumed else ["", "freed"]
                continue
            t = p.detach()
            want = (shapes or {}).get(name)
            if want and len(want) == t.dim() and t.shape[0] > want[0]:
                t = t[: want[0]]  # vocabulary padding
            out[name] = [tensor_fingerprint(t, kind=kind), "param"]
        return out
