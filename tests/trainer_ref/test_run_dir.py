"""A fresh run refuses a directory that holds another run (its checkpoint or finished summary):
appending to that record would show every sample of both runs as consumed twice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainer_ref import checkpoint
from trainer_ref.config import Config
from trainer_ref.run import check_run_dir, train


def _listing(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_fresh_run_into_an_old_run_dir_is_refused_before_writing(tmp_path):
    d = tmp_path / "run"
    checkpoint.write_state(d, 4, {"step": 4})
    before = _listing(d)
    with pytest.raises(ValueError, match="already holds a checkpoint.*--resume"):
        train(Config(run_dir=str(d), progress=False))
    assert _listing(d) == before  # nothing written: no record, no process files
    check_run_dir(Config(run_dir=str(d), resume=True))  # continuing it is the legal way

    done = tmp_path / "done"
    done.mkdir()
    (done / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match="finished run"):
        check_run_dir(Config(run_dir=str(done)))
    check_run_dir(Config(run_dir=str(tmp_path / "new")))  # absent or empty dirs are fine
    (tmp_path / "empty").mkdir()
    check_run_dir(Config(run_dir=str(tmp_path / "empty")))


def test_cli_reports_the_occupied_run_dir_in_one_line(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text("{}")
    p = subprocess.run([sys.executable, "-m", "trainer_ref.run", "--run-dir", str(d)], capture_output=True, check=False,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("error: run dir") and "Traceback" not in p.stderr
    bad = subprocess.run([sys.executable, "-m", "trainer_ref.run", "--mode", "bogus"], capture_output=True, check=False,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "mode='bogus'" in bad.stderr and "Traceback" not in bad.stderr
