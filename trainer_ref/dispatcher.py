"""The separate_async dispatcher: a thread that keeps the generator fed and moves finished groups
through the graders into the bounded ``graded`` queue the trainer loop consumes.

One round: look for restarted actors, submit new groups while admission allows (dispatched but not
consumed under ``(max_staleness + 1) * groups_per_step``, the queue and the backlog a checkpoint or resume carried
over counted; queue under ``queue_capacity``), poll the
generator for finished groups and send them to a grader, collect finished gradings into the queue.
On ``stop`` it drains: everything dispatched ends up graded in the orchestrator's buffer (checkpointable).
A grading lost to a grader death is sent again, up to ``MAX_GRADE_ATTEMPTS``; then its groups are
dropped (``grader_error``), never lost. All state below is this thread's, except ``in_flight``
(read by nobody else, updated under ``lock``), ``error`` (read by the trainer loop) and ``backlog`` (the trainer
loop's: this thread only reads its length).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from trainer_ref import faults, telemetry
from trainer_ref.records import Group
from trainer_ref.recovery import Recovery, actor_errors

if TYPE_CHECKING:
    from collections import deque

    from trainer_ref.orchestrator import Orchestrator

MAX_GRADE_ATTEMPTS = 5  # gradings of one batch lost to grader deaths before its groups are dropped
CHECK_EVERY_S = 0.5  # how often the actors' incarnations are asked for


@dataclass
class Grading:
    """One grading call in flight: its result ref, the groups, the grader it went to, the attempt."""

    ref: Any
    groups: list[Group]
    grader: int
    attempt: int = 0


class Dispatcher:
    def __init__(self, orch: "Orchestrator", recovery: Recovery, graded: "queue.Queue[Group]",
                 backlog: "deque[Group]") -> None:
        self.orch, self.recovery, self.graded = orch, recovery, graded
        # graded groups carried over from before a checkpoint or resume, consumed before the queue: dispatched and
        # not yet consumed, so they count against max_outstanding like the queue does
        self.backlog = backlog
        self.gen = orch.gen
        cfg = orch.cfg
        self.batch, self.capacity = cfg.groups_per_step, cfg.queue_capacity
        self.max_outstanding = (cfg.max_staleness + 1) * cfg.groups_per_step
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = 0  # groups dispatched and not yet graded into the queue
        self.error: BaseException | None = None
        self.sent: dict[str, Group] = {}  # group id -> group on the generator, not yet polled back
        self.grading: list[Grading] = []
        self.gen_seen: str | None = None  # the generator incarnation our ``sent`` groups live on
        self.last_check = 0.0
        self.asked: dict[int, Any] = {}  # actor index (-1: generator) -> pending incarnation() call
        self.thread = threading.Thread(target=self._main, daemon=True, name="dispatcher")

    # ----- the thread -------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float = 600) -> None:
        self.stop.set()
        self.thread.join(timeout=timeout)

    def _main(self) -> None:
        import ray

        try:
            self.recovery.baseline()
            self.gen_seen = self.recovery.gen_inc
            while not self.stop.is_set():
                self._check_incarnations()
                self._dispatch()
                self._received(self._gen_call(lambda: ray.get(self.gen.poll.remote(0, 0.05))))
                self._collect(0, into_buffer=False)
                telemetry.on_queue("generator_inflight", self.in_flight, self.max_outstanding)
            while self.in_flight > 0:  # drain into the buffer
                self._check_incarnations()
                wait = 0.2 if self.sent else 0
                self._received(self._gen_call(lambda w=wait: ray.get(self.gen.poll.remote(0, w))))
                self._collect(0.2, into_buffer=True)
        except Exception as e:  # surfaced in the trainer loop
            self.error = e

    def _dispatch(self) -> None:
        """Submit new groups while admission allows."""
        import ray

        limit = faults.max_outstanding(self.orch.fault, self.orch.step, self.max_outstanding, self.capacity)
        with self.lock:
            room = min(limit - self.in_flight - self.graded.qsize() - len(self.backlog), self.batch)
        if room <= 0:
            return
        groups = self.orch.next_groups(room)
        with self.lock:
            self.in_flight += len(groups)
        self.sent.update((g.group_id, g) for g in groups)
        reqs = [g.request() for g in groups]
        self._gen_call(lambda: ray.get(self.gen.submit.remote(reqs)))  # lost ones: resubmitted

    # ----- generator ------------------------------------------------------------------------------
    def _resubmit_lost(self, force: bool = False) -> None:
        """After a generator restart (or any failed call: a lost poll reply took its groups with it):
        submit again the groups the generator does not hold."""
        import ray

        if self.gen_seen == self.recovery.gen_inc and not force:
            return
        known = set(ray.get(self.gen.known_groups.remote()))
        lost = [g for gid, g in self.sent.items() if gid not in known]
        if lost:
            ray.get(self.gen.submit.remote([g.request() for g in lost]))
        self.recovery.resubmitted(len(lost))
        self.gen_seen = self.recovery.gen_inc

    def _gen_call(self, fn: Callable[[], Any]) -> Any:
        """fn() against the generator; on a failure: recover it (a restarted one is re-synced), resubmit
        what it lost, and return None (the call itself is not repeated)."""
        for attempt in range(4):
            try:
                self._resubmit_lost(force=attempt > 0)
                return fn() if attempt == 0 else None
            except actor_errors() as e:
                self.recovery.ensure_generator(type(e).__name__)
        raise RuntimeError("the generator kept failing during its recovery")

    def _check_incarnations(self) -> None:
        """A death between two calls is seen only here: a new incarnation answers (or the call fails).
        Non-blocking: a busy grader answers on a later round."""
        import ray

        if self.asked:
            ready, _ = ray.wait(list(self.asked.values()), num_returns=len(self.asked), timeout=0)
            ready_set = set(ready)
            for k, ref in [(k, r) for k, r in self.asked.items() if r in ready_set]:
                del self.asked[k]
                try:
                    inc = ray.get(ref)
                except actor_errors() as e:
                    inc = type(e).__name__
                cause = "new incarnation" if ":" in inc else inc
                if k < 0 and inc != self.recovery.gen_inc:
                    self.recovery.ensure_generator(cause)
                    self._resubmit_lost()
                elif k >= 0 and inc != self.recovery.grader_inc.get(k):
                    self.recovery.ensure_grader(k, cause)
        if time.time() - self.last_check >= CHECK_EVERY_S:
            self.last_check = time.time()
            for k, a in [(-1, self.gen), *self.recovery.pooled_graders()]:
                if k not in self.asked:
                    self.asked[k] = a.incarnation.remote()

    # ----- graders --------------------------------------------------------------------------------
    def _received(self, done: list[dict[str, Any]] | None) -> None:
        """Finished groups polled from the generator go to the next grader."""
        groups = [Group.from_dict(d) for d in done or [] if self.sent.pop(d["group_id"], None) is not None]
        if groups:
            self.orch.mark_generated(groups)
            i = self.orch.next_grader()
            self.grading.append(Grading(self.orch.grade_on(groups, i), groups, i))

    def _collect(self, timeout: float, into_buffer: bool) -> None:
        """Finished gradings: rewards attached, kept groups into the queue (the buffer when draining)."""
        import ray

        if not self.grading:
            return
        ready, _ = ray.wait([x.ref for x in self.grading], num_returns=len(self.grading), timeout=timeout)
        ready_set = set(ready)
        for entry in [x for x in self.grading if x.ref in ready_set]:
            self.grading.remove(entry)
            try:
                res = ray.get(entry.ref)
            except actor_errors() as e:  # the grader died: its results are gone, grade again
                self.recovery.ensure_grader(entry.grader, type(e).__name__)
                if self._regrade(entry):
                    continue
                res = None
            for g in self.orch.attach_rewards(entry.groups, res) if res is not None else []:
                self._place(g, into_buffer)
            with self.lock:
                self.in_flight -= len(entry.groups)

    def _regrade(self, entry: Grading) -> bool:
        """Send a lost grading again; after ``MAX_GRADE_ATTEMPTS`` drop its groups with a reason (False)."""
        if entry.attempt + 1 < MAX_GRADE_ATTEMPTS:
            self.recovery.counts["regraded_groups"] += len(entry.groups)
            j = self.orch.next_grader()
            self.grading.append(Grading(self.orch.grade_on(entry.groups, j), entry.groups, j, entry.attempt + 1))
            return True
        for g in entry.groups:  # every grader died under it: dropped with a reason, not lost
            self.recovery.counts["grader_lost_samples"] += len(g.samples)
            self.orch.admission.drop(g, "grader_error")
        return False

    def _place(self, g: Group, into_buffer: bool) -> None:
        """Into the bounded queue (blocking while it is full); when stopping, into the buffer instead."""
        while not into_buffer and not self.stop.is_set():
            try:
                self.graded.put(g, timeout=0.1)
                return
            except queue.Full:
                continue
        self.orch.buffer.append(g)  # stopping: kept for the checkpoint instead of lost
