"""The one detector (rlobs.detect): the live probe, its alert counter, the doctor and the app agree on every
spike of one record; zero and constant series never become a baseline to divide by, in any rule."""

from __future__ import annotations

import math
import random
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import rlobs
from rlobs.detect import (
    SPIKE,
    SpikeDetector,
    level_shift,
    share_exceeds,
    spikes,
    wilson,
)
from rlobs.doctor import Severity, diagnose
from rlobs.schema import KINDS


def _spike_counter(url: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "rlobs_grad_norm_spikes_total":
                return s.value
    raise KeyError("rlobs_grad_norm_spikes_total")


def test_live_probe_alert_doctor_and_app_agree_on_every_spike(tmp_path: Path):
    from probes.gradnorm import GradNormProbe
    from rlobs.app.queries import train_series
    from rlobs.doctor.context import RunContext
    from rlobs.doctor.rules.gradnorm import spike_scores

    rng = random.Random(7)
    # heavy-tailed healthy noise, steps without gradient (zero std batches), a level shift and spikes
    series = [math.exp(rng.gauss(0, 0.4)) for _ in range(120)]
    for s in (3, 4, 30, 31, 32, 77):
        series[s] = 0.0
    for s in range(90, 120):
        series[s] *= 4.0  # lasting level shift: fires at first, then becomes the baseline
    for s, x in ((12, 40.0), (33, 25.0), (60, 8.0), (61, 9.0), (100, 400.0)):
        series[s] = x
    series[70] = float("nan")
    rec = rlobs.init(tmp_path / "run", component="trainer", prometheus=True, memory=True, set_global=False)
    probe = GradNormProbe(rec, max_norm=1.0)
    live = []
    for step, g in enumerate(series):
        if probe.observe(grad_norm=g, step=step, loss=1.0).spike:
            live.append(step)
    assert rec.flush(10.0)
    counter = _spike_counter(rec.metrics_url)  # what the grad-norm-spike alert's increase() reads
    rec.close()
    assert live and 12 in live and 100 in live and 90 not in live  # 4x level shift: within this noise
    assert 3 not in live and 5 not in live and 31 not in live  # zero norms neither spike nor set the baseline
    assert counter == len(live)
    with rlobs.open_run(tmp_path / "run") as record:
        col = [int(s) for (s,) in record.sql("SELECT step FROM train_step WHERE spike ORDER BY step").fetchall()]
        doctor = [s for s, sc in spike_scores(RunContext(record)) if sc.spike]
        app = train_series(record)
        app_spikes = [int(s) for s in app.loc[app["spike"] & ~app["nonfinite"].fillna(False), "step"]]
        report = diagnose(record, rule_ids=["grad-norm-spike"])
    assert col == live == doctor == app_spikes
    f = report.findings[0]
    assert f.evidence[1].observed == ", ".join(str(s) for s in live[:10])
    assert f.severity == Severity.INFO  # every spike clipped at 1.0, loss flat: the run absorbed them


def test_offline_series_matches_the_online_detector():
    rng = np.random.default_rng(3)
    xs = np.exp(rng.normal(0, 0.3, 300))
    xs[[50, 51, 200]] = [30, 0, 50]
    det = SpikeDetector()
    online = [det.update(float(x))[1] for x in xs]
    assert online == [s.spike for s in spikes(xs, **SPIKE)]
    assert [i for i, b in enumerate(online) if b] == [50, 200]


@pytest.mark.parametrize("const", [0.0, 1e-12, 1.0, 3.7])
def test_constant_and_zero_series_are_not_spikes(const):
    out = spikes([const] * 60 + [const * 1.3] + [0.0] * 5 + [const])
    assert not any(s.spike for s in out)
    assert all(s.ratio is None or math.isfinite(s.ratio) for s in out)


def test_zero_steps_do_not_become_the_baseline():
    # TRL: steps whose groups all have zero std have grad norm exactly 0; the next real step is not a spike
    out = spikes([0.0] * 8 + [0.8, 0.0, 0.0, 0.7, 0.9, 0.0, 0.75, 0.81, 0.0, 0.85, 0.79])
    assert not any(s.spike for s in out)
    assert all(s.baseline is None or s.baseline > 0.1 for s in out)


def test_wilson_judges_proportions_against_their_sample_size():
    lo, hi = wilson(6, 8)
    assert 0.35 < lo < 0.45 and 0.9 < hi < 0.97  # "6 of 8 groups" is weak evidence
    assert not share_exceeds(6, 8, 0.5)
    assert share_exceeds(60, 80, 0.5)
    assert wilson(0, 0) == (0.0, 1.0)


def test_level_shift_on_a_constant_history_is_floored():
    flat = [(s, 2.0) for s in range(10)]
    sh = level_shift(flat + [(10, 2.0), (11, 2.0)], 9)
    assert sh is not None and sh.z == 0.0 and sh.sigma > 0
    zeros = [(s, 0.0) for s in range(12)]
    sh = level_shift(zeros, 8)
    assert sh is not None and math.isfinite(sh.z) and sh.z == 0.0


def _value(field_type: str, x: float, step: int):
    if field_type.startswith(("float", "double")):
        return x
    if field_type.startswith(("int", "uint")):
        return int(x)
    return None  # strings / JSON: left out


# findings whose condition is literally true of an all-zero / constant record (not a division artefact)
LEGIT = {
    0.0: {"no-gradient"},  # grad norm exactly 0 on every step IS the no-gradient finding
    # every group zero-std, every response truncated, |dlogp| = 1 (absolute bars), calls 1 s old at a 1 s deadline,
    # every update moving the policy 1 nat/token from the first step (the oversized-updates first-steps leg's bar)
    1.0: {"advantage-zero-std-groups", "response-length-clipped", "advantage-denominator-collapse", "parity-drift",
          "grader-hung", "precursor-oversized-updates"},
}


@pytest.mark.parametrize("const", [0.0, 1.0])
def test_every_rule_on_all_zero_and_constant_series(tmp_path: Path, const: float):
    """Every kind, every numeric field = ``const`` on every step: no rule crashes (a division by a zero
    baseline is a rule error) and no rule finds an anomaly in a flat series."""
    skip = {"manifest", "telemetry", "incident", "span"}
    recs = {comp: rlobs.init(tmp_path / "run", component=comp, prometheus=False, set_global=False,
                             flush_interval=3600, config={"mode": "sync"})
            for comp in ("driver", "trainer", "generator", "grader")}
    for step in range(40):
        for kind, spec in KINDS.items():
            if kind in skip:
                continue
            fields = {f.name: v for f in spec.fields if (v := _value(f.type, const, step)) is not None}
            if kind in ("rollout", "ledger", "grader_call", "parity_sample"):
                fields["sample_id"] = f"s{step}"
            if kind == "ledger":
                fields["state"] = "consumed"
            if kind == "heartbeat":
                fields["phase"] = "train"
            comp = "grader" if kind.startswith("grader") else "generator" if kind == "rollout" else "trainer"
            recs[comp].emit(kind, step=step, policy_version=step, **fields)
    for r in recs.values():
        assert r.flush(10.0)
        r.close()
    with rlobs.open_run(tmp_path / "run") as record:
        report = diagnose(record)
    assert report.errors == {}
    bad = {f.rule: f.title for f in report.findings if f.rule not in LEGIT.get(const, set())}
    assert bad == {}
    for f in report.findings:
        for e in f.evidence:
            assert not (isinstance(e.observed, float) and not math.isfinite(e.observed)), (f.rule, e)
        assert "inf" not in f.title.lower().replace("info", ""), f.title


def _spike_run(run: Path, after: str) -> Path:
    """30 steps of noisy grad norms (clipped at 1.0), a 50x spike at step 20, then: nothing (the run keeps its
    trend), a loss level shift, a NaN loss, or an entropy collapse; ``unclipped``: no clipping at all."""
    rng = random.Random(1)
    rec = rlobs.init(run, component="trainer", prometheus=False, set_global=False, flush_interval=3600)
    for step in range(30):
        g = 2.0 * math.exp(rng.gauss(0, 0.2)) * (50 if step == 20 else 1)
        loss = 0.5 + rng.gauss(0, 0.02) + (3.0 if after == "loss" and step > 20 else 0.0)
        if after == "nan" and step == 21:
            loss = float("nan")
        entropy = 1.0 + rng.gauss(0, 0.02) if not (after == "entropy" and step > 20) else 0.05
        clip = after != "unclipped"
        rec.emit("train_step", step=step, grad_norm=g, loss=loss, entropy=entropy, reward_mean=0.3 + rng.gauss(0, 0.02),
                 clipped=(g > 1.0) if clip else None, grad_norm_clipped=min(g, 1.0) if clip else None)
    assert rec.flush(10.0)
    rec.close()
    return run


@pytest.mark.parametrize(("after", "severity", "evidence"), [
    ("nothing", Severity.INFO, None), ("unclipped", Severity.WARNING, None),
    ("loss", Severity.CRITICAL, "train_step.loss"), ("nan", Severity.CRITICAL, "train_step.loss / grad_norm"),
    ("entropy", Severity.CRITICAL, "train_step.entropy")])
def test_spike_severity_comes_from_what_happened_next(tmp_path: Path, after, severity, evidence):
    with rlobs.open_run(_spike_run(tmp_path / after, after)) as record:
        report = diagnose(record, rule_ids=["grad-norm-spike"])
    (f,) = report.findings
    assert f.first_step == 20 and f.severity == severity, (f.severity, f.title, f.evidence)
    if evidence:
        assert any(e.metric == evidence for e in f.evidence), f.evidence
    else:
        assert "kept its trend" in f.title
    assert "x its rolling median" in f.evidence[0].note and "sigma" in f.evidence[0].note  # effect + noise
