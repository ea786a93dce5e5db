"""The doctor's shared, optimised queries give exactly what the plain formulations they replace give.

``RunContext.suspect_samples`` (a two-pass ledger aggregate), the grader calls placed on steps (ASOF join
only for calls without a step) and the prompt-index gaps (computed in SQL) are checked against the
straightforward one-pass queries and Python loops on records with the edge cases: NULL states, repeated
consumption, duplicate flags, drops, samples never consumed, calls with and without a step.
"""

from __future__ import annotations

from pathlib import Path

import rlobs
from rlobs.doctor.context import RunContext
from rlobs.doctor.rules.graders import _calls_by_step
from rlobs.doctor.rules.ledger import _prompt_gaps

# the one-pass per-sample summary the two-pass suspect table replaces, filtered to what the rules read
_ONE_PASS = (
    "SELECT hash(sample_id) AS h, any_value(sample_id) AS sample_id, "
    "min(CASE WHEN state = 'generated' THEN ts_ns END) AS generated_ts, "
    "sum((state = 'consumed')::INT) AS consumed, "
    "min(CASE WHEN state = 'consumed' THEN step END) AS first_consumed_step, "
    "max(CASE WHEN state = 'consumed' THEN step END) AS last_consumed_step, "
    "bool_or(state IN ('consumed', 'dropped')) AS terminal, "
    "bool_or(coalesce(duplicate, false)) AS duplicate FROM ledger WHERE sample_id IS NOT NULL GROUP BY h")
_SUSPECT = "WHERE consumed > 1 OR duplicate OR (NOT terminal AND generated_ts IS NOT NULL)"


def _ledger_record(path: Path, transitions: list[tuple]) -> Path:
    rec = rlobs.init(path, component="trainer", prometheus=False, set_global=False)
    for sample_id, state, step, duplicate in transitions:
        rec.emit("ledger", step=step, sample_id=sample_id, state=state, duplicate=duplicate)
    for step in range(12):
        rec.emit("train_step", step=step, loss=1.0)
    rec.close()
    return path


EDGE_CASES = [
    ("ok", "generated", 0, None), ("ok", "consumed", 1, None),                         # healthy
    ("twice", "generated", 0, None), ("twice", "consumed", 1, None), ("twice", "consumed", 4, None),
    ("lost", "generated", 1, None),                                                    # never consumed
    ("dropped", "generated", 1, None), ("dropped", "dropped", 2, None),                 # dropped: fine
    ("dup", "generated", 2, True), ("dup", "consumed", 3, None),                       # flagged duplicate
    ("dup2", "generated", 2, False), ("dup2", "consumed", 3, True), ("dup2", "consumed", 5, True),
    ("only-consumed", "consumed", 3, None),                                            # no generated: fine
    ("null-state", None, 3, None),                                                     # no state at all
    ("null-then-gen", None, 2, None), ("null-then-gen", "generated", 2, None),         # generated, no terminal
    (None, "generated", 3, None), (None, "consumed", 3, None),                         # no sample id: ignored
]


def test_suspect_samples_equal_the_one_pass_summary(tmp_path):
    path = _ledger_record(tmp_path / "ledger", EDGE_CASES)
    with rlobs.open_run(path) as record:
        ctx = RunContext(record)
        got = record.sql(f"SELECT * FROM {ctx.suspect_samples()} ORDER BY sample_id").fetchall()
        want = record.sql(f"SELECT * FROM ({_ONE_PASS}) {_SUSPECT} ORDER BY sample_id").fetchall()
    assert got == want
    assert [r[1] for r in got] == ["dup", "dup2", "lost", "null-then-gen", "twice"]


def test_suspect_samples_of_a_healthy_ledger_is_an_empty_table(tmp_path):
    path = _ledger_record(tmp_path / "healthy", [t for t in EDGE_CASES if t[0] in ("ok", "dropped", "only-consumed")])
    with rlobs.open_run(path) as record:
        ctx = RunContext(record)
        table = ctx.suspect_samples()
        assert record.sql(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
        columns = [d[0] for d in record.sql(f"SELECT * FROM {table}").description]
    assert columns == ["h", "sample_id", "generated_ts", "consumed", "first_consumed_step", "last_consumed_step",
                       "terminal", "duplicate"]


def test_grader_calls_by_step_equal_the_asof_join_of_every_call(tmp_path):
    import time

    path = tmp_path / "graders"
    trainer = rlobs.init(path, component="trainer", prometheus=False, set_global=False)
    grader = rlobs.init(path, component="grader", prometheus=False, set_global=False)
    for step in range(6):
        trainer.emit("train_step", step=step, loss=1.0)
        trainer.flush()
        for i in range(3):  # calls without a step are placed by time; calls with one keep it
            grader.emit("grader_call", step=None if i else step + 100, grader_kind="code", latency_s=0.1 * i,
                        outcome="ok" if i < 2 else "timeout")
        grader.flush()
        time.sleep(0.002)
    trainer.close()
    grader.close()
    plain = ("WITH steps AS (SELECT min(ts_ns) ts_ns, step FROM train_step WHERE step IS NOT NULL GROUP BY step) "
             "SELECT coalesce(g.step, s.step) AS step, g.grader_kind, g.latency_s, g.outcome "
             "FROM grader_call g ASOF LEFT JOIN steps s ON g.ts_ns >= s.ts_ns")
    with rlobs.open_run(path) as record:
        ctx = RunContext(record)
        got = sorted(record.sql(_calls_by_step(ctx)).fetchall(), key=repr)
        want = sorted(record.sql(plain).fetchall(), key=repr)
    assert got == want and len(got) == 18
    assert {r[0] for r in got} >= {100, 105} and None not in {r[0] for r in got}


def test_prompt_gaps_equal_the_python_scan(tmp_path):
    present = [0, 1, 2, 5, 6, 9, 10, 11, 2013]
    path = tmp_path / "prompts"
    rec = rlobs.init(path, component="generator", prometheus=False, set_global=False)
    for i in present:
        rec.emit("rollout", step=0, sample_id=f"s{i}", prompt_id=f"p{i}")
    rec.emit("rollout", step=0, sample_id="e1", prompt_id="eval7")  # eval prompts are not dispatched ones
    rec.emit("rollout", step=0, sample_id="x", prompt_id="no-index")
    rec.close()
    with rlobs.open_run(path) as record:
        gaps = _prompt_gaps(RunContext(record))
    ps = set(present)
    assert gaps == [i for i in range(present[0], present[-1] + 1) if i not in ps][:1000]
    assert gaps[:5] == [3, 4, 7, 8, 12] and len(gaps) == 1000
