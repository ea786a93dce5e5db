"""Does the doctor tell a task the policy solved from a failure? Short real runs that reach their ceiling.

    python bench/solved_task.py run   [--split tune|heldout] [--root DIR]   # record (resumable)
    python bench/solved_task.py score [--split tune|heldout] [--root DIR]   # doctor on every record

Why: ``make main MODEL=smollm2`` (README's second main job: SmolLM2-135M on its echo task, 12 steps) goes from
reward 0.83 to 1.0 by step 5, and on 3 Dec 2026 the doctor answered it with two warnings: every group zero-std
(``advantage-zero-std-groups``) and entropy 0.41 -> 0.005 (``entropy-collapse``). Both are true of a solved task
and neither is a failure: a warning on a healthy run is a defect. entropy-collapse's convergence guard
(bench/entropy_converged.py) needs a 20-step window and a reward gain of 0.2, which a 12-step run near its
ceiling from the start cannot show.

The change (frozen in the commit that adds this file, before any run below was recorded; numbers set from the
3 Dec run's description, not tuned): ``rlobs.doctor.rules.aggregates.task_solved`` -- over the flagged steps the
training reward (bounded in [0, 1]) averages >= 0.9, and every held-out evaluation from the first flagged step on
(at least one) is >= max(0.85, that average - 0.1). Both rules then answer at info. The held-out leg is what tells
a solved task from a grader that turned constant at 1: that lifts the training reward, not held-out success
(trainer_ref grades it with an exact check on prompts it never trains on).

Scored, per run: every warning / critical of any rule (on a healthy run each is a false alarm;
``selection-bias`` reported apart, as in bench/doctor_calib.py), and the two rules' severity with the solved leg
and without it (``solved_reward`` 2: out of reach, the rules before this change). On the fault runs the expected
answer is ``advantage-zero-std-groups`` at warning (and any entropy-collapse at warning).

Splits (registered 4 Dec 2026, before any of these runs was recorded):
- tune: the README command itself, ``make main MODEL=smollm2``'s settings (separate_async, lr 2e-5, 12 steps of
  4 groups x 4, 16 tokens, held-out 32 prompts x 4 every 4 steps), seed 0. Checks the mechanics; nothing is tuned
  on it unless it fails, and then the held-out split is scored under whatever is frozen next, reported as such.
- heldout: the same settings, seeds 1-3, one in each mode (sync, colocate_async, separate_async): healthy.
  Fault runs, a grader constant at reward 1 for 7 prompts in 8 (``--fault zero_std --fault-magnitude 1``):
  SmolLM2, same settings, onset step 2, seed 4 (the model would solve the task; the grader hides that it has not
  yet); tiny-packed, lr 3e-4, 30 steps, onset 10, seeds 960 (sync) and 961 (separate_async).

Amended 4 Dec 2026 after the tune run, before any held-out run was recorded. The tune run (reward 0.83 -> 1.0 by
step 5, held-out 0.59 -> 1.0) drew neither rule -- its entropy rose to 0.095 at step 7, under 5 steps in a row, and
its zero-std streak's bound stayed under 0.7 -- but ``precursor-oversized-updates`` warned at step 5: 4 of the 5
updates of steps 1-5 moved the policy over 0.015 nats/token, judged at step 5, the first step with no gradient at all
(every group all correct; Adam's momentum alone moved it 3e-5 nats). The precursor now judges only steps that had
a gradient (``no_gradient_eps`` 1e-10, no-gradient's eps); on the 17 recorded runs in tests/early_warning/data its
first warnings are unchanged. Scored like the two rules: with the guard and without it (``no_gradient_eps`` -1).

Review mends (4 Dec 2026, after the held-out split was scored once; rescored on the same records, the same figures):
the reward must hold over the whole stretch (its lowest ``solved_window``-step mean, 5, not its average); only the
evaluations of the flagged steps count (or else the first one after them); entropy-collapse falls back to the
solved-task test only when its long-run guard could not judge the run (too short, or no room for the gain).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `python bench/NAME.py`: bench._plan from the checkout

from bench._plan import cli, finished, record, save  # noqa: E402

OUT = ROOT / "bench/results/solved_task"
BIAS = "selection-bias"
RULES = ("advantage-zero-std-groups", "entropy-collapse", "precursor-oversized-updates")
# each rule as it was before this change: the solved leg out of reach, every step judged
BEFORE = {"advantage-zero-std-groups": {"solved_reward": 2.0}, "entropy-collapse": {"solved_reward": 2.0},
          "precursor-oversized-updates": {"no_gradient_eps": -1.0}}

# the Makefile's MAIN_ARGS for MODEL=smollm2
SMOL = ["--model", "smollm2", "--lr", "2e-5", "--steps", "12", "--groups-per-step", "4", "--group-size", "4",
        "--max-tokens", "16", "--eval-every", "4", "--eval-prompts", "32"]
CONST1 = ["--fault", "zero_std", "--fault-magnitude", "1"]
TP = ["--model", "tiny-packed", "--lr", "3e-4", "--steps", "30", "--eval-every", "10"]
# name -> (mode, seed, extra arguments, healthy)
PLAN: dict[str, dict[str, tuple[str, int, list[str], bool]]] = {
    "tune": {"smol-separate_async-s0": ("separate_async", 0, SMOL, True)},
    "heldout": {
        "smol-sync-s1": ("sync", 1, SMOL, True),
        "smol-colocate_async-s2": ("colocate_async", 2, SMOL, True),
        "smol-separate_async-s3": ("separate_async", 3, SMOL, True),
        "smol-const1-onset2-s4": ("separate_async", 4, [*SMOL, *CONST1, "--fault-onset", "2"], False),
        "tp-sync-const1-onset10-s960": ("sync", 960, [*TP, *CONST1, "--fault-onset", "10"], False),
        "tp-separate_async-const1-onset10-s961": ("separate_async", 961, [*TP, *CONST1, "--fault-onset", "10"],
                                                  False),
    },
}


def run(split: str, root: Path, only: str = "") -> None:
    """Record every planned run not yet recorded (one ``python -m trainer_ref.run`` process each)."""
    record(root / split, {name: ["--mode", mode, "--seed", str(seed), *extra]
                          for name, (mode, seed, extra, _) in PLAN[split].items()}, only)


def _sev(findings: list[Any], rule: str) -> str | None:
    f = next((f for f in findings if f.rule == rule), None)
    return f"{f.severity.name.lower()}@{f.first_step}" if f else None


def score_one(rd: Path) -> dict[str, Any]:
    import rlobs
    from rlobs.catalogue import HELDOUT_SCALARS
    from rlobs.doctor import Severity, diagnose

    with rlobs.open_run(rd) as rec:
        names = ", ".join(f"'{n}'" for n in HELDOUT_SCALARS)
        held = [round(float(v), 3) for _, v in rec.sql(
            f"SELECT step, avg(value) FROM scalar WHERE name IN ({names}) AND isfinite(value) GROUP BY step "
            "ORDER BY step").fetchall()]
        reward = [round(float(v), 3) for _, v in rec.sql(
            "SELECT step, avg(reward_mean) FROM train_step GROUP BY step ORDER BY step").fetchall()]
        ent = rec.sql("SELECT min(e), max(e) FROM (SELECT avg(entropy) e FROM train_step GROUP BY step)").fetchall()[0]
        rep = diagnose(rec)
        old = diagnose(rec, rule_ids=list(RULES), thresholds=BEFORE)
    return {
        "heldout": held, "reward": reward, "entropy_range": [round(float(x), 3) for x in ent],
        **{r: _sev(rep.findings, r) for r in RULES},
        **{f"{r} before": _sev(old.findings, r) for r in RULES},
        "warnings": sorted(f"{f.rule}:{f.severity.name.lower()}@{f.first_step}" for f in rep.findings
                           if f.severity >= Severity.WARNING and f.rule != BIAS),
        "bias_reported": [f"{f.rule}:{f.severity.name.lower()}" for f in rep.findings if f.rule == BIAS],
    }


def _warned(found: str | None) -> bool:
    return bool(found) and not found.startswith("info")


def score(split: str, root: Path, out: Path) -> dict[str, Any]:
    rows = {name: {"healthy": healthy, **score_one(root / split / name)}
            for name, (_, _, _, healthy) in PLAN[split].items() if finished(root / split / name)}
    ok = {n: r for n, r in rows.items() if r["healthy"]}
    bad = {n: r for n, r in rows.items() if not r["healthy"]}
    summary = {
        "healthy runs": len(ok),
        "healthy runs with a warning or critical (false alarms)": sum(bool(r["warnings"]) for r in ok.values()),
        **{f"healthy runs where {r} warned (before this change)":
           f"{sum(_warned(x[r]) for x in ok.values())} ({sum(_warned(x[f'{r} before']) for x in ok.values())})"
           for r in RULES},
        "constant-grader runs": len(bad),
        "constant-grader runs where advantage-zero-std-groups warned": sum(
            _warned(r["advantage-zero-std-groups"]) for r in bad.values()),
        "constant-grader runs where entropy-collapse fired / warned": (
            f"{sum(bool(r['entropy-collapse']) for r in bad.values())} / "
            f"{sum(_warned(r['entropy-collapse']) for r in bad.values())}"),
        "runs with selection-bias reported (apart)": sum(bool(r["bias_reported"]) for r in rows.values()),
    }
    res = {"split": split, "summary": summary, "runs": rows}
    lines = [f"# Solved tasks vs failures: {split} split", "", *(f"- {k}: {v}" for k, v in summary.items()), "",
             "| run | healthy | training reward (first, last) | held-out | entropy min-max | zero-std (before) | "
             "entropy-collapse (before) | oversized-updates (before) | warnings / criticals |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n, r in rows.items():
        cells = " | ".join(f"{r[x] or '-'} ({r[x + ' before'] or '-'})" for x in RULES)
        lines.append(f"| {n} | {r['healthy']} | {r['reward'][:1]} -> {r['reward'][-1:]} | {r['heldout']} | "
                     f"{r['entropy_range']} | {cells} | {', '.join(r['warnings']) or '-'} |")
    save(out, split, res, lines)
    return res


def main() -> None:
    cli(tuple(PLAN), run, score, "/tmp/rlobs-solved-task", OUT)


if __name__ == "__main__":
    main()
