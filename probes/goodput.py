"""Goodput: the effective-token ratio and where the other generated tokens went (DESIGN.md §2.9).

A token is *effective* when it carried gradient signal: it was trained on, in a group whose
advantages are not all zero, and it was not masked out. Every other generated token lands in one
category:

    stale           dropped: staleness over the bound (ledger reason ``stale``)
    expired         dropped: older than the TTL (``ttl``)
    queue_full      dropped: the bounded queue was full (``queue_full``)
    zero_advantage  trained on, but its group's rewards were all equal (advantage 0)
    truncated       cut at max length and masked out of the loss (``truncated``)
    grader_error    no reward: the grader failed or timed out (``grader_error``)
    aborted         generation aborted, e.g. by a weight sync (``aborted``)

Per step ``emit_step()`` emits one ``goodput`` event per non-empty category (always one for
``effective``, carrying ``effective_ratio`` = effective / all tokens accounted this step; metric
``rlobs_effective_token_ratio``) and resets the step counters; running totals stay in ``totals``.

Token-based cost per component: ``cost_per_effective_token(phase_seconds, effective_tokens)`` turns the
seconds each component spent (``Liveness.totals()``: generation, grading, training, sync) into seconds
per effective token, the price of one token of learning signal. In PromQL:
``rate(rlobs_phase_seconds_total[5m]) / ignoring(phase) group_left
rate(rlobs_goodput_tokens_total{category="effective"}[5m])``.

    acct = GoodputAccount()
    ledger = SampleLedger(goodput=acct)          # drops are accounted automatically
    acct.add_batch(tokens=[12, 40, 33], zero_advantage=[False, True, False])
    acct.emit_step()
"""

from __future__ import annotations

import math
import threading
from typing import Any, Mapping, Sequence

from probes._common import Recorderish, as_list, recorder_or_global

CATEGORIES = ("effective", "stale", "expired", "queue_full", "zero_advantage", "truncated", "grader_error", "aborted")
REASON_TO_CATEGORY = {"stale": "stale", "ttl": "expired", "queue_full": "queue_full",
                      "zero_advantage": "zero_advantage", "truncated": "truncated", "grader_error": "grader_error",
                      "aborted": "aborted"}


class GoodputAccount:
    """Token accounting by category, per step and in total. Thread-safe."""

    def __init__(self, recorder: Recorderish | None = None):
        self._recorder = recorder
        self._lock = threading.Lock()
        self._step = {c: [0, 0] for c in CATEGORIES}  # category -> [tokens, samples]
        self.totals = {c: [0, 0] for c in CATEGORIES}

    def add(self, category: str, tokens: int, samples: int = 1) -> None:
        if category not in self._step:
            raise ValueError(f"unknown goodput category {category!r}; valid: {', '.join(CATEGORIES)}")
        with self._lock:
            for d in (self._step, self.totals):
                d[category][0] += int(tokens)
                d[category][1] += int(samples)

    def add_drop(self, reason: str, tokens: int, samples: int = 1) -> None:
        """A dropped sample, by ledger drop reason."""
        cat = REASON_TO_CATEGORY.get(reason)
        if cat is None:
            raise ValueError(f"unknown drop reason {reason!r}; valid: {', '.join(REASON_TO_CATEGORY)}")
        self.add(cat, tokens, samples)

    def add_batch(self, tokens: Sequence[int] | Any, *, zero_advantage: Sequence[bool] | Any = None,
                  truncated_masked: Sequence[bool] | Any = None) -> dict[str, int]:
        """A trained batch: each sample's loss-eligible tokens, whether its advantage was zero (its group's
        rewards all equal), whether it was masked out as truncated. Returns tokens by category."""
        toks = [int(t) for t in as_list(tokens)]
        zero = [bool(z) for z in as_list(zero_advantage)] or [False] * len(toks)
        trunc = [bool(t) for t in as_list(truncated_masked)] or [False] * len(toks)
        if not (len(zero) == len(trunc) == len(toks)):
            raise ValueError(f"lengths differ: tokens {len(toks)}, zero_advantage {len(zero)}, truncated {len(trunc)}")
        out = {"effective": 0, "zero_advantage": 0, "truncated": 0}
        counts = {"effective": 0, "zero_advantage": 0, "truncated": 0}
        for t, z, tr in zip(toks, zero, trunc):
            cat = "truncated" if tr else ("zero_advantage" if z else "effective")
            out[cat] += t
            counts[cat] += 1
        for cat in out:
            if counts[cat]:
                self.add(cat, out[cat], counts[cat])
        return out

    def step_counts(self) -> dict[str, int]:
        with self._lock:
            return {c: v[0] for c, v in self._step.items()}

    @staticmethod
    def ratio(counts: Mapping[str, Any]) -> float:
        """effective / all tokens, from {category: tokens} or {category: (tokens, samples)}."""
        toks = {c: int(v[0] if isinstance(v, (list, tuple)) else v) for c, v in counts.items()}
        total = sum(toks.values())
        return toks.get("effective", 0) / total if total else math.nan

    @property
    def total_ratio(self) -> float:
        """Effective-token ratio over the whole run so far."""
        with self._lock:
            return self.ratio(self.totals)

    def emit_step(self, step: int | None = None) -> dict[str, Any]:
        """Emit this step's ``goodput`` events, reset the step counters, return {category: tokens, ratio}."""
        with self._lock:
            snap = {c: tuple(v) for c, v in self._step.items()}
            self._step = {c: [0, 0] for c in CATEGORIES}
        ratio = self.ratio(snap)
        rec = recorder_or_global(self._recorder)
        extra = {"step": step} if step is not None else {}
        for cat, (tokens, samples) in snap.items():
            if cat == "effective":
                rec.emit("goodput", category=cat, tokens=tokens, samples=samples,
                         effective_ratio=ratio if math.isfinite(ratio) else None, **extra)
            elif tokens or samples:
                rec.emit("goodput", category=cat, tokens=tokens, samples=samples, **extra)
        return {**{c: v[0] for c, v in snap.items()}, "effective_ratio": ratio}


def cost_per_effective_token(phase_seconds: Mapping[str, Any], effective_tokens: int) -> dict[str, float]:
    """Seconds per effective token for each component. ``phase_seconds``: {phase: seconds} or
    ``Liveness.totals()`` ({phase: {"seconds": s, ...}})."""
    out = {}
    for name, v in phase_seconds.items():
        s = float(v["seconds"]) if isinstance(v, Mapping) else float(v)
        out[name] = s / effective_tokens if effective_tokens else math.inf
    return out
