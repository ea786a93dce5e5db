"""Runs the quick-start in ``probes.__doc__`` verbatim (a plain PyTorch loop with probes) against a real
run record and a real /metrics endpoint."""

from __future__ import annotations

import re
import textwrap
import urllib.request

import rlobs
import probes


def _example() -> str:
    doc = probes.__doc__
    start = doc.index("    import torch, rlobs, probes")
    end = doc.index("    rlobs.shutdown()", start) + len("    rlobs.shutdown()")
    return textwrap.dedent(doc[start:end])


def test_quickstart_is_short():
    code = _example()
    lines = [ln for ln in code.splitlines() if "# +" in ln]
    assert code.endswith("rlobs.shutdown()")  # extracted without its "# +" marker: count it too
    assert len(lines) + 1 == 8 < 10, lines  # "a trainer author adds probes in under 10 lines"


def test_plain_loop_example_records_events_and_serves_metrics(tmp_path):
    code = _example()
    run_dir = tmp_path / "demo"
    code = code.replace('"runs/demo"', repr(str(run_dir)))
    body, last = code.rsplit("\n", 1)
    assert last.strip() == "rlobs.shutdown()"
    ns: dict = {}
    try:
        exec(compile(body, "probes-quickstart", "exec"), ns)  # everything up to the shutdown
        rec = ns["rec"]
        assert rec.flush()
        text = urllib.request.urlopen(rec.metrics_url, timeout=10).read().decode()
        assert rec.stats()["dropped_total"] == 0
        exec(compile(last, "probes-quickstart", "exec"), ns)
    finally:
        rlobs.shutdown()

    def series(name: str) -> list[float]:
        return [float(m.group(1)) for m in re.finditer(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M)]

    assert series("rlobs_train_steps_total") == [5.0]
    assert len(series("rlobs_grad_norm")) == 1
    assert series("rlobs_phase_seconds_total") and series("rlobs_heartbeats_total") == [5.0]
    assert len(series("rlobs_advantage_zero_std_groups_ratio")) == 1
    assert 'phase="training"' in text

    with rlobs.open_run(run_dir) as record:
        counts = record.counts()
        assert counts["train_step"] == 5 and counts["advantage"] == 5
        assert counts["phase"] == 5 and counts["heartbeat"] == 5
        steps = record.con.execute("select step, grad_norm > 0, lr from train_step order by step").fetchall()
        assert steps == [(s, True, 0.1) for s in range(5)]
        assert record.con.execute("select min(groups), max(groups) from advantage").fetchone() == (4, 4)
