"""The one configuration dataclass of the reference trainer, and its command-line parser.

Every field has a one-line explanation (shown by ``python -m trainer_ref.run --help``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

MODES = ("sync", "colocate_async", "separate_async")
GRADERS = ("exact", "rule", "code", "judge", "verbose")  # verbose: a flawed grader with a loophole (reward hacking)
AUDIT_GRADERS = ("exact", "rule", "verbose")  # in-process, cheap: the audit re-grades every training sample
INTERRUPT = ("resume", "abort", "wait")
# the tiny presets were built (and tuned) at 1e-3; a 135M model needs far less (2e-5 learns faster and
# saturates the echo task within 4 steps of 2 groups, which the doctor rightly flags as zero-std groups)
TINY_LR, REAL_LR = 1e-3, 1e-5


@dataclass
class Config:
    """Reference GRPO trainer settings."""

    mode: str = field(default="separate_async", metadata={"help": "sync | colocate_async | separate_async"})
    steps: int = field(default=20, metadata={"help": "optimiser steps to run (total, including resumed ones)"})
    run_dir: str = field(default="runs/trainer_ref", metadata={"help": "run record + checkpoints directory"})
    seed: int = field(default=0, metadata={"help": "seed of data order, sampling and init"})
    model: str = field(default="tiny", metadata={"help": "tiny | tiny-packed | tiny-dot (trainer_ref.model_build.PRESETS) | smollm2 | path to an HF model folder"})
    model_dir: str = field(default="", metadata={"help": "where to build/cache the model (default ~/.cache/rlobs)"})
    groups_per_step: int = field(default=8, metadata={"help": "prompts (GRPO groups) per optimiser step"})
    group_size: int = field(default=8, metadata={"help": "G: completions per prompt"})
    max_tokens: int = field(default=96, metadata={"help": "generation cap per completion (long tail ends here)"})
    max_model_len: int = field(default=256, metadata={"help": "vLLM max_model_len"})
    deterministic: bool = field(default=False, metadata={"help": "run vLLM's engine core inside the generator process (VLLM_ENABLE_V1_MULTIPROCESSING=0): batches form only when the generator steps the engine, so a sync run with the same seed is bit-reproducible (async modes stay timing-dependent)"})
    task: str = field(default="", metadata={"help": "prompt stream (trainer_ref.task.TASKS): arith | echo; empty: the model's (arith for the tiny presets, echo for smollm2 or a folder)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (same on both sides)"})
    chain_prob: float = field(default=0.15, metadata={"help": "share of long 'chain' prompts (long-tail lengths)"})
    eval_chain_prob: float = field(default=-1.0, metadata={"help": "share of chain prompts in the held-out evaluation (negative: chain_prob); a training mix unlike the task's, judged on the task's own mix (reward-hacking experiments: --chain-prob 0.9 --eval-chain-prob 0.15)"})
    lr: float = field(default=0.0, metadata={"help": f"Adam learning rate; 0: the model's ({TINY_LR} for the tiny presets, {REAL_LR} for smollm2 or a folder)"})
    lr_peak: float = field(default=0.0, metadata={"help": "linear warm-up: the learning rate rises from lr at step 0 to this at lr_warmup_steps and stays (0: constant lr)"})
    lr_warmup_steps: int = field(default=0, metadata={"help": "steps of the linear warm-up to lr_peak"})
    clip_eps: float = field(default=0.2, metadata={"help": "PPO ratio clip epsilon"})
    ppo_epochs: int = field(default=1, metadata={"help": "optimiser updates per step over the same batch (verl's ppo_epochs): the proximal log-probs are the step's first pass, so the ratio clip acts from the second update on; the policy version still advances once per step"})
    adv_eps: float = field(default=1e-4, metadata={"help": "epsilon in (r - mean) / (std + eps)"})
    kl_coef: float = field(default=0.0, metadata={"help": "KL-to-reference coefficient (0: no reference model)"})
    kl_clamp: float = field(default=10.0, metadata={"help": "per-token bound of the k3 KL to the reference, in the loss and in what is logged (verl's low_var_kl and OpenRLHF's k3 clamp at 10): a token the policy has all but dropped (a stale sample's) otherwise reads hundreds of nats and its gradient with it; a clamped token adds no KL gradient; 0: unbounded (trainer_ref before 6 Dec 2026)"})
    entropy_coef: float = field(default=0.0, metadata={"help": "entropy coefficient (verl's entropy_coeff): the loss subtracts coef x the mean token entropy, so > 0 is an entropy bonus (exploration) and < 0 minimises entropy (the EM-RL / RENT objective; too strong, it collapses the policy onto its own guesses); 0: off"})
    tis_cap: float = field(default=2.0, metadata={"help": "truncated importance-sampling cap C (0: off)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping threshold"})
    policy_change_samples: int = field(default=16, metadata={"help": "samples of each step re-scored after the update to measure how far it moved the policy (train_step.policy_kl; one no-grad forward over them; 0: off)"})
    max_staleness: int = field(default=2, metadata={"help": "drop samples with trainer version - dispatch version above this"})
    staleness_basis: str = field(default="dispatch", metadata={"help": "what max_staleness is checked on at consumption: dispatch (the oldest version a group was dispatched with) | completion (the newest version that wrote any of the group's tokens: with --interrupt resume a long group resumed across weight syncs is kept; its older tokens keep their generator log-probs and are importance-corrected, --tis-cap)"})
    rollout_ttl_s: float = field(default=120.0, metadata={"help": "drop samples older than this at consumption"})
    queue_capacity: int = field(default=32, metadata={"help": "bound of each queue between components, in groups"})
    interrupt: str = field(default="resume", metadata={"help": "on weight update: resume | abort | wait (in-flight requests)"})
    grader: str = field(default="rule", metadata={"help": "exact | rule | code | judge | verbose (a loophole: rewards unchecked shown work; reward-hacking experiments)"})
    audit_grader: str = field(default="exact", metadata={"help": "re-grade every graded training sample with this grader too (exact | rule | verbose; empty: off) and record the training reward's excess over it per step (scalar grader_audit_gap): an exact check beside a shaped or flawed reward shows a loophole on the samples themselves (reward hacking, issue 18)"})
    grader_placement: str = field(default="pool", metadata={"help": "pool (separate Ray actors) | colocated (in the generator)"})
    grader_workers: int = field(default=2, metadata={"help": "grader actors in the pool"})
    grader_timeout_s: float = field(default=5.0, metadata={"help": "per-call grader timeout"})
    max_restarts: int = field(default=4, metadata={"help": "Ray restarts of the generator and each grader actor after a death (-1: unlimited, 0: none); separate_async waits for the restart, re-syncs the weights and resubmits / re-grades the lost work"})
    restart_timeout_s: float = field(default=300.0, metadata={"help": "how long the driver waits for a restarted actor to answer before failing the run"})
    eval_every: int = field(default=0, metadata={"help": "held-out evaluation every N steps (0: start and end only)"})
    eval_prompts: int = field(default=64, metadata={"help": "held-out prompts per evaluation"})
    checkpoint_every: int = field(default=0, metadata={"help": "checkpoint every N steps (0: only at the end)"})
    resume: bool = field(default=False, metadata={"help": "resume from the latest checkpoint in run_dir"})
    dp: int = field(default=1, metadata={"help": "data-parallel trainer ranks (Ray actors; gradients and the token count all-reduced)"})
    num_cpus: int = field(default=2, metadata={"help": "CPUs given to ray.init"})
    object_store_mb: int = field(default=256, metadata={"help": "Ray object store size, MiB"})
    kv_cache_gb: int = field(default=1, metadata={"help": "VLLM_CPU_KVCACHE_SPACE, GiB"})
    probes: bool = field(default=True, metadata={"help": "probe calls on (off: every probe/telemetry call is a no-op)"})
    prometheus: bool = field(default=False, metadata={"help": "serve /metrics from each process"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    stop_after: int = field(default=0, metadata={"help": "stop (as if killed) after this many steps of this invocation (tests)"})
    fault: str = field(default="", metadata={"help": "injected fault (trainer_ref.faults; empty: none)"})
    fault_onset: int = field(default=5, metadata={"help": "first step the injected fault affects"})
    fault_magnitude: float = field(default=0.0, metadata={"help": "strength of the injected fault (0: its default)"})

    def __post_init__(self) -> None:
        for name, value, valid in (("mode", self.mode, MODES), ("grader", self.grader, GRADERS),
                                   ("interrupt", self.interrupt, INTERRUPT),
                                   ("staleness_basis", self.staleness_basis, ("dispatch", "completion")),
                                   ("grader_placement", self.grader_placement, ("pool", "colocated")),
                                   ("audit_grader", self.audit_grader, ("", *AUDIT_GRADERS))):
            if value not in valid:
                raise ValueError(f"{name}={value!r}; valid: {', '.join(valid)}")
        from trainer_ref.task import default_task, get_task

        self.task = self.task or default_task(self.model)
        get_task(self.task)  # ValueError naming the valid tasks
        if not self.lr:
            self.lr = TINY_LR if default_task(self.model) == "arith" else REAL_LR
        if self.dp < 1:
            raise ValueError("dp must be >= 1")
        if self.ppo_epochs < 1:
            raise ValueError("ppo_epochs must be >= 1 (optimiser updates per step)")
        if self.fault:
            from trainer_ref import faults

            faults.from_config(self)  # unknown fault, or a fault this configuration cannot inject
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2 (group-normalised advantages)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def parse_args(argv: list[str] | None = None) -> Config:
    """Build a Config from ``--field value`` flags (booleans: ``--flag`` / ``--no-flag``)."""
    p = argparse.ArgumentParser(prog="python -m trainer_ref.run", description=Config.__doc__)
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "")
        if f.type in ("bool", bool):
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=helptext)
        else:
            typ = {"int": int, "float": float, "str": str}[str(f.type)]
            p.add_argument(flag, dest=f.name, type=typ, default=f.default, help=f"{helptext} (default {f.default})")
    return Config(**vars(p.parse_args(argv)))
