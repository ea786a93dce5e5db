"""The three modes' training loops, each readable top to bottom (``orch`` is the ``Orchestrator``).

* ``run_sync``: generate a batch, grade it, train, push the weights; repeat.
* ``run_colocate_async``: the next batch generates with the current weights while this one trains.
* ``run_separate_async``: a ``Dispatcher`` thread fills the graded queue; this loop consumes it.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from trainer_ref import telemetry
from trainer_ref.dispatcher import Dispatcher
from trainer_ref.records import Group

if TYPE_CHECKING:
    from trainer_ref.orchestrator import Orchestrator


def run_sync(orch: Orchestrator, end: int) -> None:
    """Generate a batch, grade it, train on it, push the weights; repeat."""
    B = orch.cfg.groups_per_step
    while orch.step < end:
        t0 = time.perf_counter()
        batch = orch.take_from_buffer(B)
        while len(batch) < B:
            with telemetry.span("generate", step=orch.step):
                done = orch.generate(orch.next_groups(B - len(batch)))
            batch += orch.attach_rewards(done, orch.rewards_for(done))
        out = orch.train_on(batch, time.perf_counter() - t0)
        orch.sync_weights()
        orch.finish_step(out)


def run_colocate_async(orch: Orchestrator, end: int) -> None:
    """The next batch generates with the current weights while the trainer trains on this one
    (one-step off-policy); the weights are pushed once both are done."""
    import ray

    B = orch.cfg.groups_per_step
    def submit() -> Any:
        return orch.gen.generate.remote([g.request() for g in orch.next_groups(B)])

    pending = submit() if not orch.buffer else None
    carried = 0.0  # the trainer's idle time after its step, waiting for the next step's batch
    while orch.step < end:
        t0 = time.perf_counter()
        batch = orch.take_from_buffer(B)
        if len(batch) < B:
            done = orch.generated(ray.get(pending if pending is not None else submit()))
            batch += orch.attach_rewards(done, orch.rewards_for(done))
            pending = None
        wait = carried + time.perf_counter() - t0
        if orch.step + 1 < end:  # next batch generates with the current weights while we train
            pending = submit()
        out = orch.train_on(batch[:B], wait)
        orch.buffer.extend(batch[B:])
        carried = 0.0
        if pending is not None:
            # one-step off-policy: finished under the old weights. The trainer is idle from here until that
            # batch is generated and graded: that is the next step's data wait (a slow generator shows up
            # there, as it does in the other modes), not a gap no phase accounts for
            t_wait = time.perf_counter()
            done = orch.generated(ray.get(pending))
            orch.buffer.extend(orch.attach_rewards(done, orch.rewards_for(done)))
            carried = time.perf_counter() - t_wait
            pending = None
        orch.sync_weights(interrupt="wait")
        orch.finish_step(out)


def run_separate_async(orch: Orchestrator, end: int) -> None:
    """The dispatcher fills the graded queue; this loop takes admitted groups from it, trains, and
    pushes the weights while generation goes on. On the way out everything graded goes to the buffer."""
    B, cap = orch.cfg.groups_per_step, orch.cfg.queue_capacity
    graded: queue.Queue[Group] = queue.Queue(maxsize=cap)
    # groups graded before a resume (the checkpoint's buffer) are taken first, oldest first, from their own deque:
    # a finished run's buffer can hold more than the queue's capacity (the queue plus what was in flight), and
    # putting them into the bounded queue before anything consumes it blocked the resume for good
    backlog, orch.buffer = orch.buffer, deque()
    dispatcher = Dispatcher(orch, orch.recovery, graded, backlog)
    dispatcher.start()
    try:
        while orch.step < end:
            t0 = time.perf_counter()
            batch = _take_admitted(orch, graded, B, dispatcher, backlog)
            telemetry.on_queue("graded", graded.qsize(), cap)
            out = orch.train_on(batch, time.perf_counter() - t0)
            # engine-side stages overlap the next step; the previous sync is collected first
            orch.recovery.resilient(lambda: orch.sync_weights(wait=False))
            orch.finish_step(out)
        orch.recovery.resilient(orch.finish_sync)
    finally:
        with telemetry.pause("drain"):  # in-flight generation finishes into the buffer: no step until it has
            dispatcher.close()
        earlier = list(backlog)
        while not graded.empty():
            earlier.append(graded.get())
        orch.buffer = deque(earlier + list(orch.buffer))


def _take_admitted(orch: Orchestrator, graded: queue.Queue[Group], k: int, dispatcher: Dispatcher,
                   backlog: deque[Group]) -> list[Group]:
    batch: list[Group] = []
    while len(batch) < k:
        if dispatcher.error:
            raise RuntimeError("dispatcher failed") from dispatcher.error
        if backlog:
            g = backlog.popleft()
        else:
            try:
                g = graded.get(timeout=0.5)
            except queue.Empty:
                continue
        if orch.admit(g):
            batch.append(g)
    return batch


LOOPS = {"sync": run_sync, "colocate_async": run_colocate_async, "separate_async": run_separate_async}
