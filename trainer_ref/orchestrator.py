"""The driver: runs one of the three modes over the Ray actors.

* ``sync``: dispatch a batch, wait for every completion, grade, train, sync weights, repeat.
* ``colocate_async``: the batch for step k+1 is generated (with weights v_k) while the trainer
  trains step k; weights are synced once both are done (one-step off-policy, staleness 1).
* ``separate_async``: a dispatcher thread (``trainer_ref.dispatcher``) keeps the generator fed and
  moves finished groups through the graders into a bounded queue; the trainer loop consumes from it,
  drops groups that are too stale (trainer version - dispatch version > ``max_staleness``) or too old
  (``rollout_ttl_s``), and syncs weights after every step while generation goes on (interrupting
  in-flight requests per ``interrupt``). Admission control keeps dispatched-but-unconsumed groups under
  ``(max_staleness + 1) * groups_per_step`` and the queue under ``queue_capacity``. Restarted actors
  are recovered by ``trainer_ref.recovery``.

Groups and samples are typed records (``trainer_ref.records``); drops and the staleness / TTL bounds
are ``trainer_ref.admission``'s; the sample ledger is ``probes.SampleLedger`` (``trainer_ref.ledger``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any, Callable

from trainer_ref import checkpoint, faults, modes, telemetry
from trainer_ref.admission import DROP_REASONS, Admission, check_drop_reasons  # noqa: F401 - re-exported
from trainer_ref.config import Config
from trainer_ref.dispatcher import MAX_GRADE_ATTEMPTS  # noqa: F401 - re-exported
from trainer_ref.ledger import Ledger
from trainer_ref.records import Group
from trainer_ref.recovery import Recovery, actor_errors  # noqa: F401 - re-exported
from trainer_ref.task import get_task

EVAL_SEED_OFFSET = 777_777


class Orchestrator:
    def __init__(self, cfg: Config, model_dir: str, hashes: dict[str, str], actors: dict[str, Any]) -> None:
        self.cfg, self.model_dir, self.hashes = cfg, model_dir, hashes
        self.fault = faults.from_config(cfg)
        self.gen, self.trainer, self.graders = actors["generator"], actors["trainer"], actors["graders"]
        self.trainers = list(actors.get("trainers") or [self.trainer])  # data-parallel ranks, rank 0 first
        self.step, self.version, self.cursor = 0, 0, 0
        self.ledger = Ledger()
        self.admission = Admission(cfg, self.fault, self.ledger)
        self.buffer: deque[Group] = deque()  # graded groups not yet consumed (checkpointed)
        self.history: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.eval_times: list[dict[str, Any]] = []
        self.consumed_groups: list[str] = []
        self.syncs: list[dict[str, Any]] = []
        self._pending_sync: tuple[Any, dict[str, Any], float] | None = None
        self._gi = 0
        self._produced_lock = threading.Lock()  # produced samples since the last throughput tick
        self._produced = 0  # (the dispatcher adds, the trainer loop reads and resets)
        self._tp_t: float | None = None
        self.on_step: Callable[[dict[str, Any]], None] | None = None
        self.recovery = Recovery(cfg, hashes, self.gen, self.graders, lambda i: self.sync_weights(interrupt=i),
                                 self._forget_pending_sync, lambda: self.step)

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped samples by reason."""
        return self.admission.dropped

    @property
    def restarts(self) -> list[dict[str, Any]]:
        return self.recovery.restarts

    # ----- data ------------------------------------------------------------------------------
    def next_groups(self, k: int) -> list[Group]:
        task = get_task(self.cfg.task)
        out = []
        for _ in range(k):
            out.append(Group.from_problem(task.problem(self.cfg.seed, self.cursor, self.cfg.chain_prob),
                                          self.cfg.group_size, self.cfg.seed))
            self.cursor += 1
        return out

    def generate(self, groups: list[Group]) -> list[Group]:
        """Generate ``groups`` and wait for them (sync and colocate_async)."""
        import ray

        return self.generated(ray.get(self.gen.generate.remote([g.request() for g in groups])))

    @staticmethod
    def generated(done: list[dict[str, Any]]) -> list[Group]:
        return [Group.from_dict(d) for d in done]

    # ----- grading ---------------------------------------------------------------------------
    def mark_generated(self, groups: list[Group]) -> None:
        for g in groups:
            for s in g.samples:
                self.ledger.mark(s.sample_id, g.group_id, "generated", tokens=s.tokens)

    def next_grader(self) -> int:
        i = self._gi % len(self.graders)
        self._gi += 1
        return i

    def grade_on(self, groups: list[Group], i: int) -> Any:
        """Grade on worker ``i`` (no ledger transition: a re-grade after a grader death uses it too); the
        calls are stamped with the trainer step in progress now."""
        return self.graders[i].grade.remote([s.to_dict() for g in groups for s in g.samples], time.time(), self.step)

    def rewards_for(self, groups: list[Group]) -> list[dict[str, Any]]:
        """Grade and wait for the rewards (the wait is the trainer's reward-wait time)."""
        import ray

        self.mark_generated(groups)
        ref = self.grade_on(groups, self.next_grader())
        with telemetry.probe().grader.waiting():
            return ray.get(ref)

    def audit(self, samples: list[Any]) -> None:
        """The training reward's excess over the audit grader (``cfg.audit_grader``: an exact check by default) on
        the same samples, one scalar per graded batch at the step in progress: a shaped reward's partial credit
        shrinks as the policy learns; a loophole's grows (reward hacking). Never fails the run."""
        from trainer_ref.graders import GRADERS

        fn = GRADERS.get(self.cfg.audit_grader or "")
        if fn is None or not samples:
            return
        try:
            gap = sum(s.reward - fn(s.to_dict()) for s in samples) / len(samples)
        except Exception:  # noqa: BLE001 - telemetry never breaks training
            return
        telemetry.on_scalar("grader_audit_gap", gap, step=self.step)

    def attach_rewards(self, groups: list[Group], results: list[dict[str, Any]]) -> list[Group]:
        """Rewards onto the samples; a failed grading drops its sample, a group left with fewer than two
        graded samples is dropped (GRPO needs two)."""
        by_id = {r["sample_id"]: r for r in results}
        with self._produced_lock:
            self._produced += sum(len(g.samples) for g in groups)
        telemetry.probe().throughput.produced(sum(len(g.samples) for g in groups), sum(g.tokens for g in groups))
        kept = []
        for g in groups:
            ok = []
            for s in g.samples:
                r = by_id[s.sample_id]
                if r["outcome"] == "ok":
                    s.reward = r["reward"]
                    self.ledger.mark(s.sample_id, g.group_id, "graded")
                    ok.append(s)
                else:
                    self.admission.drop(g, "grader_error", [s])
            if len(ok) >= 2:
                kept.append(g.with_samples(ok))
            else:
                self.admission.drop(g, "grader_error", ok)
        self.audit([s for g in kept for s in g.samples])
        return kept

    # ----- consumption, training, sync -------------------------------------------------------
    def admit(self, g: Group) -> bool:
        """The staleness / TTL bounds on a graded group as a whole (``Admission.admit``)."""
        return self.admission.admit(g, self.version, self.step)

    def take_from_buffer(self, k: int) -> list[Group]:
        """Up to ``k`` admitted groups from the buffer (the rest of what is taken is dropped)."""
        batch = []
        while self.buffer and len(batch) < k:
            g = self.buffer.popleft()
            if self.admit(g):
                batch.append(g)
        return batch

    def train_on(self, groups: list[Group], data_wait_s: float) -> dict[str, Any]:
        """One optimiser step on ``groups`` (every trainer rank at once); the samples are consumed."""
        import ray

        now = time.time()
        telemetry.set_context(step=self.step, version=self.version)  # consumed transitions carry this step
        stal_hist: dict[int, int] = {}
        bound = faults.max_staleness(self.fault, self.step, self.cfg.max_staleness)
        for g in groups:
            judged = self.version - g.tag(self.cfg.staleness_basis)["dispatch_version"]
            assert 0 <= judged <= bound, f"staleness {judged} beyond bound"
            for s in g.samples:
                st = self.version - s.dispatch_version  # the histogram: since dispatch, whatever the basis
                stal_hist[st] = stal_hist.get(st, 0) + 1
                self.ledger.mark(s.sample_id, g.group_id, "consumed", tokens=s.tokens, staleness=st,
                                 age_s=now - s.t_done)
            self.consumed_groups.append(g.group_id)
        with telemetry.span("train_step", step=self.step, version=self.version):
            wait = telemetry.probe().grader.take_wait()
            n = len(self.trainers)  # data parallel: whole groups per rank, every rank steps at once
            outs = ray.get([t.train_step.remote([g.to_dict() for g in groups[r::n]], self.step, data_wait_s,
                                                reward_wait_s=wait) for r, t in enumerate(self.trainers)])
            out = outs[0]  # rank 0 reports the whole step (statistics reduced over the ranks)
        # the staleness event (histogram, ages, importance stats) comes from the trainer's StalenessProbe
        self._goodput(groups, out)
        self.version = out["version"]
        out.update(staleness_hist=stal_hist, data_wait_s=data_wait_s, wall=time.time())
        self.history.append(out)
        return out

    def _goodput(self, groups: list[Group], out: dict[str, Any]) -> None:
        """Consumed tokens by fate (effective / zero advantage), aborted tokens, the throughput window."""
        flat = [(len({s.reward for s in g.samples}) == 1, s) for g in groups for s in g.samples]
        gp = telemetry.probe().goodput
        gp.add_batch([s.tokens for _, s in flat], zero_advantage=[z for z, _ in flat])
        aborted = sum(s.aborted_tokens for _, s in flat)
        if aborted:
            gp.add("aborted", aborted, 0)
        if telemetry.enabled():
            gp.emit_step(self.step)
            self._tick_throughput([s for _, s in flat], out)

    def _tick_throughput(self, samples: list[Any], out: dict[str, Any]) -> None:
        """Generator-side window seen from the driver: produced vs consumed (effective) samples, sync
        bubbles, and the staleness the generator and trainer rates predict."""
        from probes import predict_staleness

        tp = telemetry.probe().throughput
        tp.effective(len(samples))
        now = time.perf_counter()
        window = now - (self._tp_t if self._tp_t is not None else now - max(out["step_seconds"], 1e-9))
        self._tp_t = now
        with self._produced_lock:
            produced, self._produced = self._produced, 0
        gen_sps = produced / window if window > 0 else 0.0
        lat = sum(s.gen_seconds for s in samples) / max(len(samples), 1)
        pred = predict_staleness(gen_sps, len(samples) / max(out["step_seconds"], 1e-9), len(samples),
                                 generation_latency_s=lat, queue_capacity=self.cfg.queue_capacity * self.cfg.group_size,
                                 max_staleness=self.cfg.max_staleness)
        tp.tick(predicted_staleness=pred if math.isfinite(pred) else None, force=True)
    def sync_weights(self, interrupt: str | None = None, wait: bool = True) -> dict[str, Any] | None:
        """Push the trainer's weights to the generator (stages 1-5). With ``wait=False`` the
        engine-side stages run while the trainer goes on (at most one sync in flight); the report
        lands in ``self.syncs`` when ``finish_sync`` collects it."""
        import ray

        self.finish_sync()
        t0 = time.perf_counter()
        telemetry.heartbeat("sync", f"v{self.version}")
        with telemetry.probe().throughput.sync_bubble():
            meta = ray.get(self.trainer.sync_out.remote())
        ref = self.gen.update_weights.remote(meta["ref"], meta["version"], meta["fingerprints"], meta["shapes"],
                                             interrupt, handoff=meta["handoff"])
        self._pending_sync = (ref, meta, t0)
        return self.finish_sync() if wait else None

    def finish_sync(self) -> dict[str, Any] | None:
        import ray

        pending = getattr(self, "_pending_sync", None)
        if pending is None:
            return None
        self._pending_sync = None
        ref, meta, t0 = pending
        with telemetry.probe().throughput.sync_bubble():
            rep = ray.get(ref)
        tr_s = meta["put_s"] + rep["transfer_recv_s"]
        v = meta["version"]
        e2e = time.perf_counter() - t0
        telemetry.on_phase("sync", e2e)  # the boundaries' events come from the WeightSyncProbe on both sides
        if rep["mismatched"] and not faults.tolerate_mismatch(self.fault):
            raise RuntimeError(f"weight sync v{v}: engine fingerprints differ for {rep['mismatched'][:5]}")
        out = {**rep, "dump_s": meta["dump_s"], "staging_s": meta["staging_s"], "put_s": meta["put_s"],
               "transfer_s": tr_s, "end_to_end_s": e2e, "bytes": meta["bytes"]}
        self.syncs.append(out)
        return out

    def finish_step(self, out: dict[str, Any]) -> None:
        self.step += 1
        if self.cfg.eval_every and self.step % self.cfg.eval_every == 0 and self.step < self.cfg.steps:
            out["eval"] = self.evaluate()
        telemetry.on_queue("graded", len(self.buffer), self.cfg.queue_capacity)
        if self.on_step:
            self.on_step(out)

    def _forget_pending_sync(self) -> None:
        """A weight update sent to a generator that died: its reply will never come."""
        self._pending_sync = None

    # ----- evaluation ------------------------------------------------------------------------
    def evaluate(self, n_prompts: int | None = None) -> float:
        """Mean exact-match reward on held-out prompts (4 samples each), graded here."""
        from trainer_ref.graders import grade_exact

        task = get_task(self.cfg.task)
        chain_prob = self.cfg.chain_prob if self.cfg.eval_chain_prob < 0 else self.cfg.eval_chain_prob
        groups = []
        for i in range(n_prompts or self.cfg.eval_prompts):
            p = task.problem(self.cfg.seed + EVAL_SEED_OFFSET, i, chain_prob)
            groups.append(Group(group_id=f"eval{self.step}-{i}", prompt_idx=-1 - i, prompt=p.prompt,
                                answer=p.answer, n=4, seed=99_991 * (i + 1)))
        t0 = time.time()
        with telemetry.pause("eval"):
            rewards = [grade_exact(s.to_dict()) for g in self.generate(groups) for s in g.samples]
        mean = sum(rewards) / max(1, len(rewards))
        telemetry.on_scalar("eval_reward_mean", mean, step=self.step)
        self.evals.append({"step": self.step, "reward_mean": mean, "samples": len(rewards)})
        self.eval_times.append({"step": self.step, "t": t0, "seconds": time.time() - t0})  # (benches: time to target)
        return mean

    # ----- checkpoint ------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        import ray

        d = checkpoint.step_dir(self.cfg.run_dir, self.step)
        with telemetry.pause("checkpoint"):
            ray.get(self.trainer.save.remote(str(d)))
            checkpoint.write_state(self.cfg.run_dir, self.step, {
                "step": self.step, "version": self.version, "cursor": self.cursor,
                "buffer": [g.to_dict() for g in self.buffer], "ledger": self.ledger.to_json(),
                "consumed_groups": self.consumed_groups, "dropped": self.dropped, "evals": self.evals,
                "config": self.cfg.to_dict()})

    def restore(self) -> bool:
        import ray

        d = checkpoint.latest(self.cfg.run_dir)
        if d is None:
            return False
        st = faults.resume_state(self.fault, checkpoint.read_state(d), self.cfg.groups_per_step)
        ray.get([t.load.remote(str(d), st["version"]) for t in self.trainers])
        self.step, self.version, self.cursor = st["step"], st["version"], st["cursor"]
        self.buffer = deque(Group.from_dict(g) for g in st["buffer"])
        self.ledger = Ledger(st["ledger"])
        self.admission = Admission(self.cfg, self.fault, self.ledger, st["dropped"])
        self.consumed_groups = list(st["consumed_groups"])
        self.evals = list(st["evals"])
        if faults.push_weights_on_resume(self.fault):
            self.sync_weights(interrupt="abort")  # the engine serves the restored policy
        return True

    # ----- modes -----------------------------------------------------------------------------
    def run(self, steps: int, stop_after: int = 0) -> None:
        """Train up to ``steps`` (or ``stop_after`` more). Every ``checkpoint_every`` steps the
        pipeline is drained (in-flight groups finish and are graded into the buffer) and saved."""
        end = steps if not stop_after else min(steps, self.step + stop_after)
        every = self.cfg.checkpoint_every
        loop = modes.LOOPS[self.cfg.mode]
        while self.step < end:
            chunk_end = min(end, (self.step // every + 1) * every) if every else end
            loop(self, chunk_end)
            if every and self.step % every == 0 and self.step < end:
                self.save_checkpoint()
