"""Dashboards as plain data: boards, rows, panels and queries, independent of any Grafana SDK.

The board definitions (``rlobs.dashboards.boards_*``) build these objects; ``render`` turns them
into Grafana JSON with grafana-foundation-sdk. Tests and the Prometheus integration test walk the
same objects (or the JSON) to run every query.

Units: every panel states one. ``unit_of(metric)`` maps a catalogue metric's unit to Grafana's unit
id; panels that show derived values (rates, shares) name their unit explicitly with the constants
below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlobs.catalogue import CATALOGUE

# Grafana unit ids used by rlobs panels.
SECONDS = "s"
BYTES = "bytes"
BYTES_PER_SECOND = "Bps"
PERCENT = "percentunit"  # 0..1 shown as %
COUNT = "short"
PER_SECOND = "cps"  # counts per second
STEPS_PER_SECOND = "suffix: steps/s"
SAMPLES_PER_SECOND = "suffix: samples/s"
TOKENS_PER_SECOND = "suffix: tok/s"
TOKENS = "suffix: tok"
VERSIONS = "suffix: versions"
NUMBER = "none"
TIMESTAMP = "dateTimeAsIso"

_UNIT_BY_CATALOGUE = {
    "seconds": SECONDS,
    "timestamp_seconds": TIMESTAMP,
    "bytes": BYTES,
    "bytes_per_second": BYTES_PER_SECOND,
    "ratio": PERCENT,
    "tokens": TOKENS,
    "tokens_per_second": TOKENS_PER_SECOND,
    "samples_per_second": SAMPLES_PER_SECOND,
    "versions": VERSIONS,
    "1": NUMBER,
}

PANEL_KINDS = ("timeseries", "stat", "heatmap", "bargauge", "table")


def unit_of(metric: str) -> str:
    """Grafana unit of a catalogue metric's values."""
    spec = CATALOGUE.get(metric)
    if spec is None:
        raise ValueError(f"{metric!r} is not in rlobs.catalogue")
    return _UNIT_BY_CATALOGUE[spec.unit]


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""
    format: str = "time_series"  # time_series | heatmap | table
    instant: bool = False


@dataclass(frozen=True, slots=True)
class Threshold:
    value: float | None  # None: the base colour
    color: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    kind: str
    unit: str
    queries: tuple[Query, ...]
    description: str
    width: int = 8
    height: int = 8
    stack: bool = False
    thresholds: tuple[Threshold, ...] = ()
    min: float | None = None
    max: float | None = None
    points: bool = False  # draw points only (event markers)
    # (field name, URL template): a data link on that column of a table; "{runbook_base}" in the template is
    # the build's runbook base URL, Grafana fills ${__value.raw} with the cell
    links: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in PANEL_KINDS:
            raise ValueError(f"panel {self.title!r}: kind {self.kind!r}; valid: {', '.join(PANEL_KINDS)}")
        if not self.unit:
            raise ValueError(f"panel {self.title!r}: a unit is required")
        if not self.queries:
            raise ValueError(f"panel {self.title!r}: at least one query is required")
        if not self.description.strip():
            raise ValueError(f"panel {self.title!r}: a description is required")
        if not 1 <= self.width <= 24:
            raise ValueError(f"panel {self.title!r}: width {self.width} not in 1..24")


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Annotation:
    name: str
    expr: str
    color: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class Board:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    annotations: tuple[Annotation, ...] = ()
    tags: tuple[str, ...] = ("rlobs",)

    @property
    def slug(self) -> str:
        return self.uid.removeprefix("rlobs-")

    def panels(self) -> tuple[Panel, ...]:
        return tuple(p for r in self.rows for p in r.panels)

    def __post_init__(self) -> None:
        titles = [p.title for p in self.panels()]
        dupes = sorted({t for t in titles if titles.count(t) > 1})
        if dupes:
            raise ValueError(f"board {self.uid!r}: panel titles repeat: {dupes}")


def ts(title: str, unit: str, description: str, *queries: Query, **kw: object) -> Panel:
    return Panel(title, "timeseries", unit, tuple(queries), description, **kw)  # type: ignore[arg-type]


def stat(title: str, unit: str, description: str, *queries: Query, **kw: object) -> Panel:
    kw.setdefault("width", 4)
    kw.setdefault("height", 5)
    return Panel(title, "stat", unit, tuple(queries), description, **kw)  # type: ignore[arg-type]


def q(expr: str, legend: str = "", **kw: object) -> Query:
    return Query(expr, legend, **kw)  # type: ignore[arg-type]


GREEN_AT_ZERO = (Threshold(None, "green"), Threshold(1, "red"))


def traffic_light(warn: float, crit: float) -> tuple[Threshold, ...]:
    return (Threshold(None, "green"), Threshold(warn, "orange"), Threshold(crit, "red"))


def to_yaml(doc: Any) -> str:
    """YAML text of generated files (alert rules, promtool tests, provisioning, Prometheus config), with
    PyYAML: key order kept, block style, long PromQL and templates never folded, so diffs stay stable."""
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 20)
