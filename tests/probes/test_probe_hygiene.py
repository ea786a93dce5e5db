"""Every probe at once: all their metric families appear, names come from the catalogue, no ids in
labels, promtool is happy; probes import no trainer code and no torch; bad input never raises."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import probes
from rlobs.catalogue import FORBIDDEN_LABELS, METRICS, all_exposed_names
from tests.probes.conftest import rows

PROBES_DIR = Path(probes.__file__).resolve().parent
# counters that may only get a series when their fault happens (labelled ones are not pre-created);
# each is asserted on /metrics in its own test
# (test_advantage: 2 gloo ranks disagree; test_weight_sync: torn read; test_ledger_liveness: duplicates)
FAULT_ONLY = {"rlobs_advantage_rank_disagreements_total", "rlobs_weight_sync_torn_reads_total",
              "rlobs_ledger_duplicate_transitions_total",
              # only from a consumer whose staleness bound is not on dispatch (tests/probes/test_staleness.py)
              "rlobs_staleness_bounded_max_versions"}
PROBE_KINDS = {"rollout", "grader_call", "grader_inflight", "train_step", "advantage", "staleness", "weight_sync",
               "queue", "throughput", "parity", "parity_sample", "heartbeat", "phase", "ledger", "goodput"}


def _exercise_every_probe(live) -> None:
    rec = live.rec
    rec.set_policy_version(3)
    acct = probes.GoodputAccount()
    led = probes.SampleLedger(goodput=acct)
    tag = probes.tag_dispatch(1)
    probes.record_rollout("s1", tag, group_id="g1", prompt_tokens=5, completion_tokens=7, finish_reason="stop",
                          gen_seconds=0.2, logprobs=[-0.1] * 7, ledger=led)
    probes.record_rollout("s2", tag, group_id="g1", completion_tokens=9, finish_reason="length", ledger=led)
    sp = probes.StalenessProbe(ledger=led, max_staleness=1, correction_cap=2.0)
    assert sp.admit("s2", tag, 3) == "stale"
    sp.consume(["s1"], [tag], 3, gen_logprobs=[np.full(7, -0.1)], train_logprobs=[np.full(7, -0.12)])
    probes.record_queue("rollout", 1, 8, 0.5)
    probes.AdvantageProbe().observe([[0.0, 1.0], [1.0, 1.0]], token_denominator=7)
    probes.GradNormProbe(max_norm=1.0).observe(grad_norm=float("nan"), loss=1.0, samples=1, tokens=7,
                                               step_seconds=0.1, data_wait_s=0.01, reward_wait_s=0.005,
                                               reward_mean=0.5, lr=1e-3, policy_kl=2e-3)
    g = probes.GradNormProbe(max_norm=1.0, detector=probes.SpikeDetector(window=5, warmup=3))
    for v in (1.0, 1.0, 1.1, 1.0, 40.0):
        g.observe(grad_norm=v)
    ws = probes.WeightSyncProbe()
    buf = probes.StagingBuffer()
    state = {"w": np.ones(4, np.float32)}
    with ws.sync(3) as s:
        with s.dump() as b:
            b.record_state(state)
        buf.write(state)
        s.read_staging(buf)
        with s.transfer() as b:
            b.bytes = 16
        with s.load() as b:
            b.record_state({"w": np.zeros(4, np.float32)})
        with s.cache_reset() as b:
            b.requested()
    gr = probes.GraderProbe(deadline_s=0.0, interval_s=0.05, watchdog=False)
    gr.call("exact", lambda: 1.0, sample_id="s1")
    release = threading.Event()
    th = threading.Thread(target=lambda: gr.call("judge", release.wait, 5))
    th.start()
    try:
        while not gr.inflight():
            pass
        gr.check()
    finally:
        release.set()
        th.join()
    tm = probes.ThroughputMeter(window_s=0.0)
    tm.produced(1, 7)
    with tm.sync_bubble():
        pass
    tm.tick(predicted_staleness=1.0, force=True)
    pp = probes.ParityProbe(generator_hashes={"sampling": "a"}, trainer_hashes={"sampling": "b"})
    pp.on_sync(3)
    pp.observe([np.full(3, -1.0)], [np.full(3, -1.01)], sample_ids=["s1"])
    with probes.Liveness().phase("train", tokens=7):
        pass
    acct.add_batch([7], zero_advantage=[False])
    acct.emit_step()


def test_all_probe_metric_families_appear_with_catalogue_names_and_no_ids(live):
    _exercise_every_probe(live)
    scraped = live.scrape()
    exposed = all_exposed_names() | {m.name.removesuffix("_total") + "_created" for m in METRICS}
    rlobs_names = {n for n in scraped if n.startswith("rlobs_")}
    assert rlobs_names <= exposed, rlobs_names - exposed
    for name, series in scraped.items():
        for labels, _ in series:
            assert not (set(labels) & FORBIDDEN_LABELS), (name, labels)
    # a baseline (catalogue `first`) needs that many readings, a running reading one past its `skip`; the exercise
    # gives each probe one
    expected = {m.name for m in METRICS if m.source is not None and m.source.kind in PROBE_KINDS
                and m.source.first <= 1 and not m.source.skip}
    present = {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum").removesuffix("_total")
               for n in scraped}
    missing = sorted(m for m in expected if m.removesuffix("_total") not in present)
    assert set(missing) <= FAULT_ONLY, set(missing) - FAULT_ONLY
    live.assert_no_drops()
    rec = live.close_and_open()
    kinds = {k for k, n in rec.counts().items() if n}
    assert PROBE_KINDS <= kinds, PROBE_KINDS - kinds


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_clean(live):
    _exercise_every_probe(live)
    live.flush()
    text = urllib.request.urlopen(live.rec.metrics_url, timeout=10).read()
    out = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), (out.stdout, out.stderr)


def test_probes_import_no_trainer_code_and_not_torch_at_import():
    for path in PROBES_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] == "trainer_ref" for n in names), (path.name, names)
    code = "import sys, probes; print(json.dumps(sorted(m for m in ('torch', 'ray', 'vllm') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout) == [], out.stderr


def test_modules_are_small_and_documented():
    for path in PROBES_DIR.glob("*.py"):
        text = path.read_text()
        assert len(text.splitlines()) <= 500, path.name
        assert ast.get_docstring(ast.parse(text)), path.name
    assert sorted(probes.__all__) == sorted(set(probes.__all__))
    assert all(hasattr(probes, n) for n in probes.__all__)


def test_bad_input_on_the_hot_path_is_logged_not_raised(live, caplog):
    st = probes.StalenessProbe().consume(["a"], [probes.tag_dispatch(0)], 1, gen_logprobs=[np.zeros(3)],
                                         train_logprobs=[np.zeros(4)])
    assert st.importance is None and st.max_staleness == 1
    ps = probes.ParityProbe().observe([np.zeros(3)], [np.zeros(2)])
    assert ps.tokens == 0
    h = probes.AdvantageProbe().observe(object())
    assert h.groups == 0
    assert "skipped" in caplog.text and "not measured" in caplog.text
    rec = live.close_and_open()
    assert rows(rec, "select samples, is_ratio_mean from staleness") == [(1, None)]
