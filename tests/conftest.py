"""Shared fixtures: a fresh run directory and a recorder that is always shut down; and how the suite splits across
pytest-xdist workers when run with ``-n N --dist loadgroup`` (README's test command and CI): a test file is a group,
and the modules marked ``heavy`` (a Ray cluster, vLLM engines, trainer_ref processes) take a slot that only one
worker holds at a time, so two such stacks never share the machine's memory."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

import rlobs

# Ray starts its workers at niceness 15 (RAY_worker_niceness; for the raylet and the driver's sake on a busy node), so
# beside the other xdist worker's light tests (niceness 0) a heavy group's actors (vLLM engines, trainers, graders) got
# what CPU those left: the heavy slot's groups, one after another most of the suite's time, stalled while the light
# tests ran (8 Dec 2026: the stack's group ended 512 s in whether it started at 44 s or 79 s). At 0 they share the CPUs.
# Tests that start Ray (in a worker or in a driver subprocess) inherit it.
os.environ.setdefault("RAY_worker_niceness", "0")

pytest_plugins = ["pytester"]  # tests/test_heavy_slot.py runs a small xdist suite with this conftest


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
    if hasattr(config, "workerinput"):
        _stack_first(items)
        _build_tiny_first(items)


def _stack_first(items: list[pytest.Item]) -> None:
    """Under xdist the groups go out in this order (pytest_configure turns xdist's own reordering off): the shared
    stack's group first, then the rest largest first (xdist's order, by test count). In xdist's order the first heavy
    group came 79-100 s in: both workers ran large light groups while the heavy slot, whose groups run one after
    another and are most of the suite's time, sat idle. With the stack's group first one worker takes the slot at
    once and the other runs the light tests beside it. Every worker sorts alike (xdist checks that they collected
    the same order)."""
    size = Counter(group_of(item) for item in items)
    items.sort(key=lambda item: (group_of(item) != STACK_GROUP, -size[group_of(item)]))  # stable within a group


def _build_tiny_first(items: list[pytest.Item]) -> None:
    """Under xdist, where a heavy test is selected, the tiny model the stack and the other heavy groups load is built
    (on an empty cache: CI's, a newcomer's) while the workers collect, before any test runs: one worker builds, the
    other waits on the build's lock (trainer_ref.model_build._cached), and the controller schedules nothing until
    both have collected. Alone on the machine it builds in ~37 s; built by the stack's first test beside the other
    worker's light tests it took 167 s (8 Dec 2026), at the head of the heavy slot's groups, which are most of the
    suite's time. The same build either way (same process kind, same threads): the same weights. A failed build is
    left to the test that needs it, which builds again and says why."""
    if os.environ.get("RLOBS_TESTS_BUILD_FIRST") == "0" or not any(_heavy(item) for item in items):
        return  # (0: tests/test_heavy_slot.py's small suite, whose stack needs no model)
    try:
        from trainer_ref.model_build import build_tiny

        build_tiny()
    except Exception:  # noqa: BLE001 - the stack's fixture builds it again and reports the error
        pass


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
        _slot_log("take")

    def release(self, group: str) -> None:
        for stop in self.at_group_end.pop(group, []):
            stop()
        if self.fd is not None:
            _slot_log(f"give back {group}")
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


HEAVY = HeavySlot()


def _slot_log(what: str) -> None:
    """``RLOBS_SLOT_LOG=FILE``: each worker appends when it takes the heavy slot and gives it back (time, worker,
    group): where the slot sat idle, the suite's time (README "Suite time")."""
    path = os.environ.get("RLOBS_SLOT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{time.time():.1f} {os.environ.get('PYTEST_XDIST_WORKER', '-')} {what}\n")


def pytest_configure(config: pytest.Config) -> None:
    """The controller of an xdist run names the run itself, so that it can remove the slot's file at the end, and
    hands the groups out in the order the workers collected them (``_stack_first``)."""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "testrunuid", "") is None:
        config.option.testrunuid = uuid.uuid4().hex
    if not hasattr(config, "workerinput"):
        config.option.loadscopereorder = False  # the order is ours: _stack_first


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
