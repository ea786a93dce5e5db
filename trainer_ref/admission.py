"""Admission at consumption and the driver's drops.

``Admission`` applies the staleness / TTL bounds (``probes.StalenessProbe``) to a graded group as a
whole (GRPO needs its group) and is the one place a group or sample is dropped: the ledger records
each dropped sample with its reason (its goodput account counts the tokens), ``dropped`` counts
samples by reason. Every reason trainer_ref records is checked against the ledger schema at start-up.
"""

from __future__ import annotations

import time

from trainer_ref import faults, telemetry
from trainer_ref.config import Config
from trainer_ref.ledger import Ledger
from trainer_ref.records import Group, Sample

# every drop reason trainer_ref records; checked against the ledger schema and goodput at start-up
DROP_REASONS = ("stale", "ttl", "grader_error")


def check_drop_reasons(reasons: tuple[str, ...] = DROP_REASONS) -> None:
    """Fail at start-up (not in the dispatcher, mid-run) if a reason this trainer records is not in the
    schema (``probes.ledger.DROP_REASONS``) or has no goodput category."""
    from probes.goodput import REASON_TO_CATEGORY
    from probes.ledger import DROP_REASONS as SCHEMA

    bad = [r for r in reasons if r not in SCHEMA or r not in REASON_TO_CATEGORY]
    if bad:
        raise ValueError(f"trainer_ref drop reasons {bad} not in the ledger schema {SCHEMA} / goodput categories")


class Admission:
    def __init__(self, cfg: Config, fault: faults.Fault, ledger: Ledger, dropped: dict[str, int] | None = None) -> None:
        from probes import StalenessProbe

        check_drop_reasons()
        self.cfg, self.fault, self.ledger = cfg, fault, ledger
        self.dropped: dict[str, int] = dict(dropped or {})
        self.probe = StalenessProbe(telemetry.SWITCH, max_staleness=cfg.max_staleness, ttl_s=cfg.rollout_ttl_s,
                                    is_cap=cfg.tis_cap or 2.0, ledger=ledger, correction_cap=cfg.tis_cap)

    @property
    def drops(self) -> dict[str, int]:
        """The staleness probe's own count of its drops."""
        return self.probe.drops

    def admit(self, g: Group, version: int, step: int) -> bool:
        """Staleness / TTL on the group's dispatch tag (its oldest version and time): every sample gets the
        group's verdict; a dropped group's samples are dropped in the ledger (by the probe) with the reason."""
        tag = g.tag(self.cfg.staleness_basis)
        self.probe.max_staleness = faults.max_staleness(self.fault, step, self.cfg.max_staleness)
        why = None
        for s in g.samples:
            why = self.probe.admit(s.sample_id, tag, version, tokens=s.tokens)
        if why:
            self._count(why, len(g.samples))
        return why is None

    def drop(self, g: Group, reason: str, samples: list[Sample] | None = None) -> None:
        """Drop ``samples`` (default: the whole group) with ``reason``."""
        now = time.time()
        samples = g.samples if samples is None else samples
        for s in samples:
            self.ledger.mark(s.sample_id, g.group_id, "dropped", reason=reason, tokens=s.tokens,
                             age_s=now - s.t_done if s.t_done else None)
        self._count(reason, len(samples))

    def _count(self, reason: str, n: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n
