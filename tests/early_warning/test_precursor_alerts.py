"""The live precursor alerts fire in a real Prometheus on real collapse runs, and stay quiet on a healthy one.

``data/collapse_runs.json`` holds the per-step signals of real ``trainer_ref`` runs (``tiny-packed``, no injected
fault: collapse settings of ``bench/early_warning.py``, extracted from their records with
``python bench/early_warning.py extract``). Each run is replayed through a real rlobs recorder (the
Prometheus sink serves ``/metrics`` and writes its file_sd target, as a trainer does), one step a second, scraped
every second by Debian's Prometheus (``LocalPrometheus``) that evaluates the precursor rules of
``rlobs.dashboards.alerts.precursor_rules``: the committed expressions and thresholds, with their time windows
scaled (the last 10 min vs the hour before become 5 s vs 30 s; ``for`` 1 min becomes 1 s), so a step of the replay
stands for two minutes of a real run. The replay is ``bench/early_warning_live.py``'s, the one its bench runs on
any set of records. Each precursor alert must fire for the run that
shows its precursor, with its runbook; no precursor alert may fire for the healthy run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.early_warning_live import gate_report, replay, step_at
from rlobs.dashboards.alerts import precursor_rules, runbook_url
from rlobs.failures import FAILURES

from ..dashboards.conftest import need

# heavy: not for its memory but its clock: the replay's 5 s windows missed a step's precursor once in five runs on two
# xdist workers (6 Dec 2026; never serially); in the heavy slot (tests/conftest.py) no Ray / vLLM stack runs beside it
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

DATA = Path(__file__).with_name("data") / "collapse_runs.json"
ALERT = {r.id: r.name for r in precursor_rules()}  # failure-table id -> its alert's name


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    need("prometheus")
    data = json.loads(DATA.read_text())
    # only the runs these tests assert on (an expected alert, or a healthy run that must stay quiet): each replay is
    # a thread and a scrape target, and the alerts' 5 s windows leave little room for scrape jitter on 2 cores
    data = {**data, "runs": {n: r for n, r in data["runs"].items() if _live(r) or r["class"] == "healthy"}}
    gate: dict[str, dict] = {}
    seen, alerts, times = replay(data["runs"], tmp_path_factory.mktemp("early-warning-live"),
                                 done=lambda seen: _expected_seen(data, seen), gate=gate)
    return data, seen, alerts, times, gate


def _live(r: dict) -> list[str]:
    """The precursor alerts a recorded run must fire live: its ``expect`` (what the doctor warns it by), unless the
    data says otherwise in ``live_expect`` with a ``live_note`` on why (reward-hacking-s0: a one-step pattern the
    replay's 5 s windows miss)."""
    return r.get("live_expect", r.get("expect", []))


def _expected_seen(data: dict, seen: dict[str, set[str]]) -> bool:
    return all(ALERT[fid] in seen[run] for run, r in data["runs"].items() for fid in _live(r))


def test_every_precursor_alert_fires_on_a_real_collapse_run(replayed):
    data, seen, alerts, _, _ = replayed
    for run, r in data["runs"].items():
        for fid in _live(r):
            assert ALERT[fid] in seen[run], f"{fid} did not fire on {run} ({r['what']}); fired: {sorted(seen[run])}"
            a = alerts[(run, ALERT[fid])]
            assert a["labels"]["severity"] == "warning" and a["labels"]["runbook"] == fid
            assert a["annotations"]["runbook_url"] == runbook_url(fid)
            assert (Path(__file__).resolve().parents[2] / "runbooks" / f"{fid}.md").is_file()
    # at the thresholds chosen on the calibration runs, the KL creep, the uncorrected off-policy level and the
    # oversized-updates level show on these runs; every other precursor is listed in the data with why it stays
    # silent: a precursor can be neither shown nor left unexplained
    expected = {fid for r in data["runs"].values() for fid in _live(r)}
    assert expected | set(data["not_shown"]) == {r.id for r in precursor_rules()}
    assert not expected & set(data["not_shown"])


def test_no_precursor_alert_on_the_healthy_run(replayed):
    data, seen, _, _, _ = replayed
    for run, r in data["runs"].items():
        if r["class"] == "healthy":
            assert not {n for n in seen[run] if n.startswith("RlobsPrecursor")}, f"{run}: {sorted(seen[run])}"


def test_oversized_updates_fire_live_from_the_first_steps(replayed):
    """The first-steps leg, live: on the lr-too-high run (lr 1.5e-3, 0.03-0.23 nats/token per update from step 0,
    8 of its first 10 over 0.04; the doctor's first-steps leg warns at step 9) the alert goes active within the
    first ``early_steps`` steps."""
    data, _, alerts, times, _ = replayed
    run = "lr-too-high-s5"
    early = FAILURES["precursor-oversized-updates"].thresholds["early_steps"]
    a = alerts.get((run, ALERT["precursor-oversized-updates"]))
    assert a is not None, f"no oversized-updates alert on {run}"
    step = data["runs"][run]["steps"][step_at(times[run], a["activeAt"])]["step"]
    assert step < early, (step, a["activeAt"])


def test_the_fresh_data_gate_stays_open_while_a_run_steps(replayed):
    """The committed precursor alerts hold only while their run progressed within the recent window
    (``rlobs.dashboards.alerts.fresh_data``), so held readings after a run's last step page nobody. Read back from
    the same real Prometheus every 0.25 s, that gate was open at every read from each run's step 5 to its last: while
    the runs stepped the gated alerts computed what the alerts without it would have."""
    _, _, _, times, gate = replayed
    for run, t in times.items():
        g = gate_report(t, gate[run])
        assert g["fresh_shut_while_stepping"] == [], (run, g["fresh_shut_while_stepping"][:5])
        assert gate[run]["fresh_open"], run  # it was read, not absent
