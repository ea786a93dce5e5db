"""bench/no_progress_pauses.py end to end on a synthetic run: its series go through the real sink's routes, promtool's
backfill and a real Prometheus evaluating the committed RlobsNoProgress rule."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import no_progress_pauses as npp  # noqa: E402

from .conftest import need  # noqa: E402

T0 = 1_764_000_000.0  # a wall time in the past (the backfill refuses nothing; retention is set long)


def _ev(kind: str, t: float, component: str, **fields: object) -> tuple:
    return (kind, int(t * 1e9), int(t * 1e9), None, None, None, {**fields, "_component": component, "_rank": 0})


def synthetic_run() -> dict[str, list[tuple]]:
    """A trainer stepping every 0.5 s (0.4 s optimiser + 0.05 s data wait reported; a heartbeat as each step
    starts, as trainer_ref's does), its driver evaluating for 1 s
    before step 1 and for 6 s after steps 10 and 25 (the trainer waits through them): 40 steps."""
    trainer, driver, t = [], [], T0 + 1.0
    driver += [_ev("heartbeat", T0, "driver", phase="eval", detail=""),
               _ev("phase", T0 + 1.0, "driver", phase="evaluation", seconds=1.0, tokens=None)]
    for k in range(1, 41):
        trainer.append(_ev("heartbeat", t + 0.05, "trainer", phase="train", detail=f"step {k}"))
        t += 0.5
        trainer.append(_ev("train_step", t, "trainer", step_seconds=0.4, data_wait_s=0.05))
        if k in (10, 25):
            driver += [_ev("heartbeat", t + 0.01, "driver", phase="eval", detail=""),
                       _ev("phase", t + 6.01, "driver", phase="evaluation", seconds=6.0, tokens=None)]
            t += 6.01
    return {"trainer-0": trainer, "driver-0": driver}


def test_pauses_and_hang_points_of_a_run():
    ev = synthetic_run()
    ps = npp.pauses(ev)
    assert [(p, round(b - T0, 2), round(e - b, 2)) for p, b, e in ps] == [
        ("evaluation", 0.0, 1.0), ("evaluation", 6.01, 6.0), ("evaluation", 19.52, 6.0)]
    assert [s["scenario"] for s in npp.scenarios(ev, "x")] == [
        "recorded", "undeclared", "hang-evaluation@10", "hang-evaluation@25", "hang-step@22"]


def test_a_real_prometheus_pages_the_undeclared_evaluation_and_every_hang_but_not_the_declared_run(tmp_path):
    """Step allowance 5 x 0.45 s; the 6 s evaluations outlast it (the rule before pauses counted pages them), and
    are within it plus 5x the mean pause before them (1 s, then 3.5 s). Each hang pages when the rule's own
    arithmetic on the held series says it is due (within the query resolution)."""
    need("promtool")
    need("prometheus")
    r = npp.score_events(synthetic_run(), "synthetic", tmp_path)
    sc = {x["scenario"]: x for x in r["scenarios"]}
    assert sc["recorded"]["pages"] == []
    assert sc["undeclared"]["paged_steps"] == [10, 25], sc["undeclared"]
    hangs = [x for x in r["scenarios"] if "cut_s" in x]
    assert [x["scenario"] for x in hangs] == ["hang-evaluation@10", "hang-evaluation@25", "hang-step@22"]
    for x in hangs:
        assert x["within_bar"] and x["paged_before_cut"] == 0, x
        assert abs(x["fired_after_cut_s"] - x["due_after_cut_s"]) <= 0.2, x
    ev10, ev25 = sc["hang-evaluation@10"], sc["hang-evaluation@25"]
    assert ev10["in_pause"] and abs(ev10["allowance_s"] - (2.25 + 5.0)) < 0.05, ev10
    assert abs(ev25["allowance_s"] - (2.25 + 17.5)) < 0.05, ev25
    assert not sc["hang-step@22"]["in_pause"] and abs(sc["hang-step@22"]["allowance_s"] - 2.25) < 0.05
