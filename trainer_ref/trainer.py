"""The GRPO trainer actor (torch, device-agnostic): one optimiser step per batch of groups, and
the trainer side of weight sync (stages 1-3a).

``device = "cuda" if torch.cuda.is_available() else "cpu"``. The batch arrives as graded groups
(samples with token ids, generator log-probs, versions and rewards); see ``trainer_ref.grpo`` for
the objective and its departures from DeepSeekMath/R1.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, NamedTuple

import torch

from trainer_ref import checkpoint, dp, faults, grpo, telemetry, weight_sync


class _Rescore(NamedTuple):
    """The samples ``Trainer._policy_kl`` re-scores after the update, as the step's forward saw them."""
    ids: torch.Tensor
    attention: torch.Tensor
    mask: torch.Tensor
    before: torch.Tensor  # log-probs before the update
    behaviour: torch.Tensor  # the generator's log-probs


class _Backward:
    """What one step's micro-batches add up to (reduced over the ranks when data parallel)."""

    def __init__(self) -> None:
        self.acc = {k: 0.0 for k in ("loss", "tokens", "is_sum", "is_clip", "w", "w2", "kl", "ent", "dl")}
        self.is_max, self.dl_max = 0.0, 0.0
        self.fresh_dl, self.fresh_tok = 0.0, 0.0
        self.gen_lp: list[torch.Tensor] = []  # per sample, completion tokens (parity, importance stats)
        self.train_lp: list[torch.Tensor] = []
        self.rescore: _Rescore | None = None
        self.replay: list[tuple[Any, ...]] = []  # ppo_epochs > 1: each micro-batch's inputs, for the later updates

    def add(self, parts: Any) -> None:
        a = self.acc
        a["loss"] += float(parts.loss.detach())
        a["tokens"] += parts.tokens
        a["is_sum"] += parts.is_ratio_mean
        a["is_clip"] += parts.is_clipped
        a["w"] += parts.ess_sum_w
        a["w2"] += parts.ess_sum_w2
        a["kl"] += parts.kl
        a["ent"] += parts.entropy_sum
        a["dl"] += parts.dlogp_abs_sum
        self.is_max, self.dl_max = max(self.is_max, parts.is_ratio_max), max(self.dl_max, parts.dlogp_abs_max)


class Trainer:
    def __init__(self, model_dir: str, cfg: dict[str, Any], run_dir: str | None = None,
                 hashes: dict[str, str] | None = None, rank: int = 0, world: int = 1) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.rank, self.world = int(rank), int(world)
        if run_dir:
            telemetry.init_component(run_dir, "trainer", self.rank, config=cfg, hashes=hashes,
                                     prometheus=bool(cfg.get("prometheus")))
        torch.manual_seed(int(cfg["seed"]))
        self.cfg, self.fault, self._prev_dump = cfg, faults.from_config(cfg), None
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        telemetry.probe(cfg).parity.set_hashes(trainer=telemetry.parity_hashes(self.tok, cfg))
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(self.device)
        self.model.train()
        self.ref = None
        if float(cfg.get("kl_coef", 0)) > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(self.device).eval()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=float(cfg["lr"]), betas=(0.9, 0.99), weight_decay=0.0)
        self.version = 0
        self.staging = weight_sync.StagingBuffer()
        # tensors every dump must hold (tied aliases such as lm_head under tie_word_embeddings are not
        # sent: the engine ties them itself); the engine layout comes from the generator
        # (set_engine_layout), or from vLLM's model registry when none told us
        self.expected = sorted(self.model.state_dict())
        self.layout: weight_sync.EngineLayout | None = None
        self._norms: deque[float] = deque(maxlen=10)  # recent pre-clip grad norms (the grad_spike fault's yardstick)
        self._opt_ns: int | None = None  # wall time of the optimiser step that produced self.version
        self.micro = 32
        self.epochs = int(cfg.get("ppo_epochs", 1) or 1)  # optimiser updates per step over its batch

    def ready(self) -> bool:
        return True

    def set_engine_layout(self, engine: dict[str, Any]) -> list[str]:
        """Adopt the running engine's weight layout (``VLLMGenerator.engine_layout``); raises
        ``ValueError`` when this model's tensors do not map one to one onto the engine's parameters.
        Returns the engine-layout names every sync must deliver."""
        self.layout = weight_sync.EngineLayout.from_engine(self.model, engine)
        self._engine_place = {k: engine.get(k) for k in ("node_id", "device", "workers")}
        return self.expected_engine

    @property
    def expected_engine(self) -> list[str]:
        return self._layout().names(self.expected)

    def _layout(self) -> weight_sync.EngineLayout:
        if self.layout is None:
            self.layout = weight_sync.EngineLayout.from_model(self.model)
        return self.layout

    def init_dist(self, init_method: str) -> int:
        """Join the data-parallel group (gloo on CPU, NCCL on CUDA); every rank calls it at once."""
        import torch.distributed as dist

        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device == "cuda" else "gloo", init_method=init_method,
                                    rank=self.rank, world_size=self.world)
        return self.rank

    def set_run(self, run_dir: str, cfg: dict[str, Any], hashes: dict[str, str] | None = None) -> None:
        """Reuse this actor for another run: its record, config and fresh probes."""
        self.cfg, self.fault, self._prev_dump = cfg, faults.from_config(cfg), None
        telemetry.set_run(run_dir, "trainer", self.rank, cfg, hashes, bool(cfg.get("prometheus")))
        telemetry.probe().parity.set_hashes(trainer=telemetry.parity_hashes(self.tok, cfg))

    def set_telemetry(self, on: bool) -> None:
        """Probes on/off in this process (telemetry.set_enabled)."""
        telemetry.set_enabled(on)

    def flush_telemetry(self) -> bool:
        """Everything this process recorded so far is in the run record (a reused actor, end of a run)."""
        return telemetry.flush()

    def set_generator_hashes(self, hashes: dict[str, str]) -> None:
        """The generator's parity hashes (tokenizer, chat template, sampling), compared on every batch."""
        telemetry.probe().parity.set_hashes(generator=hashes)

    # ----- one optimiser step ----------------------------------------------------------------
    def train_step(self, groups: list[dict[str, Any]], step: int, data_wait_s: float | None = None,
                   reward_wait_s: float | None = None) -> dict[str, Any]:
        """One GRPO step over graded groups; the policy version increases by one.

        Data parallel (``world`` > 1): every rank calls this at once with its shard of the step's groups.
        The loss is a token mean over the *global* batch: the token count is all-reduced (the denominator
        every rank must agree on; the advantage probe all-gathers it to check), gradients are all-reduced
        (summed) before clipping, and the step's statistics are reduced so rank 0 reports the whole step."""
        t0 = time.perf_counter()
        telemetry.set_context(step=step, version=self.version)
        telemetry.heartbeat("train", f"step {step}")
        faults.slow_trainer(self.fault, step)
        rewards = [[s["reward"] for s in g["samples"]] for g in groups]
        advs = grpo.advantages(rewards, float(self.cfg["adv_eps"]))  # health is measured by the probe below
        samples = [s for g in groups for s in g["samples"]]
        token_den = faults.token_denominator(self.fault, step, self.rank, float(sum(len(s["completion_ids"]) for s in samples)),
                                             lambda v: dp.all_reduce_sum(v, self.world)) or 1.0  # the global token count
        probing = telemetry.enabled()
        b = self._backward(samples, [a for g in advs for a in g], token_den, step, probing)
        flat_r = [x for g in rewards for x in g]
        r_sum, r_sq, n_all = float(sum(flat_r)), float(sum(x * x for x in flat_r)), float(len(flat_r))
        if self.world > 1:  # the whole step's gradient and numbers on every rank
            dp.all_reduce_grads(self.model)
            b.acc, b.fresh_dl, b.fresh_tok, r_sum, r_sq, n_all = dp.reduce_sums(b.acc, b.fresh_dl, b.fresh_tok,
                                                                                   r_sum, r_sq, n_all)
            b.is_max, b.dl_max = dp.reduce_max(b.is_max, b.dl_max)
        faults.spike_grads(self.fault, step, self.model.parameters(), self._norms)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.cfg["max_grad_norm"])))
        if math.isfinite(grad_norm):
            self._norms.append(grad_norm)
        lead = self.rank == 0  # rank 0 reports the step (train_step, grad norm); every rank its own shard
        # the grad-norm probe decides nonfinite / clipped once (before zero_grad: per-group norms at a spike)
        gres = telemetry.probe().grad.observe(grad_norm=grad_norm, groups=self.model, step=step, emit=False,
                                              sample_ids=[s["sample_id"] for s in samples],
                                              group_ids=[g["group_id"] for g in groups]) if lead else None
        if probing:
            self._observe(step, groups, samples, rewards, advs, token_den, b)
        self._set_lr(step)
        stepped = math.isfinite(grad_norm)
        if stepped:
            self.opt.step()
        # one optimiser update's size (~0 without one), measured before the later ppo_epochs updates (whose ratio
        # clip bounds them): the quantity the oversized-updates bars are set in, whatever the updates per step
        policy_kl = self._policy_kl(b) if lead else None
        if stepped:
            self._later_epochs(b, token_den)
        self.opt.zero_grad(set_to_none=True)
        self.version += 1
        self._opt_ns = time.time_ns()
        out = self._step_out(step, b, grad_norm, gres, (r_sum, r_sq, n_all), token_den, t0, data_wait_s, reward_wait_s)
        out["policy_kl"] = policy_kl
        if probing and lead:
            self._emit(step, out, gres)
        elif probing:
            telemetry.on_phase("training", out["step_seconds"], int(sum(len(x["completion_ids"]) for x in samples)))
        return out

    def _later_epochs(self, b: "_Backward", token_den: float) -> None:
        """``ppo_epochs`` > 1: the step's further updates over the same batch, each a forward and backward against
        the first pass's log-probs as the proximal policy (so the ratio clip acts), gradients all-reduced and
        clipped as the first update's. The step reports its first pass (what the probes compare with the
        generator) and its first update's ``policy_kl``. A non-finite gradient ends the step's updates."""
        for _ in range(self.epochs - 1):
            self.opt.zero_grad(set_to_none=True)
            for ids, attn, mask, first, old, gen, ref, adv in b.replay:
                logp, ent = grpo.token_logprobs(self.model, ids, self.pad_id, attention_mask=attn, first=first,
                                                with_entropy=bool(self.cfg.get("entropy_coef")))
                self._loss(logp, old, gen, adv, mask, token_den, ref, entropy=ent).loss.backward()
            if self.world > 1:
                dp.all_reduce_grads(self.model)
            if not math.isfinite(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                                       float(self.cfg["max_grad_norm"])))):
                return
            self.opt.step()

    def _loss(self, logp: torch.Tensor, old: torch.Tensor, gen: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
              token_den: float, ref: torch.Tensor | None, entropy: torch.Tensor | None = None) -> Any:
        """``grpo.grpo_loss`` with this run's clip, importance-correction cap, KL coefficient and KL bound."""
        return grpo.grpo_loss(logp, old, gen, adv, mask, token_den, clip_eps=float(self.cfg["clip_eps"]),
                              tis_cap=float(self.cfg["tis_cap"]), ref_logp=ref,
                              kl_coef=float(self.cfg.get("kl_coef", 0)),
                              kl_clamp=float(self.cfg.get("kl_clamp", 10.0)), entropy=entropy,
                              entropy_coef=float(self.cfg.get("entropy_coef", 0) or 0))

    def _policy_kl(self, b: "_Backward") -> float | None:
        """How far this step's update moved the policy: KL(before || after) per token on up to
        ``policy_change_samples`` samples of the first micro-batch (spread over its groups), re-scored with the
        updated weights (``grpo.policy_kl``).
        The step size an lr gives is model-dependent; this is the same quantity on every model (PPO's
        ``approx_kl`` with one update per batch; with ``ppo_epochs`` > 1, the first update's: one update's size, as
        the precursor bars are set, not the step's n updates together, ~n^2 larger at the same lr). None when off
        or not measured."""
        if b.rescore is None:
            return None
        ids, attn, mask, before, gen = b.rescore
        try:
            with torch.no_grad():
                after, _ = grpo.token_logprobs(self.model, ids, self.pad_id, attention_mask=attn,
                                               first=grpo.first_scored(mask))
            kl = grpo.policy_kl(before, after, mask, behaviour=gen)
        except Exception as e:  # noqa: BLE001 - a measurement must never cost the step (e.g. out of memory)
            import logging

            self.cfg = {**self.cfg, "policy_change_samples": 0}  # off for the rest of this run, said once
            logging.getLogger(__name__).warning("policy_kl re-score failed (%s); off for the rest of the run", e)
            return None
        return kl if math.isfinite(kl) else None

    def _set_lr(self, step: int) -> None:
        """Linear warm-up from ``lr`` to ``lr_peak`` over ``lr_warmup_steps`` (config; off when lr_peak is 0)."""
        if float(self.cfg.get("lr_peak") or 0) > 0:
            ramp = min(1.0, step / max(1, int(self.cfg.get("lr_warmup_steps") or 0)))
            for pg in self.opt.param_groups:
                pg["lr"] = float(self.cfg["lr"]) + ramp * (float(self.cfg["lr_peak"]) - float(self.cfg["lr"]))

    def _backward(self, samples: list[dict[str, Any]], adv_flat: list[float], token_den: float, step: int,
                  probing: bool) -> "_Backward":
        """Forward and backward over micro-batches; the sums the step reports (and the log-probs the
        probes compare, when probing)."""
        seqs = [s["prompt_ids"] + s["completion_ids"] for s in samples]
        starts = [len(s["prompt_ids"]) for s in samples]
        self.opt.zero_grad(set_to_none=True)
        b = _Backward()
        for i in range(0, len(samples), self.micro):
            sl = slice(i, i + self.micro)
            ids, mask = grpo.pad_batch(seqs[sl], starts[sl], self.pad_id)
            attn = grpo.length_mask([len(x) for x in seqs[sl]], ids.shape[1]).to(self.device)
            ids, mask = ids.to(self.device), mask.to(self.device)
            first = grpo.first_scored(mask)  # the prompt's positions get no LM head / softmax
            logp, ent = grpo.token_logprobs(self.model, ids, self.pad_id, with_entropy=True, attention_mask=attn,
                                            first=first)
            old = logp.detach()
            gen = grpo.gen_logprob_tensor([s["logprobs"] for s in samples[sl]], starts[sl], tuple(mask.shape)).to(self.device)
            ref = None
            if self.ref is not None:
                with torch.no_grad():
                    ref, _ = grpo.token_logprobs(self.ref, ids, self.pad_id, attention_mask=attn, first=first)
            adv = torch.tensor(adv_flat[sl], dtype=torch.float32, device=self.device)
            parts = self._loss(logp, old, gen, adv, mask, token_den, ref, entropy=ent)
            faults.scale_loss(self.fault, step, parts.loss).backward()
            b.add(parts)
            if self.epochs > 1:
                b.replay.append((ids, attn, mask, first, old, gen, ref, adv))
            keep = int(self.cfg.get("policy_change_samples", 0) or 0)
            if probing and keep > 0 and b.rescore is None:  # spread over the micro-batch's groups
                pick = slice(0, None, max(1, ids.shape[0] // keep))
                b.rescore = _Rescore(*(t[pick][:keep] for t in (ids, attn, mask, old, gen)))
            dabs = ((old - gen).abs() * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            if probing:
                counts = mask.sum(-1).long().tolist()
                m = mask.bool()
                b.gen_lp += list(torch.split(gen[m].cpu(), counts))
                b.train_lp += list(torch.split(old[m].cpu(), counts))
            for s, d, n in zip(samples[sl], dabs.tolist(), mask.sum(-1).tolist()):
                if s["max_token_version"] == self.version and s["min_token_version"] == self.version:
                    b.fresh_dl += d * n
                    b.fresh_tok += n
        return b

    def _observe(self, step: int, groups: list[dict[str, Any]], samples: list[dict[str, Any]],
                 rewards: list[list[float]], advs: Any, token_den: float, b: "_Backward") -> None:
        """The advantage, staleness (importance statistics) and parity probes of this rank's shard."""
        P = telemetry.probe()
        P.adv.observe(rewards, advantages=advs, token_denominator=token_den, step=step)
        bounded = None
        if self.cfg.get("staleness_basis") == "completion":  # what admission checked the bound on, per sample
            bounded = [self.version - max(x.get("max_token_version", x["dispatch_version"]) for x in g["samples"])
                       for g in groups for _ in g["samples"]]
        P.staleness.consume([s["sample_id"] for s in samples], [telemetry.dispatch_tag(s) for s in samples], self.version,
                            gen_logprobs=b.gen_lp, train_logprobs=b.train_lp, emit_ledger=False,
                            tokens=[len(s["completion_ids"]) for s in samples], bounded_staleness=bounded)
        # parity compares log-probs of the same weights: only samples generated entirely by this version
        fresh = [i for i, s in enumerate(samples) if s["min_token_version"] == s["max_token_version"] == self.version]
        P.parity.observe([b.gen_lp[i] for i in fresh], [b.train_lp[i] for i in fresh],
                         sample_ids=[samples[i]["sample_id"] for i in fresh], step=step)

    def _step_out(self, step: int, b: "_Backward", grad_norm: float, gres: Any, rsums: tuple[float, float, float],
                  token_den: float, t0: float, data_wait_s: float | None, reward_wait_s: float | None) -> dict[str, Any]:
        """The step's numbers (rank 0's: the whole step). ``nonfinite`` / ``clipped`` are the grad-norm
        probe's verdict (None on other ranks: rank 0 reports)."""
        acc = b.acc
        r_sum, r_sq, n_all = rsums
        n_tok = max(acc["tokens"], 1.0)
        r_mean = r_sum / max(n_all, 1.0)
        return {"step": step, "version": self.version, "loss": acc["loss"], "grad_norm": grad_norm,
                "grad_norm_clipped": gres.grad_norm_clipped if gres else None,
                "clipped": gres.clipped if gres else None, "nonfinite": not math.isfinite(grad_norm),
                "samples": int(n_all), "tokens": int(acc["tokens"]), "step_seconds": time.perf_counter() - t0,
                "reward_mean": r_mean, "reward_std": math.sqrt(max(r_sq / max(n_all, 1.0) - r_mean * r_mean, 0.0)),
                "kl": acc["kl"] / n_tok if self.ref is not None else None, "entropy": acc["ent"] / n_tok,
                "lr": float(self.opt.param_groups[0]["lr"]),
                "is_ratio_mean": acc["is_sum"] / n_tok, "is_ratio_max": b.is_max, "is_clipped_ratio": acc["is_clip"] / n_tok,
                "ess_ratio": (acc["w"] ** 2) / (n_tok * acc["w2"]) if acc["w2"] > 0 else 1.0,
                "mean_abs_dlogp": acc["dl"] / n_tok, "max_abs_dlogp": b.dl_max,
                "fresh_mean_abs_dlogp": b.fresh_dl / b.fresh_tok if b.fresh_tok else None,
                "fresh_tokens": int(b.fresh_tok), "token_denominator": token_den, "data_wait_s": data_wait_s,
                "reward_wait_s": reward_wait_s}

    def _emit(self, step: int, o: dict[str, Any], gres: Any) -> None:
        """The grad-norm probe emits train_step (its fields + the step's numbers); training phase, trainer throughput."""
        P = telemetry.probe()
        P.grad.emit(gres, step=step, loss=o["loss"], lr=o["lr"], samples=o["samples"], tokens=o["tokens"],
                    step_seconds=o["step_seconds"], reward_mean=o["reward_mean"], data_wait_s=o["data_wait_s"],
                    reward_wait_s=o["reward_wait_s"], reward_std=o["reward_std"], kl=o["kl"], entropy=o["entropy"],
                    policy_kl=o.get("policy_kl"))
        P.liveness.add("training", o["step_seconds"], o["tokens"])
        P.throughput.produced(o["samples"], o["tokens"])
        P.throughput.add_busy(o["step_seconds"])
        P.throughput.tick(force=True)

    # ----- weight sync, trainer side ---------------------------------------------------------
    def sync_out(self, torn_read: bool = False) -> dict[str, Any]:
        """Stages 1 (dump), 2 (staging write + seqlock read) and 3a (the path's send); returns what the
        engine needs, with the ``WeightSyncProbe`` handoff (dump fingerprints, expected tensors,
        optimiser-step time, trace parent, the send's seconds, the path) the generator's side continues
        from. The path (``weight_sync.choose_path``): ``shm`` on one node, ``object_store`` across nodes,
        ``cuda_ipc`` / ``nccl`` on GPUs; ``cfg["weight_sync_path"]`` forces one."""
        v = self.version
        P = telemetry.probe()
        path = self.sync_path()
        with P.wsync_send.sync(v, optimizer_step_ns=self._opt_ns, expected=self.expected_engine,
                               end_to_end=False) as s:
            with s.dump() as b:  # 1: every expected tensor present, per-tensor fingerprints (engine layout)
                layout = self._layout()
                dump = faults.dump(self.fault, v - 1, weight_sync.dump_weights(
                    self.model, v, self.expected, layout, kind=weight_sync.fingerprint_kind(path)), layout)
                b.record_fingerprints(dump.fingerprints, nbytes=dump.nbytes)
                b.path = path
            if path in ("cuda_ipc", "nccl"):
                from trainer_ref import gpu_sync

                with s.staging() as b:  # 2: the device buckets (one device copy), no host staging
                    st = gpu_sync.stage(self, dump, path)
                    b.bytes, b.path, b.lock_wait_s, b.lock_hold_s = dump.nbytes, path, 0.0, st["seconds"]
                rd_nbytes, staging_s = dump.nbytes, st["seconds"]
                transport, put_s = faults.transfer(self.fault, v - 1, lambda _: gpu_sync.send(self, path), None)  # 3a
            else:
                with s.staging() as b:  # 2: copy into the shared-memory buffer; lock wait/hold, seqlock read
                    self.staging.write(dump.state, v)
                    wait_w, hold_w = self.staging.last_lock_wait_s, self.staging.last_lock_hold_s
                    prev, self._prev_dump = self._prev_dump, dump
                    rd = faults.staging_read(self.fault, v - 1, self.staging, dump, prev, not torn_read)
                    b.record_read(rd, nbytes=dump.nbytes)
                    b.lock_wait_s, b.lock_hold_s, b.path = wait_w + rd.lock_wait_s, hold_w + rd.lock_hold_s, path
                rd_nbytes, staging_s = dump.nbytes, wait_w + hold_w + rd.lock_hold_s
                transport, put_s = faults.transfer(self.fault, v - 1, lambda st: weight_sync.transfer(st, path),
                                                   self.staging)  # 3a
            P.parity.on_sync(v)  # the next batch is the first after this sync
            handoff = {**s.handoff(), "sender_s": put_s, "path": path}
        return {"ref": [transport], "version": v, "fingerprints": dump.fingerprints, "shapes": dump.shapes,
                "bytes": rd_nbytes, "dump_s": dump.seconds, "staging_s": staging_s, "put_s": put_s,
                "digest": dump.digest, "handoff": handoff, "path": path}

    def sync_path(self) -> str:
        """The weight-sync path for this trainer and its engine (``weight_sync.choose_path``)."""
        eng = getattr(self, "_engine_place", {}) or {}
        return weight_sync.choose_path(self.device, weight_sync.node_id(), eng.get("node_id"),
                                       self.cfg.get("weight_sync_path"), eng.get("device"))

    # ----- evaluation helpers, checkpoints ---------------------------------------------------
    def save(self, directory: str) -> None:
        from pathlib import Path

        checkpoint.save_trainer(self.model, self.opt, Path(directory))

    def load(self, directory: str, version: int) -> None:
        from pathlib import Path

        checkpoint.load_trainer(self.model, self.opt, Path(directory))
        self.version = version

    def reset(self, model_dir: str) -> None:
        """Back to the initial weights, a fresh optimiser and version 0 (reuse of one actor across runs)."""
        from pathlib import Path

        from safetensors.torch import load_file

        state: dict[str, torch.Tensor] = {}
        for f in sorted(Path(model_dir).glob("*.safetensors")):  # one file, or the shards of a bigger model
            state.update(load_file(str(f)))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        bad = [k for k in missing if k not in weight_sync.tied_aliases(self.model)] + list(unexpected)
        if bad:
            raise RuntimeError(f"{model_dir}: initial weights do not fit the model: {bad[:5]}")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=float(self.cfg["lr"]), betas=(0.9, 0.99), weight_decay=0.0)
        self.version = 0

    def weights_digest(self) -> str:
        """One fingerprint over every parameter (data-parallel ranks must agree on it after each step; on a GPU
        computed there, ``device`` kind: every rank's parameters are on the same kind of device)."""
        kind = "device" if self.device == "cuda" else "bytes"
        return weight_sync.digest({k: weight_sync.tensor_fingerprint(v, kind=kind)
                                   for k, v in self.model.state_dict().items()})

    def shutdown(self) -> None:
        self.staging.close()  # the shared-memory staging file
        telemetry.shutdown()
