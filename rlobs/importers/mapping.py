"""Metric-name tables and the conversion of metric rows into rlobs events.

A reader turns a log file into ``MetricRow``s: a step and ``{metric name: value}`` as the framework
logged them. A ``MetricTable`` maps names onto rlobs kinds and fields (``Target``); ``convert`` groups
one step's mapped values into one event per (kind, discriminator) and keeps every value it could not
map, or mapped lossily, as a ``scalar`` event (name, value, source). Nothing is silently dropped:
what is not a number is counted in the ``ImportReport``.

Targets:
    Target("train_step", "grad_norm")                        value copied
    Target("advantage", "max_abs_advantage", op="absmax")    |value|, the larger of several names wins
    Target("phase", "seconds", fixed={"phase": "generation"}) one phase event per step and phase name
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlobs.importers.report import ImportReport
from rlobs.schema import KINDS

OPS = ("value", "absmax", "int", "alias")
# Where a row's step comes from, first match wins: OpenRLHF / TRL-on-wandb log ``train/global_step`` (wandb's
# own ``_step`` may differ from it); verl's file logger and TRL's log_history use ``step``.
STEP_KEYS = ("train/global_step", "step", "global_step", "training/global_step", "Step", "_step", "train/step",
             "rollout/step")


@dataclass(frozen=True)
class Target:
    """Where one logged metric goes: ``kind.field`` (plus fixed discriminator fields)."""

    kind: str
    field: str
    op: str = "value"  # value | absmax (|x|, max over names) | int (rounded count) | alias (copy; original kept too)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"target kind {self.kind!r} unknown; valid: {', '.join(sorted(KINDS))}")
        names = KINDS[self.kind].field_names
        for f in (self.field, *self.fixed):
            if f not in names:
                raise ValueError(f"target {self.kind}.{f}: no such field; valid: {', '.join(names)}")
        if self.op not in OPS:
            raise ValueError(f"target op {self.op!r}; valid: {', '.join(OPS)}")

    @property
    def lossless(self) -> bool:
        """The field holds the logged value itself ("int" stores only integral values; others become scalars)."""
        return self.op in ("value", "int")

    def label(self) -> str:
        fixed = ", ".join(f"{k}={v}" for k, v in self.fixed.items())
        return f"{self.kind}.{self.field}" + (f" [{fixed}]" if fixed else "") + (f" ({self.op})" if self.op != "value" else "")


@dataclass(frozen=True)
class MetricTable:
    """One framework's metric names. ``prefixes`` are stripped before lookup (e.g. wandb's ``train/``)."""

    framework: str
    exact: Mapping[str, Target]
    patterns: tuple[tuple[str, Target], ...] = ()
    prefixes: tuple[str, ...] = ()

    def normalise(self, name: str) -> str:
        for p in self.prefixes:
            if name.startswith(p):
                return name[len(p):]
        return name

    def lookup(self, name: str) -> Target | None:
        key = self.normalise(name)
        hit = self.exact.get(name) if key != name else None
        if hit is None:
            hit = self.exact.get(key)
        if hit is not None:
            return hit
        for pattern, target in self.patterns:
            if re.fullmatch(pattern, key):
                return target
        return None

    def score(self, names: Iterable[str]) -> int:
        """How many of ``names`` this table maps (framework detection)."""
        return sum(1 for n in set(names) if self.lookup(n) is not None)


@dataclass
class MetricRow:
    """One logged row: the step it belongs to and its values as logged."""

    step: int | None
    values: dict[str, Any]
    origin: str  # file:line (or file:event index)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # console logs print numbers as text ("1.49e-08", "nan")
        try:
            v = float(value.strip())
        except ValueError:
            return None
        if math.isinf(v) and "inf" not in value.lower():
            return None  # "1e999", a 5000-digit number: beyond float64, not an infinity anyone logged
        return v
    return None


INT64_MAX = 2**63 - 1


def pick_step(row: Mapping[str, Any], keys: Iterable[str]) -> tuple[int | None, str | None]:
    """The row's step from the first of ``keys`` holding a finite number, and which key it was."""
    for key in keys:
        if key in row:
            v = _number(row[key])
            if v is not None and math.isfinite(v) and abs(v) <= INT64_MAX:
                return int(v), key
    return None, None


@dataclass
class _StepEvents:
    events: dict[tuple[str, tuple[tuple[str, Any], ...]], dict[str, Any]] = field(default_factory=dict)
    scalars: list[tuple[str, float]] = field(default_factory=list)


def convert(rows: Iterable[MetricRow], table: MetricTable, report: ImportReport, *, source: str
            ) -> list[tuple[int | None, str, dict[str, Any]]]:
    """Map rows to ``[(step, kind, fields), ...]`` in step order, filling ``report``."""
    per_step: dict[int | None, _StepEvents] = {}
    order: list[int | None] = []
    for row in rows:
        report.rows += 1
        step = row.step
        if step is None:
            report.rows_without_step += 1
        bucket = per_step.get(step)
        if bucket is None:
            bucket = per_step[step] = _StepEvents()
            order.append(step)
        for name, raw in row.values.items():
            value = _number(raw)
            if value is None:
                report.count_nonnumeric(name, raw)
                continue
            if not math.isfinite(value):
                report.nonfinite[name] = report.nonfinite.get(name, 0) + 1
            target = table.lookup(name)
            if target is None:
                bucket.scalars.append((name, value))
                report.unmapped[name] = report.unmapped.get(name, 0) + 1
                continue
            report.mapped.setdefault(name, target.label())
            key = (target.kind, tuple(sorted(target.fixed.items())))
            fields = bucket.events.setdefault(key, dict(target.fixed))
            if target.op == "alias":  # the field gets the value and the original name stays a scalar
                if target.field not in fields or target.field in target.fixed:
                    fields[target.field] = value
                bucket.scalars.append((name, value))
            elif target.op == "absmax":
                v = abs(value)
                prev = fields.get(target.field)
                fields[target.field] = v if prev is None or not (prev >= v) else prev
                bucket.scalars.append((name, value))  # the sign is lost in the event: keep the original too
            elif target.op == "int":
                if math.isfinite(value) and value == round(value) and abs(value) <= INT64_MAX:
                    fields[target.field] = int(value)
                else:  # not a count: keep it as logged
                    bucket.scalars.append((name, value))
            elif target.field in fields and target.field not in target.fixed:
                # two names for one field in the same step: the first wins, the other is kept as a scalar
                bucket.scalars.append((name, value))
                report.conflicts[name] = report.conflicts.get(name, 0) + 1
            else:
                fields[target.field] = value
    out: list[tuple[int | None, str, dict[str, Any]]] = []
    ordered = sorted(s for s in order if s is not None) + ([None] if None in per_step else [])
    for step in ordered:
        bucket = per_step[step]
        for (kind, _fixed), fields in bucket.events.items():
            _derive(kind, fields, step)
            out.append((step, kind, fields))
        for name, value in bucket.scalars:
            out.append((step, "scalar", {"name": name, "value": value, "source": source}))
    return out


def _derive(kind: str, fields: dict[str, Any], step: int | None) -> None:
    """Fields implied by others (never overriding what the log said)."""
    if kind == "train_step" and "grad_norm" in fields and "nonfinite" not in fields:
        g = fields["grad_norm"]
        fields["nonfinite"] = not math.isfinite(g)
    if kind == "weight_sync":
        fields.setdefault("outcome", "ok")
        if step is not None:
            fields.setdefault("version", step)


_LABEL = re.compile(r"^\s*(\w+)\.(\w+)\s*(?:\[([^\]]*)\])?\s*(?:\((\w+)\))?\s*$")


def parse_target(label: str) -> Target:
    """``kind.field [key=value, ...] (op)``, the notation of docs/importers.md and ``Target.label()``;
    ValueError with the reason otherwise."""
    m = _LABEL.match(label)
    if not m:
        raise ValueError(f"{label!r} is not 'kind.field [key=value, ...] (op)'")
    kind, fld, fixed_txt, op = m.groups()
    fixed: dict[str, Any] = {}
    for part in (fixed_txt or "").split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"{label!r}: {part.strip()!r} is not key=value")
        fixed[k.strip()] = v.strip()
    return Target(kind, fld, op=op or "value", fixed=fixed)


def load_user_map(path: Any) -> dict[str, Target]:
    """A ``--map`` file: a JSON object ``{"logged name": "kind.field [k=v] (op)", ...}``."""
    import json
    from pathlib import Path

    from rlobs.importers.report import ImportFailed

    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ImportFailed(f"--map {p}: cannot read: {exc}") from None
    if len(raw) > 16 * 1024 * 1024:
        raise ImportFailed(f"--map {p}: {len(raw)} bytes; a mapping file may have at most 16 MiB")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ImportFailed(f"--map {p}: not JSON ({str(exc)[:120]}); expected "
                           '{"logged name": "kind.field [key=value] (op)", ...}') from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        raise ImportFailed(f"--map {p}: expected a JSON object of strings: "
                           '{"logged name": "kind.field [key=value] (op)", ...}')
    out: dict[str, Target] = {}
    bad = []
    for name, label in obj.items():
        try:
            out[name] = parse_target(label)
        except ValueError as exc:
            bad.append(f"{name!r}: {exc}")
    if bad:
        raise ImportFailed(f"--map {p}: " + "; ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""))
    return out
