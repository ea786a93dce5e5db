"""Shared fixtures: a fresh run directory and a recorder that is always shut down."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import rlobs


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def recorder(run_dir: Path):
    rec = rlobs.init(run_dir, component="trainer", rank=0, memory=True, prometheus=False)
    yield rec
    rlobs.shutdown()


def have(binary: str) -> bool:
    return shutil.which(binary) is not None
