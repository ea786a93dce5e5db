"""Each mode end to end on real Ray actors and a real vLLM engine (tiny model), with exact
accounting: steps, versions, ledger, staleness bound, weight-sync verification, run record."""

from __future__ import annotations

import json
import re
import statistics
import time
import urllib.request
from pathlib import Path

import pytest

from tests.trainer_ref.conftest import small_config

pytestmark = pytest.mark.slow

STEPS = 3
PER_STEP = 4 * 4  # groups_per_step * group_size

# every event kind the probes (and the recorder itself) put into a trainer_ref run record
PROBE_KINDS = ("rollout", "grader_call", "grader_inflight", "train_step", "advantage", "staleness", "weight_sync",
               "queue", "throughput", "parity", "heartbeat", "phase", "ledger", "goodput", "manifest", "span")
SYNC_BOUNDARIES = {"dump", "staging", "transfer", "load", "cache_reset", "end_to_end"}
# families every run must serve whatever the data (the probes' headline numbers)
MUST_FAMILIES = ("rlobs_train_steps_total", "rlobs_grad_norm", "rlobs_advantage_token_denominator",
                 "rlobs_staleness_max_versions", "rlobs_importance_ratio_mean", "rlobs_effective_sample_size_ratio",
                 "rlobs_weight_sync_boundary_seconds", "rlobs_weight_sync_policy_lag_seconds",
                 "rlobs_weight_sync_lock_wait_seconds", "rlobs_weight_sync_memory_high_water_bytes",
                 "rlobs_grader_latency_seconds", "rlobs_grader_inflight_calls", "rlobs_parity_abs_logprob_diff_mean",
                 "rlobs_parity_post_sync_abs_logprob_diff_mean", "rlobs_effective_throughput_samples_per_second",
                 "rlobs_predicted_staleness_versions", "rlobs_sync_bubble_seconds_total",
                 "rlobs_trainer_reward_wait_seconds_total", "rlobs_effective_token_ratio", "rlobs_samples_total",
                 "rlobs_heartbeats_total", "rlobs_phase_seconds_total", "rlobs_queue_depth", "rlobs_rollouts_total",
                 # the driver's declared pause (the held-out evaluation before step 1): the no-progress alert's input
                 "rlobs_phases_total", "rlobs_phase_end_timestamp_seconds")


def scrape_all(run_dir: Path) -> tuple[str, int]:
    """Concatenated /metrics of every live process of the run (stale process files are skipped)."""
    texts = []
    for pf in sorted((Path(run_dir) / "processes").glob("*.json")):
        url = json.loads(pf.read_text()).get("metrics_url")
        if not url:
            continue
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                texts.append(r.read().decode())
        except OSError:
            continue
    return "\n".join(texts), time.time_ns()


def _sql_lit(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"'{v}'" if isinstance(v, str) else str(v)


def expected_families(rec: object, before_ns: int) -> set[str]:
    """Catalogue families whose source events (kind, where, non-null field) are in the record before
    ``before_ns``: the ones the processes' /metrics must serve."""
    from rlobs.catalogue import CATALOGUE

    out = set()
    for name, spec in CATALOGUE.items():
        src = spec.source
        if src is None:
            continue
        conds = [f"ts_ns < {before_ns}"] + [
            f"{k} in ({', '.join(map(_sql_lit, v))})" if isinstance(v, tuple) else f"{k} = {_sql_lit(v)}"
            for k, v in src.where.items()]
        if src.field and src.field != "ts_ns":
            conds.append(f"{src.field} is not null")
        try:
            n = rec.sql(f"select count(*) from {src.kind} where {' and '.join(conds)}").fetchall()[0][0]
        except Exception:  # no events of this kind at all
            n = 0
        # a baseline (catalogue `first`) is served once its first values are in, a running reading once a value
        # after its `skip` is
        if n >= max(1, src.first, src.skip + 1):
            out.add(name)
    return out


def served(text: str, family: str) -> bool:
    return re.search(rf"^{re.escape(family)}(_bucket|_count|_sum)?[{{ ]", text, re.M) is not None


@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_mode_end_to_end(stack, tmp_path, mode):
    from trainer_ref.run import train

    actors, model_dir, record = stack
    run_dir = record if mode == "separate_async" else tmp_path / mode
    scraped: dict = {}

    def on_step(out: dict) -> None:  # last step: every process of the run is up and serving /metrics
        scraped.setdefault("waits", []).append((out["step"], out["data_wait_s"]))
        if out["step"] == STEPS - 1:
            time.sleep(1.5)  # recorders flush every 0.5 s; the Prometheus sink follows the events
            scraped["text"], scraped["ns"] = scrape_all(run_dir)

    s = train(small_config(run_dir, mode=mode, steps=STEPS, max_staleness=2, prometheus=True), actors=actors,
              model_dir=model_dir, on_step=on_step)
    assert s["steps"] == STEPS and s["version"] == STEPS
    assert s["samples_consumed"] == STEPS * PER_STEP
    assert s["ledger"].get("consumed") == STEPS * PER_STEP
    assert s["telemetry_dropped"] == 0
    hist = {int(k): v for k, v in s["staleness_hist"].items()}
    if mode == "sync":
        assert hist == {0: STEPS * PER_STEP}
    elif mode == "colocate_async":
        assert hist == {0: PER_STEP, 1: (STEPS - 1) * PER_STEP}  # one-step off-policy
        # the trainer idles after its step until the in-flight batch is generated and graded: that is the next
        # step's data wait (it used to fall outside every phase, so a slow generator left no trace here)
        waits = [w for st, w in scraped["waits"] if st >= 1]
        assert len(waits) == STEPS - 1 and statistics.median(waits) > 1e-3, waits
    else:
        assert max(hist) <= 2
    for sync in s["sync"]:
        assert sync["bytes"] > 0 and sync["load_s"] > 0
    assert len(s["evals"]) == 2 and 0.0 <= s["evals"][-1]["reward_mean"] <= 1.0
    _check_probes(run_dir, mode, scraped)


def _check_probes(run_dir: Path, mode: str, scraped: dict) -> None:
    """Every probe event kind in this mode's record, and every catalogue family it feeds on /metrics."""
    import rlobs

    time.sleep(1.0)  # actors' recorders flush every 0.5 s
    rec = rlobs.open_run(run_dir)
    counts = {}
    for kind in PROBE_KINDS:
        try:
            counts[kind] = rec.sql(f"select count(*) from {kind}").fetchall()[0][0]
        except Exception:
            counts[kind] = 0
    assert [k for k, n in counts.items() if n == 0] == [], (mode, counts)
    bounds = {r[0] for r in rec.sql("select distinct boundary from weight_sync").fetchall()}
    assert bounds >= SYNC_BOUNDARIES, (mode, bounds)
    comps = {r[0] for r in rec.sql("select distinct component from heartbeat").fetchall()}
    assert {"trainer", "generator", "grader"} <= comps, comps
    # probe-only fields: IS stats in staleness, parity hashes compared, post-sync batches flagged
    assert rec.sql("select count(*) from staleness where is_ratio_mean is not null and ess_ratio > 0").fetchall()[0][0] >= STEPS
    assert rec.sql("select count(*) from parity where hashes_match and first_after_sync").fetchall()[0][0] >= STEPS
    assert rec.sql("select count(*) from train_step where spike is not null").fetchall()[0][0] >= STEPS
    # how far each update moved the policy (re-scored after the step): measured, non-negative, finite
    assert rec.sql("select count(*) from train_step where policy_kl >= 0 and isfinite(policy_kl)").fetchall()[0][0] >= STEPS
    # the grader audit (an exact check re-grading every graded training sample): one reading per graded batch, a
    # difference of two rewards in [0, 1]; the step's training reward minus it is what the exact check confirms
    audit = rec.sql("select count(distinct step), min(value), max(value) from scalar "
                    "where name = 'grader_audit_gap'").fetchall()[0]
    assert audit[0] >= STEPS - 1 and -1.0 <= audit[1] <= audit[2] <= 1.0, (mode, audit)
    text = scraped.get("text", "")
    assert text, "no /metrics scraped"
    want = expected_families(rec, scraped["ns"] - 1_000_000_000) | set(MUST_FAMILIES)
    missing = sorted(f for f in want if not served(text, f))
    assert missing == [], (mode, missing)


def test_run_record_has_every_component(stack):
    """After the separate_async run, the shared record holds events of all four components."""
    import rlobs

    actors, _, record = stack
    import ray

    ray.get(actors["trainer"].ready.remote())
    rec = rlobs.open_run(record)
    comps = {r[0] for r in rec.sql("select distinct component from heartbeat").fetchall()}
    assert {"trainer", "generator", "grader"} <= comps
    assert rec.sql("select count(*) from train_step where data_wait_s is not null").fetchall()[0][0] >= STEPS
    assert rec.sql("select count(*) from span where name = 'weight_sync'").fetchall()[0][0] >= STEPS
    phases = {r[0] for r in rec.sql("select distinct phase from phase").fetchall()}
    assert {"training", "sync", "grading", "evaluation", "checkpoint", "drain"} <= phases
    # the driver declares its pauses (held-out evaluations before step 1 and after the last, the drain of in-flight
    # generation after the last step, the final checkpoint): a heartbeat on entry, a timed phase on exit, each entry
    # before its exit (the no-progress alert's inputs)
    for beat, noun, n in (("eval", "evaluation", 2), ("checkpoint", "checkpoint", 1), ("drain", "drain", 1)):
        entries = [r[0] for r in rec.sql(f"select ts_ns from heartbeat where component = 'driver' and phase = '{beat}' "
                                         "order by ts_ns").fetchall()]
        exits = rec.sql(f"select ts_ns, seconds from phase where component = 'driver' and phase = '{noun}' "
                        "order by ts_ns").fetchall()
        assert len(entries) == len(exits) >= n, (beat, entries, exits)
        assert all(b < e and s > 0 for b, (e, s) in zip(entries, exits)), (beat, entries, exits)
    cats = {r[0] for r in rec.sql("select distinct category from goodput").fetchall()}
    assert "effective" in cats or "zero_advantage" in cats
    rows = rec.sql("select boundary, count(*) from weight_sync group by 1").fetchall()
    assert {b for b, _ in rows} >= {"dump", "staging", "transfer", "load", "cache_reset", "end_to_end"}
    assert rec.sql("select count(*) from weight_sync where boundary = 'load' and not fingerprint_match").fetchall()[0][0] == 0
    # the WeightSyncProbe on both sides: trainer (dump, staging) and generator (transfer, load, cache reset,
    # end-to-end lag) in one trace per version; the lag runs from the optimiser step to serving
    sides = dict(rec.sql("select boundary, string_agg(distinct component, ',') from weight_sync group by 1").fetchall())
    assert sides == {"dump": "trainer", "staging": "trainer", "transfer": "generator", "load": "generator",
                     "cache_reset": "generator", "end_to_end": "generator"}, sides
    joined = rec.sql("select count(*) from (select trace_id from span where name = 'weight_sync' group by 1 "
                     "having count(distinct component) = 2)").fetchall()[0][0]
    assert joined >= STEPS
    lag_ok = rec.sql("select bool_and(e.duration_s >= l.duration_s) from weight_sync e join weight_sync l using (version) "
                     "where e.boundary = 'end_to_end' and l.boundary = 'load'").fetchall()[0][0]
    assert lag_ok
    bad = rec.sql("select count(*) from ledger where state = 'consumed' and staleness > 2").fetchall()[0][0]
    assert bad == 0


def test_completion_basis_records_the_staleness_its_bound_holds(stack, tmp_path):
    """``--staleness-basis completion``: groups resumed across weight syncs are kept while their newest tokens are
    within the bound. Every consumed batch records that staleness (``max_bounded_staleness``) beside the dispatch
    one, never above the bound nor above the dispatch staleness, and the doctor judges the bound on it: no
    staleness finding on a run that kept its bound (on the thirty-eighth early-warning run's healthy completion-basis
    runs the dispatch reading was a critical)."""
    import rlobs
    from rlobs.doctor import Severity, diagnose
    from trainer_ref.run import train

    actors, model_dir, _ = stack
    run_dir = tmp_path / "completion"
    s = train(small_config(run_dir, mode="separate_async", steps=6, max_staleness=1, staleness_basis="completion"),
              actors=actors, model_dir=model_dir)
    assert s["steps"] == 6
    time.sleep(1.0)  # actors' recorders flush every 0.5 s
    with rlobs.open_run(run_dir) as rec:
        rows = rec.sql("select step, max_staleness, max_bounded_staleness from staleness order by step").fetchall()
        assert len(rows) == 6 and all(b is not None and 0 <= b <= min(1, d) for _, d, b in rows), rows
        report = diagnose(rec, rule_ids=["staleness-over-bound", "staleness-growing"])
    assert [f for f in report.findings if f.severity >= Severity.WARNING] == [], rows
