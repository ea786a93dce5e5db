"""Evaluation of ``rlobs doctor`` on real trainer_ref runs: healthy seeds and every injected fault.

    python -m bench.doctor_eval [--faults a,b] [--seeds 3] [--steps 14] [--onset 5]

One Ray session, one model build and one set of actors (vLLM generator, trainer, graders) serve every
run: each run points the actors at its own record (``set_run``) and config (fault, seed), the trainer
is reset to the initial weights, and ``trainer_ref.run.train`` runs in-process. Resume faults run two
invocations (``--stop-after onset`` then ``--resume``); between them the generator is restarted to the
base model (what a crash does to a fresh engine). Then the doctor reads each record and is scored:
recall (the expected rule fires), top-1 (the first ranked finding is the expected rule), false positives
(warning/critical findings on healthy runs) and the delay from onset to the expected finding's first step.
Results: ``bench/results/doctor_eval.json`` and ``bench/results/doctor_eval.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from trainer_ref.faults import EXPECTED_FINDING, NEEDS_DP

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# fault -> (expected top-1 rule, allowed onset-to-detection delay): one table, in trainer_ref.faults
EXPECTED: dict[str, tuple[str, int]] = EXPECTED_FINDING
SMALL = dict(groups_per_step=4, group_size=4, max_tokens=48, eval_prompts=4, progress=False, grader_workers=1,
             grader_timeout_s=2.0, mode="separate_async")
ONSET_ZERO = ("sampling_mismatch",)  # configured from the start: the mismatch exists at step 0


class Stack:
    """Ray + model + actors, shared by every run."""

    def __init__(self, root: Path, settings: dict[str, Any] | None = None) -> None:
        from trainer_ref.config import Config
        from trainer_ref.model_build import tokenizer_hash
        from trainer_ref.run import resolve_model, start_actors, start_ray

        base = Config(run_dir=str(root / "_actors"), **(settings or SMALL))
        self.model_dir = resolve_model(base)
        start_ray(base)
        self.hashes = {"tokenizer": tokenizer_hash(self.model_dir), "sampling": f"T={base.temperature},max={base.max_tokens}"}
        self.actors = start_actors(base, self.model_dir, self.hashes)
        self._dp: dict[int, list[Any]] = {}  # extra data-parallel trainer ranks, started on first use

    def actors_for(self, cfg: Any) -> dict[str, Any]:
        """The shared actors, with ``cfg.dp`` trainer ranks (one process group per dp, made once)."""
        if cfg.dp <= 1:
            return self.actors
        if cfg.dp not in self._dp:
            from trainer_ref.run import start_trainers

            self._dp[cfg.dp] = start_trainers(cfg, self.model_dir, self.hashes)
        ranks = self._dp[cfg.dp]
        return {**self.actors, "trainer": ranks[0], "trainers": ranks}

    def point(self, cfg: Any) -> None:
        """Actors record into ``cfg.run_dir`` with ``cfg``'s fault."""
        import ray

        from trainer_ref.run import trainer_ranks

        actors = self.actors_for(cfg)
        handles = [actors["generator"], *trainer_ranks(actors), *actors["graders"]]
        ray.get([h.set_run.remote(cfg.run_dir, cfg.to_dict(), self.hashes) for h in handles])

    def restart_generator(self) -> None:
        """The generator serves the base model at version 0 again (a fresh engine after a crash)."""
        import ray

        tr, gen = self.actors["trainer"], self.actors["generator"]
        ray.get(tr.reset.remote(self.model_dir))
        meta = ray.get(tr.sync_out.remote())
        ray.get(gen.update_weights.remote(meta["ref"], 0, meta["fingerprints"], meta["shapes"], "abort"))

    def close(self) -> None:
        import ray

        from trainer_ref.run import stop_actors

        for ranks in self._dp.values():
            stop_actors({"trainers": ranks, "graders": []})
        stop_actors(self.actors)
        ray.shutdown()


def run_one(stack: Stack, run_dir: Path, fault: str, seed: int, steps: int, onset: int) -> dict[str, Any]:
    from trainer_ref.config import Config
    from trainer_ref.run import train

    shutil.rmtree(run_dir, ignore_errors=True)
    onset = 0 if fault in ONSET_ZERO else onset
    t0 = time.time()
    if fault.startswith("resume_"):
        first = Config(run_dir=str(run_dir), seed=seed, steps=steps, stop_after=onset, **SMALL)
        stack.point(first)
        train(first, stack.actors, stack.model_dir)
        stack.restart_generator()
        cfg = Config(run_dir=str(run_dir), seed=seed, steps=steps, resume=True, fault=fault, fault_onset=onset, **SMALL)
    else:
        dp = 2 if fault in NEEDS_DP else 1  # a per-rank fault needs data-parallel ranks
        cfg = Config(run_dir=str(run_dir), seed=seed, steps=steps, fault=fault, fault_onset=onset, dp=dp, **SMALL)
    stack.point(cfg)
    train(cfg, stack.actors_for(cfg), stack.model_dir)
    return {"onset": onset if fault else None, "run_seconds": round(time.time() - t0, 1)}


def score(run_dir: Path, fault: str, onset: int | None) -> dict[str, Any]:
    import rlobs
    from rlobs.doctor import Severity, diagnose

    rep = diagnose(rlobs.open_run(run_dir))
    fired = [f.rule for f in rep.findings]
    out: dict[str, Any] = {"findings": [f"{f.rule}:{f.severity.name.lower()}@{f.first_step}" for f in rep.findings],
                           "top1": fired[0] if fired else None, "exit_code": rep.exit_code,
                           "rule_errors": rep.errors}
    if not fault:
        out["false_positives"] = [f.rule for f in rep.findings if f.severity >= Severity.WARNING]
        return out
    want, allowed = EXPECTED[fault]
    hit = next((f for f in rep.findings if f.rule == want), None)
    delay = (hit.first_step - onset) if hit is not None and hit.first_step is not None else None
    out.update(expected=want, recall=hit is not None, top1_ok=bool(fired) and fired[0] == want, delay=delay,
               allowed_delay=allowed, in_time=delay is not None and delay <= allowed)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | expected rule | recall | top-1 | delay (allowed) | top-1 found | warn/crit on healthy |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['name']} | {r.get('expected', '-')} | run failed | | | {r['error'][:60]} | |")
        elif r["fault"]:
            lines.append(f"| {r['name']} | {r['expected']} | {'yes' if r['recall'] else 'NO'} | "
                         f"{'yes' if r['top1_ok'] else 'NO'} | {r['delay']} ({r['allowed_delay']}) | {r['top1']} | |")
        else:
            lines.append(f"| {r['name']} | (none) | | | | {r['top1']} | {', '.join(r['false_positives']) or 'none'} |")
    return "\n".join(lines)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    faults = [r for r in rows if r["fault"] and not r.get("error")]
    healthy = [r for r in rows if not r["fault"] and not r.get("error")]
    n = len(faults)
    return {"fault_runs": n, "healthy_runs": len(healthy),
            "recall": sum(r["recall"] for r in faults) / n if n else None,
            "top1": sum(r["top1_ok"] for r in faults) / n if n else None,
            "in_time": sum(r["in_time"] for r in faults) / n if n else None,
            "healthy_with_warnings": sum(1 for r in healthy if r["false_positives"]),
            "failed_runs": [r["name"] for r in rows if r.get("error")]}


def rescore(root: Path, out: Path) -> int:
    """Diagnose the already recorded runs again (after a doctor change) and rewrite the table."""
    res = json.loads(out.with_suffix(".json").read_text())
    keep = ("name", "fault", "seed", "onset", "run_seconds", "error")
    rows = []
    for r in res["runs"]:
        row = {k: r[k] for k in keep if k in r}
        if r["fault"]:
            row["expected"] = EXPECTED[r["fault"]][0]
        if not row.get("error"):
            row.update(score(root / r["name"], r["fault"], r.get("onset")))
        rows.append(row)
    res.update(summary=summarise(rows), runs=rows)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    out.with_suffix(".md").write_text(table(rows) + "\n\n" + json.dumps(res["summary"]) + "\n")
    print(table(rows))
    print(json.dumps(res["summary"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    from trainer_ref.faults import FAULTS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated fault names ('' for none)")
    p.add_argument("--seeds", type=int, default=3, help="healthy runs (seeds 0..N-1)")
    p.add_argument("--steps", type=int, default=14)  # the calibration harness's length (was 10: see README)
    p.add_argument("--onset", type=int, default=5)
    p.add_argument("--root", default="runs/doctor_eval", help="where the run records go")
    p.add_argument("--out", default="bench/results/doctor_eval")
    p.add_argument("--rescore", action="store_true", help="only re-run the doctor on the records of the saved table")
    a = p.parse_args(argv)
    if a.rescore:
        return rescore(Path(a.root), Path(a.out))
    faults = [f for f in a.faults.split(",") if f]
    root = Path(a.root)
    root.mkdir(parents=True, exist_ok=True)
    healthy = [(f"healthy-s{s}", "", s) for s in range(a.seeds)]
    plan = healthy[:1] + [(f, f, 100) for f in faults] + healthy[1:]  # the fault table first, more seeds last
    stack = Stack(root)
    rows: list[dict[str, Any]] = []
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for name, fault, seed in plan:
            run_dir = root / name
            row: dict[str, Any] = {"name": name, "fault": fault, "seed": seed}
            if fault:
                row["expected"] = EXPECTED[fault][0]
            try:
                row.update(run_one(stack, run_dir, fault, seed, a.steps, a.onset))
                row.update(score(run_dir, fault, row["onset"]))
            except Exception as e:  # one broken run must not lose the table
                row["error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
            res = {"steps": a.steps, "onset": a.onset, "config": SMALL, "summary": summarise(rows), "runs": rows}
            out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
            out.with_suffix(".md").write_text(table(rows) + "\n\n" + json.dumps(res["summary"]) + "\n")
    finally:
        stack.close()
    # the actors' recorders flush asynchronously: score every record again now that all are closed
    return rescore(root, out)


if __name__ == "__main__":
    sys.exit(main())
