"""Every page of the replay app, driven by ``streamlit.testing.v1.AppTest`` on recorded scenarios.

Assertions are on what the page shows: the doctor's exact finding titles, metric values, table contents.
"""

from __future__ import annotations

import pytest

from tests.app.conftest import app_test, metrics, no_failure, texts, unescape

pytest.importorskip("streamlit")


def test_triage_ranks_findings_and_links_to_evidence_and_runbook(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "cache_not_reset")
    at.run()
    no_failure(at)
    assert metrics(at)["Findings"] == "2" and metrics(at)["Critical"] == "2"
    shown = texts(at)
    cause = shown.index("#### 1. prefix/KV cache not reset after 8 weight load(s), first v9")
    symptom = shown.index("#### 2. mean |dlogp| reached 0.03 at step 8 (healthy < 0.005)")
    assert cause < symptom
    assert any("explained by `weight-sync-cache-not-reset`" in t for t in shown)
    links = {link.label: link for link in at.get("page_link")}
    assert "Evidence: Weight sync, steps 6–15" in links
    assert "Evidence: Timeline, steps 6–15" in links  # parity-drift's evidence is on the timeline
    assert "Runbook: runbooks/weight-sync-cache-not-reset.md" in links
    assert "Runbook: runbooks/parity-drift.md" in links
    evidence = at.dataframe[0].value
    assert evidence["metric"].tolist() == ["weight_sync[cache_reset].reset_confirmed"]
    assert evidence["observed"].tolist() == ["false/absent"]


def test_triage_of_a_healthy_run_says_so(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "healthy")
    at.run()
    no_failure(at)
    assert metrics(at)["Findings"] == "0"
    assert at.success and at.success[0].value.startswith("No findings: ")
    assert not [t for t in texts(at) if t.startswith("#### ")]


def test_timeline_on_the_evidence_range_of_a_finding(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "cache_not_reset", lo="6", hi="15", step="8")
    at.switch_page("views/timeline.py").run()
    no_failure(at)
    m = metrics(at)
    assert m["Steps shown"] == "6–15"
    assert m["Failed syncs"] == "8"  # versions 9..16 synced at steps 8..15 skipped their cache reset
    assert m["Incidents"] == "1"
    assert m["mean |Δlogp| @ 8"] == "0.03"
    assert m["Grad-norm spikes"] == "0"
    assert len(at.get("vega_lite_chart")) == 8  # reward, grad norm, denominators x2, staleness x2, parity, throughput
    incidents = next(df.value for df in at.dataframe if "fault" in df.value.columns)
    assert incidents["fault"].tolist() == ["cache_not_reset"] and incidents["step"].tolist() == [8]
    at.segmented_control(key="timeline_axis").set_value("wall time").run()
    no_failure(at)
    assert len(at.get("vega_lite_chart")) == 8


def test_timeline_marks_a_grad_norm_spike(tmp_path, monkeypatch):
    from tests.doctor import scenarios

    scenarios.build(tmp_path / "spike", "grad_spike", seed=0)
    at = app_test(monkeypatch, tmp_path, "spike")
    at.switch_page("views/timeline.py").run()
    no_failure(at)
    assert metrics(at)["Grad-norm spikes"] == "1"
    spikes = next(df.value for df in at.dataframe if "spike_z" in df.value.columns)
    assert spikes["step"].tolist() == [8]


def test_weight_sync_gantt_and_one_sync_in_full(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "cache_not_reset")
    at.switch_page("views/weight_sync.py").run()
    no_failure(at)
    m = metrics(at)
    assert (m["Versions synced"], m["Syncs with a failed boundary"], m["Cache resets not confirmed"]) == ("16", "8", "8")
    assert len(at.get("vega_lite_chart")) == 1  # the Gantt
    assert unescape(at.error[0].value) == "version 9: failed boundaries: cache_reset:skipped"
    detail = at.dataframe[1].value
    assert list(detail.columns) == ["dump", "staging", "transfer", "load", "cache_reset", "end_to_end"]
    assert detail.loc["reset_confirmed", "cache_reset"] == "False"
    assert detail.loc["bytes", "transfer"] == "4000000"
    next(s for s in at.selectbox if s.label == "Version").set_value(3).run()
    no_failure(at)
    assert at.success[0].value == "version 3: every boundary ok"
    assert at.dataframe[1].value.loc["reset_confirmed", "cache_reset"] == "True"


def test_graders_latency_timeouts_and_slowest_calls(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "hung_grader")
    at.switch_page("views/graders.py").run()
    no_failure(at)
    m = metrics(at)
    assert (m["Grader calls"], m["Timeouts"], m["Errors"]) == ("256", "32", "0")  # first sample of each group, steps 8-15
    summary = at.dataframe[0].value
    assert summary["grader_kind"].tolist() == ["rule"] and summary["timeouts"].tolist() == [32]
    assert len(at.get("vega_lite_chart")) == 3  # latency distribution, timeouts per step, p95 per step
    slow = at.dataframe[1].value
    assert len(slow) == 20 and set(slow["outcome"]) == {"timeout"} and set(slow["latency_s"]) == {5.0}
    assert slow["step"].min() >= 8 and slow["sample_id"].str.endswith("-0").all()
    assert [link.label for link in at.get("page_link")] == [f"Sample {slow['sample_id'].iloc[0]} in full"]


def test_samples_table_filters_and_one_sample_in_full(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "cache_not_reset")
    at.switch_page("views/samples.py").run()
    no_failure(at)
    assert at.caption[0].value == "256 samples match · showing 1–200"
    table = at.dataframe[0].value
    assert list(table.columns[:8]) == ["step", "group_id", "sample_id", "reward", "staleness", "abs_dlogp",
                                       "finish_reason", "grader_outcome"]
    assert table["sample_id"].iloc[0] == "s0-0-0" and set(table["grader_outcome"]) == {"ok"}
    at.text_input(key="f_group").set_value("g8-1").run()
    no_failure(at)
    assert at.caption[0].value == "4 samples match · showing 1–4"
    table = at.dataframe[0].value
    assert table["sample_id"].tolist() == ["s8-1-0", "s8-1-1", "s8-1-2", "s8-1-3"]
    assert (table["abs_dlogp"] > 0.01).all()  # after the onset, every token drifts by ~0.03
    m = metrics(at)
    assert m["Step"] == "8" and m["Group"] == "g8-1"
    code = [c.value for c in at.code]
    assert code[0].startswith("[p") and "What is" in code[0] and "The answer is" in code[1]
    tokens = at.dataframe[1].value
    assert len(tokens) == int(m["Completion tokens"])
    assert 0.015 < tokens["abs_dlogp"].mean() < 0.045
    grades = at.dataframe[2].value
    assert grades["outcome"].tolist() == ["ok"] and float(m["Reward"]) == grades["reward"].iloc[0]
    ledger = at.dataframe[3].value
    assert ledger["state"].tolist() == ["generated", "graded", "consumed"]


def test_samples_joined_filter_on_grader_outcome(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "hung_grader")
    at.switch_page("views/samples.py").run()
    at.multiselect(key="f_outcome").set_value(["timeout"]).run()
    no_failure(at)
    assert at.caption[0].value == "32 samples match · showing 1–32"
    table = at.dataframe[0].value
    assert set(table["grader_outcome"]) == {"timeout"} and table["reward"].isna().all()
    assert metrics(at)["Reward"] == "—"


def test_compare_overlays_two_runs_and_diffs_configs(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "healthy", "cache_not_reset")
    at.switch_page("views/compare.py").run()
    no_failure(at)
    assert len(at.get("vega_lite_chart")) == 6
    assert "1 key(s) differ" in [c.value for c in at.caption]
    diff = at.dataframe[0].value
    assert diff["key"].tolist() == ["config.fault"]
    assert diff.iloc[0, 1:3].tolist() == ["null", "cache_not_reset"]
    at.toggle(key="cfg_all").set_value(True).run()
    assert "config.max_staleness" in at.dataframe[0].value["key"].tolist()


def test_runbook_page_shows_the_rule_runbook(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "cache_not_reset", rule="weight-sync-cache-not-reset")
    at.switch_page("views/runbook.py").run()
    no_failure(at)
    assert any(t.startswith("# KV/prefix cache not reset after sync") for t in texts(at))


def test_damaged_record_says_what_it_could_not_read(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "damaged")
    at.run()
    no_failure(at)
    assert any("1 segment(s) could not be read in full" in w.value for w in at.warning)
    problems = at.dataframe[0].value
    assert problems["kind"].tolist() == ["train_step"] and problems["problem"].tolist() == ["unreadable"]
    for page in ("timeline", "weight_sync", "graders", "samples", "compare"):
        at.switch_page(f"views/{page}.py").run()
        no_failure(at)


def test_unreadable_manifest_is_an_error_message_not_a_traceback(runs_root, monkeypatch):
    at = app_test(monkeypatch, runs_root, "broken")
    at.run()
    no_failure(at)
    assert at.error and at.error[0].value.startswith("could not open broken: RunRecordError")


def test_run_outside_the_root_is_refused(runs_root, monkeypatch, tmp_path):
    at = app_test(monkeypatch, runs_root, "../" + runs_root.name + "_elsewhere")
    at.run()
    no_failure(at)
    assert at.error and "outside the runs root" in at.error[0].value
    at = app_test(monkeypatch, runs_root, "healthy", run="/etc")
    at.run()
    no_failure(at)
    assert any("ignored ?run=/etc" in e.value for e in at.error)


def test_refresh_picks_up_a_run_still_being_written(tmp_path, monkeypatch):
    import rlobs

    rec = rlobs.init(tmp_path / "live", component="trainer", prometheus=False, set_global=False, flush_interval=3600)
    try:
        for step in range(5):
            rec.emit("train_step", step=step, loss=0.5, grad_norm=1.0, reward_mean=0.25)
        rec.flush()
        at = app_test(monkeypatch, tmp_path, "live")
        at.switch_page("views/timeline.py").run()
        no_failure(at)
        assert metrics(at)["Steps shown"] == "0–4"
        assert at.toggle(key="auto_refresh").value is True  # a writer is running
        for step in range(5, 10):
            rec.emit("train_step", step=step, loss=0.5, grad_norm=1.0, reward_mean=0.5)
        rec.flush()
        at.button(key="refresh").click().run()
        no_failure(at)
        assert metrics(at)["Steps shown"] == "0–9"
        assert metrics(at)["reward @ 0"] == "0.25"
    finally:
        rec.close()
