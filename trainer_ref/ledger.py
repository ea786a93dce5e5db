"""The driver's sample ledger: every sample id is generated, graded, then consumed or dropped, once.

The state lives in ``probes.SampleLedger`` (tracking on): one ledger, one transition table
(``probes.ledger.NEXT``). This class adds what the driver needs on top: an illegal transition
(a sample consumed twice, or after being dropped) raises ``LedgerError`` *before* anything is
emitted, instead of being recorded as a duplicate; groups are known after a resume from the id
scheme; the checkpoint keeps ``{sample id: state}``. ``dropped`` / ``consumed`` have
``probes.SampleLedger``'s signatures, so a probe that decides drops (``StalenessProbe.admit``)
records them here; the ledger tells the goodput account the tokens of every drop.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from probes.ledger import DROP_REASONS, NEXT, SampleLedger
from trainer_ref import telemetry


class LedgerError(RuntimeError):
    pass


class Ledger:
    def __init__(self, states: dict[str, str] | None = None, goodput: Any = None) -> None:
        """``goodput``: the account told the tokens of every dropped sample (the process's, by default)."""
        gp = telemetry.probe().goodput if goodput is None else goodput
        self.probe = SampleLedger.from_states(dict(states or {}), telemetry.SWITCH, goodput=gp)

    def mark(self, sample_id: str, group_id: str, state: str, **fields: Any) -> None:
        cur = self.probe.current(sample_id)
        if state not in NEXT.get(cur, ()):
            raise LedgerError(f"sample {sample_id}: illegal transition {cur} -> {state}")
        if state == "dropped" and fields.get("reason") not in DROP_REASONS:
            raise LedgerError(f"sample {sample_id}: drop reason {fields.get('reason')!r} not in {DROP_REASONS}")
        self.probe.transition(sample_id, state, group_id=group_id, **fields)

    def group_of(self, sample_id: str) -> str:
        """The sample's group (after a resume, from the generator's id scheme ``<group_id>-s<j>``)."""
        return self.probe.group_of(sample_id) or str(sample_id).rsplit("-s", 1)[0]

    def dropped(self, sample_id: str, reason: str, *, age_s: float | None = None, tokens: int | None = None) -> None:
        self.mark(sample_id, self.group_of(sample_id), "dropped", reason=reason, age_s=age_s, tokens=tokens)

    def consumed(self, sample_id: str, *, staleness: int | None = None, age_s: float | None = None,
                 tokens: int | None = None) -> None:
        self.mark(sample_id, self.group_of(sample_id), "consumed", staleness=staleness, age_s=age_s, tokens=tokens)

    @property
    def states(self) -> dict[str, str]:
        return self.probe.states()

    def counts(self) -> dict[str, int]:
        """Samples by current state."""
        return dict(Counter(self.probe.states().values()))

    def with_state(self, state: str) -> list[str]:
        return sorted(k for k, v in self.probe.states().items() if v == state)

    def to_json(self) -> dict[str, str]:
        return self.probe.states()
