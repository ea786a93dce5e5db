"""Shared fixtures: a fresh run directory and a recorder that is always shut down; and how the suite splits across
pytest-xdist workers when run with ``-n N --dist loadgroup`` (README's test command and CI): a test file is a group,
and the modules marked ``heavy`` (a Ray cluster, vLLM engines, trainer_ref processes) take a slot that only one
worker holds at a time, so two such stacks never share the machine's memory."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import uuid
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


class HeavySlot:
    """The one slot for a heavy stack under pytest-xdist: an exclusive ``flock`` on a file named after the test run.
    A worker takes it before the first test of a heavy group (a file marked ``heavy``, or the shared trainer_ref
    stack's group) and gives it back after the group's last test, once the group's fixtures (and the shared stack:
    ``at_group_end``) are torn down. Two Ray + vLLM stacks at once took the 24 GB machine to 1.3 GB free (6 Dec
    2026, two workers, no slot); one at a time, the other worker runs the light tests beside it. It is taken outside
    pytest-timeout's clock (the wait for the other worker's group is not the test's time). Serially (no xdist) it
    does nothing."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.at_group_end: dict[str, list] = {}  # group -> callables to run before the slot is given back

    @staticmethod
    def path(run: str) -> Path:
        return Path(tempfile.gettempdir()) / f"rlobs-tests-heavy-{run}.lock"

    def acquire(self, config: pytest.Config) -> None:
        run = getattr(config, "workerinput", {}).get("testrunuid")
        if run is None or self.fd is not None:
            return  # not an xdist worker (nothing runs beside it), or already held
        fd = os.open(self.path(run), os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd

    def release(self, group: str) -> None:
        for stop in self.at_group_end.pop(group, []):
            stop()
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


HEAVY = HeavySlot()


def pytest_configure(config: pytest.Config) -> None:
    """The controller of an xdist run names the run itself, so that it can remove the slot's file at the end."""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "testrunuid", "") is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    run = getattr(config.option, "testrunuid", None)
    if run and not hasattr(config, "workerinput"):  # the controller, after every worker has ended
        HeavySlot.path(run).unlink(missing_ok=True)


def group_of(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark and mark.args else item.nodeid.split("::", 1)[0]


def _heavy(item: pytest.Item) -> bool:
    return item.get_closest_marker("heavy") is not None or group_of(item) == STACK_GROUP


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    heavy = _heavy(item)
    if heavy:
        HEAVY.acquire(item.config)
    yield
    if heavy and (nextitem is None or group_of(nextitem) != group_of(item)):
        HEAVY.release(group_of(item))
