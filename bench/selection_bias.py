"""Does ``selection-bias`` warn on healthy asynchronous runs? Real trainer_ref runs, scored by the doctor.

    python bench/selection_bias.py run   [--split heldout] [--root DIR]   # record (resumable)
    python bench/selection_bias.py score [--split tune|heldout] [--root DIR]

Why: a separate_async trainer at max staleness 2 drops a quarter of its samples as stale, and the dropped ones are
the long answers (1.8-2.1x the consumed ones' length on ``tiny-packed``), which also fail more often. Over 60 steps
the dropped samples' mean reward sits 0.19-0.29 under the consumed ones', around the rule's ``reward_gap`` (0.25),
so ``selection-bias`` warned ("the batch's reward distribution is not the policy's") on **7 of the 18** healthy
separate_async runs of bench/early_warning.py's thirtieth to thirty-seventh runs (``/work/records/ew30``-``ew37``,
the tune split). Every earlier bench reported the rule apart for that reason (bench/doctor_calib.py,
bench/entropy_converged.py, bench/solved_task.py). A warning on a healthy run is a defect.

What the tune records show: compared at the same completion length, the gap is gone. Stratified by the consumed
samples' length deciles, the dropped samples' reward is -0.03..+0.04 from the consumed ones' on all 18 healthy
async runs and all 18 staleness-no-is runs (stratified by the policy version they were generated with instead, the
gap stays -0.19..-0.28): the reward gap is the length bias seen through the reward, which the rule already reports
(at info, with the length ratio and the share of tokens thrown away). A drop that selects on the reward itself
(a grader that is slow on wrong answers, a TTL that catches the failures) still shows at the same length.

Registered 6 Dec 2026 before any held-out run was recorded, the change frozen in a commit before the held-out split
is scored:
- The change: the reward leg compares dropped and consumed samples **at the same length**: the consumed samples'
  completion-length deciles make up to 10 strata (``length_strata``; 1 is the rule as it was, the raw gap), the
  gap is the dropped-weighted mean of the per-stratum differences (a dropped sample outside the consumed range
  goes to the nearest stratum), its standard error from the strata's variances; a warning when that gap clears
  the unchanged ``reward_gap`` 0.25 with Welch z > the unchanged ``z`` 4. Without lengths, the raw gap as before.
  A raw gap the lengths explain is shown as evidence of the info finding. No other number changes.
- Tune split: the 36 separate_async records of ew30-ew37 above (healthy-async s20-37, staleness-no-is s42-59).
- Held-out split (fresh seeds, 60 steps unless said): healthy-async s38-43, healthy-async 100 steps s44-45,
  max staleness 1 s300-302, TIS cap 5 s300-302, no IS at max staleness 2 s300-302, colocate_async without IS
  s300-302 (the healthy variants of bench/early_warning.py), and staleness-no-is s60-62 (a collapse class: its
  selection-bias severity is reported, not scored): 23 runs.
- Bar: **0 selection-bias warnings on the 20 healthy held-out runs** (the old rule, scored on the same records with
  ``length_strata`` 1, for comparison); every other warning or critical the doctor gives a healthy held-out run is
  listed and counts as a false alarm; the synthetic cases of tests/doctor/test_bottleneck.py (a reward gap at
  every length, most samples dropped) still warn.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `python bench/NAME.py`: bench._plan from the checkout

from bench._plan import cli, finished, record, save  # noqa: E402
from bench.early_warning import CLASSES, COMMON, HEALTHY_ASYNC, HEALTHY_ASYNC_NO_IS, HEALTHY_VARIANTS  # noqa: E402

OUT = ROOT / "bench/results/selection_bias"
RULE = "selection-bias"
TUNE_ROOTS = [Path(f"/work/records/ew{n}") for n in (30, 31, 32, 33, 37)]
TUNE = ([f"healthy-async-s{s}" for s in range(20, 38)] + [f"staleness-no-is-s{s}" for s in range(42, 60)])


def _heldout() -> dict[str, tuple[bool, int, list[str]]]:
    """name -> (healthy, steps, trainer_ref arguments)."""
    plan: dict[str, tuple[bool, int, list[str]]] = {}
    plan.update({f"healthy-async-s{s}": (True, 60, HEALTHY_ASYNC) for s in range(38, 44)})
    plan.update({f"healthy-async-100st-s{s}": (True, 100, HEALTHY_ASYNC) for s in (44, 45)})
    for variant in ("healthy-async-stale1", "healthy-async-tis5", "healthy-colocate-nois"):
        plan.update({f"{variant}-s{s}": (True, 60, HEALTHY_VARIANTS[variant][1]) for s in (300, 301, 302)})
    plan.update({f"healthy-async-nois-s{s}": (True, 60, HEALTHY_ASYNC_NO_IS) for s in (300, 301, 302)})
    plan.update({f"staleness-no-is-s{s}": (False, 60, CLASSES["staleness-no-is"][1]) for s in (60, 61, 62)})
    return plan


HELDOUT = _heldout()


def run(split: str, root: Path, only: str = "") -> None:
    if split != "heldout":
        raise SystemExit("the tune split's records are bench/early_warning.py's (/work/records/ew30-ew37)")
    common = [a for a in COMMON if a != "--no-progress"]  # record() adds it
    record(root / split, {name: [*common, "--steps", str(steps), "--seed", name.rsplit("-s", 1)[1], *args]
                          for name, (_, steps, args) in HELDOUT.items()}, only)


def _dirs(split: str, root: Path) -> dict[str, tuple[Path, bool]]:
    """name -> (record directory, healthy) for the split's records at hand."""
    if split == "tune":
        out = {}
        for name in TUNE:
            for r in TUNE_ROOTS:
                if (r / name / "manifest.json").is_file():
                    out[name] = (r / name, name.startswith("healthy"))
        return out
    return {name: (root / split / name, healthy) for name, (healthy, _, _) in HELDOUT.items()
            if finished(root / split / name)}


def _bias(report: Any) -> dict[str, Any] | None:
    f = next((f for f in report.findings if f.rule == RULE), None)
    if f is None:
        return None
    return {"severity": f.severity.name.lower(), "title": f.title,
            "evidence": {e.metric: e.observed for e in f.evidence}}


def score_one(rd: Path) -> dict[str, Any]:
    import rlobs
    from rlobs.doctor import Severity, diagnose

    with rlobs.open_run(rd) as rec:
        rep = diagnose(rec)
        old = diagnose(rec, rule_ids=[RULE], thresholds={RULE: {"length_strata": 1}})
    return {"selection_bias": _bias(rep), "selection_bias_old": _bias(old),
            "warnings": sorted(f"{f.rule}:{f.severity.name.lower()}@{f.first_step}" for f in rep.findings
                               if f.severity >= Severity.WARNING)}


def _sev(b: dict[str, Any] | None) -> str:
    return b["severity"] if b else "-"


def score(split: str, root: Path, out: Path) -> dict[str, Any]:
    rows = {name: {"healthy": healthy, **score_one(rd)} for name, (rd, healthy) in _dirs(split, root).items()}
    healthy = {n: r for n, r in rows.items() if r["healthy"]}
    summary = {
        "runs": len(rows), "healthy runs": len(healthy),
        "healthy runs where selection-bias warned": sum(_sev(r["selection_bias"]) == "warning"
                                                        for r in healthy.values()),
        "healthy runs where the old rule (length_strata 1) warned": sum(
            _sev(r["selection_bias_old"]) == "warning" for r in healthy.values()),
        "healthy runs with any warning or critical (false alarms)": sum(bool(r["warnings"])
                                                                        for r in healthy.values()),
        "collapse-class runs where selection-bias warned": sum(_sev(r["selection_bias"]) == "warning"
                                                               for r in rows.values() if not r["healthy"]),
    }
    res = {"split": split, "summary": summary, "runs": rows}

    def ev(b: dict[str, Any] | None, key: str) -> str:
        if not b:
            return "-"
        hit = [v for k, v in b["evidence"].items() if key in k]
        return ", ".join(f"{v:+.3f}" if isinstance(v, float) else str(v) for v in hit) or "-"

    lines = [f"# selection-bias on separate_async runs: {split} split", "",
             *(f"- {k}: {v}" for k, v in summary.items()), "",
             "| run | healthy | selection-bias | old rule | length ratio | reward gap | at the same length "
             "| warnings / criticals (any rule) |",
             "|---|---|---|---|---|---|---|---|"]
    for n, r in rows.items():
        b = r["selection_bias"]
        lines.append(f"| {n} | {'yes' if r['healthy'] else 'no'} | {_sev(b)} | {_sev(r['selection_bias_old'])} | "
                     f"{ev(b, 'completion tokens')} | {ev(r['selection_bias_old'], 'mean reward')} | "
                     f"{ev(b, 'at the same length')} | {', '.join(r['warnings']) or '-'} |")
    save(out, split, res, lines)
    return res


def main() -> None:
    cli(("heldout", "tune"), run, score, "/work/records/selection_bias", OUT)


if __name__ == "__main__":
    main()
