"""Grader latency: per call queue wait, latency, outcome and reward; a watchdog for hung calls.

    graders = GraderProbe(deadline_s=30)          # starts the watchdog thread
    reward = graders.call("code", run_tests, completion, sample_id=sid, submitted_ns=t_submit)
    reward = await graders.acall("judge", judge(completion), sample_id=sid, timeout_s=60)
    with graders.waiting():                       # trainer blocked on rewards
        batch = rewards_queue.get()
    wait_s = graders.take_wait()                  # -> train_step.reward_wait_s

Each call emits one ``grader_call`` event: ``queue_wait_s`` (submission -> start; 0 without
``submitted_ns``), ``latency_s`` (start -> end), ``outcome`` (ok / timeout / error) and ``reward``
(when the grader returned a number, or what ``reward_of`` extracts). ``step=`` / ``policy_version=`` on a
call stamp its event: a grader in its own process has no trainer step, and without one the doctor places
the call on the trainer step in progress when it finished (wall clock), which misplaces calls when
grading lags training. The wrappers are transparent: they
return what the grader returned and re-raise what it raised (``TimeoutError`` and
``asyncio.TimeoutError`` count as ``timeout``).

Watchdog: every ``interval_s`` it emits one ``grader_inflight`` event per grader kind with calls in
flight, how many are past ``deadline_s`` and the oldest age; the first time a call goes overdue it
logs a warning and calls ``on_overdue(InflightCall)``. A hung grader is thus reported between
``deadline_s`` and ``deadline_s + interval_s`` after it started.

Reward-wait share: ``waiting()`` accumulates the seconds the trainer blocks on rewards;
``wait_share()`` is that over the wall time since the probe was created (or ``reset_share()``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator

from probes._common import Recorderish, recorder_or_global

log = logging.getLogger("probes.grader")


@dataclass(slots=True)
class InflightCall:
    call_id: int
    kind: str
    sample_id: str | None
    started: float  # time.monotonic()
    overdue_reported: bool = False
    step: int | None = None  # trainer step the call belongs to (None: the recorder's context)
    policy_version: int | None = None  # policy that generated the graded sample (None: the context)


@dataclass(slots=True)
class CallHandle:
    """An open call for ``track``: set ``reward`` (and ``outcome`` / ``error`` if you handle failures)."""

    kind: str
    sample_id: str | None
    reward: float | None = None
    outcome: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _reward(value: Any, reward_of: Callable[[Any], Any] | None) -> float | None:
    try:
        if reward_of is not None:
            value = reward_of(value)
        if value is None or isinstance(value, bool):
            return None if value is None else float(value)
        return float(value)
    except (TypeError, ValueError):
        return None


class GraderProbe:
    """Instrumented grader calls plus an in-flight watchdog.

    deadline_s: age after which a call in flight counts as overdue.
    interval_s: watchdog period (``grader_inflight`` events are emitted each period while calls are in
        flight, and once more when the last one ends).
    on_overdue: called (from the watchdog thread) once per call that goes overdue.
    reward_of: extracts the reward from what the grader returns (default: the value if it is a number).
    """

    def __init__(self, recorder: Recorderish | None = None, *, deadline_s: float = 30.0, interval_s: float = 1.0,
                 on_overdue: Callable[[InflightCall], None] | None = None,
                 reward_of: Callable[[Any], Any] | None = None, watchdog: bool = True):
        self._recorder = recorder
        self.deadline_s = float(deadline_s)
        self.interval_s = float(interval_s)
        self.on_overdue = on_overdue
        self.reward_of = reward_of
        self._ids = itertools.count(1)
        self._inflight: dict[int, InflightCall] = {}
        self._kinds_seen: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wait_s = 0.0
        self._wait_total = 0.0
        self._share_origin = time.monotonic()
        self.overdue_calls: list[InflightCall] = []
        if watchdog:
            self.start()

    # ---- calls ----------------------------------------------------------------------------------
    def _begin(self, kind: str, sample_id: Any, step: int | None = None,
               policy_version: int | None = None) -> InflightCall:
        c = InflightCall(next(self._ids), str(kind), None if sample_id is None else str(sample_id), time.monotonic(),
                         step=None if step is None else int(step),
                         policy_version=None if policy_version is None else int(policy_version))
        with self._lock:
            self._inflight[c.call_id] = c
            self._kinds_seen.add(kind)
        return c

    def _end(self, c: InflightCall, submitted_ns: int | None, start_ns: int, outcome: str, reward: float | None,
             error: str | None) -> None:
        latency = time.monotonic() - c.started
        with self._lock:
            self._inflight.pop(c.call_id, None)
        wait = max((start_ns - submitted_ns) / 1e9, 0.0) if submitted_ns is not None else 0.0
        stamp = {k: v for k, v in (("step", c.step), ("policy_version", c.policy_version)) if v is not None}
        recorder_or_global(self._recorder).emit(
            "grader_call", **stamp, sample_id=c.sample_id, grader_kind=c.kind, queue_wait_s=wait, latency_s=latency,
            outcome=outcome, reward=reward if outcome == "ok" else None, error=error)

    @staticmethod
    def _classify(exc: BaseException) -> str:
        return "timeout" if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) else "error"

    def call(self, kind: str, fn: Callable[..., Any], *args: Any, sample_id: Any = None,
             submitted_ns: int | None = None, step: int | None = None, policy_version: int | None = None,
             **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as one grader call of ``kind``; return its result. ``step`` /
        ``policy_version`` stamp the event (graders in their own process have no trainer step of their own)."""
        start_ns = time.time_ns()
        c = self._begin(kind, sample_id, step, policy_version)
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:
            self._end(c, submitted_ns, start_ns, self._classify(exc), None, f"{type(exc).__name__}: {exc}")
            raise
        self._end(c, submitted_ns, start_ns, "ok", _reward(value, self.reward_of), None)
        return value

    async def acall(self, kind: str, awaitable: Awaitable[Any], *, sample_id: Any = None,
                    submitted_ns: int | None = None, timeout_s: float | None = None, step: int | None = None,
                    policy_version: int | None = None) -> Any:
        """Await ``awaitable`` (optionally bounded by ``timeout_s``) as one grader call of ``kind``."""
        start_ns = time.time_ns()
        c = self._begin(kind, sample_id, step, policy_version)
        try:
            if timeout_s is not None:
                value = await asyncio.wait_for(awaitable, timeout_s)
            else:
                value = await awaitable
        except BaseException as exc:
            self._end(c, submitted_ns, start_ns, self._classify(exc), None, f"{type(exc).__name__}: {exc}")
            raise
        self._end(c, submitted_ns, start_ns, "ok", _reward(value, self.reward_of), None)
        return value

    @contextmanager
    def track(self, kind: str, *, sample_id: Any = None, submitted_ns: int | None = None, step: int | None = None,
              policy_version: int | None = None) -> Iterator[CallHandle]:
        """A grader call whose work happens inside the block; set ``handle.reward`` (and optionally
        ``handle.outcome`` / ``handle.error``). An exception marks it error/timeout and propagates."""
        start_ns = time.time_ns()
        c = self._begin(kind, sample_id, step, policy_version)
        h = CallHandle(kind, c.sample_id)
        try:
            yield h
        except BaseException as exc:
            self._end(c, submitted_ns, start_ns, self._classify(exc), None, f"{type(exc).__name__}: {exc}")
            raise
        outcome = h.outcome or "ok"
        self._end(c, submitted_ns, start_ns, outcome, _reward(h.reward, None), h.error)

    def wrap(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: every call of the function is a grader call of ``kind``."""
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            def inner(*args: Any, **kwargs: Any) -> Any:
                return self.call(kind, fn, *args, **kwargs)
            inner.__name__ = getattr(fn, "__name__", "grader")
            inner.__doc__ = fn.__doc__
            return inner
        return deco

    # ---- watchdog -------------------------------------------------------------------------------
    def inflight(self) -> list[InflightCall]:
        with self._lock:
            return list(self._inflight.values())

    def check(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        """One watchdog pass: emit ``grader_inflight`` per kind; report calls newly overdue.
        Returns {kind: {"in_flight", "overdue", "oldest_age_s"}}."""
        now = time.monotonic() if now is None else now
        with self._lock:
            calls = list(self._inflight.values())
            kinds = set(self._kinds_seen)
        stats: dict[str, dict[str, Any]] = {k: {"in_flight": 0, "overdue": 0, "oldest_age_s": 0.0} for k in kinds}
        newly: list[InflightCall] = []
        for c in calls:
            age = now - c.started
            s = stats.setdefault(c.kind, {"in_flight": 0, "overdue": 0, "oldest_age_s": 0.0})
            s["in_flight"] += 1
            s["oldest_age_s"] = max(s["oldest_age_s"], age)
            if age > self.deadline_s:
                s["overdue"] += 1
                if not c.overdue_reported:
                    c.overdue_reported = True
                    newly.append(c)
        rec = recorder_or_global(self._recorder)
        for kind, s in sorted(stats.items()):
            rec.emit("grader_inflight", grader_kind=kind, in_flight=s["in_flight"], overdue=s["overdue"],
                     oldest_age_s=s["oldest_age_s"], deadline_s=self.deadline_s)
        with self._lock:
            if not self._inflight:
                self._kinds_seen.clear()  # report zeros once after calls drain, then go quiet
        for c in newly:
            self.overdue_calls.append(c)
            log.warning("grader call %s (kind %s, sample %s) in flight for %.1fs, past the %.1fs deadline",
                        c.call_id, c.kind, c.sample_id, now - c.started, self.deadline_s)
            if self.on_overdue is not None:
                try:
                    self.on_overdue(c)
                except Exception as exc:
                    log.warning("grader on_overdue callback failed: %s", exc)
        return stats

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="rlobs-grader-watchdog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                active = bool(self._kinds_seen)
            if active:
                try:
                    self.check()
                except Exception as exc:  # never let the watchdog die
                    log.warning("grader watchdog error: %s", exc)

    def close(self) -> None:
        """Stop the watchdog thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
            self._thread = None

    # ---- reward wait ----------------------------------------------------------------------------
    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time a block where the trainer waits for rewards."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            dt = time.monotonic() - t0
            with self._lock:
                self._wait_s += dt
                self._wait_total += dt

    def take_wait(self) -> float:
        """Seconds waited for rewards since the last ``take_wait`` (for ``train_step.reward_wait_s``)."""
        with self._lock:
            w, self._wait_s = self._wait_s, 0.0
        return w

    def wait_share(self, now: float | None = None) -> float:
        """Share of wall time since creation (or ``reset_share``) spent waiting for rewards."""
        elapsed = (time.monotonic() if now is None else now) - self._share_origin
        return self._wait_total / elapsed if elapsed > 0 else math.nan

    def reset_share(self) -> None:
        with self._lock:
            self._wait_total = 0.0
            self._share_origin = time.monotonic()
