"""The doctor's data model: rules, findings, evidence, and the explicit "insufficient data" result.

A ``Rule`` is a pure function from a run's tables (``RunContext``) to a ``RuleResult``: a list of
findings (empty when healthy) or ``Insufficient(reason)`` when the record lacks what the rule needs.
Rules never guess: no data is never reported as healthy.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from rlobs.runbooks import data_dir, runbook_link

if TYPE_CHECKING:
    from rlobs.doctor.context import RunContext

RUNBOOKS_DIR = data_dir("runbooks")  # the installed pages (package data), see rlobs.runbooks


class Severity(enum.IntEnum):
    INFO = 1
    WARNING = 2
    CRITICAL = 3

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Evidence:
    """One number that supports a finding: observed value vs threshold, over steps."""

    metric: str
    observed: float | str
    threshold: float | str | None = None
    steps: tuple[int, int] | None = None  # first, last step where it held
    note: str = ""


@dataclass
class Finding:
    rule: str
    severity: Severity
    title: str
    first_step: int | None
    last_step: int | None
    evidence: list[Evidence]
    root_cause: str
    confidence: float  # 0..1
    remediation: list[str]
    chain: list[str] = field(default_factory=list)  # correlated signals, cause first
    explained_by: str | None = None  # rule id of a co-occurring root cause that explains this symptom
    explains: list[str] = field(default_factory=list)

    @property
    def runbook(self) -> str:
        """The runbook link: the configured base URL's page, else the installed page (rlobs.runbooks)."""
        return runbook_link(self.rule)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = str(self.severity)
        d["runbook"] = self.runbook
        d["evidence"] = [asdict(e) for e in self.evidence]
        return d


@dataclass(frozen=True)
class Insufficient:
    """The record lacks what a rule needs; says what."""

    reason: str


RuleResult = list[Finding] | Insufficient


@dataclass(frozen=True)
class Rule:
    id: str
    concern: str
    title: str
    needs: tuple[str, ...]  # event kinds the rule reads
    thresholds: Mapping[str, float]  # documented defaults, overridable with --threshold id.name=value
    fn: Callable[["RunContext", Mapping[str, float]], RuleResult]
    doc: str = ""
    causes: tuple[str, ...] = ()  # rule ids of symptoms this rule, when it fires, explains

    @property
    def runbook(self) -> str:
        return runbook_link(self.id)


_REGISTRY: dict[str, Rule] = {}


def rule(id: str, *, concern: str, title: str, needs: tuple[str, ...], thresholds: Mapping[str, float] | None = None,
         causes: tuple[str, ...] = ()) -> Callable[[Callable[..., RuleResult]], Callable[..., RuleResult]]:
    """Register a rule function under ``id`` (also the runbook name)."""

    def deco(fn: Callable[..., RuleResult]) -> Callable[..., RuleResult]:
        if id in _REGISTRY:
            raise ValueError(f"doctor rule {id!r} registered twice")
        from rlobs.failures import thresholds as shared  # the failure table's numbers win (alerts read them too)

        _REGISTRY[id] = Rule(id=id, concern=concern, title=title, needs=needs,
                             thresholds={**dict(thresholds or {}), **shared(id)},
                             fn=fn, doc=(fn.__doc__ or "").strip(), causes=causes)
        return fn

    return deco


def registry() -> dict[str, Rule]:
    from rlobs.doctor import rules  # noqa: F401  (registers every rule module)

    return dict(sorted(_REGISTRY.items()))
