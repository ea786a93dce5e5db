"""Advantage-denominator probe: zero / near-zero std groups, denominators, rank agreement (2 gloo ranks)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from probes.advantage import AdvantageProbe, advantage_health, grpo_advantages
from tests.probes.conftest import rows

SQRT_THIRD = math.sqrt(1.0 / 3.0)
# all-equal rewards (std 0), std 1e-7 (near zero), a healthy binary group, a lone sample (std NaN)
GROUPS = [[1.0, 1.0, 1.0, 1.0], [0.0, math.sqrt(2.0) * 1e-7], [0.0, 1.0, 0.0, 1.0], [0.2]]


def test_health_on_constructed_groups_exact():
    h = advantage_health(GROUPS)  # eps 1e-6, ddof 1, threshold 1e-3
    assert (h.groups, h.zero_std_groups, h.near_zero_std_groups) == (4, 1, 1)
    assert (h.zero_std_ratio, h.near_zero_std_ratio, h.near_zero_threshold) == (0.25, 0.25, 1e-3)
    assert h.max_abs_advantage == pytest.approx(0.5 / (SQRT_THIRD + 1e-6), rel=1e-12)
    assert h.denom_min == 1e-6
    assert h.denom_p50 == pytest.approx(1.1e-6, rel=1e-9)
    assert h.denom_max == pytest.approx(SQRT_THIRD + 1e-6, rel=1e-12)
    assert h.nonfinite_denominators == 1
    assert h.ranks_agree is None and h.token_denominator is None


def test_near_zero_std_group_amplifies_a_noise_level_difference():
    advs, denoms = grpo_advantages([GROUPS[1]])
    # a reward gap of 1.4e-7 becomes advantages of +-0.064: amplified ~450,000x
    assert denoms[0] == pytest.approx(1.1e-6, rel=1e-9)
    assert advs[0] == pytest.approx([-0.7071067811865e-7 / 1.1e-6, 0.7071067811865e-7 / 1.1e-6], rel=1e-9)
    # with a smaller eps the same group gets advantages of +-0.64
    h = advantage_health([GROUPS[1]], eps=1e-8)
    assert h.max_abs_advantage == pytest.approx(0.7071067811865e-7 / 1.1e-7, rel=1e-9)


def test_inputs_as_tensor_array_mapping_agree_and_used_advantages_override():
    import torch

    g = [[0.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.5, 1.0, 1.5]]
    ref = advantage_health(g)
    assert advantage_health(np.array(g)) == ref
    assert advantage_health(torch.tensor(g)) == ref
    assert advantage_health({"p1": g[0], "p2": g[1], "p3": g[2]}) == ref
    used = advantage_health(g, advantages=torch.tensor([[3.0, -7.5], [0.0, 1.0]]))
    assert used.max_abs_advantage == 7.5
    zero_denoms = advantage_health(g, denominators=[0.0, 1.0, float("nan")])
    assert zero_denoms.nonfinite_denominators == 2 and zero_denoms.denom_min == 0.0


def test_probe_emits_event_record_and_metrics(live):
    h = AdvantageProbe().observe(GROUPS, token_denominator=512, step=3)
    assert h.ranks_agree is True and h.rank_denominators == (512.0,)
    assert live.value("rlobs_advantage_zero_std_groups_ratio") == 0.25
    assert live.value("rlobs_advantage_near_zero_std_groups_ratio") == 0.25
    assert live.value("rlobs_advantage_denominator_min") == 1e-6
    assert live.value("rlobs_advantage_denominator_p50") == pytest.approx(1.1e-6, rel=1e-9)
    assert live.value("rlobs_advantage_abs_max") == pytest.approx(0.5 / (SQRT_THIRD + 1e-6))
    assert live.value("rlobs_advantage_nonfinite_denominators_total") == 1.0
    assert live.value("rlobs_advantage_token_denominator") == 512.0
    assert [v for _, v in live.scrape().get("rlobs_advantage_rank_disagreements_total", [])] in ([], [0.0])
    rec = live.close_and_open()
    got = rows(rec, "select step, groups, zero_std_groups, near_zero_std_groups, nonfinite_denominators, "
                    "token_denominator, ranks_agree, rank_denominators from advantage")
    assert got == [(3, 4, 1, 1, 1, 512.0, True, "[512.0]")]


@pytest.mark.parametrize("case,denominators,expected_agree,expected_disagreements", [
    ("agree", [[100.0, 100.0], [64.0, 64.0]], [True, True], 0.0),
    ("disagree", [[100.0, 100.0], [100.0, 101.0]], [True, False], 1.0),
])
def test_two_gloo_ranks_token_denominator(tmp_path, case, denominators, expected_agree, expected_disagreements):
    import torch.multiprocessing as mp

    import rlobs
    from tests.probes._dist_worker import run_rank

    mp.spawn(run_rank, args=(2, str(tmp_path), denominators), nprocs=2, join=True)
    for rank in (0, 1):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert [a for a, _ in out["agree"]] == expected_agree
        assert [d for _, d in out["agree"]] == denominators
        assert out["disagreements"] == expected_disagreements
        assert out["dropped"] == 0
    rec = rlobs.open_run(tmp_path / "run")
    got = rows(rec, "select step, rank, token_denominator, ranks_agree, rank_denominators from advantage "
                    "order by step, rank")
    assert got == [(s, r, denominators[s][r], expected_agree[s], json.dumps(denominators[s]).replace(" ", ""))
                   for s in range(2) for r in range(2)]
