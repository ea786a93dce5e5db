"""What an import did: rows read, names mapped and to what, names kept as scalars, values that were not
numbers, lines that could not be read. Written as ``import_report.json`` into the run directory."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPORT_FILE = "import_report.json"


class ImportFailed(Exception):
    """The source could not be imported at all (missing, empty, wrong format): the message says why."""


@dataclass
class ReadIssue:
    """A line / record that could not be read (kept out of the record, listed here)."""

    where: str  # file:line
    problem: str  # malformed | truncated | unreadable | skipped
    detail: str


@dataclass
class ImportReport:
    source: str
    source_format: str = "?"  # jsonl | verl-file | verl-console | trl-state | trl-console | wandb-history | ...
    framework: str = "?"
    rows: int = 0
    rows_without_step: int = 0
    steps: tuple[int, int] | None = None
    mapped: dict[str, str] = field(default_factory=dict)  # metric name -> kind.field
    unmapped: dict[str, int] = field(default_factory=dict)  # metric name -> values kept as scalar events
    conflicts: dict[str, int] = field(default_factory=dict)  # second name for an already-filled field (kept as scalar)
    nonnumeric: dict[str, str] = field(default_factory=dict)  # metric name -> "N values, e.g. <type>"
    nonfinite: dict[str, int] = field(default_factory=dict)  # NaN / Inf values (imported as such)
    issues: list[ReadIssue] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)  # kind -> events written
    notes: list[str] = field(default_factory=list)
    run_dir: str | None = None
    _nonnumeric_counts: dict[str, int] = field(default_factory=dict, repr=False)

    def count_nonnumeric(self, name: str, raw: Any) -> None:
        n = self._nonnumeric_counts.get(name, 0) + 1
        self._nonnumeric_counts[name] = n
        if isinstance(raw, dict):
            kind = f"dict {raw.get('_type', '')}".strip()
        elif type(raw).__name__ == "_Described":
            kind = str(raw)
        elif isinstance(raw, str) and len(raw) > 40 and raw.strip().lstrip("+-").replace(".", "", 1).isdigit():
            kind = f"number with {len(raw.strip())} characters (beyond float64)"
        else:
            kind = type(raw).__name__
        self.nonnumeric[name] = f"{n} value(s), e.g. {kind}"

    def issue(self, where: str, problem: str, detail: str) -> None:
        self.issues.append(ReadIssue(where, problem, detail[:300]))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("_nonnumeric_counts", None)
        d["issues"] = [asdict(i) for i in self.issues]
        return d

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / REPORT_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return path

    def summary_lines(self) -> list[str]:
        """Plain-text summary for the CLI."""
        lines = [f"imported {self.rows} row(s) from {self.source} ({self.source_format}, framework {self.framework})"]
        if self.steps:
            lines.append(f"steps {self.steps[0]}..{self.steps[1]}")
        lines.append("events: " + ", ".join(f"{k} {v}" for k, v in sorted(self.events.items())))
        lines.append(f"{len(self.mapped)} metric name(s) mapped onto rlobs fields; "
                     f"{len(self.unmapped)} kept as scalar events (see import_report.json)")
        if self.nonnumeric:
            lines.append("not numbers, not imported: " + ", ".join(f"{k} ({v})" for k, v in sorted(self.nonnumeric.items())))
        if self.nonfinite:
            lines.append("NaN/Inf values (imported as such): " + ", ".join(f"{k} x{v}" for k, v in sorted(self.nonfinite.items())))
        if self.rows_without_step:
            lines.append(f"{self.rows_without_step} row(s) had no step (imported with step null)")
        for note in self.notes:
            lines.append(f"note: {note}")
        for i in self.issues[:20]:
            lines.append(f"{i.problem}: {i.where}: {i.detail}")
        if len(self.issues) > 20:
            lines.append(f"... {len(self.issues) - 20} more issue(s) in import_report.json")
        return lines
