"""What a rule sees: the run's tables through DuckDB, the run config, and small query helpers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

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
        self._memo: dict[Any, Any] = {}

    # ---- data presence ----
    def count(self, kind: str) -> int:
        return self._counts.get(kind, 0)

    def missing(self, *kinds: str) -> list[str]:
        return [k for k in kinds if not self._counts.get(k)]

    # ---- shared derived values and tables (built once per diagnosis, shared by the rules) ----
    def memo(self, key: Any, fn: Callable[[], Any]) -> Any:
        """``fn()`` computed once per diagnosis under ``key``: a query several rules need runs once."""
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def suspect_samples(self) -> str:
        """Name of a temp table with one row per sample id that breaks exactly-once: consumed more than once,
        a transition flagged ``duplicate``, or generated and never consumed nor dropped. Columns: sample id,
        generated ts, consumption count and first/last consumed step, terminal, duplicate.

        Grouped by a 64-bit hash of the id (much faster than by string; collisions are negligible), in two
        passes: one aggregate over every transition with only what decides suspicion (the consumption count
        and a bit-or of three flags: a million groups carry two numbers, not seven aggregates and a string),
        then the full summary of the suspects alone (none in a healthy run, so no second pass)."""
        def build() -> str:
            con = self.record.con
            con.execute(
                "CREATE OR REPLACE TEMP TABLE _suspect_hashes AS SELECT hash(sample_id) AS h FROM ledger "
                "WHERE sample_id IS NOT NULL GROUP BY h HAVING count(*) FILTER (WHERE state = 'consumed') > 1 "
                # bit 1: generated (with a time), bit 2: consumed or dropped (terminal), bit 4: flagged duplicate
                "OR bit_or(coalesce(state = 'generated' AND ts_ns IS NOT NULL, false)::INT "
                "| (coalesce(state IN ('consumed', 'dropped'), false)::INT << 1) "
                "| (coalesce(duplicate, false)::INT << 2)) IN (1, 4, 5, 6, 7)")
            some = con.execute("SELECT count(*) FROM _suspect_hashes").fetchall()[0][0] > 0
            con.execute(
                "CREATE OR REPLACE TEMP TABLE _suspect_samples AS SELECT hash(sample_id) AS h, "
                "any_value(sample_id) AS sample_id, "
                "min(CASE WHEN state = 'generated' THEN ts_ns END) AS generated_ts, "
                "sum((state = 'consumed')::INT) AS consumed, "
                "min(CASE WHEN state = 'consumed' THEN step END) AS first_consumed_step, "
                "max(CASE WHEN state = 'consumed' THEN step END) AS last_consumed_step, "
                "bool_or(state IN ('consumed', 'dropped')) AS terminal, "
                "bool_or(coalesce(duplicate, false)) AS duplicate FROM ledger WHERE sample_id IS NOT NULL AND "
                + ("hash(sample_id) IN (SELECT h FROM _suspect_hashes)" if some else "false") + " GROUP BY h")
            return "_suspect_samples"
        return self.memo("suspect_samples", build)

    def step_starts(self) -> str:
        """Name of a temp table (ts_ns, step): when each trainer step began, for ASOF joins of step-less events."""
        def build() -> str:
            self.record.con.execute("CREATE OR REPLACE TEMP TABLE _step_starts AS SELECT min(ts_ns) ts_ns, step "
                                    "FROM train_step WHERE step IS NOT NULL GROUP BY step")
            return "_step_starts"
        return self.memo("step_starts", build)

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
