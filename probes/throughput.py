"""Throughput matching: generator vs trainer rates over windows, idle ratios, sync bubbles, and the
equilibrium staleness the rates predict.

One ``ThroughputMeter`` per side (in the generator process and in the trainer process):

    gen = ThroughputMeter(window_s=10)
    gen.produced(samples=8, tokens=3100)      # generator: completions; trainer: samples trained on
    gen.effective(samples=6)                  # generator: of those, samples the trainer consumed
    with gen.busy(): ...                      # time the side did work (the rest of the window is idle)
    with gen.sync_bubble(): ...               # time blocked by a weight sync
    gen.tick()                                # emits a ``throughput`` event when the window is over

Effective generator throughput counts only generated samples the trainer later consumed. Call
``effective()`` where consumption is seen: on the generator's meter in one process, or on a meter in the
trainer (or buffer) process that counts consumed samples per window; the gap between the generator's
``samples_per_s`` and the effective rate is throughput spent on samples that were dropped.

Predicted equilibrium staleness (``predict_staleness``), from Little's law. In steady state samples
are consumed at r = min(generator rate, trainer rate) samples/s. When a sample is dispatched, the
samples ahead of it in the pipeline are those being generated (r * L, L = mean generation latency)
and those waiting in the queue (D: the queue capacity when the generator is faster, since it fills
up; 0 when the trainer is faster, since it drains). The trainer consumes B samples per optimiser step
(one policy version each), so by the time the sample is consumed the policy has advanced

    staleness ~= (r * L + D) / B  versions,

capped at ``max_staleness`` when the consumer drops older samples. With an unbounded queue and a
faster generator the queue grows without limit and so does staleness (``inf``). In ``sync`` mode
staleness is 0; in ``colocate_async`` it is 1 by construction.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from probes._common import Recorderish, recorder_or_global


def predict_staleness(generator_samples_per_s: float, trainer_samples_per_s: float, batch_size: int, *,
                      generation_latency_s: float, queue_capacity: int | None = None,
                      max_staleness: int | None = None) -> float:
    """Equilibrium staleness in policy versions (see the module docstring for the derivation)."""
    g, t = float(generator_samples_per_s), float(trainer_samples_per_s)
    if batch_size <= 0 or g <= 0 or t <= 0:
        return math.nan
    r = min(g, t)
    if g > t:
        depth = math.inf if queue_capacity is None else float(queue_capacity)
    else:
        depth = 0.0
    s = (r * float(generation_latency_s) + depth) / float(batch_size)
    if max_staleness is not None:
        s = min(s, float(max_staleness))
    return s


@dataclass(frozen=True, slots=True)
class ThroughputWindow:
    window_s: float
    samples: int
    tokens: int
    effective_samples: int | None
    busy_s: float
    sync_bubble_s: float
    predicted_staleness: float | None = None

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.window_s if self.window_s > 0 else math.nan

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.window_s if self.window_s > 0 else math.nan

    @property
    def effective_samples_per_s(self) -> float | None:
        if self.effective_samples is None:
            return None
        return self.effective_samples / self.window_s if self.window_s > 0 else math.nan

    @property
    def idle_ratio(self) -> float:
        if self.window_s <= 0:
            return math.nan
        return min(max(1.0 - self.busy_s / self.window_s, 0.0), 1.0)

    def fields(self) -> dict[str, float | int | None]:
        """The ``throughput`` event fields."""
        return {"window_s": self.window_s, "samples": self.samples, "tokens": self.tokens,
                "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s,
                "effective_samples_per_s": self.effective_samples_per_s, "idle_ratio": self.idle_ratio,
                "sync_bubble_s": self.sync_bubble_s, "predicted_staleness": self.predicted_staleness}


class ThroughputMeter:
    """Counts one side's work over windows of ``window_s`` seconds and emits ``throughput`` events.

    Busy time is what ``busy()`` / ``add_busy`` measured inside the window; sync bubbles count as idle
    (they are reported separately in ``sync_bubble_s``). Thread-safe.
    """

    def __init__(self, recorder: Recorderish | None = None, *, window_s: float = 10.0,
                 clock: Callable[[], float] | None = None):
        self._recorder = recorder
        self.window_s = float(window_s)
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._start = self._clock()
        self._reset_counts()
        self.last: ThroughputWindow | None = None

    def _reset_counts(self) -> None:
        self._samples = 0
        self._tokens = 0
        self._effective: int | None = None
        self._busy = 0.0
        self._bubble = 0.0

    def produced(self, samples: int = 1, tokens: int = 0) -> None:
        with self._lock:
            self._samples += int(samples)
            self._tokens += int(tokens)

    def effective(self, samples: int = 1) -> None:
        """Samples of this side's output that were consumed (generator side)."""
        with self._lock:
            self._effective = (self._effective or 0) + int(samples)

    def add_busy(self, seconds: float) -> None:
        with self._lock:
            self._busy += float(seconds)

    def add_sync_bubble(self, seconds: float) -> None:
        with self._lock:
            self._bubble += float(seconds)

    @contextmanager
    def busy(self) -> Iterator[None]:
        t0 = self._clock()
        try:
            yield
        finally:
            self.add_busy(self._clock() - t0)

    @contextmanager
    def sync_bubble(self) -> Iterator[None]:
        t0 = self._clock()
        try:
            yield
        finally:
            self.add_sync_bubble(self._clock() - t0)

    def tick(self, *, predicted_staleness: float | None = None, force: bool = False) -> ThroughputWindow | None:
        """Emit and return the window if ``window_s`` has passed (or ``force``); else None."""
        now = self._clock()
        with self._lock:
            elapsed = now - self._start
            if not force and elapsed < self.window_s:
                return None
            w = ThroughputWindow(elapsed, self._samples, self._tokens, self._effective, self._busy, self._bubble,
                                 predicted_staleness)
            self._start = now
            self._reset_counts()
        self.last = w
        recorder_or_global(self._recorder).emit("throughput", **w.fields())
        return w
