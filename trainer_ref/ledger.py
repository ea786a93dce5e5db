"""The sample ledger: every sample id is generated, graded, then consumed or dropped, once.

Transitions are validated (a sample cannot be consumed twice or after being dropped) and each is
emitted as a ``ledger`` event through ``probes.SampleLedger`` (the states kept here are the exactly-once
check). The ledger is part of the checkpoint, so accounting survives resume. ``dropped`` / ``consumed``
have ``probes.SampleLedger``'s signatures, so a probe that decides drops (``StalenessProbe.admit``)
records them here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from trainer_ref import telemetry

_NEXT = {None: {"generated"}, "generated": {"graded", "dropped"}, "graded": {"consumed", "dropped"}}


class LedgerError(RuntimeError):
    pass


class Ledger:
    def __init__(self, states: dict[str, str] | None = None) -> None:
        from probes import SampleLedger

        self.states: dict[str, str] = dict(states or {})
        self._group: dict[str, str] = {}
        self._events = SampleLedger(telemetry.SWITCH, track=False)  # emits; the checks are ours

    def mark(self, sample_id: str, group_id: str, state: str, **fields: Any) -> None:
        cur = self.states.get(sample_id)
        if state not in _NEXT.get(cur, set()):
            raise LedgerError(f"sample {sample_id}: illegal transition {cur} -> {state}")
        self.states[sample_id] = state
        self._group[sample_id] = group_id
        self._events.transition(sample_id, state, group_id=group_id, **fields)

    def group_of(self, sample_id: str) -> str:
        """The sample's group (after a resume, from the generator's id scheme ``<group_id>-s<j>``)."""
        return self._group.get(sample_id) or sample_id.rsplit("-s", 1)[0]

    def dropped(self, sample_id: str, reason: str, *, age_s: float | None = None, tokens: int | None = None) -> None:
        self.mark(sample_id, self.group_of(sample_id), "dropped", reason=reason, age_s=age_s, tokens=tokens)

    def consumed(self, sample_id: str, *, staleness: int | None = None, age_s: float | None = None,
                 tokens: int | None = None) -> None:
        self.mark(sample_id, self.group_of(sample_id), "consumed", staleness=staleness, age_s=age_s, tokens=tokens)

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.states.values()))

    def with_state(self, state: str) -> list[str]:
        return sorted(k for k, v in self.states.items() if v == state)

    def to_json(self) -> dict[str, str]:
        return dict(self.states)
