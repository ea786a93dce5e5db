"""What a rule sees: the run's tables through DuckDB, the run config, and small query helpers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from rlobs.store import RunRecord


@dataclass
class RunContext:
    record: RunRecord
    since_step: int | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.config:
            cfg = self.record.manifest.get("config") or {}
            self.config = cfg if isinstance(cfg, dict) else {}
        self._counts = self.record.counts()

    # ---- data presence ----
    def count(self, kind: str) -> int:
        return self._counts.get(kind, 0)

    def missing(self, *kinds: str) -> list[str]:
        return [k for k in kinds if not self._counts.get(k)]

    # ---- shared derived tables (built once per diagnosis) ----
    def sample_summary(self) -> str:
        """Name of a temp table with one row per sample id: generated ts, consumption count and steps, terminal."""
        if not getattr(self, "_samples_built", False):
            # grouped by a 64-bit hash of the id (much faster than by string; collisions are negligible)
            self.record.con.execute(
                "CREATE OR REPLACE TEMP TABLE _sample_summary AS SELECT hash(sample_id) AS h, "
                "any_value(sample_id) AS sample_id, "
                "min(CASE WHEN state = 'generated' THEN ts_ns END) AS generated_ts, "
                "sum((state = 'consumed')::INT) AS consumed, "
                "min(CASE WHEN state = 'consumed' THEN step END) AS first_consumed_step, "
                "max(CASE WHEN state = 'consumed' THEN step END) AS last_consumed_step, "
                "bool_or(state IN ('consumed', 'dropped')) AS terminal, "
                "bool_or(coalesce(duplicate, false)) AS duplicate FROM ledger WHERE sample_id IS NOT NULL GROUP BY h")
            self._samples_built = True
        return "_sample_summary"

    # ---- queries ----
    def step_filter(self, column: str = "step") -> str:
        return f" AND {column} >= {int(self.since_step)}" if self.since_step is not None else ""

    def rows(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        rel = self.record.sql(sql, params) if params is not None else self.record.sql(sql)
        return rel.fetchall()

    def scalar(self, sql: str) -> Any:
        rows = self.rows(sql)
        return rows[0][0] if rows else None

    def cfg(self, *names: str, default: Any = None) -> Any:
        """First config value found under any of ``names`` (nested keys with dots)."""
        for name in names:
            node: Any = self.config
            for part in name.split("."):
                if isinstance(node, dict) and part in node:
                    node = node[part]
                else:
                    node = None
                    break
            if node is not None:
                return node
        return default


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def runs_of(steps: Sequence[int], min_len: int) -> list[tuple[int, int]]:
    """Maximal runs of consecutive steps with at least ``min_len`` members: [(first, last), ...]."""
    out = []
    ordered = sorted(set(steps))
    start = prev = None
    for s in ordered:
        if prev is not None and s == prev + 1:
            prev = s
            continue
        if start is not None and prev - start + 1 >= min_len:
            out.append((start, prev))
        start = prev = s
    if start is not None and prev - start + 1 >= min_len:
        out.append((start, prev))
    return out


def json_list(value: str | None) -> list[Any]:
    if not value:
        return []
    try:
        out = json.loads(value)
    except (json.JSONDecodeError, TypeError):
        return []
    return out if isinstance(out, list) else []
