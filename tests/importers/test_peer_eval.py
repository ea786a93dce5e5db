"""The peer evaluation corpus (bench/peer_corpus.py) on a slice that runs in CI: per framework, one healthy
run (no warning or critical finding) and one run per problem at the milder magnitude (the expected rule is the
top-1 finding, within the allowed delay). The full corpus and its tables: python -m bench.doctor_eval_peers."""

from __future__ import annotations

import pytest

from bench import doctor_eval_peers as ev
from bench import peer_corpus as pc

SLICE = [r for r in pc.runs(healthy_seeds=1)
         if r["problem"] is None or (r["magnitude"] == pc.PROBLEMS[r["problem"]].magnitudes[0]
                                     and r["onset"] == pc.ONSETS[0])]
SLICE = [r for r in SLICE if not (r["framework"] == "verl" and r["format"] == "tensorboard")
         and r["framework"] != "prime-rl"
         and not (r["framework"] != "verl" and r["problem"] in ("grad_spike", "nan_grad"))]  # covered elsewhere
SLICE += [r for r in pc.runs(("prime-rl",), healthy_seeds=1)
          if r["problem"] in (None, "staleness") and r["onset"] in (None, pc.ONSETS[0])][:3]


@pytest.mark.parametrize("run", SLICE, ids=lambda r: f"{r['framework']}-{r['format']}-{r['problem'] or 'healthy'}")
def test_peer_corpus_slice(run, tmp_path):
    if run["framework"] == "prime-rl":
        pytest.importorskip("wandb")
    res = ev.evaluate(run, tmp_path)
    assert not res["errors"], res["errors"]
    if run["problem"] is None:
        assert res["false_alarms"] == [], res["findings"]
    else:
        assert res["top1"] and res["in_time"], (res["expected"], res["findings"], res["delay"])
