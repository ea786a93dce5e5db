"""Train/serve parity: same tokenizer, chat template and sampling parameters on both sides, and the
per-token log-prob gap between the generator's and the trainer's log-probs (DESIGN.md §2.7).

Hashes (sha256 of stable JSON; ``config_hashes`` returns the dict ``rlobs.init(hashes=...)`` takes):
- tokenizer: vocabulary (token -> id, added tokens included), special tokens, normalizer and
  pre-tokenizer configuration;
- chat template: the template text;
- sampling: the parameters that shape the sampling distribution (``SAMPLING_KEYS``: temperature,
  top_p, top_k, min_p and the penalties), with canonical defaults so that ``{}`` and a vLLM
  ``SamplingParams()`` hash the same; ``max_tokens`` and ``n`` do not change log-probs and are left out.

Log-prob gap, over the tokens of a batch, with d = logp_train - logp_gen and x ~ generator:
- mean / max |d|; field guidance: mean < 0.005 healthy, > 0.01 a problem (``parity_status``);
- KL(gen || train) estimators (Schulman, "Approximating KL divergence"), with r = p_train / p_gen:
  k1 = -log r = -d (unbiased, noisy, can be negative); k2 = (log r)^2 / 2 (low variance, biased);
  k3 = (r - 1) - log r (unbiased, always >= 0).

``ParityProbe.on_sync(version)`` marks the next observed batch as the first after a weight sync
(``first_after_sync``; metric ``rlobs_parity_post_sync_abs_logprob_diff_mean``): a jump there points at
weight sync or an unreset cache, a slow rise at staleness or precision.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from probes._common import Recorderish, dumps, flatten_tokens, recorder_or_global, split_tokens, warn_limited

HEALTHY_MEAN_ABS_DLOGP = 0.005
PROBLEM_MEAN_ABS_DLOGP = 0.01
SAMPLING_KEYS: dict[str, Any] = {
    "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
    "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
}
HASH_KEYS = ("tokenizer", "chat_template", "sampling")


def stable_hash(obj: Any) -> str:
    """sha256 (hex) of ``obj`` as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _backend_json(tok: Any) -> dict[str, Any] | None:
    backend = getattr(tok, "backend_tokenizer", None) or (tok if hasattr(tok, "to_str") else None)
    if backend is None:
        return None
    try:
        return json.loads(backend.to_str())
    except Exception:
        return None


def tokenizer_fingerprint(tok: Any) -> dict[str, Any]:
    """What ``tokenizer_hash`` hashes: vocab, special tokens, normalizer, pre-tokenizer."""
    try:
        vocab = tok.get_vocab(with_added_tokens=True)
    except TypeError:
        vocab = tok.get_vocab()
    cfg = _backend_json(tok) or {}
    special = sorted({str(t["content"]) for t in cfg.get("added_tokens", []) if t.get("special")})
    for attr in ("all_special_tokens",):
        extra = getattr(tok, attr, None)
        if extra:
            special = sorted(set(special) | {str(t) for t in extra})
    return {"vocab": sorted((str(k), int(v)) for k, v in vocab.items()), "special_tokens": special,
            "normalizer": cfg.get("normalizer"), "pre_tokenizer": cfg.get("pre_tokenizer")}


def tokenizer_hash(tok: Any) -> str:
    """Hash of a Hugging Face tokenizer (``transformers`` or ``tokenizers``) or anything with
    ``get_vocab()``."""
    return stable_hash(tokenizer_fingerprint(tok))


def chat_template_hash(template: Any) -> str:
    """Hash of a chat template: the text, or a tokenizer's ``chat_template``."""
    text = template if isinstance(template, str) or template is None else getattr(template, "chat_template", None)
    return stable_hash({"chat_template": text})


def sampling_view(params: Any) -> dict[str, Any]:
    """The distribution-shaping sampling parameters with canonical defaults (mapping or object)."""
    out = {}
    for key, default in SAMPLING_KEYS.items():
        val = params.get(key) if isinstance(params, Mapping) else getattr(params, key, None)
        if val is None or (key == "top_k" and val in (0, -1)):
            val = default
        out[key] = float(val) if key != "top_k" else int(val)
    return out


def sampling_hash(params: Any) -> str:
    return stable_hash(sampling_view(params))


def config_hashes(*, tokenizer: Any = None, chat_template: Any = None, sampling: Any = None) -> dict[str, str]:
    """{"tokenizer", "chat_template", "sampling"} hashes of what is given (for ``rlobs.init(hashes=)``).
    ``chat_template`` defaults to the tokenizer's."""
    out = {}
    if tokenizer is not None:
        out["tokenizer"] = tokenizer_hash(tokenizer)
        if chat_template is None and getattr(tokenizer, "chat_template", None) is not None:
            chat_template = tokenizer.chat_template
    if chat_template is not None:
        out["chat_template"] = chat_template_hash(chat_template)
    if sampling is not None:
        out["sampling"] = sampling_hash(sampling)
    return out


def compare_hashes(generator: Mapping[str, str], trainer: Mapping[str, str]) -> list[str]:
    """Names of the hashes present on both sides that differ (sorted)."""
    return sorted(k for k in set(generator) & set(trainer) if generator[k] != trainer[k])


@dataclass(frozen=True, slots=True)
class ParityStats:
    tokens: int
    mean_abs_dlogp: float
    max_abs_dlogp: float
    kl_k1: float
    kl_k2: float
    kl_k3: float


def logprob_parity(gen_logprobs: Any, train_logprobs: Any, mask: Any = None) -> ParityStats:
    """Per-token gap statistics (see the module docstring); NaN fields when there are no tokens."""
    g = flatten_tokens(gen_logprobs, mask)
    t = flatten_tokens(train_logprobs, mask)
    if g.shape != t.shape:
        raise ValueError(f"gen and train log-probs differ in shape: {g.shape} vs {t.shape}")
    if g.size == 0:
        return ParityStats(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    d = t - g  # log r
    ad = np.abs(d)
    with np.errstate(over="ignore"):
        k3 = np.expm1(d) - d
    return ParityStats(int(d.size), float(ad.mean()), float(ad.max()), float((-d).mean()),
                       float((0.5 * d * d).mean()), float(k3.mean()))


def parity_status(mean_abs_dlogp: float) -> str:
    """healthy (< 0.005), watch (0.005 .. 0.01), problem (> 0.01), unknown (NaN)."""
    if not math.isfinite(mean_abs_dlogp):
        return "unknown"
    if mean_abs_dlogp < HEALTHY_MEAN_ABS_DLOGP:
        return "healthy"
    if mean_abs_dlogp > PROBLEM_MEAN_ABS_DLOGP:
        return "problem"
    return "watch"


class ParityProbe:
    """Emits one ``parity`` event per observed batch (+ optional ``parity_sample`` per sample).

    generator_hashes / trainer_hashes: ``config_hashes`` of each side (set later with ``set_hashes``).
    sample_every: emit ``parity_sample`` events every N-th batch (0: never); the first batch after a
        sync is always sampled when ``sample_after_sync``.
    """

    def __init__(self, recorder: Recorderish | None = None, *, generator_hashes: Mapping[str, str] | None = None,
                 trainer_hashes: Mapping[str, str] | None = None, sample_every: int = 0,
                 sample_after_sync: bool = True, max_sample_events: int = 64):
        self._recorder = recorder
        self.generator_hashes = dict(generator_hashes or {})
        self.trainer_hashes = dict(trainer_hashes or {})
        self.sample_every = sample_every
        self.sample_after_sync = sample_after_sync
        self.max_sample_events = max_sample_events
        self._pending_sync: int | None = None
        self._batches = 0

    def set_hashes(self, *, generator: Mapping[str, str] | None = None,
                   trainer: Mapping[str, str] | None = None) -> None:
        if generator is not None:
            self.generator_hashes = dict(generator)
        if trainer is not None:
            self.trainer_hashes = dict(trainer)

    def mismatched_hashes(self) -> list[str] | None:
        """Hash names that differ, or None until both sides have hashes."""
        if not self.generator_hashes or not self.trainer_hashes:
            return None
        return compare_hashes(self.generator_hashes, self.trainer_hashes)

    def on_sync(self, version: int) -> None:
        """A weight sync finished: the next batch is flagged ``first_after_sync``."""
        self._pending_sync = int(version)

    def observe(self, gen_logprobs: Any, train_logprobs: Any, *, mask: Any = None,
                sample_ids: Sequence[Any] | None = None, step: int | None = None) -> ParityStats:
        """Compare one batch's log-probs (ragged list of per-sample arrays, or padded ``(B, T)`` + mask).
        Bad input (shapes that differ) is logged and yields NaN stats; nothing is emitted then."""
        try:
            stats = logprob_parity(gen_logprobs, train_logprobs, mask)
        except Exception as exc:
            warn_limited("parity", "parity probe: batch skipped: %s: %s", type(exc).__name__, exc)
            return ParityStats(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        first = self._pending_sync is not None
        self._pending_sync = None
        self._batches += 1
        mism = self.mismatched_hashes()
        fields: dict[str, Any] = {
            "tokens": stats.tokens, "mean_abs_dlogp": stats.mean_abs_dlogp, "max_abs_dlogp": stats.max_abs_dlogp,
            "kl_k1": stats.kl_k1, "kl_k2": stats.kl_k2, "kl_k3": stats.kl_k3, "first_after_sync": first,
            "hashes_match": None if mism is None else not mism,
            "mismatched_hashes": None if mism is None else dumps(mism),
        }
        if step is not None:
            fields["step"] = step
        rec = recorder_or_global(self._recorder)
        rec.emit("parity", **fields)
        want = (self.sample_every and self._batches % self.sample_every == 0) or (first and self.sample_after_sync)
        if want and sample_ids is not None:
            gens = split_tokens(gen_logprobs, mask)
            trains = split_tokens(train_logprobs, mask)
            for sid, gs, ts in list(zip(sample_ids, gens, trains))[: self.max_sample_events]:
                if gs.shape != ts.shape:
                    continue
                d = np.abs(ts - gs)
                extra = {"step": step} if step is not None else {}
                rec.emit("parity_sample", sample_id=str(sid), mean_abs_dlogp=float(d.mean()) if d.size else None,
                         max_abs_dlogp=float(d.max()) if d.size else None,
                         train_logprobs=[float(x) for x in ts], **extra)
        return stats
