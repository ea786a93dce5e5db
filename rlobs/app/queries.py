"""The app's DuckDB queries: pure functions from a ``RunRecord`` to pandas frames (no streamlit here).

Everything per step is aggregated in DuckDB so that a record with millions of samples returns a few
thousand rows; per-sample tables are paged (filter, order, ``LIMIT``) before they are joined with the
grader, ledger and parity tables. Every kind has a view even when the record lacks it (empty), so a
query never fails on a missing kind: it returns an empty frame.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rlobs.detect import spikes
from rlobs.store import RunRecord

# Rollouts from a generator that does not follow the trainer's steps carry no step: place them at their
# policy version (else dispatch version), which the trainer advances once per step.
ROLLOUT = "(SELECT * REPLACE (coalesce(step, policy_version, dispatch_version) AS step) FROM rollout)"
BOUNDARIES = ("dump", "staging", "transfer", "load", "cache_reset", "end_to_end")


def _df(rec: RunRecord, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
    return rec.sql(sql, params).df() if params is not None else rec.sql(sql).df()


def _rows(rec: RunRecord, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    return (rec.sql(sql, params) if params is not None else rec.sql(sql)).fetchall()


# ---------- per-step series (Timeline, Compare) ----------
def step_bounds(rec: RunRecord) -> tuple[int, int] | None:
    """First and last step of the run (train steps and rollouts, else any event)."""
    lo, hi = _rows(rec, "SELECT min(lo), max(hi) FROM (SELECT min(step) lo, max(step) hi FROM train_step "
                        f"UNION ALL SELECT min(step), max(step) FROM {ROLLOUT})")[0]
    if lo is None:
        lo, hi = _rows(rec, "SELECT min(step), max(step) FROM events WHERE step IS NOT NULL")[0]
    return None if lo is None else (int(lo), int(hi))


def train_series(rec: RunRecord) -> pd.DataFrame:
    """step, wall time, loss, grad norm (+ robust spike flag), reward, step seconds, samples/s."""
    df = _df(rec, """
        SELECT step, min(ts_ns) AS ts_ns, avg(loss) AS loss, max(grad_norm) AS grad_norm,
               bool_or(coalesce(spike, false)) AS spike_flag, bool_or(coalesce(nonfinite, false)) AS nonfinite,
               avg(reward_mean) AS reward_mean, avg(reward_std) AS reward_std, max(step_seconds) AS step_seconds,
               sum(samples) AS samples, max(data_wait_s) AS data_wait_s, max(reward_wait_s) AS reward_wait_s
        FROM train_step WHERE step IS NOT NULL GROUP BY step ORDER BY step""")
    df["time"] = pd.to_datetime(df["ts_ns"], unit="ns", utc=True)
    # the one spike detector (rlobs.detect, the live probe's): log scale, zero-norm steps never a baseline
    gn = df["grad_norm"].astype("float64").where(~df["nonfinite"].fillna(False).astype(bool))
    scores = spikes(gn.fillna(np.nan).to_numpy())
    df["spike_z"] = [np.nan if s.z is None else s.z for s in scores]
    df["spike_ratio"] = [np.nan if s.ratio is None else s.ratio for s in scores]
    df["spike"] = (df["spike_flag"].fillna(False).astype(bool) | np.array([s.spike for s in scores], dtype=bool)
                   | df["nonfinite"].fillna(False).astype(bool))
    return df


def advantage_series(rec: RunRecord) -> pd.DataFrame:
    return _df(rec, """
        SELECT step, max(zero_std_ratio) AS zero_std_ratio, max(near_zero_std_ratio) AS near_zero_std_ratio,
               min(denom_min) AS denom_min, max(max_abs_advantage) AS max_abs_advantage,
               sum(nonfinite_denominators) AS nonfinite_denominators, bool_and(coalesce(ranks_agree, true)) AS ranks_agree
        FROM advantage WHERE step IS NOT NULL GROUP BY step ORDER BY step""")


def parity_series(rec: RunRecord) -> pd.DataFrame:
    return _df(rec, """
        SELECT step, avg(mean_abs_dlogp) AS mean_abs_dlogp, max(max_abs_dlogp) AS max_abs_dlogp, avg(kl_k3) AS kl_k3,
               bool_or(coalesce(first_after_sync, false)) AS first_after_sync,
               bool_and(coalesce(hashes_match, true)) AS hashes_match
        FROM parity WHERE step IS NOT NULL GROUP BY step ORDER BY step""")


def staleness_series(rec: RunRecord) -> pd.DataFrame:
    return _df(rec, """
        SELECT step, avg(mean_staleness) AS mean_staleness, max(max_staleness) AS max_staleness,
               avg(is_ratio_mean) AS is_ratio_mean, avg(ess_ratio) AS ess_ratio
        FROM staleness WHERE step IS NOT NULL GROUP BY step ORDER BY step""")


def staleness_histogram(rec: RunRecord, lo: int, hi: int) -> pd.DataFrame:
    """Staleness of consumed samples in steps [lo, hi]: ledger, else the staleness histograms, else rollouts."""
    df = _df(rec, "SELECT staleness, count(*) AS samples FROM ledger WHERE state = 'consumed' AND staleness IS NOT NULL "
                  "AND step BETWEEN ? AND ? GROUP BY staleness ORDER BY staleness", [lo, hi])
    if len(df):
        return df
    counts: dict[int, int] = {}
    for (raw,) in _rows(rec, "SELECT histogram FROM staleness WHERE histogram IS NOT NULL AND step BETWEEN ? AND ?",
                        [lo, hi]):
        try:
            for k, v in json.loads(raw).items():
                counts[int(k)] = counts.get(int(k), 0) + int(v)
        except (ValueError, TypeError, AttributeError):
            continue
    if counts:
        return pd.DataFrame({"staleness": list(counts), "samples": list(counts.values())}).sort_values("staleness")
    return _df(rec, f"SELECT policy_version - dispatch_version AS staleness, count(*) AS samples FROM {ROLLOUT} "
                    "WHERE dispatch_version IS NOT NULL AND step BETWEEN ? AND ? GROUP BY ALL ORDER BY 1", [lo, hi])


def throughput_series(rec: RunRecord) -> pd.DataFrame:
    """samples/s per side and step: generator (all and effective) from throughput, trainer from train_step."""
    return _df(rec, """
        SELECT step, component || ' samples/s' AS series, avg(samples_per_s) AS value FROM throughput
          WHERE step IS NOT NULL AND samples_per_s IS NOT NULL GROUP BY ALL
        UNION ALL
        SELECT step, component || ' effective samples/s', avg(effective_samples_per_s) FROM throughput
          WHERE step IS NOT NULL AND effective_samples_per_s IS NOT NULL GROUP BY ALL
        UNION ALL
        SELECT step, 'trainer samples/s', sum(samples) / max(step_seconds) FROM train_step
          WHERE step IS NOT NULL AND step_seconds > 0 GROUP BY ALL
        ORDER BY 1, 2""")


def sync_markers(rec: RunRecord) -> pd.DataFrame:
    """One row per synced version: the step it happened at and whether every boundary was ok."""
    return _df(rec, """
        SELECT version, min(step) AS step, min(coalesce(start_ns, ts_ns)) AS ts_ns,
               bool_and(coalesce(outcome, 'ok') = 'ok') AS ok
        FROM weight_sync WHERE version IS NOT NULL GROUP BY version ORDER BY version""")


def incidents(rec: RunRecord) -> pd.DataFrame:
    return _df(rec, "SELECT coalesce(onset_step, step) AS step, fault, magnitude, detail, component, ts_ns "
                    "FROM incident ORDER BY ts_ns")


# ---------- weight sync ----------
def sync_versions(rec: RunRecord) -> pd.DataFrame:
    """Per version: step, boundaries seen, failed boundaries, end-to-end and transfer figures, checks."""
    return _df(rec, f"""
        SELECT version, min(step) AS step, count(DISTINCT boundary) AS boundaries,
               string_agg(CASE WHEN coalesce(outcome, 'ok') <> 'ok' THEN boundary || ':' || outcome END, ', '
                          ORDER BY boundary) AS failed,
               max(CASE WHEN boundary = 'end_to_end' THEN duration_s END) AS end_to_end_s,
               max(CASE WHEN boundary = 'transfer' THEN duration_s END) AS transfer_s,
               max(CASE WHEN boundary = 'transfer' THEN bandwidth_bps END) / 1e6 AS transfer_mb_per_s,
               bool_and(fingerprint_match) AS fingerprint_match,
               bool_and(CASE WHEN boundary = 'cache_reset' THEN coalesce(reset_confirmed, false) END) AS cache_reset_confirmed,
               bool_or(coalesce(torn, false)) AS torn,
               string_agg(DISTINCT path, ',' ORDER BY path) AS path
        FROM weight_sync WHERE version IS NOT NULL AND boundary IN ({", ".join(f"'{b}'" for b in BOUNDARIES)})
        GROUP BY version ORDER BY version""")


def sync_gantt(rec: RunRecord, versions: tuple[int, ...]) -> pd.DataFrame:
    """Bars for the Gantt, in ms since the version's first boundary started.

    Boundaries with ``start_ns`` are placed where they ran ("measured"); when a version lacks it, its
    boundaries are laid end to end in boundary order from their durations ("sequential")."""
    cols = ["version", "boundary", "outcome", "start_ms", "duration_ms", "end_ms", "layout", "path", "mb_per_s"]
    if not versions:
        return pd.DataFrame(columns=cols)
    df = _df(rec, f"""
        SELECT version, boundary, coalesce(outcome, 'ok') AS outcome, start_ns, coalesce(duration_s, 0) * 1e3 AS duration_ms,
               ts_ns, path, bandwidth_bps / 1e6 AS mb_per_s FROM weight_sync
        WHERE version IN ({", ".join(str(int(v)) for v in versions)}) AND boundary <> 'end_to_end'""")
    order = {b: i for i, b in enumerate(BOUNDARIES)}
    df["_o"] = df["boundary"].map(order).fillna(len(order))
    parts = []
    for _, g in df.sort_values(["version", "_o", "ts_ns"]).groupby("version", sort=True):
        g = g.copy()
        if g["start_ns"].notna().all():
            g["start_ms"] = (g["start_ns"] - g["start_ns"].min()) / 1e6
            g["layout"] = "measured"
        else:
            g["start_ms"] = g["duration_ms"].cumsum() - g["duration_ms"]
            g["layout"] = "sequential"
        parts.append(g)
    out = pd.concat(parts, ignore_index=True) if parts else df.assign(start_ms=[], layout=[])
    out["end_ms"] = out["start_ms"] + out["duration_ms"]
    return out[cols].sort_values(["version", "start_ms"], kind="stable").reset_index(drop=True)


def sync_detail(rec: RunRecord, version: int) -> pd.DataFrame:
    """Every boundary event of one version, in boundary order, with the columns that carry values."""
    df = _df(rec, "SELECT * EXCLUDE (run_id, trace_id, span_id, mono_ns) FROM weight_sync WHERE version = ? ",
             [int(version)])
    order = {b: i for i, b in enumerate(BOUNDARIES)}
    df = df.assign(_o=df["boundary"].map(order).fillna(99)).sort_values(["_o", "ts_ns"]).drop(columns="_o")
    return df.dropna(axis=1, how="all").reset_index(drop=True)


# ---------- graders ----------
def grader_summary(rec: RunRecord) -> pd.DataFrame:
    return _df(rec, """
        SELECT grader_kind, count(*) AS calls, count(*) FILTER (WHERE outcome = 'timeout') AS timeouts,
               count(*) FILTER (WHERE outcome = 'error') AS errors,
               quantile_cont(latency_s, 0.5) AS p50_s, quantile_cont(latency_s, 0.95) AS p95_s,
               quantile_cont(latency_s, 0.99) AS p99_s, max(latency_s) AS max_s, avg(queue_wait_s) AS mean_queue_wait_s
        FROM grader_call GROUP BY grader_kind ORDER BY grader_kind""")


def grader_latency_histogram(rec: RunRecord) -> pd.DataFrame:
    """Latency distribution per kind on log-spaced bins (10 per decade), computed in DuckDB."""
    return _df(rec, """
        SELECT grader_kind, pow(10, floor(log10(greatest(latency_s, 1e-6)) * 10) / 10) AS latency_s,
               count(*) AS calls, count(*) FILTER (WHERE outcome <> 'ok') AS not_ok
        FROM grader_call WHERE latency_s IS NOT NULL GROUP BY ALL ORDER BY 1, 2""")


def grader_by_step(rec: RunRecord) -> pd.DataFrame:
    """Calls, timeouts, errors and p95 latency per step and grader kind. Graders often run outside the
    trainer's step: a call without a step takes the step of the rollout it graded."""
    unstepped = _rows(rec, "SELECT count(*) FROM grader_call WHERE step IS NULL")[0][0]
    source = ("grader_call" if not unstepped else
              "(SELECT g.* REPLACE (coalesce(g.step, r.step) AS step) FROM grader_call g LEFT JOIN "
              f"(SELECT sample_id, min(step) AS step FROM {ROLLOUT} GROUP BY sample_id) r USING (sample_id))")
    return _df(rec, f"""
        SELECT step, grader_kind, count(*) AS calls, count(*) FILTER (WHERE outcome = 'timeout') AS timeouts,
               count(*) FILTER (WHERE outcome = 'error') AS errors, quantile_cont(latency_s, 0.95) AS p95_s
        FROM {source} WHERE step IS NOT NULL GROUP BY ALL ORDER BY 1, 2""")


def slowest_calls(rec: RunRecord, n: int = 20, kind: str | None = None) -> pd.DataFrame:
    """The slowest grader calls with their sample (step, group, finish reason, tokens)."""
    where, params = ("WHERE grader_kind = ?", [kind]) if kind else ("", [])
    return _df(rec, f"""
        WITH c AS (SELECT sample_id, grader_kind, latency_s, queue_wait_s, outcome, reward, error, step AS grader_step
                   FROM grader_call {where} ORDER BY latency_s DESC NULLS LAST, sample_id LIMIT {int(n)})
        SELECT c.sample_id, c.grader_kind, c.latency_s, c.queue_wait_s, c.outcome, c.reward, c.error,
               coalesce(r.step, c.grader_step) AS step, r.group_id, r.finish_reason, r.completion_tokens
        FROM c LEFT JOIN (SELECT * FROM {ROLLOUT} WHERE sample_id IN (SELECT sample_id FROM c)) r USING (sample_id)
        ORDER BY c.latency_s DESC NULLS LAST, c.sample_id""", params or None)


# ---------- samples ----------
@dataclass
class SampleFilter:
    step_lo: int | None = None
    step_hi: int | None = None
    group: str = ""  # group id (exact) or prefix ending in *
    sample: str = ""  # sample id (exact)
    finish_reasons: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)  # grader outcome
    min_abs_dlogp: float | None = None
    min_staleness: int | None = None

    @property
    def needs_join(self) -> bool:
        return bool(self.outcomes) or self.min_abs_dlogp is not None or self.min_staleness is not None


_JOINED = """
    LEFT JOIN (SELECT sample_id, min(grader_kind) AS grader_kind, sum(reward) AS reward,
                      ['ok', 'error', 'timeout'][max(CASE outcome WHEN 'timeout' THEN 3 WHEN 'error' THEN 2
                                                                  WHEN 'ok' THEN 1 END)] AS grader_outcome,
                      max(latency_s) AS grader_latency_s
               FROM grader_call {semi} GROUP BY sample_id) g USING (sample_id)
    LEFT JOIN (SELECT sample_id, max(staleness) AS consumed_staleness,
                      max(CASE WHEN state = 'dropped' THEN reason END) AS dropped
               FROM ledger WHERE state IN ('consumed', 'dropped') {semi_and} GROUP BY sample_id) l USING (sample_id)
    LEFT JOIN (SELECT sample_id, max(mean_abs_dlogp) AS abs_dlogp FROM parity_sample {semi} GROUP BY sample_id) p
               USING (sample_id)"""
_COLUMNS = ("r.step, r.group_id, r.sample_id, g.reward, coalesce(l.consumed_staleness, r.policy_version - "
            "r.dispatch_version) AS staleness, p.abs_dlogp, r.finish_reason, g.grader_outcome, g.grader_kind, "
            "r.completion_tokens, g.grader_latency_s, l.dropped")


def _rollout_where(f: SampleFilter) -> tuple[str, list[Any]]:
    conds, params = ["true"], []
    if f.step_lo is not None:
        conds.append("step >= ?")
        params.append(int(f.step_lo))
    if f.step_hi is not None:
        conds.append("step <= ?")
        params.append(int(f.step_hi))
    if f.group.strip():
        g = f.group.strip()
        if g.endswith("*"):
            conds.append("starts_with(group_id, ?)")
            params.append(g[:-1])
        else:
            conds.append("group_id = ?")
            params.append(g)
    if f.sample.strip():
        conds.append("sample_id = ?")
        params.append(f.sample.strip())
    if f.finish_reasons:
        conds.append(f"finish_reason IN ({', '.join('?' for _ in f.finish_reasons)})")
        params.extend(f.finish_reasons)
    return " AND ".join(conds), params


def _joined_where(f: SampleFilter) -> tuple[str, list[Any]]:
    conds, params = ["true"], []
    if f.outcomes:
        conds.append(f"grader_outcome IN ({', '.join('?' for _ in f.outcomes)})")
        params.extend(f.outcomes)
    if f.min_abs_dlogp is not None:
        conds.append("abs_dlogp >= ?")
        params.append(float(f.min_abs_dlogp))
    if f.min_staleness is not None:
        conds.append("staleness >= ?")
        params.append(int(f.min_staleness))
    return " AND ".join(conds), params


def samples_page(rec: RunRecord, f: SampleFilter, limit: int = 200, offset: int = 0) -> tuple[pd.DataFrame, int]:
    """One page of the samples table (ordered by step, sample id) and the number of matching samples.

    Filters on rollout columns page the rollouts first and join only that page; filters on joined columns
    (grader outcome, |Δlogp|, staleness) join everything that passes the rollout filters, then page."""
    where, params = _rollout_where(f)
    if not f.needs_join:
        total = int(_rows(rec, f"SELECT count(*) FROM {ROLLOUT} WHERE {where}", params)[0][0])
        semi = "sample_id IN (SELECT sample_id FROM r)"
        sql = (f"WITH r AS (SELECT * FROM {ROLLOUT} WHERE {where} ORDER BY step, sample_id LIMIT {int(limit)} "
               f"OFFSET {int(offset)}) SELECT {_COLUMNS} FROM r "
               f"{_JOINED.format(semi='WHERE ' + semi, semi_and='AND ' + semi)} "
               "ORDER BY r.step, r.sample_id")
        return _df(rec, sql, params), total
    jwhere, jparams = _joined_where(f)
    base = (f"WITH r AS (SELECT * FROM {ROLLOUT} WHERE {where}), j AS (SELECT {_COLUMNS} FROM r "
            f"{_JOINED.format(semi='', semi_and='')}) ")
    total = int(_rows(rec, base + f"SELECT count(*) FROM j WHERE {jwhere}", params + jparams)[0][0])
    page = _df(rec, base + f"SELECT * FROM j WHERE {jwhere} ORDER BY step, sample_id LIMIT {int(limit)} "
                           f"OFFSET {int(offset)}", params + jparams)
    return page, total


def distinct_values(rec: RunRecord, kind: str, column: str, limit: int = 50) -> list[str]:
    rows = _rows(rec, f'SELECT DISTINCT "{column}" FROM "{kind}" WHERE "{column}" IS NOT NULL ORDER BY 1 LIMIT {int(limit)}')
    return [str(r[0]) for r in rows]


def sample_detail(rec: RunRecord, sample_id: str) -> dict[str, Any] | None:
    """One sample in full: rollout (prompt, completion), grader calls, ledger history, per-token log-probs."""
    roll = _df(rec, "SELECT * EXCLUDE (run_id, trace_id, span_id, mono_ns) FROM rollout WHERE sample_id = ? "
                    "ORDER BY ts_ns", [sample_id])
    if roll.empty:
        return None
    first = roll.iloc[0]
    grades = _df(rec, "SELECT grader_kind, outcome, reward, latency_s, queue_wait_s, error, step, ts_ns "
                      "FROM grader_call WHERE sample_id = ? ORDER BY ts_ns", [sample_id])
    ledger = _df(rec, "SELECT state, reason, step, staleness, age_s, tokens, duplicate, component, ts_ns "
                      "FROM ledger WHERE sample_id = ? ORDER BY ts_ns", [sample_id])
    parity = _df(rec, "SELECT mean_abs_dlogp, max_abs_dlogp, train_logprobs FROM parity_sample WHERE sample_id = ? "
                      "ORDER BY ts_ns", [sample_id])
    gen_arr = _floats(first.get("logprobs"))
    train_arr = _floats(parity.iloc[0]["train_logprobs"] if len(parity) else None)
    n = max(len(gen_arr), len(train_arr))
    tokens = pd.DataFrame({"position": np.arange(n)})
    tokens["generator_logprob"] = np.pad(gen_arr, (0, n - len(gen_arr)), constant_values=np.nan)
    tokens["trainer_logprob"] = np.pad(train_arr, (0, n - len(train_arr)), constant_values=np.nan)
    tokens["abs_dlogp"] = (tokens["generator_logprob"] - tokens["trainer_logprob"]).abs()
    fields = {k: (None if _isna(v) else v) for k, v in first.items() if k not in ("prompt", "completion", "logprobs")}
    return {"sample_id": sample_id, "rollout": fields, "prompt": _text(first.get("prompt")),
            "completion": _text(first.get("completion")), "grader_calls": grades, "ledger": ledger,
            "parity": parity.drop(columns=["train_logprobs"]) if len(parity) else parity, "tokens": tokens,
            "reward": float(grades["reward"].sum()) if len(grades) and grades["reward"].notna().any() else None}


def _floats(v: Any) -> np.ndarray:
    if v is None or (not hasattr(v, "__len__") and _isna(v)):
        return np.array([], dtype="float64")
    return np.asarray([np.nan if x is None else x for x in v], dtype="float64")


def _isna(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _text(v: Any) -> str | None:
    return None if v is None or _isna(v) else str(v)


# ---------- config (Compare) ----------
def config_of(rec: RunRecord) -> dict[str, Any]:
    """Flattened manifest config + hashes, plus each component's own manifest-event config where it differs."""
    flat: dict[str, Any] = {}
    _flatten("config", rec.manifest.get("config") or {}, flat)
    _flatten("hashes", rec.manifest.get("hashes") or {}, flat)
    for comp, cfg, tok, tpl, smp in _rows(rec, "SELECT component, any_value(config), any_value(tokenizer_hash), "
                                               "any_value(chat_template_hash), any_value(sampling_hash) FROM manifest "
                                               "GROUP BY component ORDER BY component"):
        for name, value in (("tokenizer_hash", tok), ("chat_template_hash", tpl), ("sampling_hash", smp)):
            if value is not None:
                flat[f"{comp}.{name}"] = value
        try:
            parsed = json.loads(cfg) if cfg else {}
        except (TypeError, ValueError):
            parsed = {}
        own: dict[str, Any] = {}
        _flatten("config", parsed if isinstance(parsed, dict) else {}, own)
        for k, v in own.items():
            if flat.get(k) != v:
                flat[f"{comp}.{k}"] = v
    return flat


def _flatten(prefix: str, node: Any, out: dict[str, Any]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = node


def config_diff(a: dict[str, Any], b: dict[str, Any], only_different: bool = True) -> pd.DataFrame:
    keys = sorted(set(a) | set(b))
    rows = [{"key": k, "run A": _show(a.get(k, "—")), "run B": _show(b.get(k, "—")),
             "differs": a.get(k, "—") != b.get(k, "—")} for k in keys]
    df = pd.DataFrame(rows, columns=["key", "run A", "run B", "differs"])
    return df[df["differs"]].reset_index(drop=True) if only_different else df


def _show(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v
