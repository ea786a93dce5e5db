"""Does ``entropy-collapse`` tell a run that converged from one that collapsed? Long real trainer_ref runs.

    python bench/entropy_converged.py run   [--split tune|heldout] [--root DIR]   # record (resumable)
    python bench/entropy_converged.py score [--split tune|heldout] [--root DIR]   # doctor on every record

Why: the doctor's calibration runs (bench/doctor_calib.py) are 12-200 steps of ``tiny``, which barely learns, and
bench/early_warning.py's are 40-60 steps of ``tiny-packed``. Run ``tiny-packed`` on to 150-250 steps and it solves
the task: entropy falls from ~0.95 to 0.03-0.25 while held-out success holds at 0.8-0.9 -- and until 4 Dec 2026
``entropy-collapse`` warned there (step ~169 of two healthy 250-step runs). The rule now calls a collapse whose
training reward held near its ceiling (and whose held-out success held) a convergence, at info.

Ground truth needs no doctor: held-out success (64 unseen prompts x 4, every 10 steps). A run *converged* when its
last three evaluations' median is >= 0.6 and at least its first evaluation + 0.3; it *degenerated* when that median
is <= its first evaluation (or <= 0.05). Scored: every warning / critical finding on the converged runs (each one
a false alarm), and ``entropy-collapse``'s severity on the degenerated runs (a warning expected wherever it fires).

Splits (registered 4 Dec 2026 before any held-out run was recorded; the rule's held-reward guard and its numbers,
``held_window`` 20, ``held_gain`` 0.2, ``held_share`` 0.75, ``solved`` 0.6, ``heldout_drop`` 0.15, were chosen on
the tune split and the previous session's records -- dc9/dc10 ``tiny`` lr 3e-3 degenerations, two healthy 250-step runs -- and
frozen in the same commit as this file):
- tune: tiny-packed sync lr 3e-4 / 5e-4 and separate_async lr 3e-4, 250 steps, seed 900.
- heldout: tiny-packed, lr 3e-4 or 5e-4, 150-250 steps, in every mode, seeds 910-916; ``tiny`` at lr 3e-3 (4 groups
  x 8, doctor_calib's shape whose 200-step runs degenerated 17 of 17) in every mode, seeds 920-925, 200 steps;
  tiny-packed at lr 1.5e-3 (bench/early_warning.py's lr-too-high class), 100 steps, seeds 930-931.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `python bench/NAME.py`: bench._plan from the checkout

from bench._plan import cli, finished, record, save  # noqa: E402

OUT = ROOT / "bench/results/entropy_converged"
# reported apart, as bench/doctor_calib.py does: separate_async's staleness bound drops the long chain answers,
# which also fail more often, so the consumed batch is reward-shifted -- a true property of that configuration
BIAS = "selection-bias"

TP = ["--model", "tiny-packed"]
TINY = ["--model", "tiny", "--groups-per-step", "4", "--group-size", "8", "--lr", "3e-3"]
# name -> (mode, steps, seed, extra arguments)
PLAN: dict[str, dict[str, tuple[str, int, int, list[str]]]] = {
    "tune": {
        "tp-sync-lr3e-4-s900": ("sync", 250, 900, [*TP, "--lr", "3e-4"]),
        "tp-sync-lr5e-4-s900": ("sync", 250, 900, [*TP, "--lr", "5e-4"]),
        "tp-separate_async-lr3e-4-s900": ("separate_async", 250, 900, [*TP, "--lr", "3e-4"]),
    },
    "heldout": {
        "tp-sync-lr3e-4-s910": ("sync", 250, 910, [*TP, "--lr", "3e-4"]),
        "tp-sync-lr5e-4-s911": ("sync", 200, 911, [*TP, "--lr", "5e-4"]),
        "tp-separate_async-lr3e-4-s912": ("separate_async", 250, 912, [*TP, "--lr", "3e-4"]),
        "tp-separate_async-lr5e-4-s913": ("separate_async", 200, 913, [*TP, "--lr", "5e-4"]),
        "tp-colocate_async-lr3e-4-s914": ("colocate_async", 250, 914, [*TP, "--lr", "3e-4"]),
        "tp-colocate_async-lr5e-4-s915": ("colocate_async", 200, 915, [*TP, "--lr", "5e-4"]),
        "tp-sync-lr4e-4-s916": ("sync", 150, 916, [*TP, "--lr", "4e-4"]),
        **{f"tiny-{m}-lr3e-3-s{s}": (m, 200, s, TINY)
           for m, s in zip(("sync", "separate_async", "colocate_async") * 2, range(920, 926))},
        "tp-sync-lr1.5e-3-s930": ("sync", 100, 930, [*TP, "--lr", "1.5e-3"]),
        "tp-separate_async-lr1.5e-3-s931": ("separate_async", 100, 931, [*TP, "--lr", "1.5e-3"]),
    },
}


def run(split: str, root: Path, only: str = "") -> None:
    """Record every planned run not yet recorded (one ``python -m trainer_ref.run`` process each)."""
    record(root / split, {name: ["--mode", mode, "--steps", str(steps), "--seed", str(seed), "--eval-every", "10",
                                 "--deterministic", *extra]
                          for name, (mode, steps, seed, extra) in PLAN[split].items()}, only)


def truth(heldout: list[tuple[int, float]]) -> str:
    """converged / degenerated / neither, from held-out success alone (see the module's docstring)."""
    if len(heldout) < 4:
        return "unknown"
    first, last = heldout[0][1], statistics.median(v for _, v in heldout[-3:])
    if last >= 0.6 and last >= first + 0.3:
        return "converged"
    if last <= first or last <= 0.05:
        return "degenerated"
    return "neither"


def score_one(rd: Path) -> dict[str, Any]:
    import rlobs
    from rlobs.catalogue import HELDOUT_SCALARS
    from rlobs.doctor import Severity, diagnose

    with rlobs.open_run(rd) as rec:
        names = ", ".join(f"'{n}'" for n in HELDOUT_SCALARS)
        held = [(int(s), float(v)) for s, v in rec.sql(
            f"SELECT step, avg(value) FROM scalar WHERE name IN ({names}) AND isfinite(value) GROUP BY step "
            "ORDER BY step").fetchall()]
        ent = rec.sql("SELECT min(e), max(e) FROM (SELECT avg(entropy) e FROM train_step GROUP BY step)").fetchall()[0]
        rep = diagnose(rec)
        # the rule as it was before the guard: no run converges (held_gain out of reach)
        old = diagnose(rec, rule_ids=["entropy-collapse"], thresholds={"entropy-collapse": {"held_gain": 1e9}})
    ec = [f for f in rep.findings if f.rule == "entropy-collapse"]
    ec_old = [f for f in old.findings if f.rule == "entropy-collapse"]
    return {
        "truth": truth(held), "heldout": [round(v, 3) for _, v in held], "entropy_range": [round(x, 3) for x in ent],
        "entropy_collapse": (f"{ec[0].severity.name.lower()}@{ec[0].first_step}: {ec[0].title}" if ec else None),
        "entropy_collapse_without_guard": (f"{ec_old[0].severity.name.lower()}@{ec_old[0].first_step}" if ec_old
                                           else None),
        "warnings": sorted(f"{f.rule}:{f.severity.name.lower()}@{f.first_step}" for f in rep.findings
                           if f.severity >= Severity.WARNING and f.rule != BIAS),
        "bias_reported": [f"{f.rule}:{f.severity.name.lower()}" for f in rep.findings if f.rule == BIAS],
    }


def _warned(found: str | None) -> bool:
    return bool(found) and found.startswith("warning")


def score(split: str, root: Path, out: Path) -> dict[str, Any]:
    rows = {name: score_one(root / split / name) for name in PLAN[split]
            if finished(root / split / name)}
    conv = {n: r for n, r in rows.items() if r["truth"] == "converged"}
    degen = {n: r for n, r in rows.items() if r["truth"] == "degenerated"}
    summary = {
        "converged runs": len(conv),
        "converged runs with a warning or critical (false alarms)": sum(bool(r["warnings"]) for r in conv.values()),
        "converged runs where entropy-collapse fired": sum(bool(r["entropy_collapse"]) for r in conv.values()),
        "converged runs where entropy-collapse warned": sum(_warned(r["entropy_collapse"]) for r in conv.values()),
        "converged runs where it warned without the guard (the rule before 4 Dec 2026)": sum(
            _warned(r["entropy_collapse_without_guard"]) for r in conv.values()),
        "degenerated runs": len(degen),
        "degenerated runs where entropy-collapse fired": sum(bool(r["entropy_collapse"]) for r in degen.values()),
        "degenerated runs where entropy-collapse warned": sum(_warned(r["entropy_collapse"]) for r in degen.values()),
        "degenerated runs where it warned without the guard": sum(
            _warned(r["entropy_collapse_without_guard"]) for r in degen.values()),
        "other runs": len(rows) - len(conv) - len(degen),
        "runs with selection-bias reported (apart)": sum(bool(r["bias_reported"]) for r in rows.values()),
    }
    res = {"split": split, "summary": summary, "runs": rows}
    lines = [f"# entropy-collapse on long runs: {split} split", "", *(f"- {k}: {v}" for k, v in summary.items()), "",
             "| run | truth | held-out (first, last 3) | entropy min-max | entropy-collapse | without the guard "
             "| warnings / criticals | selection-bias |", "|---|---|---|---|---|---|---|---|"]
    for n, r in rows.items():
        h = r["heldout"]
        lines.append(f"| {n} | {r['truth']} | {h[0] if h else '-'} -> {h[-3:]} | {r['entropy_range']} | "
                     f"{r['entropy_collapse'] or '-'} | {r['entropy_collapse_without_guard'] or '-'} | "
                     f"{', '.join(r['warnings']) or '-'} | "
                     f"{', '.join(r['bias_reported']) or '-'} |")
    save(out, split, res, lines)
    return res


def main() -> None:
    cli(tuple(PLAN), run, score, "/tmp/rlobs-entropy-converged", OUT)


if __name__ == "__main__":
    main()
