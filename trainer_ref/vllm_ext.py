"""vLLM worker extension: in-place weight reload and weight fingerprints, run inside the workers.

Passed to vLLM as ``worker_extension_cls="trainer_ref.vllm_ext.WeightSyncExtension"``; the methods
become callable through ``llm.collective_rpc(name, args=...)``. Arguments travel serialised, so the
weights arrive as safetensors bytes (tensors would arrive as Python lists).

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

import resource
from typing import Any


class WeightSyncExtension:
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
        return {**self._rlobs_layout().to_dict(), "params": sorted(n for n, _ in model.named_parameters()),
                "architecture": type(model).__name__}

    def rlobs_load_weights(self, payload: bytes) -> dict[str, Any]:
        """Load safetensors bytes through ``model_runner.reload_weights``."""
        from safetensors.torch import load

        from trainer_ref.weight_sync import tensor_fingerprint

        state = load(bytes(payload))
        self._rlobs_consumed = {k: tensor_fingerprint(v) for k, v in self._rlobs_layout().apply(state).items()}
        self.model_runner.reload_weights(weights_iterator=iter(state.items()))  # type: ignore[attr-defined]
        return {"tensors": len(state),
                "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

    def rlobs_fingerprints(self, shapes: dict[str, list[int]] | None = None) -> dict[str, list[str]]:
        """{name: [xxh64, source]} for every parameter (source: param | consumed | freed)."""
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
            out[name] = [tensor_fingerprint(t), "param"]
        return out
