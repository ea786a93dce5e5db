"""Sample ledger: every sample id's life, each transition exactly once, across crashes and resume.

A sample moves through ``generated -> graded -> consumed`` or ends ``dropped`` (with a reason) at any
point. The ledger emits one ``ledger`` event per transition and checks exactly-once on the way:

- a state a sample already reached (a second ``consumed``, a second ``graded`` ...) or any transition
  after the sample ended (``consumed`` or ``dropped``) is a *duplicate*: the event is still emitted,
  with ``duplicate=True`` (metric ``rlobs_ledger_duplicate_transitions_total{state}``), because the
  record must show what really happened; it is also kept in ``violations``;
- ``open_samples()`` lists samples generated but not yet ended (lost if the run ends here).

The state saves to and restores from JSON (``save`` / ``load`` / ``to_json`` / ``from_json``) so a
resumed trainer keeps checking against what happened before the crash: a sample consumed before the
checkpoint and consumed again after resume is reported as a duplicate.

    ledger = SampleLedger()
    ledger.generated("s1", group_id="g1", tokens=42)
    ledger.graded("s1")
    ledger.consumed("s1", staleness=1, age_s=3.2)
    ledger.save("ckpt/ledger.json")         # with the checkpoint
    ledger = SampleLedger.load("ckpt/ledger.json")

Drop reasons (``DROP_REASONS``) follow the schema: stale, ttl, queue_full, grader_error, aborted,
truncated, zero_advantage. An optional ``goodput`` account (``probes.goodput.GoodputAccount``) is
told the tokens of every dropped sample.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes._common import Recorderish, recorder_or_global

STATES = ("generated", "graded", "consumed", "dropped")
TERMINAL = frozenset({"consumed", "dropped"})
DROP_REASONS = ("stale", "ttl", "queue_full", "grader_error", "aborted", "truncated", "zero_advantage")
# the one transition table (trainer_ref's checks and its chaos checker use it): state -> legal next states
NEXT: dict[str | None, frozenset[str]] = {None: frozenset({"generated"}), "generated": frozenset({"graded", "dropped"}),
                                          "graded": frozenset({"consumed", "dropped"})}
_BIT = {s: 1 << i for i, s in enumerate(STATES)}
_TERMINAL_MASK = _BIT["consumed"] | _BIT["dropped"]
STATE_FORMAT = 1
_IMPLIED = {"generated": _BIT["generated"], "graded": _BIT["generated"] | _BIT["graded"],
            "consumed": _BIT["generated"] | _BIT["graded"] | _BIT["consumed"],
            "dropped": _BIT["generated"] | _BIT["dropped"]}


def _current(mask: int) -> str | None:
    if mask & _BIT["dropped"]:
        return "dropped"
    for s in ("consumed", "graded", "generated"):
        if mask & _BIT[s]:
            return s
    return None


@dataclass(frozen=True, slots=True)
class Violation:
    """One exactly-once violation."""

    sample_id: str
    state: str
    previous: tuple[str, ...]  # states the sample had reached before
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerReport:
    """Result of ``SampleLedger.check()``."""

    samples: int
    counts: dict[str, int]
    open_samples: list[str]
    violations: list[Violation]

    @property
    def ok(self) -> bool:
        return not self.violations


class SampleLedger:
    """Tracks each sample's transitions, emits ``ledger`` events, reports exactly-once violations.

    recorder: where events go (default: the process's current recorder).
    goodput: optional ``GoodputAccount`` told the tokens of every dropped sample.
    max_violations: how many violations to keep in memory (all are counted).
    track: keep per-sample state for the exactly-once checks (about 200 bytes of memory per sample id
        ever seen, ~200 MB and a ~20 MB JSON state per million samples). ``track=False`` only emits events (the
        doctor can still find duplicates in the record); use it where another process owns the checks.
    Thread-safe.
    """

    def __init__(self, recorder: Recorderish | None = None, *, goodput: Any = None, max_violations: int = 10_000,
                 track: bool = True):
        self._recorder = recorder
        self.track = track
        self.goodput = goodput
        self.max_violations = max_violations
        self._lock = threading.Lock()
        self._mask: dict[str, int] = {}
        self._group: dict[str, str] = {}
        self._tokens: dict[str, int] = {}
        self.violations: list[Violation] = []
        self.violation_count = 0

    # ---- transitions ----------------------------------------------------------------------------
    def transition(self, sample_id: str, state: str, *, group_id: str | None = None, reason: str | None = None,
                   tokens: int | None = None, staleness: int | None = None, age_s: float | None = None,
                   step: int | None = None) -> bool:
        """Record one transition. Returns False (and reports it) when it violates exactly-once."""
        if state not in _BIT:
            raise ValueError(f"unknown ledger state {state!r}; valid: {', '.join(STATES)}")
        if state == "dropped" and reason not in DROP_REASONS:
            raise ValueError(f"drop reason {reason!r} unknown; valid: {', '.join(DROP_REASONS)}")
        sid = str(sample_id)
        bit = _BIT[state]
        group_id = None if group_id is None else str(group_id)
        tokens = None if tokens is None else int(tokens)
        staleness = None if staleness is None else int(staleness)
        age_s = None if age_s is None else float(age_s)
        if not self.track:
            fields0: dict[str, Any] = {"sample_id": sid, "group_id": group_id, "state": state, "reason": reason,
                                       "tokens": tokens, "staleness": staleness, "age_s": age_s}
            if step is not None:
                fields0["step"] = step
            recorder_or_global(self._recorder).emit("ledger", **fields0)
            if state == "dropped" and self.goodput is not None:
                self.goodput.add_drop(reason, tokens or 0)
            return True
        with self._lock:
            mask = self._mask.get(sid, 0)
            duplicate = bool(mask & bit) or bool(mask & _TERMINAL_MASK)
            self._mask[sid] = mask | bit
            if group_id is not None:
                self._group[sid] = str(group_id)
            else:
                group_id = self._group.get(sid)
            if tokens is not None:
                if state == "generated":
                    self._tokens[sid] = int(tokens)
            else:
                tokens = self._tokens.get(sid)
            if duplicate:
                self.violation_count += 1
                if len(self.violations) < self.max_violations:
                    prev = tuple(s for s in STATES if mask & _BIT[s])
                    self.violations.append(Violation(sid, state, prev, reason))
            if state in TERMINAL and not duplicate:
                self._tokens.pop(sid, None)  # no longer needed; keeps memory bounded by open samples
        fields: dict[str, Any] = {"sample_id": sid, "group_id": group_id, "state": state, "reason": reason,
                                  "tokens": tokens, "staleness": staleness, "age_s": age_s}
        if duplicate:
            fields["duplicate"] = True
        if step is not None:
            fields["step"] = step
        recorder_or_global(self._recorder).emit("ledger", **fields)
        if state == "dropped" and not duplicate and self.goodput is not None:
            self.goodput.add_drop(reason, tokens or 0)
        return not duplicate

    def generated(self, sample_id: str, *, group_id: str | None = None, tokens: int | None = None) -> bool:
        return self.transition(sample_id, "generated", group_id=group_id, tokens=tokens)

    def graded(self, sample_id: str) -> bool:
        return self.transition(sample_id, "graded")

    def consumed(self, sample_id: str, *, staleness: int | None = None, age_s: float | None = None,
                 tokens: int | None = None) -> bool:
        return self.transition(sample_id, "consumed", staleness=staleness, age_s=age_s, tokens=tokens)

    def dropped(self, sample_id: str, reason: str, *, age_s: float | None = None, tokens: int | None = None) -> bool:
        return self.transition(sample_id, "dropped", reason=reason, age_s=age_s, tokens=tokens)

    # ---- queries --------------------------------------------------------------------------------
    def state_of(self, sample_id: str) -> tuple[str, ...]:
        """States the sample has reached, in order of the life cycle (empty if unknown)."""
        mask = self._mask.get(str(sample_id), 0)
        return tuple(s for s in STATES if mask & _BIT[s])

    def current(self, sample_id: str) -> str | None:
        """The sample's current state: its terminal state once ended, else the latest reached (None: unknown)."""
        return _current(self._mask.get(str(sample_id), 0))

    def states(self) -> dict[str, str]:
        """{sample id: current state} (the compact form a checkpoint keeps; ``from_states`` restores it)."""
        with self._lock:
            return {s: _current(m) for s, m in self._mask.items() if m}

    @classmethod
    def from_states(cls, states: dict[str, str], recorder: Recorderish | None = None, *, goodput: Any = None,
                    groups: dict[str, str] | None = None) -> "SampleLedger":
        """A tracking ledger whose samples are in ``states`` ({sample id: current state}); the states on the
        way there are implied (``graded`` implies ``generated``; a drop keeps no earlier state but ``generated``)."""
        led = cls(recorder, goodput=goodput)
        for sid, st in states.items():
            if st not in _BIT:
                raise ValueError(f"sample {sid}: unknown ledger state {st!r}; valid: {', '.join(STATES)}")
            led._mask[str(sid)] = _IMPLIED[st]
        led._group = {str(k): str(v) for k, v in (groups or {}).items()}
        return led

    def group_of(self, sample_id: str) -> str | None:
        """The group given with the sample's first transition (None: never given)."""
        return self._group.get(str(sample_id))

    def tokens_of(self, sample_id: str) -> int | None:
        return self._tokens.get(str(sample_id))

    def open_samples(self) -> list[str]:
        """Samples generated (or graded) but neither consumed nor dropped."""
        with self._lock:
            return sorted(s for s, m in self._mask.items() if not m & _TERMINAL_MASK)

    def counts(self) -> dict[str, int]:
        """Samples that reached each state."""
        with self._lock:
            masks = list(self._mask.values())
        return {s: sum(1 for m in masks if m & _BIT[s]) for s in STATES}

    def check(self) -> LedgerReport:
        with self._lock:
            n = len(self._mask)
            violations = list(self.violations)
        return LedgerReport(n, self.counts(), self.open_samples(), violations)

    def __len__(self) -> int:
        return len(self._mask)

    # ---- persistence ----------------------------------------------------------------------------
    def to_json(self) -> str:
        """The ledger state as JSON (sample states, open samples' groups and tokens, violation count)."""
        with self._lock:
            data = {
                "format": STATE_FORMAT,
                "states": list(STATES),
                "samples": dict(self._mask),
                "groups": {s: g for s, g in self._group.items() if not self._mask.get(s, 0) & _TERMINAL_MASK},
                "tokens": dict(self._tokens),
                "violation_count": self.violation_count,
            }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, recorder: Recorderish | None = None, *, goodput: Any = None) -> "SampleLedger":
        data = json.loads(text)
        if data.get("format") != STATE_FORMAT or list(data.get("states", [])) != list(STATES):
            raise ValueError(f"ledger state format {data.get('format')!r} / states {data.get('states')!r} "
                             f"not supported (expected format {STATE_FORMAT}, states {list(STATES)})")
        led = cls(recorder, goodput=goodput)
        led._mask = {str(k): int(v) for k, v in data["samples"].items()}
        led._group = {str(k): str(v) for k, v in data.get("groups", {}).items()}
        led._tokens = {str(k): int(v) for k, v in data.get("tokens", {}).items()}
        led.violation_count = int(data.get("violation_count", 0))
        return led

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the state atomically (tmp file + rename)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, p)

    @classmethod
    def load(cls, path: str | os.PathLike[str], recorder: Recorderish | None = None, *,
             goodput: Any = None) -> "SampleLedger":
        return cls.from_json(Path(path).read_text(), recorder, goodput=goodput)
