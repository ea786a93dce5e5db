"""rlobs doctor: rules over a run record -> ranked findings with evidence, root cause and runbook.

    from rlobs.doctor import diagnose
    report = diagnose(rlobs.open_run("runs/x"))
    report.findings[0].rule, report.exit_code
"""

from rlobs.doctor.engine import Report, diagnose, parse_thresholds, rank
from rlobs.doctor.model import Evidence, Finding, Insufficient, Rule, Severity, registry

__all__ = ["diagnose", "Report", "rank", "parse_thresholds", "Finding", "Evidence", "Insufficient", "Rule",
           "Severity", "registry"]
