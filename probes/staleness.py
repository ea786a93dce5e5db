"""Staleness: tag rollouts with the policy version at dispatch, measure off-policyness at consumption.

Tag at *dispatch* (stamping at completion under-counts staleness):

    tag = tag_dispatch(policy_version)          # VersionTag: dispatch version + wall time
    ... weights change mid-generation ...  tag.saw_version(v)  # min/max token versions
    tag.to_dict() / VersionTag.from_dict(d)     # travels with the rollout (plain JSON)

At consumption (the trainer, with its current version ``v``):

    probe = StalenessProbe(max_staleness=4, ttl_s=600, is_cap=2.0)
    reason = probe.admit(sample_id, tag, v)     # None, or "stale" / "ttl" (the sample is dropped)
    probe.drop(sample_id, "queue_full", tag=tag)   # drops decided elsewhere
    stats = probe.consume(batch_ids, batch_tags, v, gen_logprobs=..., train_logprobs=...)

Definitions (DESIGN.md §2.1):
- staleness = trainer version - dispatch version (versions, >= 0 normally; a negative value means a
  version counter went backwards, e.g. after a resume that lost its version);
- age = consumption wall time - dispatch wall time (seconds); TTL compares the same age;
- importance ratio per token w = exp(logp_train - logp_gen), the (current or old) trainer policy over
  the behaviour policy that generated the token. Reported on the raw w: mean, max, ESS ratio
  ``(sum w)^2 / (n * sum w^2)`` (1 = on-policy, 1/n = one token carries everything); the truncated
  share is the share of tokens with w > ``is_cap`` (truncated importance sampling clips them to the cap).

Events: one ledger ``consumed`` per sample (staleness, age), ledger ``dropped`` with a reason per drop,
one ``staleness`` event per consumed batch (histogram as JSON ``{"staleness": count}``), and ``queue``
depth samples via ``record_queue``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from probes._common import Recorderish, dumps, flatten_tokens, recorder_or_global, warn_limited
from probes.ledger import SampleLedger

DROP_STALE = "stale"
DROP_TTL = "ttl"
DROP_QUEUE_FULL = "queue_full"


@dataclass(slots=True)
class VersionTag:
    """Policy versions a rollout was produced under, stamped at dispatch."""

    dispatch_version: int
    dispatch_ns: int
    min_token_version: int
    max_token_version: int

    def saw_version(self, version: int) -> None:
        """Weights changed mid-generation: widen the token-version range."""
        v = int(version)
        if v < self.min_token_version:
            self.min_token_version = v
        if v > self.max_token_version:
            self.max_token_version = v

    def to_dict(self) -> dict[str, int]:
        return {"dispatch_version": self.dispatch_version, "dispatch_ns": self.dispatch_ns,
                "min_token_version": self.min_token_version, "max_token_version": self.max_token_version}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VersionTag":
        v = int(d["dispatch_version"])
        return cls(v, int(d["dispatch_ns"]), int(d.get("min_token_version", v)), int(d.get("max_token_version", v)))

    def rollout_fields(self) -> dict[str, int]:
        """The fields of a ``rollout`` event this tag fills."""
        return {"dispatch_version": self.dispatch_version, "min_token_version": self.min_token_version,
                "max_token_version": self.max_token_version}


def tag_dispatch(version: int, now_ns: int | None = None) -> VersionTag:
    """Tag a request with the policy version current when it is dispatched."""
    v = int(version)
    return VersionTag(v, time.time_ns() if now_ns is None else int(now_ns), v, v)


def staleness_of(tag: VersionTag | Mapping[str, Any], trainer_version: int) -> int:
    """trainer version - dispatch version."""
    dv = tag.dispatch_version if isinstance(tag, VersionTag) else int(tag["dispatch_version"])
    return int(trainer_version) - int(dv)


def age_of(tag: VersionTag | Mapping[str, Any], now_ns: int | None = None) -> float:
    """Seconds since dispatch."""
    dns = tag.dispatch_ns if isinstance(tag, VersionTag) else int(tag["dispatch_ns"])
    return ((time.time_ns() if now_ns is None else int(now_ns)) - int(dns)) / 1e9


@dataclass(frozen=True, slots=True)
class ISStats:
    """Importance-sampling ratio statistics over the tokens of a batch."""

    tokens: int
    mean: float
    max: float
    clipped_ratio: float
    ess_ratio: float


def importance_stats(gen_logprobs: Any, train_logprobs: Any, *, cap: float = 2.0, mask: Any = None) -> ISStats:
    """Stats of w = exp(train - gen) per token (see module docstring). NaN fields when there are no tokens."""
    g = flatten_tokens(gen_logprobs, mask)
    t = flatten_tokens(train_logprobs, mask)
    if g.shape != t.shape:
        raise ValueError(f"gen and train log-probs differ in shape: {g.shape} vs {t.shape}")
    n = int(g.size)
    if n == 0:
        return ISStats(0, math.nan, math.nan, math.nan, math.nan)
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(t - g)
        s1 = float(w.sum())
        s2 = float((w * w).sum())
    ess = (s1 * s1) / (n * s2) if s2 > 0 and math.isfinite(s2) else math.nan
    return ISStats(n, float(w.mean()), float(w.max()), float((w > cap).sum()) / n, ess)


@dataclass(frozen=True, slots=True)
class BatchStaleness:
    """What ``StalenessProbe.consume`` measured for one batch."""

    samples: int
    histogram: dict[int, int]
    max_staleness: int | None
    mean_staleness: float
    mean_age_s: float
    max_age_s: float
    importance: ISStats | None
    correction_cap: float | None = None
    max_bounded_staleness: int | None = None

    def fields(self) -> dict[str, Any]:
        """The ``staleness`` event fields."""
        imp = self.importance
        return {
            "samples": self.samples, "max_staleness": self.max_staleness, "mean_staleness": self.mean_staleness,
            "histogram": dumps({str(k): v for k, v in sorted(self.histogram.items())}),
            "mean_age_s": self.mean_age_s, "max_age_s": self.max_age_s,
            "is_ratio_mean": imp.mean if imp else None, "is_ratio_max": imp.max if imp else None,
            "is_clipped_ratio": imp.clipped_ratio if imp else None, "ess_ratio": imp.ess_ratio if imp else None,
            "is_correction_cap": self.correction_cap, "max_bounded_staleness": self.max_bounded_staleness,
        }


class StalenessProbe:
    """Staleness policy checks and measurements at the consumer (the trainer or the buffer).

    max_staleness: drop samples whose staleness exceeds this (None: never).
    ttl_s: drop samples older than this many seconds since dispatch (None: never).
    is_cap: importance-ratio truncation cap used for ``is_clipped_ratio``.
    correction_cap: the cap the consumer's loss applies to the importance ratio (0: none, stale samples are
        used uncorrected; None: not said). Recorded as ``is_correction_cap``: with it, a low ``ess_ratio`` reads as
        a bias nobody corrects (the doctor's ``precursor-uncorrected-off-policy``).
    ledger: a ``SampleLedger`` to route consumed/dropped transitions through (share one with the rest of
        the process for exactly-once checks); by default an untracked one that only emits.
    """

    def __init__(self, recorder: Recorderish | None = None, *, max_staleness: int | None = None,
                 ttl_s: float | None = None, is_cap: float = 2.0, ledger: SampleLedger | None = None,
                 correction_cap: float | None = None):
        self._recorder = recorder
        self.max_staleness = max_staleness
        self.ttl_s = ttl_s
        self.is_cap = is_cap
        self.correction_cap = None if correction_cap is None else float(correction_cap)
        self.ledger = ledger if ledger is not None else SampleLedger(recorder, track=False)
        self.drops: Counter[str] = Counter()

    def admit(self, sample_id: str, tag: VersionTag | Mapping[str, Any], trainer_version: int, *,
              now_ns: int | None = None, tokens: int | None = None) -> str | None:
        """Apply the staleness and TTL bounds. Returns None to keep the sample, or the drop reason
        (``"stale"`` checked first, then ``"ttl"``) after recording the drop."""
        s = staleness_of(tag, trainer_version)
        age = age_of(tag, now_ns)
        reason = None
        if self.max_staleness is not None and s > self.max_staleness:
            reason = DROP_STALE
        elif self.ttl_s is not None and age > self.ttl_s:
            reason = DROP_TTL
        if reason is not None:
            self._drop(sample_id, reason, age, tokens)
        return reason

    def drop(self, sample_id: str, reason: str, *, tag: VersionTag | Mapping[str, Any] | None = None,
             now_ns: int | None = None, tokens: int | None = None) -> None:
        """Record a drop decided elsewhere (``queue_full``, ``aborted``, ...)."""
        self._drop(sample_id, reason, None if tag is None else age_of(tag, now_ns), tokens)

    def _drop(self, sample_id: str, reason: str, age: float | None, tokens: int | None) -> None:
        self.drops[reason] += 1
        self.ledger.dropped(sample_id, reason, age_s=age, tokens=tokens)

    def consume(self, sample_ids: Sequence[str], tags: Sequence[VersionTag | Mapping[str, Any]],
                trainer_version: int, *, gen_logprobs: Any = None, train_logprobs: Any = None,
                mask: Any = None, now_ns: int | None = None, tokens: Sequence[int] | None = None,
                emit_ledger: bool = True, bounded_staleness: Sequence[int] | None = None) -> BatchStaleness:
        """Measure one consumed batch: a ledger ``consumed`` per sample and one ``staleness`` event.

        gen_logprobs / train_logprobs: per-token log-probs of the batch (ragged list or padded + mask)
            for the importance-ratio stats; omit both to skip them.
        bounded_staleness: per sample, the staleness the consumer's bound was checked on when that is not the
            dispatch staleness (trainer_ref's completion basis: trainer version - the newest token version of the
            sample's group; a resumed group keeps older first tokens by design). Recorded as
            ``max_bounded_staleness`` beside the dispatch ``max_staleness``, which stays what it is.
        """
        if len(sample_ids) != len(tags):
            raise ValueError(f"{len(sample_ids)} sample ids but {len(tags)} tags")
        now = time.time_ns() if now_ns is None else int(now_ns)
        stal = [staleness_of(t, trainer_version) for t in tags]
        ages = [age_of(t, now) for t in tags]
        if emit_ledger:
            for i, sid in enumerate(sample_ids):
                self.ledger.consumed(sid, staleness=stal[i], age_s=ages[i],
                                     tokens=None if tokens is None else int(tokens[i]))
        imp = None
        if gen_logprobs is not None and train_logprobs is not None:
            try:
                imp = importance_stats(gen_logprobs, train_logprobs, cap=self.is_cap, mask=mask)
            except Exception as exc:  # bad input is reported, never raised into training
                warn_limited("staleness.is", "staleness probe: importance stats skipped: %s: %s",
                             type(exc).__name__, exc)
        n = len(stal)
        bounded = [int(x) for x in bounded_staleness] if bounded_staleness is not None else None
        if bounded is not None and len(bounded) != n:
            warn_limited("staleness.bounded", "staleness probe: %d bounded staleness values for %d samples; ignored",
                         len(bounded), n)
            bounded = None
        result = BatchStaleness(
            samples=n, histogram=dict(Counter(stal)), max_staleness=max(stal) if n else None,
            mean_staleness=float(sum(stal)) / n if n else math.nan,
            mean_age_s=float(sum(ages)) / n if n else math.nan, max_age_s=max(ages) if n else math.nan,
            importance=imp, correction_cap=self.correction_cap,
            max_bounded_staleness=max(bounded) if bounded else None,
        )
        recorder_or_global(self._recorder).emit("staleness", **result.fields())
        return result


def record_queue(name: str, depth: int, capacity: int | None = None, oldest_age_s: float | None = None, *,
                 recorder: Recorderish | None = None) -> None:
    """One ``queue`` depth sample (rollout queue, grader queue, ...)."""
    recorder_or_global(recorder).emit("queue", queue=name, depth=int(depth),
                                      capacity=None if capacity is None else int(capacity),
                                      oldest_age_s=None if oldest_age_s is None else float(oldest_age_s))


def record_rollout(sample_id: str, tag: VersionTag, *, group_id: str | None = None, prompt_id: str | None = None,
                   prompt_tokens: int | None = None, completion_tokens: int | None = None,
                   finish_reason: str | None = None, gen_seconds: float | None = None,
                   logprobs: Sequence[float] | None = None, ledger: SampleLedger | None = None,
                   recorder: Recorderish | None = None) -> None:
    """Generator side: one ``rollout`` event carrying the dispatch tag, plus the ledger ``generated``
    transition (through ``ledger`` when given, for exactly-once checks)."""
    recorder_or_global(recorder).emit(
        "rollout", sample_id=str(sample_id), group_id=None if group_id is None else str(group_id),
        prompt_id=None if prompt_id is None else str(prompt_id),
        prompt_tokens=None if prompt_tokens is None else int(prompt_tokens),
        completion_tokens=None if completion_tokens is None else int(completion_tokens),
        finish_reason=finish_reason, gen_seconds=None if gen_seconds is None else float(gen_seconds),
        logprobs=None if logprobs is None else [float(x) for x in logprobs], **tag.rollout_fields())
    led = ledger if ledger is not None else SampleLedger(recorder, track=False)
    led.generated(str(sample_id), group_id=group_id, tokens=completion_tokens)
