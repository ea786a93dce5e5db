"""Liveness: heartbeats that name the current phase, and phase timing for cost accounting.

``with liveness.phase("train", tokens=n):`` marks what the component is doing. On entry it sends a
``heartbeat`` naming the phase; on exit it emits a ``phase`` event with the duration (and tokens) so
``rlobs_phase_seconds_total{phase}`` adds up where the time went. A background thread (``start()``)
keeps sending heartbeats every ``interval_s`` with the phase and how long the component has been in
it, so a stuck component shows *which* phase it is stuck in, and a dead one stops beating
(``rlobs_heartbeat_timestamp_seconds`` goes flat).

Phase names: heartbeats use the short verbs of the schema (generate, grade, train, sync, wait, idle);
phase events use the cost-accounting nouns (generation, grading, training, sync, wait). Either form
is accepted; ``PHASE_ALIASES`` maps between them. Unknown names are passed through unchanged.

Pauses: a trainer that stops stepping on purpose (a held-out evaluation, a checkpoint save, draining in-flight
generation before one) says so with ``phase("eval")``, ``phase("checkpoint")`` or ``phase("drain")``
(``rlobs.schema.PAUSE_PHASES``). The heartbeat on entry and the
phase event on exit tell the no-progress alert that a pause is under way and how long pauses take, so a long
evaluation is not paged as a stall while a hung one still is.

    from probes import phase
    with phase("train", tokens=batch_tokens):
        loss.backward(); opt.step()
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Iterator

from rlobs.schema import PAUSE_PHASES

from probes._common import Recorderish, recorder_or_global

# heartbeat verb -> phase-event noun
PHASE_ALIASES = {"generate": "generation", "grade": "grading", "train": "training", "sync": "sync",
                 "wait": "wait", "idle": "idle", **PAUSE_PHASES}
_VERB = {noun: verb for verb, noun in PHASE_ALIASES.items()}


def heartbeat_name(name: str) -> str:
    """The heartbeat form of a phase name (train, generate, ...)."""
    return _VERB.get(name, name)


def phase_name(name: str) -> str:
    """The cost-accounting form of a phase name (training, generation, ...)."""
    return PHASE_ALIASES.get(name, name)


class PhaseHandle:
    """The open phase; set ``tokens`` before it ends if not known at entry."""

    __slots__ = ("name", "tokens", "started")

    def __init__(self, name: str, tokens: int | None, started: float):
        self.name = name
        self.tokens = tokens
        self.started = started


class Liveness:
    """Heartbeats and phase timing of one component (one per process is typical).

    interval_s: period of background heartbeats once ``start()`` is called.
    Totals of seconds and tokens per phase are kept in ``totals()`` (for cost accounting).
    """

    def __init__(self, recorder: Recorderish | None = None, *, interval_s: float = 5.0):
        self._recorder = recorder
        self.interval_s = interval_s
        self._stack: list[PhaseHandle] = []
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._tokens: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current_phase(self) -> str:
        with self._lock:
            return self._stack[-1].name if self._stack else "idle"

    def beat(self, phase: str | None = None, detail: str = "") -> None:
        """Send one heartbeat naming ``phase`` (default: the current phase and how long it has run)."""
        if phase is None:
            with self._lock:
                top = self._stack[-1] if self._stack else None
            if top is None:
                phase = "idle"
            else:
                phase = top.name
                if not detail:
                    detail = f"in {top.name} for {time.monotonic() - top.started:.1f}s"
        recorder_or_global(self._recorder).emit("heartbeat", phase=heartbeat_name(phase), detail=detail)

    @contextmanager
    def phase(self, name: str, *, tokens: int | None = None) -> Iterator[PhaseHandle]:
        """Time a phase: heartbeat on entry, ``phase`` event (seconds, tokens) on exit, even on error."""
        handle = PhaseHandle(heartbeat_name(name), tokens, time.monotonic())
        with self._lock:
            self._stack.append(handle)
        self.beat(handle.name)
        try:
            yield handle
        finally:
            seconds = time.monotonic() - handle.started
            noun = phase_name(handle.name)
            with self._lock:
                if handle in self._stack:
                    self._stack.remove(handle)
                self._seconds[noun] = self._seconds.get(noun, 0.0) + seconds
                if handle.tokens is not None:
                    self._tokens[noun] = self._tokens.get(noun, 0) + int(handle.tokens)
            tok = None if handle.tokens is None else int(handle.tokens)
            recorder_or_global(self._recorder).emit("phase", phase=noun, seconds=seconds, tokens=tok)

    def add(self, name: str, seconds: float, tokens: int | None = None) -> None:
        """Account a phase measured elsewhere (e.g. reported by a remote actor)."""
        noun = phase_name(name)
        with self._lock:
            self._seconds[noun] = self._seconds.get(noun, 0.0) + float(seconds)
            if tokens is not None:
                self._tokens[noun] = self._tokens.get(noun, 0) + int(tokens)
        recorder_or_global(self._recorder).emit("phase", phase=noun, seconds=float(seconds),
                                                tokens=None if tokens is None else int(tokens))

    def totals(self) -> dict[str, dict[str, float]]:
        """{phase: {"seconds": s, "tokens": n}} accumulated so far."""
        with self._lock:
            return {p: {"seconds": s, "tokens": float(self._tokens.get(p, 0))} for p, s in self._seconds.items()}

    # ---- background heartbeats ------------------------------------------------------------------
    def start(self) -> "Liveness":
        """Send a heartbeat every ``interval_s`` from a daemon thread until ``stop()``."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="rlobs-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # telemetry never breaks the host
                pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
            self._thread = None


_default: Liveness | None = None
_default_lock = threading.Lock()


def default_liveness() -> Liveness:
    """The process-wide ``Liveness`` used by the module-level ``phase`` and ``beat``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Liveness()
        return _default


def phase(name: str, *, tokens: int | None = None) -> AbstractContextManager[PhaseHandle]:
    """``with phase("train"):`` on the process-wide ``Liveness`` (events go to the current recorder)."""
    return default_liveness().phase(name, tokens=tokens)


def beat(phase_: str | None = None, detail: str = "") -> None:
    """One heartbeat on the process-wide ``Liveness``."""
    default_liveness().beat(phase_, detail)
