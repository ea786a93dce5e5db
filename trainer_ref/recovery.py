"""Actor recovery (separate_async): restarted generator / graders are waited for, pointed at the run
and (the generator) re-synced.

Generator and graders are Ray actors with ``max_restarts``: a killed one comes back with its
constructor's state (a fresh vLLM engine with the initial model, nothing in flight, its recorder on
the run it was created for). The dispatcher notices (an actor error from a call, or a new
``incarnation``), and ``Recovery`` waits for the actor, points it at this run and re-pushes the
trainer's weights to a generator (else its version tag would not describe the weights it samples
with). Resubmitting and re-grading the lost work is the dispatcher's part.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from trainer_ref import telemetry
from trainer_ref.config import Config


def actor_errors() -> tuple[type[BaseException], ...]:
    """What a call to a dead or restarting Ray actor raises (ActorDiedError and ActorUnavailableError
    are RayActorErrors; listed for the reader)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)


class Recovery:
    """The generator / grader instances this run synced and pointed at its record, one RLock
    serialising every weight push, and what each restart cost (``restarts``, ``counts``).

    ``resync(interrupt)`` pushes the trainer's current weights (the orchestrator's ``sync_weights``);
    ``forget_pending()`` drops a weight update sent to a dead instance; ``step()`` is the current step."""

    def __init__(self, cfg: Config, hashes: dict[str, str], gen: Any, graders: list[Any],
                 resync: Callable[[str], dict[str, Any] | None], forget_pending: Callable[[], None],
                 step: Callable[[], int]) -> None:
        self.cfg, self.hashes, self.gen, self.graders = cfg, hashes, gen, graders
        self._resync, self._forget_pending, self._step = resync, forget_pending, step
        self.lock = threading.RLock()
        self.gen_inc: str | None = None
        self.grader_inc: dict[int, str] = {}
        self.restarts: list[dict[str, Any]] = []
        self.counts = {"resubmitted_groups": 0, "regraded_groups": 0, "grader_lost_samples": 0}

    def pooled_graders(self) -> list[tuple[int, Any]]:
        """Grader actors of their own (a colocated grader lives in the generator)."""
        return [(i, w) for i, w in enumerate(self.graders) if w is not self.gen]

    def wait_ready(self, actor: Any) -> str:
        """Block until ``actor`` answers (while Ray restarts it, calls fail); its incarnation."""
        import ray
        from ray.exceptions import GetTimeoutError

        deadline = time.time() + self.cfg.restart_timeout_s
        while True:
            try:
                return ray.get(actor.incarnation.remote(), timeout=max(1.0, min(30.0, deadline - time.time())))
            except (*actor_errors(), GetTimeoutError) as e:
                if time.time() > deadline:
                    raise RuntimeError(f"actor not back after {self.cfg.restart_timeout_s:.0f} s "
                                       f"(max_restarts={self.cfg.max_restarts}): {type(e).__name__}") from e
                time.sleep(0.2)

    def baseline(self) -> None:
        """The instances this run synced and pointed at its record (taken when the dispatcher starts)."""
        import ray

        if self.gen_inc is None:
            self.gen_inc = ray.get(self.gen.incarnation.remote())
        for i, w in self.pooled_graders():
            if i not in self.grader_inc:
                self.grader_inc[i] = ray.get(w.incarnation.remote())

    def _note(self, component: str, rank: int, old: str | None, new: str, cause: str, wait_s: float,
              **extra: Any) -> None:
        """The restart in the record: an ``incident`` (fault ``actor_restart:<component>``) and a heartbeat."""
        r = {"component": component, "rank": rank, "step": self._step(), "old": old, "new": new, "cause": cause,
             "wait_s": round(wait_s, 3), **extra}
        self.restarts.append(r)
        telemetry.heartbeat("recover", f"{component} r{rank} restarted ({cause}); back after {wait_s:.1f}s")
        telemetry.SWITCH.emit("incident", fault=f"actor_restart:{component}", onset_step=int(self._step()),
                              magnitude=float(wait_s), detail=telemetry.to_json(r))

    def _point_at_run(self, actor: Any) -> None:
        import ray

        ray.get([actor.set_run.remote(self.cfg.run_dir, self.cfg.to_dict(), self.hashes),
                 actor.set_telemetry.remote(telemetry.enabled())])

    def ensure_generator(self, cause: str) -> bool:
        """If the generator is not the instance this run synced: wait for it, point it at this run and
        push the trainer's current weights (interrupt ``abort``). True when this call recovered it."""
        with self.lock:
            t0 = time.time()
            inc = self.wait_ready(self.gen)
            if inc == self.gen_inc:
                return False
            self._point_at_run(self.gen)
            self._forget_pending()  # an update sent to the dead instance died with it
            for _ in range(3):
                try:
                    rep = self._resync("abort")
                    break
                except actor_errors():  # died again while loading: wait for the next instance
                    self._forget_pending()
                    inc = self.wait_ready(self.gen)
                    self._point_at_run(self.gen)
            else:
                raise RuntimeError("generator died during every re-sync after its restart")
            old, self.gen_inc = self.gen_inc, inc
            self._note("generator", 0, old, inc, cause, time.time() - t0, resynced_version=(rep or {}).get("version"))
            return True

    def ensure_grader(self, i: int, cause: str) -> bool:
        """Wait for grader ``i`` and point a restarted one at this run. True when it had restarted."""
        w = self.graders[i]
        if w is self.gen:  # colocated graders live in the generator
            return self.ensure_generator(cause)
        t0 = time.time()
        inc = self.wait_ready(w)
        if inc == self.grader_inc.get(i):
            return False
        self._point_at_run(w)
        old, self.grader_inc[i] = self.grader_inc.get(i), inc
        self._note("grader", i, old, inc, cause, time.time() - t0)
        return True

    def resilient(self, call: Callable[[], Any]) -> Any:
        """The trainer loop's weight push / collect, tolerating a generator death: the recovery re-pushes
        the trainer's current weights, then the call is repeated (at worst the same version twice)."""
        for _ in range(3):
            try:
                with self.lock:
                    return call()
            except actor_errors() as e:
                with self.lock:
                    self._forget_pending()
                self.ensure_generator(f"weight sync: {type(e).__name__}")
        raise RuntimeError("weight sync failed across three generator restarts")

    def resubmitted(self, n: int) -> None:
        """``n`` groups submitted again after a generator restart (counted on the last restart too)."""
        self.counts["resubmitted_groups"] += n
        if self.restarts:
            self.restarts[-1]["resubmitted_groups"] = self.restarts[-1].get("resubmitted_groups", 0) + n
