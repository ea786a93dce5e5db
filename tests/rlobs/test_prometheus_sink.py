from __future__ import annotations

import json
import math
import shutil
import subprocess
import urllib.request

import pytest

import rlobs
from rlobs.catalogue import FORBIDDEN_LABELS


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _key(series: str) -> tuple[str, frozenset[str]]:
    """Name and label set of a series, independent of label order."""
    if "{" not in series:
        return series, frozenset()
    name, rest = series.split("{", 1)
    return name, frozenset(rest.rstrip("}").split(","))


def _samples(text: str) -> dict[tuple[str, frozenset[str]], float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[_key(series)] = float(value)
    return out


@pytest.fixture
def prom_rec(run_dir):
    rec = rlobs.init(run_dir, component="grader", rank=0, prometheus=True, run_id="run-1")
    yield rec
    rlobs.shutdown()


def test_metrics_served_on_loopback_with_file_sd_target(prom_rec, run_dir):
    assert prom_rec.metrics_url.startswith("http://127.0.0.1:")
    (sd_file,) = (run_dir / "prometheus_sd").glob("*.json")
    sd = json.loads(sd_file.read_text())
    assert sd[0]["targets"] == [prom_rec.metrics_url.split("/")[2]]
    rlobs.shutdown()
    assert not sd_file.exists()  # a cleanly closed process is no longer a target


def test_target_labels_carry_the_rank_and_no_pid(prom_rec, run_dir):
    (sd_file,) = (run_dir / "prometheus_sd").glob("*.json")
    labels = json.loads(sd_file.read_text())[0]["labels"]
    # `up` says which process a target is; pid and host only in __meta_ labels, which Prometheus drops
    visible = {k: v for k, v in labels.items() if not k.startswith("__")}
    assert visible == {"run": "run-1", "component": "grader", "rank": "0"}
    assert str(prom_rec.info.process) not in visible.values()


def test_build_info_and_no_created_series_in_our_registry_only(prom_rec):
    import platform

    import prometheus_client

    text = _scrape(prom_rec.metrics_url)
    info = [k for k in _samples(text) if k[0] == "rlobs_build_info"]
    assert len(info) == 1 and _samples(text)[info[0]] == 1.0
    assert {f'rlobs_version="{rlobs.__version__}"', f'schema_version="{rlobs.SCHEMA_VERSION}"',
            f'python_version="{platform.python_version()}"', 'component="grader"', 'run="run-1"'} <= info[0][1]
    assert "_created" not in text
    # the application's (or vLLM's) metrics in a registry of their own keep their _created series
    foreign = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("app_requests_total", "requests", registry=foreign).inc()
    assert "app_requests_created" in prometheus_client.generate_latest(foreign).decode()


def test_parity_gauges_keep_the_last_batch_with_tokens(prom_rec):
    """A parity sample with no tokens has NaN statistics: the gauges (and RlobsParityDrift) keep the last
    real reading instead of going NaN (71 of 80 steps of a run had such a sample)."""
    rec = prom_rec
    rec.emit("parity", tokens=40, mean_abs_dlogp=0.02, max_abs_dlogp=0.3, kl_k3=0.001)
    rec.emit("parity", tokens=0, mean_abs_dlogp=float("nan"), max_abs_dlogp=float("nan"), kl_k3=float("nan"))
    assert rec.flush()
    got = {k[0]: v for k, v in _samples(_scrape(rec.metrics_url)).items() if k[0].startswith("rlobs_parity_")}
    assert got["rlobs_parity_abs_logprob_diff_mean"] == 0.02 and got["rlobs_parity_abs_logprob_diff_max"] == 0.3
    assert got["rlobs_parity_kl_k3"] == 0.001


def test_a_correction_cap_nobody_gave_is_absent_not_zero(prom_rec):
    """A staleness event from a consumer that does not say whether its loss corrects stale samples must not
    export a correction cap of 0 ("no correction": RlobsPrecursorUncorrectedOffPolicy reads exactly that)."""
    rec = prom_rec
    rec.emit("staleness", samples=8, mean_staleness=3.0, ess_ratio=0.5)
    assert rec.flush()
    got = {k[0]: v for k, v in _samples(_scrape(rec.metrics_url)).items()}
    assert got["rlobs_effective_sample_size_ratio"] == 0.5 and "rlobs_importance_correction_cap" not in got
    rec.emit("staleness", samples=8, mean_staleness=3.0, ess_ratio=0.5, is_correction_cap=0.0)
    assert rec.flush()
    assert {k[0]: v for k, v in _samples(_scrape(rec.metrics_url)).items()}["rlobs_importance_correction_cap"] == 0.0


def test_held_out_success_and_audit_gap_gauges_read_every_name_the_doctor_reads(prom_rec):
    """The canonical rlobs/ scalar names (what other trainers log, or `rlobs follow` imports) feed the live
    reward-hacking alert's gauges as trainer_ref's names do: the doctor reads both (rlobs.catalogue); another
    scalar does not touch them."""
    rec = prom_rec

    def gauges() -> dict[str, float]:
        assert rec.flush()
        return {k[0]: v for k, v in _samples(_scrape(rec.metrics_url)).items()
                if k[0] in ("rlobs_heldout_success", "rlobs_grader_audit_gap")}

    rec.emit("scalar", name="eval_loss", value=0.9, source="x")
    assert gauges() == {}  # absent until one of their names is logged
    rec.emit("scalar", name="rlobs/heldout_success", value=0.41, source="verl")
    rec.emit("scalar", name="rlobs/grader_audit_gap", value=0.05, source="verl")
    assert gauges() == {"rlobs_heldout_success": 0.41, "rlobs_grader_audit_gap": 0.05}
    rec.emit("scalar", name="eval_reward_mean", value=0.5, source="trainer_ref")
    rec.emit("scalar", name="grader_audit_gap", value=0.07, source="trainer_ref")
    rec.emit("scalar", name="rlobs/heldout_successes", value=0.9, source="x")  # not a prefix match
    assert gauges() == {"rlobs_heldout_success": 0.5, "rlobs_grader_audit_gap": 0.07}


def test_the_baselines_are_the_first_values_set_once_and_absent_before(prom_rec):
    """rlobs_reward_baseline is the median of the first REWARD_BASELINE_STEPS training rewards (the doctor's
    precursor-oversized-updates baseline), absent until they are in and never moved after; a NaN reward is no
    reading. rlobs_heldout_success_baseline is the first held-out reading, whichever of its names is logged."""
    from rlobs.catalogue import REWARD_BASELINE_STEPS
    from rlobs.failures import thresholds

    assert REWARD_BASELINE_STEPS == thresholds("precursor-oversized-updates")["baseline"]
    rec = prom_rec

    def gauges() -> dict[str, float]:
        assert rec.flush()
        return {k[0]: v for k, v in _samples(_scrape(rec.metrics_url)).items()
                if k[0] in ("rlobs_reward_baseline", "rlobs_heldout_success_baseline", "rlobs_reward_mean")}

    rewards = [0.6, float("nan"), 0.2, 0.9, 0.1, 0.3, 0.95, 0.99]  # the first five finite: 0.6 0.2 0.9 0.1 0.3
    for i, r in enumerate(rewards[:5]):
        rec.emit("train_step", step=i, reward_mean=r)
    assert "rlobs_reward_baseline" not in gauges()  # 4 finite readings: not yet
    rec.emit("scalar", name="rlobs/heldout_success", value=0.25, source="verl")
    for i, r in enumerate(rewards[5:], start=5):
        rec.emit("train_step", step=i, reward_mean=r)
    rec.emit("scalar", name="eval_reward_mean", value=0.8, source="trainer_ref")
    assert gauges() == {"rlobs_reward_baseline": 0.3, "rlobs_heldout_success_baseline": 0.25,
                        "rlobs_reward_mean": 0.99}


def test_held_out_best_and_recent_level_are_read_after_the_first_evaluation(prom_rec):
    """rlobs_heldout_success_best and rlobs_heldout_success_recent (what RlobsPrecursorOversizedUpdates reads of
    held-out success, as the doctor's rule does) are absent until a second evaluation, then the best of the
    evaluations after the first and the mean of the last HELDOUT_RECENT of them; a NaN is no evaluation, either of
    held-out success's names counts. rlobs_policy_entropy_baseline is the median entropy of the first 5 steps."""
    from rlobs.catalogue import HELDOUT_RECENT
    from rlobs.failures import thresholds

    assert HELDOUT_RECENT == thresholds("precursor-oversized-updates")["heldout_recent"] == 2
    rec = prom_rec
    names = ("rlobs_heldout_success_best", "rlobs_heldout_success_recent", "rlobs_heldout_success_baseline",
             "rlobs_policy_entropy_baseline")

    def gauges() -> dict[str, float]:
        assert rec.flush()
        return {k[0]: round(v, 9) for k, v in _samples(_scrape(rec.metrics_url)).items() if k[0] in names}

    rec.emit("scalar", name="eval_reward_mean", value=0.3, source="trainer_ref")
    rec.emit("scalar", name="eval_reward_mean", value=float("nan"), source="trainer_ref")
    assert gauges() == {"rlobs_heldout_success_baseline": 0.3}  # one evaluation: nothing after the first yet
    for value, best, recent in [(0.5, 0.5, 0.5), (0.2, 0.5, 0.35), (0.4, 0.5, 0.3), (0.7, 0.7, 0.55)]:
        rec.emit("scalar", name="rlobs/heldout_success", value=value, source="verl")
        assert gauges() == {"rlobs_heldout_success_baseline": 0.3, "rlobs_heldout_success_best": best,
                            "rlobs_heldout_success_recent": recent}
    for i, e in enumerate([0.9, float("nan"), 0.5, 0.7, 0.1, 0.3, 0.05]):  # the first five finite: 0.9 .5 .7 .1 .3
        rec.emit("train_step", step=i, entropy=e)
    assert gauges()["rlobs_policy_entropy_baseline"] == 0.5


def test_a_running_reading_is_declared_only_as_a_set_sources_best_or_recent_mean():
    """The catalogue refuses a running reading that could not mean what it says: on a counter's or a baseline's
    values, an unknown reduction, a mean without how many values, a skip or count without a running reading."""
    from rlobs.catalogue import MetricSpec, Source

    ok = Source("scalar", "set", "value", running="mean", skip=1, last=2)
    MetricSpec("rlobs_x_recent", "gauge", "1", "x", source=ok)
    for bad in (Source("scalar", "set", "value", running="median"),
                Source("scalar", "set", "value", running="mean"),
                Source("scalar", "set", "value", running="max", last=2),
                Source("scalar", "set", "value", skip=1),
                Source("scalar", "set", "value", running="max", first=2),
                Source("scalar", "set", "value", running="max", skip=-1)):
        with pytest.raises(ValueError, match="running|skip"):
            MetricSpec("rlobs_x_recent", "gauge", "1", "x", source=bad)
    with pytest.raises(ValueError, match="op 'sum' does not fit a gauge"):
        MetricSpec("rlobs_x_recent", "gauge", "1", "x", source=Source("scalar", "sum", "value", running="max"))


def test_events_become_catalogue_metrics_with_exact_values(prom_rec):
    rec = prom_rec
    for lat, outcome in [(0.2, "ok"), (0.4, "ok"), (7.0, "timeout")]:
        rec.emit("grader_call", grader_kind="code", latency_s=lat, outcome=outcome, queue_wait_s=0.01)
    rec.emit("train_step", grad_norm=float("nan"), nonfinite=True, loss=1.0, tokens=100)
    rec.emit("train_step", grad_norm=3.5, nonfinite=False, loss=0.5, tokens=50)
    rec.emit("weight_sync", boundary="load", fingerprint_match=False, duration_s=0.1, bytes=1024, outcome="mismatch")
    rec.emit("ledger", sample_id="s1", state="dropped", reason="stale")
    rec.emit("ledger", sample_id="s2", state="consumed", staleness=2, age_s=1.5)
    rec.emit("heartbeat", phase="grade")
    assert rec.flush()
    text = _scrape(rec.metrics_url)
    base = 'component="grader",run="run-1"'
    expect = {
        f'rlobs_grader_calls_total{{{base},grader_kind="code",outcome="ok"}}': 2.0,
        f'rlobs_grader_calls_total{{{base},grader_kind="code",outcome="timeout"}}': 1.0,
        f'rlobs_grader_latency_seconds_count{{{base},grader_kind="code"}}': 3.0,
        f'rlobs_grader_latency_seconds_sum{{{base},grader_kind="code"}}': 7.6000000000000005,
        f'rlobs_grader_latency_seconds_bucket{{{base},grader_kind="code",le="0.25"}}': 1.0,
        f'rlobs_grad_norm{{{base}}}': 3.5,
        f'rlobs_grad_norm_nonfinite_total{{{base}}}': 1.0,
        f'rlobs_train_tokens_total{{{base}}}': 150.0,
        f'rlobs_weight_sync_fingerprint_mismatches_total{{{base}}}': 1.0,
        f'rlobs_weight_sync_boundaries_total{{{base},boundary="load",outcome="mismatch"}}': 1.0,
        f'rlobs_samples_total{{{base},reason="stale",state="dropped"}}': 1.0,
        f'rlobs_sample_staleness_versions_count{{{base}}}': 1.0,
        f'rlobs_sample_staleness_versions_sum{{{base}}}': 2.0,
        f'rlobs_heartbeats_total{{{base}}}': 1.0,
    }
    samples = _samples(text)
    for series, value in expect.items():
        assert _key(series) in samples, series
        assert math.isclose(samples[_key(series)], value), (series, samples[_key(series)])
    hb = [k for k in samples if k[0] == "rlobs_heartbeat_timestamp_seconds"]
    assert len(hb) == 1 and samples[hb[0]] > 1.7e9
    # the recorder's own health is exported too
    assert _key(f'rlobs_telemetry_events_total{{{base}}}') in samples


def test_no_ids_in_any_exported_label(prom_rec):
    prom_rec.emit("ledger", sample_id="s-123", group_id="g-9", state="generated")
    prom_rec.emit("rollout", sample_id="s-123", group_id="g-9", finish_reason="stop", completion_tokens=4)
    prom_rec.flush()
    text = _scrape(prom_rec.metrics_url)
    assert "s-123" not in text and "g-9" not in text
    for line in text.splitlines():
        if "{" in line and not line.startswith("#"):
            labels = {kv.split("=")[0] for kv in line[line.index("{") + 1: line.index("}")].split(",")}
            assert not labels & FORBIDDEN_LABELS, line


def test_direct_counter_increment(prom_rec):
    child = prom_rec.counter("rlobs_grader_calls_total", grader_kind="exact", outcome="ok")
    for _ in range(3):
        child.inc()
    key = _key('rlobs_grader_calls_total{component="grader",grader_kind="exact",outcome="ok",run="run-1"}')
    assert _samples(_scrape(prom_rec.metrics_url))[key] == 3.0
    with pytest.raises(ValueError, match="takes labels"):
        prom_rec.counter("rlobs_grader_calls_total", grader_kind="exact")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_check_metrics_is_clean_on_a_real_scrape(prom_rec):
    from rlobs.schema import KINDS

    # one event of every kind with every numeric field set, so every metric family has samples
    prom_rec.emit("rollout", finish_reason="stop", completion_tokens=10, gen_seconds=0.5)
    prom_rec.emit("grader_call", grader_kind="rule", latency_s=0.1, queue_wait_s=0.0, outcome="ok")
    prom_rec.emit("grader_inflight", grader_kind="rule", in_flight=1, overdue=0, oldest_age_s=0.2)
    prom_rec.emit("train_step", loss=1.0, grad_norm=1.0, spike_score=0.0, step_seconds=1.0, tokens=10,
                  nonfinite=False, spike=False, clipped=False, reward_mean=0.5, data_wait_s=0.1, reward_wait_s=0.05)
    prom_rec.emit("advantage", zero_std_ratio=0.1, near_zero_std_ratio=0.0, max_abs_advantage=2.0, denom_min=0.3,
                  token_denominator=100.0, nonfinite_denominators=0, ranks_agree=True)
    prom_rec.emit("staleness", max_staleness=1, mean_staleness=0.5, is_ratio_max=1.1, is_ratio_mean=1.0,
                  is_clipped_ratio=0.0, ess_ratio=0.98)
    for b in ("dump", "staging", "transfer", "load", "cache_reset", "end_to_end"):
        prom_rec.emit("weight_sync", version=1, boundary=b, duration_s=0.01, bytes=10, outcome="ok",
                      bandwidth_bps=1e6, lock_wait_s=0.0, mem_hwm_bytes=1, reset_confirmed=True,
                      fingerprint_match=True, torn=False)
    prom_rec.emit("queue", queue="rollouts", depth=3, capacity=8, oldest_age_s=0.5)
    prom_rec.emit("throughput", samples_per_s=1.0, tokens_per_s=10.0, effective_samples_per_s=0.9, idle_ratio=0.1,
                  predicted_staleness=1.0)
    prom_rec.emit("parity", mean_abs_dlogp=0.001, max_abs_dlogp=0.01, kl_k3=0.0001, hashes_match=True)
    prom_rec.emit("heartbeat", phase="train")
    prom_rec.emit("phase", phase="training", seconds=1.0, tokens=10)
    prom_rec.emit("ledger", sample_id="a", state="consumed", staleness=1, age_s=0.3)
    prom_rec.emit("goodput", category="effective", tokens=10, samples=1)
    prom_rec.emit("incident", fault="none")
    assert set(KINDS)  # all kinds defined
    prom_rec.flush()
    text = _scrape(prom_rec.metrics_url)
    out = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "" and out.stderr.strip() == "", out.stdout + out.stderr
