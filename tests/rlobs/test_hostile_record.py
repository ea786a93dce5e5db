"""Hostile and damaged run records (issue #21): FIFOs, device files, symlinks, deep or huge JSON, values of
the wrong type, glob characters in segment names, flipped bytes, and record strings made of markup and
terminal control codes. Each case: a listed problem or a clear error, never a traceback, hang or blow-up."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import rlobs
from rlobs.cli import app
from rlobs.doctor import diagnose
from rlobs.store import RunRecordError, SegmentWriter, ensure_manifest, open_run
from rlobs.store.safeio import checksum_path
from tests.rlobs.test_store import _batch

HOSTILE = "x [/] y [link=http://evil.example]click[/link] \x1b[2J\x1b]8;;http://evil.example\x07 ![i](http://evil.example/i.png) <img src=x>"


def _record(root: Path, segments: int = 2, rows: int = 50) -> Path:
    run = root / "run"
    ensure_manifest(run, run_id="hostile-test")
    w = SegmentWriter(run / "events" / "ledger", "ledger", "p")
    for k in range(segments):
        w.write(_batch(rows, start=k * rows))
        w.rotate()
    (run / "processes").mkdir()
    (run / "processes" / "p.json").write_text(json.dumps({"process": "p", "component": "gen", "pid": 1, "ended_ns": 5}))
    return run


def _cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed CLI in a child process: a hang fails the test instead of freezing it."""
    return subprocess.run([sys.executable, "-m", "rlobs", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    run = _record(tmp_path)
    p, led = run / "processes", run / "events" / "ledger"
    os.mkfifo(p / "fifo.json")
    (p / "zero.json").symlink_to("/dev/zero")
    (p / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (p / "huge.json").write_text(json.dumps({"pad": "x" * (2 << 20)}))
    (p / "list.json").write_text("[]")
    (p / "badutf8.json").write_bytes(b'{"component": "\xff\xfe"}')
    host = socket.gethostname()
    (p / "abc.json").write_text(json.dumps({"host": host, "pid": "abc"}))
    (p / "float.json").write_text(f'{{"host": "{host}", "pid": 1e30}}')
    (p / "bigint.json").write_text(json.dumps({"host": host, "pid": 10 ** 30, "rank": "zero", "started_ns": True,
                                               "ended_ns": -5, "component": ["a"]}))
    os.mkfifo(led / "fifo.00000.arrows")
    os.mkfifo(led / "fifo.00001.parquet")
    (run / "events" / "train_step").mkdir()
    (run / "events" / "train_step" / "dev.00000.parquet").symlink_to("/dev/zero")
    first = min(led.glob("p.*.parquet"))
    (led / "link.00000.parquet").symlink_to(first)
    shutil.copy(first, led / "*.parquet")  # a real segment whose name is a glob pattern
    return run


def test_planted_files_are_listed_problems_not_hangs_or_tracebacks(planted):
    out = _cli("info", str(planted), "--json", timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    data = json.loads(out.stdout)
    by_file = {Path(p["path"]).name: p for p in data["problems"]}
    for name in ("fifo.json", "zero.json", "fifo.00000.arrows", "fifo.00001.parquet", "dev.00000.parquet",
                 "link.00000.parquet"):
        assert "not a regular file" in by_file[name]["detail"], (name, by_file.get(name))
    assert "over the" in by_file["huge.json"]["detail"]
    assert "nested too deeply" in by_file["deep.json"]["detail"]
    assert "not an object" in by_file["list.json"]["detail"] and "UTF-8" in by_file["badutf8.json"]["detail"]
    details = " | ".join(p["detail"] for p in data["problems"] if p["kind"] == "process")
    for bad in ("pid = 'abc'", "pid = 1e+30", f"pid = {10 ** 30}", "rank = 'zero'", "started_ns = True",
                "ended_ns = -5", "component = ['a']"):
        assert bad in details, bad
    # the segment named "*.parquet" is read once, as itself: 2 x 50 rows + its 50, not every segment again
    assert data["kinds"]["ledger"] == 150
    doc = _cli("doctor", str(planted), "--json", timeout=300)
    assert doc.returncode in (0, 1, 2) and "Traceback" not in doc.stderr, doc.stderr
    report = json.loads(doc.stdout)
    assert {Path(p["path"]).name for p in report["record_problems"]} >= {"fifo.json", "zero.json", "deep.json"}
    damaged = [f for f in report["findings"] if f["rule"] == "record-damaged"]
    assert damaged and "damaged segment" in damaged[0]["title"]


@pytest.mark.parametrize("content, needle", [
    ("fifo", "FIFO"), ("zero", "symlink"), ("deep", "nested too deeply"), ("huge", "over the"),
    ("list", "lacks schema_version"), ("config", "config must be an object")])
def test_hostile_manifest_is_a_clear_error(tmp_path, content, needle):
    run = tmp_path / "run"
    run.mkdir()
    m = run / "manifest.json"
    if content == "fifo":
        os.mkfifo(m)
    elif content == "zero":
        m.symlink_to("/dev/zero")
    elif content == "deep":
        m.write_text("[" * 100_000 + "]" * 100_000)
    elif content == "huge":
        m.write_text(json.dumps({"run_id": "x", "schema_version": rlobs.SCHEMA_VERSION, "pad": "x" * (9 << 20)}))
    elif content == "list":
        m.write_text("[]")
    else:
        m.write_text(json.dumps({"run_id": "x", "schema_version": rlobs.SCHEMA_VERSION, "config": [1, 2]}))
    with pytest.raises(RunRecordError, match=needle):
        open_run(run)
    out = _cli("info", str(run), timeout=60)
    assert out.returncode != 0 and needle in " ".join(out.stderr.split()) and "Traceback" not in out.stderr


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)
_FIELDS = ("process", "component", "rank", "host", "pid", "started_ns", "ended_ns", "metrics_url")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(st.sampled_from(_FIELDS) | st.text(max_size=8), _json, max_size=8) | _json)
def test_fuzzed_process_files_never_raise(tmp_path_factory, doc):
    run = _record(tmp_path_factory.mktemp("fz"), segments=1, rows=5)
    (run / "processes" / "f.json").write_text(json.dumps(doc, allow_nan=True))
    with open_run(run) as rec:
        info = rec.info()
        json.dumps(info, default=str)
        mine = [p for p in rec.problems if p.path.endswith("f.json")]
        if not isinstance(doc, dict):
            assert mine and "not an object" in mine[0].detail
        else:
            for p in rec.processes:
                for key in ("rank", "pid"):
                    assert isinstance(getattr(p, key), int)
                for key in ("component", "host"):
                    assert isinstance(getattr(p, key), str)
        diagnose(rec, rule_ids=["record-damaged"])


def test_many_small_segments_are_read_in_one_pass_and_compacted(tmp_path, monkeypatch):
    monkeypatch.setenv("RLOBS_CACHE", str(tmp_path / "cache"))
    run = _record(tmp_path, segments=40, rows=3)
    for attempt in ("decoded", "from the compacted copy"):
        with open_run(run) as rec:
            assert rec.counts()["ledger"] == 120, attempt
            plan = rec.sql("EXPLAIN SELECT count(*) FROM ledger").fetchall()
            assert "READ_PARQUET" not in str(plan).upper()  # not thousands of footers per query
            assert len(rec.files["ledger"]) == 40 and all(f.endswith(".parquet") for f in rec.files["ledger"])
            assert rec.sql("SELECT count(DISTINCT sample_id) FROM ledger").fetchall() == [(120,)]
        assert len(list((tmp_path / "cache" / "compact").glob("*.arrow"))) == 1
    # a segment rewritten after the copy was made: the copy is not used, the damage is seen
    victim = sorted((run / "events" / "ledger").glob("*.parquet"))[7]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with open_run(run, verify=True) as rec:
        assert [p.path for p in rec.problems] == [str(victim)] and rec.checksums == {"verified": 39, "missing": 0}
        assert rec.counts()["ledger"] == 117
    cached = lambda: len(list((tmp_path / "cache" / "compact").glob("*.arrow")))
    assert cached() == 2  # the 39 good segments: a new key
    with open_run(run) as rec:
        rec.counts()
        assert rec.info()["verified"] is False
    assert cached() == 3  # the rewritten segment changed the key (its ctime): decoded again, not the stale copy


def _rows(path: Path) -> list | str:
    try:
        return duckdb.sql(f"SELECT * FROM read_parquet('{path}') ORDER BY ALL").fetchall()
    except duckdb.Error as exc:
        return f"error: {exc}"


def test_every_byte_flip_that_changes_data_is_reported_by_info_verify_and_the_doctor(tmp_path):
    run = _record(tmp_path, segments=1, rows=60)
    (seg,) = sorted((run / "events" / "ledger").glob("*.parquet"))
    assert checksum_path(seg).is_file()
    pristine = seg.read_bytes()
    baseline = _rows(seg)
    runner = CliRunner()
    changed = 0
    positions = sorted({int(i * (len(pristine) - 1) / 63) for i in range(64)})
    for pos in positions:
        bad = bytearray(pristine)
        bad[pos] ^= 0x5A
        seg.write_bytes(bytes(bad))
        if _rows(seg) == baseline:
            continue  # this flip changed no data (padding, statistics, ...): still reported below, not required
        changed += 1
        res = runner.invoke(app, ["info", str(run), "--verify", "--json"])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["verified"] is True
        assert any(p["path"] == str(seg) for p in data["problems"]), f"flip at {pos} not reported by info --verify"
        assert "ledger" not in data["kinds"]  # the damaged segment was left out, not read as data
        with open_run(run) as rec:
            report = diagnose(rec)
        assert any(p["path"] == str(seg) for p in report.record_problems), f"flip at {pos} not seen by the doctor"
        assert any(f.rule == "record-damaged" for f in report.findings)
    seg.write_bytes(pristine)
    assert changed >= 32  # most single-byte flips do change the data; all of those were reported
    res = runner.invoke(app, ["info", str(run), "--verify"])
    assert "checksums verified: 1 segment(s) match" in res.output
    res = runner.invoke(app, ["info", str(run)])
    assert "checksums not verified" in res.output


def _hostile_run(root: Path) -> Path:
    run = root / "evil"
    rec = rlobs.init(run, component="grader", prometheus=False, set_global=False, run_id="run " + HOSTILE)
    for i in range(12):
        rec.set_step(i)
        rec.emit("grader_call", sample_id=f"s{i} {HOSTILE}", grader_kind=HOSTILE, queue_wait_s=0.001, latency_s=5.0,
                 outcome="timeout", reward=None)
    rec.close()
    (run / "processes" / "evil.json").write_text(json.dumps({"process": HOSTILE, "component": HOSTILE, "host": HOSTILE}))
    return run


def test_record_strings_are_inert_in_the_terminal(tmp_path):
    run = _hostile_run(tmp_path)
    env = {"FORCE_COLOR": "1", "COLUMNS": "400", "TERM": "xterm-256color"}  # as on a real terminal
    for args in (["doctor", str(run)], ["info", str(run)]):
        out = _cli(*args, env=env)
        assert "MarkupError" not in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert out.returncode != 2 or args[0] == "doctor", out.stderr
        text = out.stdout
        assert "\x1b[2J" not in text and "\x1b]8;" not in text  # no screen clear, no hyperlink (OSC 8)
        assert "x [/] y [link=http://evil.example]click[/link]" in text  # shown literally
    doc = _cli("doctor", str(run))
    assert doc.returncode == 1 and "grader-timeouts" in doc.stdout  # the warning, not a crash


def test_markdown_report_renders_record_strings_as_text(tmp_path):
    from markdown_it import MarkdownIt

    run = _hostile_run(tmp_path)
    out = _cli("doctor", str(run), "--markdown")
    assert "Traceback" not in out.stderr, out.stderr
    html = MarkdownIt("commonmark").enable("table").render(out.stdout)
    assert "<img" not in html and "evil.example" in html
    assert 'href="http://evil.example' not in html and "\x1b" not in out.stdout
