"""Hostile input to the importers (issue #21): each attack ends as an issue in the import report (or a clear
ImportFailed), never a traceback, and costs bounded time and memory; the good lines around it still import."""

from __future__ import annotations

import json
import resource
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlobs
from rlobs.cli import app
from rlobs.importers import ImportFailed, import_run, readers
from tests.importers import fixtures as fx


def _good(step: int) -> str:
    return json.dumps({"step": step, "data": {"actor/grad_norm": 1.0 + step / 10, "actor/pg_loss": -0.1}}) + "\n"


def _scalars(run: Path) -> dict[tuple[int, str], float]:
    with rlobs.open_run(run) as rec:
        return {(s, n): v for s, n, v in rec.sql("SELECT step, name, value FROM scalar").fetchall()}


def _grad_norms(run: Path) -> dict[int, float]:
    with rlobs.open_run(run) as rec:
        return dict(rec.sql("SELECT step, grad_norm FROM train_step").fetchall())


def test_a_5000_digit_number_is_reported_not_a_traceback(tmp_path):
    big = "9" * 5000
    src = tmp_path / "m.jsonl"
    src.write_text(_good(1) + '{"step": 2, "data": {"actor/grad_norm": 1.2, "my/counter": ' + big + "}}\n"
                   + '{"step": ' + big + ', "data": {"actor/grad_norm": 1.3}}\n' + _good(4))
    report = import_run("verl", src, tmp_path / "run")
    assert report.nonnumeric["my/counter"] == "1 value(s), e.g. integer with 5000 digits (beyond float64)"
    assert report.rows_without_step == 1  # the 5000-digit step is not a step; its values are kept with step null
    assert _grad_norms(tmp_path / "run") == {1: 1.1, 2: 1.2, None: 1.3, 4: 1.4}
    # the same number in a CSV cell and a console line
    csv_src = tmp_path / "h.csv"
    csv_src.write_text(f"_step,actor/grad_norm,x\n1,0.5,{big}\n2,0.6,1\n")
    rep = import_run("wandb", csv_src, tmp_path / "run_csv", framework="verl")
    assert rep.nonnumeric["x"].startswith("1 value(s), e.g. number with 5000 characters")
    con = tmp_path / "c.log"
    con.write_text(f"step:1 - actor/grad_norm:0.5 - x:{big}\nstep:2 - actor/grad_norm:0.6\n")
    rep = import_run("verl", con, tmp_path / "run_con")
    assert rep.steps == (1, 2) and "x" in rep.nonnumeric


def test_json_nested_100k_deep_in_a_verl_line_is_one_issue(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    src = tmp_path / "m.jsonl"
    src.write_text(_good(1) + '{"step": 2, "data": {"x": ' + deep + "}}\n" + _good(3))
    report = import_run("verl", src, tmp_path / "run")
    assert [(i.where, i.problem) for i in report.issues] == [("m.jsonl:2", "malformed")]
    assert "nested deeper" in report.issues[0].detail
    assert _grad_norms(tmp_path / "run") == {1: 1.1, 3: 1.3}
    # nested dicts that the parser accepts but are absurdly deep are counted, not recursed into
    nested = {"step": 1, "a": 1.0}
    cur = nested
    for _ in range(200):
        cur["d"] = {}
        cur = cur["d"]
    cur["leaf"] = 2.0
    src2 = tmp_path / "n.jsonl"
    src2.write_text(json.dumps(nested) + "\n")
    rep = import_run("wandb", src2, tmp_path / "run2")
    assert rep.unmapped == {"a": 1}
    assert any("nested deeper than 16" in v for v in rep.nonnumeric.values())


def test_trl_trainer_state_nested_100k_deep_fails_clearly(tmp_path):
    src = tmp_path / "trainer_state.json"
    src.write_text('{\n  "global_step": 2,\n  "log_history": [{"step": 1, "loss": ' + "[" * 100_000
                   + "]" * 100_000 + "}]\n}\n")
    with pytest.raises(ImportFailed, match="nested deeper than the parser allows"):
        import_run("trl", src, tmp_path / "run")
    res = CliRunner().invoke(app, ["import", "trl", str(src), "--out", str(tmp_path / "run")])
    assert res.exit_code == 65 and "nested deeper" in " ".join(res.stderr.split())
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_a_csv_cell_over_the_field_size_limit_is_one_row_issue(tmp_path):
    import csv

    src = tmp_path / "h.csv"
    huge = "x" * (csv.field_size_limit() + 10)
    src.write_text(f"_step,actor/grad_norm,note\n1,0.5,a\n2,0.6,{huge}\n3,0.7,c\n")
    report = import_run("wandb", src, tmp_path / "run", framework="verl")
    assert [(i.where, i.problem) for i in report.issues] == [("h.csv:3", "malformed")]
    assert "field larger than field limit" in report.issues[0].detail
    assert _grad_norms(tmp_path / "run") == {1: 0.5, 3: 0.7}


def test_a_200_mb_line_with_8_8m_keys_is_skipped_unread_in_bounded_memory(tmp_path):
    src = tmp_path / "m.jsonl"
    with src.open("w") as fh:
        fh.write(_good(1))
        fh.write('{"step": 2, "data": {')
        chunk = ",".join(f'"k{i}":1' for i in range(100_000)) + ","
        n = 0
        while n < 8_800_000:  # ~200 MB, 8.8M keys
            fh.write(chunk.replace('"k', f'"metric/k{n}_'))
            n += 100_000
        fh.write('"end": 1}}\n')
        fh.write(_good(3))
    assert src.stat().st_size > 200_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = import_run("verl", src, tmp_path / "run")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert [(i.where, i.problem) for i in report.issues] == [("m.jsonl:2", "oversized")]
    assert "skipped unread" in report.issues[0].detail
    assert _grad_norms(tmp_path / "run") == {1: 1.1, 3: 1.3}
    assert grown_kib < 200 * 1024, f"peak RSS grew by {grown_kib} KiB reading a 200 MB line"


def test_a_line_under_the_size_cap_with_too_many_keys_is_skipped(tmp_path):
    src = tmp_path / "m.jsonl"
    many = {f"k{i}": 1 for i in range(readers.MAX_KEYS + 1)}
    src.write_text(_good(1) + json.dumps({"step": 2, "data": many}) + "\n" + _good(3))
    report = import_run("verl", src, tmp_path / "run")
    assert [(i.where, i.problem) for i in report.issues] == [("m.jsonl:2", "oversized")]
    assert f"{readers.MAX_KEYS + 1} names" in report.issues[0].detail
    assert _grad_norms(tmp_path / "run") == {1: 1.1, 3: 1.3}


def _event_file(tmp_path: Path) -> Path:
    fx.write_tensorboard(tmp_path / "tb", "verl", steps=8)
    (f,) = list((tmp_path / "tb").glob("events.out.tfevents*"))
    return f


def _record_offsets(data: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, length))
        pos += 16 + length
    return out


def test_tensorboard_flipped_payload_byte_is_reported_not_a_renamed_tag(tmp_path):
    f = _event_file(tmp_path)
    data = bytearray(f.read_bytes())
    tag = b"actor/grad_norm"
    at = data.find(tag, data.find(tag) + 1)  # the second step's grad-norm record
    data[at + 6] ^= 0x01  # "actor/grad_norm" -> "actor/gsad_norm": a valid protobuf, a different name
    f.write_bytes(bytes(data))
    report = import_run("verl", tmp_path / "tb", tmp_path / "run")
    assert [i.problem for i in report.issues] == ["corrupt"]
    assert "payload fails its CRC" in report.issues[0].detail
    assert not [n for n in report.unmapped if "gsad" in n]
    norms = _grad_norms(tmp_path / "run")
    # step 2 lost its grad norm, visibly (the report says so); every other step kept its own
    assert norms[2] is None and all(norms[s] is not None for s in (1, 3, 4, 5, 6, 7, 8))


def test_tensorboard_corrupted_length_is_reported_and_reading_resumes(tmp_path):
    f = _event_file(tmp_path)
    data = bytearray(f.read_bytes())
    recs = _record_offsets(bytes(data))
    pos, length = recs[len(recs) // 2]
    struct.pack_into("<Q", data, pos, length + 3)  # a length that still fits in the file
    f.write_bytes(bytes(data))
    report = import_run("verl", tmp_path / "tb", tmp_path / "run")
    assert [i.problem for i in report.issues] == ["corrupt"]
    assert "length fails its CRC" in report.issues[0].detail
    assert report.steps == (1, 8)  # records after the damaged one are read again
    with rlobs.open_run(tmp_path / "run") as rec:
        names = {r[0] for r in rec.sql("SELECT DISTINCT name FROM scalar").fetchall()}
    assert all(n in fx.verl_metrics(1) or n.startswith(("val/", "rlobs/")) for n in names), names
