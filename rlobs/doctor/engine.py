"""Run the doctor's rules over a record and rank the findings, causes before symptoms.

Ranking: when a finding's rule lists another rule in ``causes`` and both fired, with the cause's onset
no later than the symptom's (plus ``ONSET_SLACK`` steps), the symptom is marked ``explained_by`` the
cause and the cause's chain lists it. Roots come first, then by severity, then failures that happened
before early warnings (a precursor predicts a failure; once that or another failure is found at the same
severity, it leads), then onset step and rule id, so the output is deterministic for the same record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Finding, Insufficient, Rule, Severity, registry
from rlobs.store import RunRecord

ONSET_SLACK = 2
EARLY_WARNING = "early_warning"  # the precursor rules' concern (rlobs.doctor.rules.precursors)


@dataclass
class Report:
    run_id: str
    path: str
    findings: list[Finding]
    insufficient: dict[str, str]  # rule id -> reason
    errors: dict[str, str]  # rule id -> error (a rule that crashed is reported, never fatal)
    healthy: list[str]  # rules that ran and found nothing
    record_problems: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        worst = max((f.severity for f in self.findings), default=None)
        if worst == Severity.CRITICAL:
            return 2
        if worst == Severity.WARNING:
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "path": self.path, "exit_code": self.exit_code,
            "findings": [f.to_dict() for f in self.findings],
            "insufficient_data": dict(sorted(self.insufficient.items())),
            "rule_errors": dict(sorted(self.errors.items())),
            "healthy": sorted(self.healthy),
            "record_problems": self.record_problems,
        }


def parse_thresholds(items: Iterable[str], rules: Mapping[str, Rule]) -> dict[str, dict[str, float]]:
    """``["grader-slow.ratio=2.5", ...]`` -> {rule: {name: value}}, validated against the rules' defaults."""
    out: dict[str, dict[str, float]] = {}
    for item in items:
        try:
            key, value = item.split("=", 1)
            rule_id, name = key.rsplit(".", 1)
            number = float(value)
        except ValueError:
            raise ValueError(f"threshold {item!r}: expected RULE.NAME=NUMBER, e.g. grader-slow.ratio=2.5") from None
        if rule_id not in rules:
            raise ValueError(f"threshold {item!r}: unknown rule {rule_id!r}; valid: {', '.join(rules)}")
        if name not in rules[rule_id].thresholds:
            valid = ", ".join(rules[rule_id].thresholds) or "none"
            raise ValueError(f"threshold {item!r}: rule {rule_id} has no threshold {name!r}; valid: {valid}")
        out.setdefault(rule_id, {})[name] = number
    return out


def _checksums_differ(record: RunRecord) -> bool:
    """Whether any sealed segment's bytes differ from the SHA-256 its writer recorded (cheap: hashing only)."""
    from rlobs.store.safeio import check_checksum

    return any(isinstance(check_checksum(Path(f)), str)
               for fs in getattr(record, "files", {}).values() for f in fs if f.endswith(".parquet"))


def diagnose(record: RunRecord, *, rule_ids: Iterable[str] | None = None, since_step: int | None = None,
             thresholds: Mapping[str, Mapping[str, float]] | None = None,
             on_rule: Callable[[str], None] | None = None) -> Report:
    t0 = time.perf_counter()
    rules = registry()
    selected = list(rule_ids) if rule_ids else list(rules)
    unknown = [r for r in selected if r not in rules]
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}; valid: {', '.join(rules)}")
    if not getattr(record, "verified", False) and _checksums_differ(record):
        # a sealed segment is not what its writer wrote: diagnose the verified record (that segment left out
        # and listed), so a flipped byte that still decodes cannot pass for data
        from rlobs.store import open_run

        verified = open_run(record.path, verify=True)
        try:
            return diagnose(verified, rule_ids=selected, since_step=since_step, thresholds=thresholds,
                            on_rule=on_rule)
        finally:
            verified.close()
    ctx = RunContext(record, since_step=since_step)
    findings: list[Finding] = []
    insufficient: dict[str, str] = {}
    errors: dict[str, str] = {}
    healthy: list[str] = []
    for rid in selected:
        rule = rules[rid]
        th = {**rule.thresholds, **(thresholds or {}).get(rid, {})}
        if on_rule:
            on_rule(rid)
        try:
            result = rule.fn(ctx, th)
        except Exception as exc:  # a rule bug or a damaged column: report it, run the others
            errors[rid] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(result, Insufficient):
            insufficient[rid] = result.reason
        elif result:
            findings.extend(result)
        else:
            healthy.append(rid)
    if errors and not getattr(record, "verified", False):
        # a query hit damaged data: re-open with full verification (corrupt segments left out) and retry
        from rlobs.store import open_run

        verified = open_run(record.path, verify=True)
        verified.verified = True  # type: ignore[attr-defined]
        if len(verified.problems) > len(record.problems):
            try:
                return diagnose(verified, rule_ids=selected, since_step=since_step,
                                thresholds=thresholds, on_rule=on_rule)
            finally:
                verified.close()
        verified.close()
    ranked = rank(findings, rules)
    return Report(run_id=record.run_id, path=str(record.path), findings=ranked, insufficient=insufficient,
                  errors=errors, healthy=healthy,
                  record_problems=[{"path": p.path, "kind": p.kind, "problem": p.problem, "detail": p.detail}
                                   for p in record.problems],
                  seconds=time.perf_counter() - t0)


def _onset(f: Finding) -> float:
    return float(f.first_step) if f.first_step is not None else float("inf")


def _summary(f: Finding) -> str:
    at = f" (step {f.first_step})" if f.first_step is not None else ""
    return f"{f.rule}{at}: {f.title}"


def rank(findings: list[Finding], rules: Mapping[str, Rule]) -> list[Finding]:
    """Mark symptoms explained by co-occurring causes; order roots first. Deterministic."""
    ordered = sorted(findings, key=lambda f: (-int(f.severity), _onset(f), f.rule, f.title))
    for symptom in ordered:
        candidates = []
        for cause in ordered:
            if cause is symptom or symptom.rule not in rules[cause.rule].causes:
                continue
            if _onset(cause) <= _onset(symptom) + ONSET_SLACK or symptom.first_step is None or cause.first_step is None:
                candidates.append(cause)
        if candidates:
            best = min(candidates, key=lambda c: (-int(c.severity), _onset(c), c.rule))
            if best.explained_by != symptom.rule:  # no two-way explanation
                symptom.explained_by = best.rule
                best.explains.append(symptom.rule)

    def root_of(f: Finding, seen: set[str]) -> Finding:
        if f.explained_by is None or f.rule in seen:
            return f
        parent = next((c for c in ordered if c.rule == f.explained_by), None)
        return f if parent is None else root_of(parent, seen | {f.rule})

    for f in ordered:
        chain = [_summary(f)]
        node, seen = f, {f.rule}
        while node.explained_by is not None:
            parent = next((c for c in ordered if c.rule == node.explained_by and c.rule not in seen), None)
            if parent is None:
                break
            chain.append(_summary(parent))
            seen.add(parent.rule)
            node = parent
        f.chain = chain  # symptom first, its root cause last
        if f.explains:
            f.confidence = min(0.95, round(f.confidence + 0.1 * len(f.explains), 2))
            f.explains = sorted(set(f.explains))

    def early(f: Finding) -> bool:  # a precursor predicts a failure; one that happened outranks it
        r = rules.get(f.rule)
        return r is not None and r.concern == EARLY_WARNING

    def key(f: Finding) -> tuple:
        root = root_of(f, set())
        return (f.explained_by is not None, -int(root.severity), early(root), _onset(root), root.rule,
                -int(f.severity), _onset(f), f.rule, f.title)

    return sorted(ordered, key=key)
