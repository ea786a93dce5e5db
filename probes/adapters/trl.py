"""rlobs for TRL's ``GRPOTrainer``: a ``TrainerCallback`` plus reward-function wrappers.

Two lines on an existing TRL script (``instrument`` wraps the trainer's reward functions in place and
adds the callback):

    from probes.adapters.trl import instrument
    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...)
    instrument(trainer, run_dir="runs/my-trl-run")          # +
    trainer.train()                                          # then: rlobs doctor runs/my-trl-run

or explicitly: ``cb = RlobsGRPOCallback("runs/x")``, ``GRPOTrainer(..., reward_funcs=cb.wrap_reward_funcs(fns),
callbacks=[cb])``.

What is recorded, per optimiser step (steps numbered as TRL logs them: 1, 2, ...):
- ``advantage``: from the raw rewards each wrapped reward function returned, combined as TRL combines
  them (weighted ``nansum`` over functions, NaN where every function returned None), grouped by
  ``num_generations`` consecutive completions (TRL's ``RepeatSampler`` order); ``probes.AdvantageProbe``
  with TRL's denominator ``std + 1e-4`` and unbiased std. Only the local process's completions are seen.
- ``rollout`` per completion (group id, completion tokens, optionally the texts) and ``grader_call`` per
  completion and reward function (``latency_s`` is the call's wall time divided by its batch size).
- ``train_step`` through ``probes.GradNormProbe``: TRL's logged pre-clip ``grad_norm``, the post-clip norm
  the callback measures before ``optimizer.step()``, clipping against ``max_grad_norm``, loss, lr,
  reward mean/std, kl, entropy, step time, samples and completion tokens. A step that TRL does not log
  (``logging_steps > 1``) still gets its post-clip norm; its pre-clip norm is known only when no
  clipping happened.
- every other logged value through the TRL import table (``rlobs.importers.trl``): parity from
  ``sampling/sampling_logp_difference/*`` (vLLM importance-sampling correction), IS ratios into
  ``staleness``, completion-length aggregates into ``rollout_summary``, the rest as ``scalar`` events.
Telemetry never breaks training: every hook catches and logs its own errors.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from transformers import TrainerCallback

import rlobs
from probes.advantage import AdvantageProbe
from probes.gradnorm import GradNormProbe, global_grad_norm
from probes.parity import config_hashes
from rlobs.importers.mapping import MetricRow, convert
from rlobs.importers.report import ImportReport
from rlobs.importers.trl import TABLE as TRL_TABLE

log = logging.getLogger("probes.adapters.trl")
TRL_EPS = 1e-4  # TRL: advantages / (std + 1e-4)
_MEASURED = ("advantage",)  # kinds the callback measures itself (the logged aggregate is not re-emitted)


class RlobsGRPOCallback(TrainerCallback):
    """Records a ``GRPOTrainer`` run into rlobs (see the module docstring).

    run_dir: start a recorder there at ``on_train_begin`` (closed at ``on_train_end``); None: use the
        process's recorder (``rlobs.init`` called by the script).
    record_text: put prompt and completion texts into the ``rollout`` events.
    prometheus: serve ``/metrics`` when the callback starts the recorder.
    """

    def __init__(self, run_dir: str | None = None, *, record_text: bool = False, prometheus: bool = False,
                 near_zero_threshold: float = 1e-3, config: dict[str, Any] | None = None):
        self.run_dir = run_dir
        self.record_text = record_text
        self.prometheus = prometheus
        self.config = dict(config or {})
        self._own = None
        self._rec: Any = None
        self._adv = AdvantageProbe(eps=TRL_EPS, ddof=1, near_zero_threshold=near_zero_threshold)
        self._grad: GradNormProbe | None = None
        self._model: Any = None
        self._n_funcs = 0  # reward functions given to wrap_reward_funcs / instrument
        self._unwrapped: list[str] = []
        self._rollout_index: int | None = None  # the wrapped function whose calls also record the rollouts
        self._weights: list[float] | None = None
        self._G = 1
        self._calls: dict[int, dict[int, np.ndarray]] = {}  # step -> func index -> rewards (local batch)
        self._batch_meta: dict[int, dict[str, Any]] = {}  # step -> samples / tokens
        self._pending: dict[int, dict[str, Any]] = {}  # step -> train_step fields awaiting on_log
        self._t_step = 0.0
        self._max_norm: float | None = None

    # ---- reward functions ----
    def wrap_reward_funcs(self, funcs: Any) -> list[Any]:
        """Wrapped copies of ``funcs`` (same ``__name__``, sync or async) that record each call's rewards.
        Reward *models* (``nn.Module``) are returned as they are: with one of them in the list the
        per-group advantage is not measured (TRL's logged zero-std share is used instead)."""
        items = list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
        self._n_funcs = len(items)
        return [self._wrap(i, f) for i, f in enumerate(items)]

    def _wrap(self, index: int, func: Any) -> Any:
        if not callable(func) or _is_module(func) or isinstance(func, str):
            self._unwrapped.append(getattr(func, "__name__", type(func).__name__))
            return func
        name = getattr(func, "__name__", f"reward_{index}")
        cb = self
        if self._rollout_index is None:
            self._rollout_index = index

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def awrapped(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                out = await func(*args, **kwargs)
                cb._on_rewards(index, name, out, kwargs, time.perf_counter() - t0)
                return out
            return awrapped

        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                out = func(*args, **kwargs)
            except Exception as exc:
                cb._on_error(name, kwargs, exc, time.perf_counter() - t0)
                raise
            cb._on_rewards(index, name, out, kwargs, time.perf_counter() - t0)
            return out
        return wrapped

    def _recorder(self) -> Any:
        return self._rec if self._rec is not None else rlobs.get_recorder()

    def _training(self) -> bool:
        return self._model is None or bool(getattr(self._model, "training", True))

    def _on_rewards(self, index: int, name: str, out: Any, kwargs: dict[str, Any], seconds: float) -> None:
        try:
            if not self._training():  # evaluation batches are not training groups
                return
            state = kwargs.get("trainer_state")
            step = int(state.global_step) + 1 if state is not None else None
            rewards = np.asarray([math.nan if r is None else float(r) for r in out], dtype=np.float64)
            rec = self._recorder()
            n = len(rewards)
            if step is not None:
                self._calls.setdefault(step, {})[index] = rewards
            per = seconds / n if n else seconds
            for i, r in enumerate(rewards):
                rec.emit("grader_call", step=step, sample_id=f"s{step}-{i}", grader_kind=name, latency_s=per,
                         outcome="ok" if math.isfinite(r) else "skipped", reward=float(r) if math.isfinite(r) else None)
            rec.emit("phase", step=step, phase="grading", seconds=seconds, tokens=None)
            if index == self._rollout_index and step is not None:
                self._record_rollouts(step, kwargs)
        except Exception as exc:  # never into training
            log.warning("rlobs TRL callback: rewards not recorded: %s: %s", type(exc).__name__, exc)

    def _on_error(self, name: str, kwargs: dict[str, Any], exc: Exception, seconds: float) -> None:
        try:
            state = kwargs.get("trainer_state")
            step = int(state.global_step) + 1 if state is not None else None
            self._recorder().emit("grader_call", step=step, grader_kind=name, latency_s=seconds, outcome="error",
                                  error=f"{type(exc).__name__}: {exc}"[:500])
        except Exception as err:
            log.warning("rlobs TRL callback: reward error not recorded: %s: %s", type(err).__name__, err)

    def _record_rollouts(self, step: int, kwargs: dict[str, Any]) -> None:
        prompts = kwargs.get("prompts") or []
        completions = kwargs.get("completions") or []
        ids = kwargs.get("completion_ids") or []
        rec = self._recorder()
        tokens = 0
        for i in range(max(len(prompts), len(ids))):
            ntok = len(ids[i]) if i < len(ids) else None
            tokens += ntok or 0
            text = {}
            if self.record_text:
                text = {"prompt": _text(prompts[i]) if i < len(prompts) else None,
                        "completion": _text(completions[i]) if i < len(completions) else None}
            rec.emit("rollout", step=step, sample_id=f"s{step}-{i}", group_id=f"s{step}-g{i // self._G}",
                     dispatch_version=step - 1, completion_tokens=ntok, **text)
        meta = self._batch_meta.setdefault(step, {"samples": 0, "tokens": 0})
        meta["samples"] += max(len(prompts), len(ids))
        meta["tokens"] += tokens

    def _emit_advantage(self, step: int) -> bool:
        calls = self._calls.pop(step, None)
        if not calls or self._unwrapped or len(calls) < self._n_funcs:
            return False
        n = min(len(v) for v in calls.values())
        w = self._weights or [1.0] * self._n_funcs
        stacked = np.stack([calls[i][:n] * w[i] for i in sorted(calls)])  # (F, B)
        combined = np.nansum(stacked, axis=0)
        combined[np.all(np.isnan(stacked), axis=0)] = np.nan
        G = self._G
        groups = [combined[i:i + G] for i in range(0, n, G)]
        self._adv._recorder = self._recorder()
        h = self._adv.observe([g[~np.isnan(g)] for g in groups], step=step)
        meta = self._pending.setdefault(step, {})
        meta["reward_mean"] = float(np.nanmean(combined)) if n else None
        return h.groups > 0

    # ---- TrainerCallback hooks ----
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                       **kwargs: Any) -> None:
        try:
            self._model = model
            self._G = int(getattr(args, "num_generations", 1) or 1)
            rw = getattr(args, "reward_weights", None)
            self._weights = [float(x) for x in rw] if rw else None
            mg = float(getattr(args, "max_grad_norm", 0.0) or 0.0)
            self._max_norm = mg if mg > 0 else None
            self._grad = GradNormProbe(max_norm=self._max_norm)
            if self._unwrapped:
                log.warning("rlobs TRL callback: reward models %s are not wrapped: per-group advantage health "
                            "comes from TRL's logged frac_reward_zero_std only", self._unwrapped)
            if self.run_dir is not None and self._rec is None:
                sampling = {k: getattr(args, k, None) for k in ("temperature", "top_p", "top_k", "min_p",
                                                                  "repetition_penalty")}
                hashes = config_hashes(tokenizer=processing_class, sampling=sampling) if processing_class is not None \
                    else config_hashes(sampling=sampling)
                cfg = {"framework": "trl", "num_generations": self._G, "max_grad_norm": mg,
                       "learning_rate": getattr(args, "learning_rate", None), "beta": getattr(args, "beta", None),
                       "loss_type": getattr(args, "loss_type", None), "scale_rewards": getattr(args, "scale_rewards", None),
                       "logging_steps": getattr(args, "logging_steps", None), **self.config}
                self._rec = rlobs.init(self.run_dir, component="trainer", rank=int(getattr(args, "process_index", 0)),
                                       config=cfg, hashes=hashes, prometheus=self.prometheus, set_global=False)
                self._own = self._rec
        except Exception as exc:
            log.warning("rlobs TRL callback: on_train_begin: %s: %s", type(exc).__name__, exc)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            self._flush_unlogged(before=int(state.global_step) + 1)
            rec = self._recorder()
            rec.set_step(int(state.global_step) + 1)
            rec.set_policy_version(int(state.global_step))
            self._t_step = time.perf_counter()
        except Exception as exc:
            log.warning("rlobs TRL callback: on_step_begin: %s: %s", type(exc).__name__, exc)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        try:  # gradients are clipped already: this is the norm the optimiser applies
            if model is not None:
                step = int(state.global_step) + 1
                self._pending.setdefault(step, {})["grad_norm_clipped"] = global_grad_norm(model.parameters())
        except Exception as exc:
            log.warning("rlobs TRL callback: grad norm not measured: %s: %s", type(exc).__name__, exc)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            step = int(state.global_step)  # already incremented: the step that just finished
            fields = self._pending.setdefault(step, {})
            fields["step_seconds"] = time.perf_counter() - self._t_step
            fields["measured_advantage"] = self._emit_advantage(step)
            meta = self._batch_meta.pop(step, None)
            if meta:
                fields["samples"], fields["tokens"] = meta["samples"], meta["tokens"]
        except Exception as exc:
            log.warning("rlobs TRL callback: on_step_end: %s: %s", type(exc).__name__, exc)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            if not logs or any(k.startswith("eval_") for k in logs) or "train_runtime" in logs:
                self._emit_scalars(int(state.global_step), logs or {}, "trl:log")
                return
            step = int(state.global_step)
            pending = self._pending.pop(step, {})
            measured = pending.pop("measured_advantage", False)
            report = ImportReport(source="trl:on_log")
            train: dict[str, Any] = {}
            rec = self._recorder()
            for ev_step, kind, fields in convert([MetricRow(step, dict(logs), "on_log")], TRL_TABLE, report,
                                                 source="trl:log"):
                if kind == "train_step":
                    train.update(fields)
                elif kind in _MEASURED and measured:
                    continue
                else:
                    rec.emit(kind, step=ev_step, **fields)
            self._emit_train_step(step, pending, train)
        except Exception as exc:
            log.warning("rlobs TRL callback: on_log: %s: %s", type(exc).__name__, exc)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            self._flush_unlogged(before=None)
            if self._own is not None:
                self._own.close()
                self._own = None
        except Exception as exc:
            log.warning("rlobs TRL callback: on_train_end: %s: %s", type(exc).__name__, exc)

    # ---- helpers ----
    def _emit_train_step(self, step: int, pending: dict[str, Any], logged: dict[str, Any]) -> None:
        fields = {k: v for k, v in pending.items() if k != "measured_advantage"}
        post = fields.pop("grad_norm_clipped", None)
        logged = dict(logged)
        logged.pop("nonfinite", None)
        grad = logged.pop("grad_norm", None)
        fields.update(logged)  # TRL's own numbers win over the callback's (step_time, reward mean)
        if grad is None and post is not None and (self._max_norm is None or post < self._max_norm * (1 - 1e-6)):
            grad = post  # nothing was clipped: post-clip == pre-clip
        if grad is None:
            self._recorder().emit("train_step", step=step, grad_norm_clipped=post, **fields)
            return
        if self._grad is None:
            self._grad = GradNormProbe(max_norm=self._max_norm)
        self._grad._recorder = self._recorder()
        result = self._grad.observe(grad_norm=grad, step=step, emit=False)
        out = {**fields, **result.fields()}
        if post is not None:
            out["grad_norm_clipped"] = post
        self._recorder().emit("train_step", step=step, **out)

    def _flush_unlogged(self, before: int | None) -> None:
        for step in sorted(self._pending):
            if before is not None and step >= before:
                continue
            pending = self._pending.pop(step)
            pending.pop("measured_advantage", None)
            self._emit_train_step(step, pending, {})

    def _emit_scalars(self, step: int, logs: dict[str, Any], source: str) -> None:
        rec = self._recorder()
        for k, v in logs.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                rec.emit("scalar", step=step, name=k, value=float(v), source=source)


def instrument(trainer: Any, run_dir: str | None = None, **options: Any) -> RlobsGRPOCallback:
    """Wrap ``trainer.reward_funcs`` in place (their names, already read by TRL, do not change) and add an
    ``RlobsGRPOCallback``; returns it. Call before ``trainer.train()``."""
    cb = RlobsGRPOCallback(run_dir, **options)
    trainer.reward_funcs = cb.wrap_reward_funcs(list(trainer.reward_funcs))
    trainer.add_callback(cb)
    return cb


def _is_module(obj: Any) -> bool:
    try:
        import torch

        return isinstance(obj, torch.nn.Module)
    except ImportError:
        return False


def _text(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, Sequence):  # conversational: list of {"role", "content"}
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in x)
    return str(x)


__all__ = ["TRL_EPS", "RlobsGRPOCallback", "instrument"]
