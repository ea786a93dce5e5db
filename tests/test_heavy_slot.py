"""The suite's heavy slot (tests/conftest.py): under pytest-xdist two workers never hold it at once, a worker's
second heavy group re-enters its own slot, and the callables a group registers run before the slot is given
back. Real ``flock`` between real processes, as two xdist workers take it."""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import time
import types
import uuid
from pathlib import Path

import pytest

from .conftest import HeavySlot


def _config(run: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(workerinput={"testrunuid": run})


def _hold(run: str, seconds: float, log) -> None:
    slot = HeavySlot()
    slot.acquire(_config(run))
    log.put(("in", time.monotonic()))
    time.sleep(seconds)
    log.put(("out", time.monotonic()))
    slot.release("g")


@pytest.fixture
def run():
    run = uuid.uuid4().hex
    yield run
    HeavySlot.path(run).unlink(missing_ok=True)


def test_two_workers_never_hold_the_slot_at_once(run: str):
    ctx = mp.get_context("spawn")
    log = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(run, 1.0, log)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    events = sorted((log.get(timeout=5) for _ in range(4)), key=lambda e: e[1])
    assert [e[0] for e in events] == ["in", "out", "in", "out"]  # the second waited for the first to give it back
    assert events[2][1] - events[0][1] >= 0.9


def test_a_group_end_runs_its_stops_then_frees_the_slot_and_serial_runs_take_nothing(run: str):
    held_while_stopping = []

    def still_held() -> None:  # another open of the lock file cannot take it while the group stops
        fd = os.open(HeavySlot.path(run), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held_while_stopping.append(False)
        except BlockingIOError:
            held_while_stopping.append(True)
        finally:
            os.close(fd)

    a, b = HeavySlot(), HeavySlot()
    a.acquire(_config(run))
    a.acquire(_config(run))  # re-entered by the same worker: still one lock
    a.at_group_end["g"] = [still_held]
    a.release("g")
    assert held_while_stopping == [True] and a.fd is None and "g" not in a.at_group_end
    b.acquire(_config(run))  # free again: taken at once
    assert b.fd is not None
    b.release("g")
    serial = HeavySlot()
    serial.acquire(types.SimpleNamespace())  # no xdist worker input: nothing runs beside it
    assert serial.fd is None


def test_the_shared_stack_is_the_first_group_a_worker_runs(pytester: pytest.Pytester, tmp_path, monkeypatch):
    """Under ``-n 2 --dist loadgroup`` the stack's group goes out first (``_stack_first``; xdist's own order, largest
    group first, would give both workers a light group and the stack third), so the heavy slot is taken at once.
    A real xdist run of a small suite with this suite's conftest: two light groups larger than the stack's."""
    pytester.makeconftest((Path(__file__).with_name("conftest.py")).read_text()
                          + "\n\n@pytest.fixture\ndef stack():\n    return 'stack'\n")
    monkeypatch.setenv("RLOBS_TESTS_BUILD_FIRST", "0")  # its stack is a name: nothing to build for it
    log = tmp_path / "order.log"
    body = ("import os\nimport pytest\n\n"
            "@pytest.mark.parametrize('i', range({n}))\n"
            "def test_x(i{fixture}):\n"
            "    with open({log!r}, 'a') as f:\n"
            "        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + __name__ + '\\n')\n")
    pytester.makepyfile(
        test_a_light=body.format(n=5, fixture="", log=str(log)),
        test_b_light=body.format(n=4, fixture="", log=str(log)),
        test_c_stack=body.format(n=2, fixture=", stack", log=str(log)))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=11)
    runs = [line.split() for line in log.read_text().splitlines()]
    worker = next(w for w, mod in runs if mod == "test_c_stack")
    assert [mod for w, mod in runs if w == worker][0] == "test_c_stack", runs
