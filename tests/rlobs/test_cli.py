from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

import rlobs
from rlobs import exitcodes
from rlobs.cli import app


def _make_run(run_dir):
    rec = rlobs.init(run_dir, component="trainer", prometheus=False)
    for step in range(3):
        rec.emit("train_step", step=step, loss=1.0 / (step + 1))
    rlobs.shutdown()


def test_info_json(run_dir):
    _make_run(run_dir)
    result = CliRunner().invoke(app, ["info", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["kinds"] == {"train_step": 3, "manifest": 1}
    assert data["events"] == 4 and data["schema_version"] == rlobs.SCHEMA_VERSION and data["truncated"] is False
    assert [p["status"] for p in data["processes"]] == ["ended"]


def test_info_table_via_the_installed_entry_point(run_dir):
    _make_run(run_dir)
    out = subprocess.run([sys.executable, "-m", "rlobs", "info", str(run_dir)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "train_step" in out.stdout and "all segments read in full" in out.stdout


def test_info_on_a_bad_path_is_a_clear_error_not_a_traceback(tmp_path):
    result = CliRunner().invoke(app, ["info", str(tmp_path / "missing")])
    assert result.exit_code == exitcodes.INPUT
    assert "does not exist" in result.output and "Traceback" not in result.output


def test_errors_are_one_unwrapped_line_when_stderr_is_not_a_terminal(tmp_path):
    # a long path: rich would hard-wrap it at 80 columns; scripts grep the message on one line
    missing = tmp_path / ("a-rather-long-directory-name-" * 4) / "missing-run"
    out = subprocess.run([sys.executable, "-m", "rlobs", "info", str(missing)], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == exitcodes.INPUT
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(missing) in lines[0], out.stderr
    assert "\x1b[" not in out.stderr  # no styling codes in a pipe


def test_version_and_distinct_exit_codes(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rlobs", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"rlobs {rlobs.__version__}"
    bad_flag = subprocess.run([sys.executable, "-m", "rlobs", "info", "--frobnicate"], capture_output=True,
                              text=True, timeout=60)
    assert bad_flag.returncode == exitcodes.USAGE and "frobnicate" in bad_flag.stderr
    missing_arg = CliRunner().invoke(app, ["info"])
    assert missing_arg.exit_code == exitcodes.USAGE
    # codes of the doctor's verdicts stay apart from the error codes
    assert len({exitcodes.OK, exitcodes.WARNINGS, exitcodes.CRITICAL, exitcodes.USAGE, exitcodes.INPUT,
                exitcodes.UNAVAILABLE}) == 6
