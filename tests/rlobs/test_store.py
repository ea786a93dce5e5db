from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from rlobs.events import WriterInfo
from rlobs.schema import arrow_schema
from rlobs.store import (
    RunRecordError,
    UnsupportedSchemaVersion,
    ensure_manifest,
    open_run,
)
from rlobs.store.segments import SegmentWriter

HERE = Path(__file__).parent


def _batch(n: int, start: int = 0) -> pa.RecordBatch:
    from rlobs.events import to_record_batch

    evs = [("ledger", 1_000 + i, i, i // 10, 0, None, {"sample_id": f"s{i}", "state": "generated", "tokens": i})
           for i in range(start, start + n)]
    return to_record_batch(WriterInfo("r", "p", "gen", 0), "ledger", evs)


def test_open_run_reads_sealed_parquet_and_open_tails_together(run_dir):
    ensure_manifest(run_dir, run_id="abc")
    kdir = run_dir / "events" / "ledger"
    sealed = SegmentWriter(kdir, "ledger", "a")
    sealed.write(_batch(100))
    sealed.close()
    live = SegmentWriter(kdir, "ledger", "b", seal_on_close=False)
    live.write(_batch(50, start=100))  # left open, like a running writer
    assert sorted(p.suffix for p in kdir.iterdir()) == [".arrows", ".parquet"]
    with open_run(run_dir) as rec:
        assert rec.counts() == {"ledger": 150}
        assert rec.sql("SELECT count(DISTINCT sample_id), sum(tokens) FROM ledger").fetchall() == [(150, sum(range(150)))]
        assert [(p.kind, p.problem, p.rows_read) for p in rec.problems] == [("ledger", "unsealed", 50)]
        assert rec.info()["truncated"] is False
        # kinds without data are still queryable, with the full schema
        assert rec.sql("SELECT count(*) FROM weight_sync").fetchall() == [(0,)]
        assert "fingerprint_match" in rec.table("weight_sync").column_names
    live.close()


def test_truncated_tail_is_reported_and_everything_before_it_is_read(run_dir):
    ensure_manifest(run_dir)
    w = SegmentWriter(run_dir / "events" / "ledger", "ledger", "p", seal_on_close=False)
    for k in range(3):
        w.write(_batch(10, start=10 * k))
    path = w.rotate()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 8 - 40])  # cut into the last batch (and its end marker)
    with open_run(run_dir) as rec:
        assert rec.counts() == {"ledger": 20}
        (problem,) = rec.problems
        assert problem.problem == "truncated" and problem.rows_read == 20 and problem.bytes_unread > 0
        assert rec.info()["truncated"] is True


def test_empty_segment_of_a_writer_killed_before_its_first_flush(run_dir):
    ensure_manifest(run_dir)
    kdir = run_dir / "events" / "ledger"
    kdir.mkdir(parents=True)
    (kdir / "p.00000.arrows").write_bytes(b"")
    with open_run(run_dir) as rec:
        assert rec.counts() == {}
        assert rec.problems[0].problem == "truncated"
        assert "before its first flush" in rec.problems[0].detail


def test_corrupt_parquet_is_reported_not_raised(run_dir):
    ensure_manifest(run_dir)
    w = SegmentWriter(run_dir / "events" / "ledger", "ledger", "good")
    w.write(_batch(5))
    w.close()
    bad = run_dir / "events" / "ledger" / "bad.00000.parquet"
    bad.write_bytes(b"PAR1 this is not parquet at all")
    with open_run(run_dir) as rec:
        assert rec.counts() == {"ledger": 5}
        assert [(Path(p.path).name, p.problem) for p in rec.problems] == [("bad.00000.parquet", "unreadable")]


def test_interrupted_seal_prefers_parquet_over_leftover_stream(run_dir):
    ensure_manifest(run_dir)
    kdir = run_dir / "events" / "ledger"
    w = SegmentWriter(kdir, "ledger", "p", seal_on_close=False)
    w.write(_batch(7))
    arrows = w.rotate()
    from rlobs.store.segments import seal

    copy = arrows.read_bytes()
    parquet = seal(arrows)
    arrows.write_bytes(copy)  # as if killed between rename and unlink
    assert parquet.exists() and arrows.exists()
    with open_run(run_dir) as rec:
        assert rec.counts() == {"ledger": 7}
        assert rec.problems == []


def test_unknown_schema_major_gets_a_clear_error(run_dir):
    ensure_manifest(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["schema_version"] = "2.0"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UnsupportedSchemaVersion, match=r"schema 2.0; this rlobs reads schema 1.x"):
        open_run(run_dir)


def test_not_a_run_record(tmp_path):
    with pytest.raises(RunRecordError, match="manifest.json is missing"):
        open_run(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RunRecordError, match="not valid JSON"):
        open_run(tmp_path)


def test_segment_of_another_schema_major_is_skipped_and_reported(run_dir):
    ensure_manifest(run_dir)
    kdir = run_dir / "events" / "ledger"
    kdir.mkdir(parents=True)
    schema = arrow_schema("ledger").with_metadata({"rlobs.schema_version": "9.0", "rlobs.kind": "ledger"})
    import pyarrow.parquet as pq

    pq.write_table(schema.empty_table(), kdir / "x.00000.parquet")
    with open_run(run_dir) as rec:
        assert [(p.problem, p.detail) for p in rec.problems] == [("schema", "segment written with schema major 9")]


def test_segments_rotate_by_size_and_are_all_read(run_dir):
    ensure_manifest(run_dir)
    w = SegmentWriter(run_dir / "events" / "ledger", "ledger", "p", max_bytes=4096)
    for k in range(20):
        w.write(_batch(50, start=50 * k))
    w.close()
    files = list((run_dir / "events" / "ledger").glob("*.parquet"))
    assert len(files) > 3
    with open_run(run_dir) as rec:
        assert rec.counts() == {"ledger": 1000}
        assert rec.sql("SELECT count(DISTINCT sample_id) FROM ledger").fetchall() == [(1000,)]


def test_manifest_first_writer_wins_across_processes(run_dir):
    code = ("import sys, rlobs.store.manifest as m, pathlib; "
            "print(m.ensure_manifest(pathlib.Path(sys.argv[1]))['run_id'])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    ids = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(ids) == 1 and ids == {json.loads((run_dir / "manifest.json").read_text())["run_id"]}


def test_sigkill_of_a_writer_loses_at_most_the_last_second(run_dir):
    proc = subprocess.Popen([sys.executable, str(HERE / "_writer_proc.py"), str(run_dir), "generator"],
                            stdout=subprocess.PIPE, text=True)
    progress: list[tuple[int, int]] = []
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        ts, n = map(int, line.split())
        progress.append((ts, n))
        if n >= 30_000 and ts - progress[0][0] > 2e9:
            break
    os.kill(proc.pid, signal.SIGKILL)
    killed_ns = time.time_ns()
    proc.wait(10)
    emitted_1s_before = max(n for ts, n in progress if ts <= killed_ns - 1_000_000_000)
    with open_run(run_dir) as rec:
        n = rec.counts()["ledger"]
        assert n >= emitted_1s_before, (n, emitted_1s_before)
        # exactly the first n samples, in order: nothing in the middle was lost
        assert rec.sql("SELECT count(DISTINCT sample_id), max(CAST(substr(sample_id, 2) AS BIGINT)) FROM ledger"
                       ).fetchall() == [(n, n - 1)]
        info = rec.info()
        (pinfo,) = info["processes"]
        assert pinfo["status"] == "lost"
        assert {p["problem"] for p in info["problems"]} <= {"unsealed", "truncated"}
    out = subprocess.run([sys.executable, "-m", "rlobs", "info", str(run_dir)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "lost" in out.stdout and "ledger" in out.stdout
