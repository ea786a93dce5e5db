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
