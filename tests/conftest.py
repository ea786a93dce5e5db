"""Shared fixtures: a fresh run directory and a recorder that is always shut down; and how the suite splits across
pytest-xdist workers when run with ``-n N --dist loadgroup`` (optional: CI runs it serially)."""

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


STACK_GROUP = "trainer_ref-stack"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``-n N --dist loadgroup`` a group runs whole on one worker. Each test file is a group, so a module's
    fixture (the on-call driver's six scenarios, a SmolLM2 conversion) is built once; every file with a test on the
    shared trainer_ref stack (one Ray, one vLLM engine: tests/trainer_ref/conftest.py) joins one group, so that stack
    starts once. Without xdist the marks do nothing."""
    files = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        files.setdefault(path, path)
        if "stack" in getattr(item, "fixturenames", ()):
            files[path] = STACK_GROUP
    for item in items:
        item.add_marker(pytest.mark.xdist_group(files[item.nodeid.split("::", 1)[0]]))
