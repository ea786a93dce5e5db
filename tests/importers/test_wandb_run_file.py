"""`rlobs import wandb` on runs written by the real wandb SDK (offline mode): the run-<id>.wandb file is read
with wandb's own protobuf definitions, every logged value lands in the record, the doctor diagnoses it, and
a damaged or cut-off file is reported as such."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from typer.testing import CliRunner

import rlobs
from rlobs.cli import app
from rlobs.importers import TABLES, ImportFailed, import_run
from tests.importers import fixtures as fx
from tests.importers.test_importers import assert_nothing_lost

pytest.importorskip("wandb")


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    return fx.write_wandb_sdk_run(tmp_path_factory.mktemp("wb"), "verl", steps=40)


def test_a_real_offline_wandb_run_imports_and_is_diagnosed(verl_run, tmp_path):
    (run_file,) = verl_run.glob("run-*.wandb")
    assert run_file.stat().st_size > 32768  # several LevelDB blocks: records split across blocks are read whole
    res = CliRunner().invoke(app, ["import", "wandb", str(verl_run), "--out", str(tmp_path / "run"), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert (report["framework"], report["source_format"], report["steps"]) == ("verl", "wandb-run-file", [1, 40])
    assert report["issues"] == [] and report["rows"] == 40
    assert report["mapped"]["actor/grad_norm"] == "train_step.grad_norm"
    expected = {s: fx.verl_metrics(s) for s in range(1, 41)}
    assert_nothing_lost(tmp_path / "run", TABLES["verl"], expected)
    with rlobs.open_run(tmp_path / "run") as rec:  # wandb's own bookkeeping is kept as scalars
        names = {n for (n,) in rec.sql("SELECT DISTINCT name FROM scalar").fetchall()}
    assert {"_runtime", "_timestamp"} <= names
    doc = CliRunner().invoke(app, ["doctor", str(tmp_path / "run"), "--json"])
    findings = json.loads(doc.stdout)["findings"]
    spikes = [f for f in findings if f["rule"] == "grad-norm-spike"]
    # severity from impact: an unclipped spike the run absorbed is a warning (critical needs a consequence)
    assert [(f["first_step"], f["severity"]) for f in spikes] == [(fx.SPIKE_STEP, "warning")]
    assert doc.exit_code == 1


def test_the_wandb_folder_above_the_run_and_the_run_file_itself_also_import(verl_run, tmp_path):
    (run_file,) = verl_run.glob("run-*.wandb")
    assert import_run("wandb", verl_run.parent, tmp_path / "a").rows == 40  # wandb/
    assert import_run("verl", run_file, tmp_path / "b").rows == 40  # the file, framework named
    assert import_run("verl", verl_run, tmp_path / "c").source_format == "wandb-run-file"


def _chunk_offsets(data: bytes) -> list[tuple[int, int, int]]:
    out, pos = [], 7
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0:
            pos += left
            continue
        out.append((pos, length, kind))
        pos += 7 + length
    return out


def test_a_flipped_byte_is_reported_and_only_its_record_is_lost(verl_run, tmp_path):
    (run_file,) = verl_run.glob("run-*.wandb")
    data = bytearray(run_file.read_bytes())
    at = data.find(b"actor/grad_norm", len(data) // 2)
    data[at + 6] ^= 0x01  # a different, valid metric name if nothing checked the CRC
    damaged = tmp_path / "run-x.wandb"
    damaged.write_bytes(bytes(data))
    report = import_run("wandb", damaged, tmp_path / "run", framework="verl")
    assert [i.problem for i in report.issues] == ["corrupt"] and "CRC" in report.issues[0].detail
    assert not [n for n in report.unmapped if "grad_morm" in n or "frad" in n]
    assert report.rows >= 39 and report.steps == (1, 40)  # at most the damaged row is lost, and visibly


def test_a_damaged_chunk_length_skips_to_the_next_block_and_says_so(verl_run, tmp_path):
    (run_file,) = verl_run.glob("run-*.wandb")
    data = bytearray(run_file.read_bytes())
    pos, _length, _kind = _chunk_offsets(bytes(data))[5]
    struct.pack_into("<H", data, pos + 4, 40000)  # longer than a block
    damaged = tmp_path / "run-y.wandb"
    damaged.write_bytes(bytes(data))
    report = import_run("wandb", damaged, tmp_path / "run", framework="verl")
    assert report.issues and report.issues[0].problem == "corrupt"
    assert "chunk header damaged" in report.issues[0].detail
    assert report.steps[1] == 40  # later blocks are read again


def test_a_run_cut_off_mid_record_keeps_every_whole_row(verl_run, tmp_path):
    (run_file,) = verl_run.glob("run-*.wandb")
    data = run_file.read_bytes()
    chunks = _chunk_offsets(data)
    pos, length, _ = chunks[len(chunks) // 2]
    cut = tmp_path / "run-z.wandb"
    cut.write_bytes(data[: pos + 7 + length // 2])
    report = import_run("wandb", cut, tmp_path / "run", framework="verl")
    assert [i.problem for i in report.issues] == ["truncated"]
    assert 0 < report.rows < 40


def test_not_a_wandb_file_and_crc_of_the_real_format(tmp_path, verl_run):
    (run_file,) = verl_run.glob("run-*.wandb")
    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    pos, length, kind = _chunk_offsets(data)[0]
    crc = struct.unpack_from("<I", data, pos)[0]  # zlib CRC32 of type byte + data, unmasked (checked here)
    assert crc == zlib.crc32(data[pos + 7:pos + 7 + length], zlib.crc32(bytes([kind])))
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(b":W&B\xe1\xbe\x00" + b"\x01" * 20)
    with pytest.raises(ImportFailed, match="no history rows"):
        import_run("wandb", bad, tmp_path / "run")


def _frame(records: list[bytes], start: int = 7) -> bytes:
    """LevelDB-log framing of ``records`` as wandb writes it (after the 7-byte file header)."""
    out, pos = bytearray(), start
    for rec in records:
        first, at = True, 0
        view = memoryview(rec)
        while True:
            left = 32768 - pos % 32768
            if left < 7:
                out += b"\x00" * left
                pos += left
                continue
            n = min(len(rec) - at, left - 7)
            last = at + n == len(rec)
            kind = (1 if last else 2) if first else (4 if last else 3)
            body = bytes(view[at:at + n])
            at += n
            out += struct.pack("<IHB", zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF, n, kind) + body
            pos += 7 + n
            first = False
            if last:
                break
    return bytes(out)


def test_a_record_over_64_mib_is_skipped_and_the_next_row_still_read(tmp_path):
    from wandb.proto import wandb_internal_pb2 as pb

    def row(step: int, extra: str = "") -> bytes:
        r = pb.Record()
        for k, v in (("_step", str(step)), ("actor/grad_norm", "0.5")) + ((("blob", json.dumps(extra)),) if extra else ()):
            item = r.history.item.add()
            item.nested_key.append(k)
            item.value_json = v
        return r.SerializeToString()

    f = tmp_path / "run-big.wandb"
    f.write_bytes(b":W&B\xe1\xbe\x00" + _frame([row(1), row(2, "x" * (70 * 1024 * 1024)), row(3)]))
    report = import_run("wandb", f, tmp_path / "run", framework="verl")
    assert [i.problem for i in report.issues] == ["oversized"]
    assert report.rows == 2 and report.steps == (1, 3)
