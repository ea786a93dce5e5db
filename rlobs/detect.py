"""One set of detectors for every consumer: the live probes, the alert thresholds, the doctor and the app.

Everything here is plain numpy + the standard library (``import rlobs`` stays free of torch/ray/scipy):

* ``SpikeDetector``: online robust spike detection on log(value). The baseline is the rolling median of
  the last ``window`` *positive, finite* values (a step without gradient, norm <= ``floor``, is not a
  baseline: zero never becomes the denominator); the noise is the run's own robust scale,
  1.4826 x MAD of the logs, floored at ``min_sigma`` so a constant series does not make a 1 % wiggle a
  spike. The noise estimate is shrunk towards a prior (``prior_sigma`` on the log scale, worth ``prior_n``
  steps): sigma^2 = (n mad_sigma^2 + prior_n prior_sigma^2) / (n + prior_n), so five or ten quiet steps do
  not make a 3.7-sigma draw of healthy noise a spike; with a full window the run's own noise dominates.
  A spike needs robust z > ``threshold`` AND an effect of at least ``min_ratio`` x the baseline
  (a log-scale test is multiplicative: z alone flags tiny absolute jumps on a very quiet series). It
  needs ``warmup`` baseline values first. Every positive finite value joins the window (a lasting level
  shift stops firing after about window/2 steps); NaN/Inf and zeros never do.
* ``spikes(values)``: the same detector run offline over a series: the doctor and the app call it on
  the record and get exactly the live probe's decision for every step of one rank.
* ``wilson``: a binomial proportion's 95 % interval (Wilson score), so "6 of 8 groups" is judged as the
  weak evidence it is; ``share_exceeds``: the lower bound clears a bar.
* ``robust_baseline``: median and robust sigma of a history (NaN-safe, constant-safe).
* ``level_shift``: did a series move after a step by more than its own noise (impact of an anomaly).

Defaults (``SPIKE``) were chosen on the calibration split of ``bench/doctor_eval`` (see README, "How
accurate is the doctor"); the failure table (``rlobs.failures``) records them for alerts and runbooks.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

MAD_TO_SIGMA = 1.4826
NO_GRADIENT = 1e-8  # a grad norm at or below this is a step without gradient, never a baseline value

# the one spike-detector setting (live probe, doctor, app, alert all read it)
SPIKE: dict[str, float] = {"window": 50, "warmup": 5, "threshold": 6.0, "min_sigma": 0.05, "min_ratio": 3.0,
                           "prior_sigma": 0.5, "prior_n": 10}


@dataclass(frozen=True, slots=True)
class SpikeScore:
    """One value judged against its baseline: effect size (ratio to the median, robust z) and the noise
    it was judged with (sigma on the log scale, n baseline values). ``z`` is None without a baseline."""

    value: float
    baseline: float | None  # rolling median, in the value's units
    z: float | None
    ratio: float | None  # value / baseline
    sigma: float | None  # robust sigma of log(value) over the baseline window
    n: int  # baseline values used
    spike: bool

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "baseline": self.baseline, "z": self.z, "ratio": self.ratio,
                "sigma": self.sigma, "n": self.n, "spike": self.spike}


def _median(xs: list[float]) -> float:
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _usable(value: float, floor: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > floor


class SpikeDetector:
    """Online robust spike detector on log(value): rolling median / MAD with a warm-up and an effect floor."""

    def __init__(self, *, window: int = int(SPIKE["window"]), warmup: int = int(SPIKE["warmup"]),
                 threshold: float = SPIKE["threshold"], min_sigma: float = SPIKE["min_sigma"],
                 min_ratio: float = SPIKE["min_ratio"], prior_sigma: float = SPIKE["prior_sigma"],
                 prior_n: float = SPIKE["prior_n"], floor: float = NO_GRADIENT):
        if warmup < 3 or window < warmup:
            raise ValueError(f"need 3 <= warmup <= window, got warmup={warmup}, window={window}")
        self.window = int(window)
        self.warmup = int(warmup)
        self.threshold = float(threshold)
        self.min_sigma = float(min_sigma)
        self.min_ratio = float(min_ratio)
        self.prior_sigma = float(prior_sigma)
        self.prior_n = float(prior_n)
        self.floor = float(floor)
        self._values: deque[float] = deque(maxlen=self.window)
        self.seen = 0

    def judge(self, value: float) -> SpikeScore:
        """Score ``value`` against the window without adding it."""
        n = len(self._values)
        if n < self.warmup or not _usable(value, self.floor):
            med = math.exp(_median(sorted(self._values))) if n else None
            return SpikeScore(float(value), med, None, None if med is None or not _usable(value, self.floor)
                              else value / med, None, n, False)
        med = _median(sorted(self._values))  # plain Python: ~5x faster than numpy on a 50-value window
        mad_sigma = MAD_TO_SIGMA * _median(sorted(abs(v - med) for v in self._values))
        sigma = max(math.sqrt((n * mad_sigma ** 2 + self.prior_n * self.prior_sigma ** 2) / (n + self.prior_n)),
                    self.min_sigma)
        lv = math.log(value)
        z = (lv - med) / sigma
        ratio = math.exp(lv - med)
        return SpikeScore(float(value), math.exp(med), z, ratio, sigma, n,
                          z > self.threshold and ratio >= self.min_ratio)

    def score(self, value: float) -> float | None:
        """Robust z of ``value`` against the window (None during warm-up or for values without gradient)."""
        return self.judge(value).z

    @property
    def median(self) -> float | None:
        """Running median of the window, in the value's units."""
        return math.exp(_median(sorted(self._values))) if self._values else None

    def push(self, value: float) -> SpikeScore:
        """Judge ``value`` then add it to the window."""
        s = self.judge(value)
        if _usable(value, self.floor):
            self._values.append(math.log(value))
            self.seen += 1
        return s

    def update(self, value: float) -> tuple[float | None, bool]:
        """Score ``value`` then add it to the window. Returns (score, spike)."""
        s = self.push(value)
        return s.z, s.spike

    def state(self) -> dict[str, Any]:
        """JSON-able state (save with a checkpoint so a resumed run keeps its baseline)."""
        return {"values": list(self._values), "seen": self.seen}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._values = deque((float(v) for v in state.get("values", [])), maxlen=self.window)
        self.seen = int(state.get("seen", len(self._values)))

    def params(self) -> dict[str, float]:
        return {"window": self.window, "warmup": self.warmup, "threshold": self.threshold,
                "min_sigma": self.min_sigma, "min_ratio": self.min_ratio, "prior_sigma": self.prior_sigma,
                "prior_n": self.prior_n}


def spikes(values: Iterable[float], **params: float) -> list[SpikeScore]:
    """The online detector run over a whole series (one score per value, in order)."""
    det = SpikeDetector(**{k: (int(v) if k in ("window", "warmup") else float(v)) for k, v in params.items()
                           if k in SPIKE})
    return [det.push(float(v) if v is not None else math.nan) for v in values]


def robust_baseline(values: Sequence[float] | np.ndarray) -> tuple[float, float, int]:
    """(median, robust sigma = 1.4826 x MAD, n) of the finite values; (nan, nan, 0) when there are none.
    A constant history has sigma 0: callers floor it (never divide by it)."""
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return math.nan, math.nan, 0
    med = float(np.median(x))
    return med, MAD_TO_SIGMA * float(np.median(np.abs(x - med))), int(x.size)


_Z95 = NormalDist().inv_cdf(0.975)


def wilson(k: float, n: float, conf: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n ((0, 1) when n is 0)."""
    if n <= 0:
        return 0.0, 1.0
    z = _Z95 if conf == 0.95 else NormalDist().inv_cdf(0.5 + conf / 2)
    p = min(max(k / n, 0.0), 1.0)
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def share_exceeds(k: float, n: float, bar: float, conf: float = 0.95) -> bool:
    """The share k/n is above ``bar`` with the given confidence (Wilson lower bound > bar)."""
    return n > 0 and wilson(k, n, conf)[0] > bar


@dataclass(frozen=True, slots=True)
class Shift:
    """A series' level after a step vs before it, in units of its own robust noise."""

    before: float
    after: float
    sigma: float
    z: float  # (after - before) / sigma (sign: direction)
    n_before: int
    n_after: int


def level_shift(series: Sequence[tuple[int, float]], at: int, *, before: int = 8, after: int = 3,
                min_sigma_rel: float = 0.05, min_sigma_abs: float = 1e-6) -> Shift | None:
    """Median of ``after`` steps from ``at`` (inclusive of the step after it) vs median of up to ``before``
    steps before ``at``, scaled by the pre-window's robust sigma (floored relative to its level and
    absolutely: a constant history is not zero noise). None without >= 3 values before and >= 1 after."""
    pre = [v for s, v in series if s < at and math.isfinite(v)][-before:]
    post = [v for s, v in series if at < s <= at + after and math.isfinite(v)]
    if len(pre) < 3 or not post:
        return None
    med, sigma, n = robust_baseline(pre)
    sigma = max(sigma, min_sigma_rel * abs(med), min_sigma_abs)
    a = float(np.median(post))
    return Shift(med, a, sigma, (a - med) / sigma, n, len(post))
