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
# warmup 4: a spike at step 4 is judged against steps 0-3 (with 5, the held-out grad_spike runs with onset 4 had
# no baseline yet at the spike and were missed; the prior on sigma keeps a 4-value baseline conservative)
SPIKE: dict[str, float] = {"window": 50, "warmup": 4, "threshold": 6.0, "min_sigma": 0.05, "min_ratio": 3.0,
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


# ---------- drift: a sustained trend away from the run's own early level (early-warning precursors) ----------
# CUSUM and effect defaults; the precursor rules (rlobs.doctor.rules.precursors) override per signal from the
# failure table, chosen on the calibration runs of bench/early_warning.py
DRIFT: dict[str, float] = {"baseline": 5, "skip": 1, "k": 1.0, "h": 8.0, "min_rel": 0.1, "min_abs": 1e-3,
                           "window": 6, "min_effect": 0.3}


def theil_sen(points: Sequence[tuple[float, float]]) -> float | None:
    """Median of the pairwise slopes (robust to a few outliers); None with fewer than 2 points."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:] if x2 != x1]
    return _median(sorted(slopes)) if slopes else None


@dataclass(frozen=True, slots=True)
class Drift:
    """A sustained departure of a series from its early level, judged online at ``step``.

    ``onset``: the change-point estimate (the step the CUSUM last left zero); ``base``/``sigma``: the early
    level and its noise; ``level``: median of the last ``window`` values; ``effect``: relative change of that
    level vs ``base`` (signed, in the direction watched); ``slope``: Theil-Sen slope per step over the last
    ``window`` values (of log(value) for a log-scale detector); ``eta``: steps until the level reaches ``target``
    at that slope (0 when it already has, None when it is not heading there)."""

    step: int
    onset: int
    base: float
    sigma: float
    level: float
    effect: float
    cusum: float
    slope: float | None
    eta: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "onset": self.onset, "base": self.base, "sigma": self.sigma, "level": self.level,
                "effect": self.effect, "cusum": self.cusum, "slope": self.slope, "eta": self.eta}


class DriftDetector:
    """Online one-sided CUSUM of a per-step series against its own early level (change-point detection).

    The first ``skip`` values are ignored (step 0 is the warm start, not the run), the next ``baseline``
    values give the level (median) and noise (1.4826 x MAD, floored at ``min_rel`` x |level| and ``min_abs``:
    a constant early history is not zero noise). Then each value adds ``direction x (x - base) / sigma - k``
    to a sum floored at 0 (``k``: the allowance, in sigmas, that noise uses up); the detector alarms when the
    sum exceeds ``h`` AND the median of the last ``window`` values has moved at least ``min_effect`` relative
    to the base (``log=True``: on log(value), effect as a ratio - 1). One outlier cannot do it: ``h`` needs
    several values beyond ``k`` sigmas, and the effect is a median. ``target`` (in the value's units): the
    level where the failure shows; ``eta`` is the time to it at the recent slope.

    ``lag`` > 0: a *fast* drift instead: the reference is the ``baseline`` values ending ``lag`` steps before the
    current one (it moves with the run), and the detector alarms when the recent median is ``h`` sigmas and
    ``min_effect`` away from it (no CUSUM): a slow trend, which a run that learns has, never builds up."""

    def __init__(self, direction: int, *, baseline: int = int(DRIFT["baseline"]), skip: int = int(DRIFT["skip"]),
                 k: float = DRIFT["k"], h: float = DRIFT["h"], min_rel: float = DRIFT["min_rel"],
                 min_abs: float = DRIFT["min_abs"], window: int = int(DRIFT["window"]),
                 min_effect: float = DRIFT["min_effect"], log: bool = False, target: float | None = None,
                 lag: int = 0):
        if direction not in (1, -1):
            raise ValueError("direction must be +1 (rising is bad) or -1 (falling is bad)")
        if baseline < 3 or window < 2:
            raise ValueError(f"need baseline >= 3 and window >= 2, got {baseline}, {window}")
        self.direction, self.baseline, self.skip = direction, int(baseline), int(skip)
        self.k, self.h, self.min_rel, self.min_abs = float(k), float(h), float(min_rel), float(min_abs)
        self.window, self.min_effect, self.log, self.target = int(window), float(min_effect), bool(log), target
        self._early: list[float] = []
        self._recent: deque[tuple[int, float]] = deque(maxlen=self.window)
        self.base: float | None = None
        self.sigma: float | None = None
        self.cusum = 0.0
        self._onset: int | None = None
        self.seen = 0
        self.lag = int(lag)
        self._hist: deque[tuple[int, float]] = deque(maxlen=self.baseline + self.lag + self.window)

    def _tx(self, v: float) -> float:
        return math.log(max(v, NO_GRADIENT)) if self.log else v

    def push(self, step: int, value: float | None) -> Drift | None:
        """Add one step's value; the alarm (a ``Drift``) when the detector fires at this step, else None."""
        if value is None or not math.isfinite(value) or (self.log and value <= NO_GRADIENT):
            return None  # a missing / non-finite / no-gradient step is neither evidence nor baseline
        self.seen += 1
        if self.seen <= self.skip:
            return None
        x = self._tx(float(value))
        if self.lag > 0:
            return self._push_rolling(step, x)
        if self.base is None:
            self._early.append(x)
            if len(self._early) == self.baseline:
                med, sig, _ = robust_baseline(self._early)
                self.base = med
                self.sigma = max(sig, self.min_rel * abs(med), self.min_abs)
            return None
        assert self.sigma is not None
        self._recent.append((step, x))
        z = self.direction * (x - self.base) / self.sigma
        prev = self.cusum
        self.cusum = max(0.0, self.cusum + z - self.k)
        if prev == 0.0 and self.cusum > 0.0:
            self._onset = step
        elif self.cusum == 0.0:
            self._onset = None
        if self.cusum <= self.h or len(self._recent) < min(self.window, 3):
            return None
        level = _median(sorted(v for _, v in self._recent))
        if self.log:
            effect = math.exp(self.direction * (level - self.base)) - 1.0
        else:
            effect = self.direction * (level - self.base) / max(abs(self.base), self.min_abs)
        if effect < self.min_effect:
            return None
        slope = theil_sen(list(self._recent))
        eta = None
        if self.target is not None:
            tgt = self._tx(self.target)
            gap = self.direction * (tgt - level)
            if gap <= 0:
                eta = 0.0
            elif slope is not None and self.direction * slope > 0:
                eta = gap / (self.direction * slope)
        back = math.exp if self.log else float
        # slope (and sigma) stay on the detector's scale: per step of log(value) with log=True
        return Drift(step, self._onset if self._onset is not None else step, back(self.base),
                     self.sigma, back(level), effect, self.cusum, slope, eta)


    def _push_rolling(self, step: int, x: float) -> Drift | None:
        self._hist.append((step, x))
        self._recent.append((step, x))
        if len(self._hist) < self.baseline + self.lag:
            return None
        ref = [v for _, v in list(self._hist)[-(self.baseline + self.lag):-self.lag]]
        med, sig, _ = robust_baseline(ref)
        self.base, self.sigma = med, max(sig, self.min_rel * abs(med), self.min_abs)
        level = _median(sorted(v for _, v in self._recent))
        z = self.direction * (level - med) / self.sigma
        self.cusum = max(0.0, z)  # the recent median's distance, in sigmas (reported as the CUSUM field)
        if z <= self.h:
            return None
        if self.log:
            effect = math.exp(self.direction * (level - med)) - 1.0
        else:
            effect = self.direction * (level - med) / max(abs(med), self.min_abs)
        if effect < self.min_effect:
            return None
        slope = theil_sen(list(self._recent))
        back = math.exp if self.log else float
        return Drift(step, self._recent[0][0], back(med), self.sigma, back(level), effect, z, slope, None)


def drifts(points: Iterable[tuple[int, float | None]], direction: int, **params: Any) -> list[Drift]:
    """The online detector run over a whole (step, value) series: every step it alarms on, in order."""
    det = DriftDetector(direction, **params)
    return [d for d in (det.push(s, v) for s, v in points) if d is not None]
