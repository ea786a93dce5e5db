"""Grad-norm probe: exact norms, NaN grads, a spike at an exact step, no false positives on noise."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from probes.gradnorm import GradNormProbe, SpikeDetector, global_grad_norm, group_grad_norms
from rlobs.detect import SPIKE
from tests.probes.conftest import rows


def _model_with_grads(emb: float, head: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    m = torch.nn.ModuleDict({"emb": torch.nn.Linear(2, 2, bias=False), "head": torch.nn.Linear(1, 1, bias=False)})
    m["emb"].weight.grad = torch.full((2, 2), emb)
    m["head"].weight.grad = torch.full((1, 1), head)
    opt = torch.optim.SGD([{"params": m["emb"].parameters(), "name": "emb"},
                           {"params": m["head"].parameters(), "name": "head"}], lr=0.1)
    return m, opt


def test_global_and_group_norms_exact():
    m, opt = _model_with_grads(3.0, 4.0)
    assert global_grad_norm(m.parameters()) == pytest.approx(math.sqrt(52.0))
    assert group_grad_norms(opt) == pytest.approx({"emb": 6.0, "head": 4.0})
    assert group_grad_norms(m) == pytest.approx({"emb": 6.0, "head": 4.0})
    assert group_grad_norms({"a": [m["head"].weight]}) == pytest.approx({"a": 4.0})


def test_nan_grad_is_flagged_with_attribution(live):
    m, opt = _model_with_grads(3.0, float("nan"))
    probe = GradNormProbe(max_norm=1.0)
    r = probe.observe(parameters=m.parameters(), groups=opt, sample_ids=["s1", "s2"], group_ids=["g1", "g1"],
                      loss=0.5, step=7)
    assert r.nonfinite and math.isnan(r.grad_norm) and not r.spike
    assert r.clipped is None  # clipping a NaN gradient means nothing
    assert r.detail["reason"] == "nonfinite"
    assert r.detail["group_norms"]["emb"] == pytest.approx(6.0) and math.isnan(r.detail["group_norms"]["head"])
    assert r.detail["sample_ids"] == ["s1", "s2"] and r.detail["group_ids"] == ["g1"]
    assert live.value("rlobs_grad_norm_nonfinite_total") == 1.0
    rec = live.close_and_open()
    (step, nonfinite, detail), = rows(rec, "select step, nonfinite, detail from train_step")
    assert (step, nonfinite) == (7, True)
    d = json.loads(detail)
    assert d["group_norms"] == {"emb": pytest.approx(6.0), "head": None}  # strict JSON: NaN -> null


def _noisy(n: int, seed: int, level: float = 1.0, noise: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level * np.exp(noise * rng.standard_normal(n))


def test_spike_detected_at_the_exact_step_with_batch_ids(live):
    series = _noisy(80, seed=1)
    k = 60
    series[k] = 50.0
    probe = GradNormProbe(max_norm=2.0)
    hits = []
    for step, g in enumerate(series):
        r = probe.observe(grad_norm=float(g), step=step, sample_ids=[f"s{step}-{i}" for i in range(4)],
                          group_ids=[f"g{step}"] * 4, loss=1.0)
        if r.spike:
            hits.append(step)
            assert r.detail["sample_ids"] == [f"s{step}-{i}" for i in range(4)]
            assert r.detail["group_ids"] == [f"g{step}"]
            assert r.detail["median"] == pytest.approx(1.0, rel=0.1)
    assert hits == [k]
    assert probe.spikes == [k]
    assert probe.clip_fraction == 1 / 80  # only the spike exceeds 2.0
    assert live.value("rlobs_grad_norm_spikes_total") == 1.0
    assert live.value("rlobs_grad_clipped_steps_total") == 1.0
    assert live.value("rlobs_train_steps_total") == 80.0
    assert live.value("rlobs_grad_norm") == pytest.approx(series[-1])
    rec = live.close_and_open()
    assert rows(rec, "select step from train_step where spike") == [(k,)]
    assert rows(rec, "select count(*) from train_step where spike_score is null") == [(int(SPIKE["warmup"]),)]  # warm-up


@pytest.mark.parametrize("seed", range(5))
def test_no_false_positive_on_a_smooth_noisy_series(seed):
    n = 2000
    steps = np.arange(n)
    # slow trend (grad norm decays as the run learns) times 10% noise
    series = (2.0 * np.exp(-steps / 800) + 0.3 * np.sin(steps / 60) + 0.5) * _noisy(n, seed)
    det = SpikeDetector()
    flagged = [i for i, g in enumerate(series) if det.update(float(g))[1]]
    assert flagged == []


def test_detector_state_survives_a_resume():
    det = SpikeDetector(window=30, warmup=10)
    for g in _noisy(30, seed=3):
        det.update(float(g))
    state = json.loads(json.dumps(det.state()))
    fresh = SpikeDetector(window=30, warmup=10)
    fresh.load_state(state)
    assert fresh.score(40.0) == pytest.approx(det.score(40.0))
    assert fresh.update(40.0)[1]


def test_bad_detector_settings_rejected():
    with pytest.raises(ValueError, match="warmup"):
        SpikeDetector(window=5, warmup=10)


def test_pass_through_fields_are_plain_values_and_a_typo_does_not_cost_the_event(live, caplog):
    probe = GradNormProbe()
    probe.observe(grad_norm=torch.tensor(2.5), loss=torch.tensor(0.75), lr=np.float64(1e-4), samples=np.int64(8),
                  tokenz=123, step=4)
    assert "'tokenz' is not a train_step field" in caplog.text
    rec = live.close_and_open()
    assert rows(rec, "select step, grad_norm, loss, lr, samples, tokens from train_step") == [
        (4, 2.5, 0.75, 1e-4, 8, None)]


def test_observe_then_emit_is_one_train_step_with_the_probes_verdict(live):
    """A trainer that observes before its step's numbers exist (emit=False) emits once through the probe:
    the probe's clipped / nonfinite fields and the trainer's fields in one train_step event."""
    m, opt = _model_with_grads(3.0, float("nan"))
    probe = GradNormProbe(max_norm=1.0)
    r = probe.observe(parameters=m.parameters(), groups=opt, step=3, emit=False)
    live.flush()
    assert live.events("train_step") == []
    probe.emit(r, step=3, loss=0.25, samples=16)
    live.flush()
    (ev,) = live.events("train_step")
    assert ev["step"] == 3 and ev["loss"] == 0.25 and ev["samples"] == 16
    assert ev["nonfinite"] is True and ev["clipped"] is None
