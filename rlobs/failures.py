"""The failure table: one row per failure id, the single source the alert generator, the doctor, the runbook
checks and their tests read, so they cannot disagree.

A row holds the failure's severity (the alert's label; the doctor's worst case), the alert's ``for:``
(None: no live alert, the failure is only visible in the record), whether a doctor rule judges it, the
numbers both sides use (``thresholds``: the doctor rule's defaults *and* the alert's bar where the alert
has the same notion), alert-only numbers (``alert_thresholds``), and the runbook (``runbooks/<id>.md``).
Panels come from the runbook's "Panels to open" (checked against the generated boards by the runbook
tests), metrics from the alert expression and the catalogue. ``rlobs explain ID`` prints the chain
metric -> panel -> alert -> rule -> runbook.

Heartbeat silence: 120 s on both sides (the doctor used 60 s, the alert 120 s: a 60 s stall was a doctor
critical and no page). Zero-std groups: 0.75 of the groups on both sides (the doctor additionally asks the
pooled share's Wilson lower bound to clear ``min_share``: it sees group counts, the alert a ratio). A grad
norm spike alone is info on both sides: what it does next (NaN, loss/reward break, entropy collapse) is a
critical finding and its own alert.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlobs.detect import SPIKE


@dataclass(frozen=True)
class Failure:
    id: str
    severity: str  # "critical" | "warning" | "info": the alert label and the doctor's worst severity
    alert_for: str | None  # the alert's `for:`; None when there is no live alert
    rule: bool  # a doctor rule of the same id judges the record
    thresholds: Mapping[str, float] = field(default_factory=dict)  # shared by the doctor rule and the alert
    alert_thresholds: Mapping[str, float] = field(default_factory=dict)  # the alert's own numbers
    metrics: tuple[str, ...] = ()  # live metrics to watch beyond the alert's (a failure without an alert)

    @property
    def alert(self) -> bool:
        return self.alert_for is not None

    @property
    def runbook(self) -> str:
        return f"runbooks/{self.id}.md"


def _f(id: str, severity: str, alert_for: str | None, rule: bool = True, thresholds: Mapping[str, float] | None = None,
       alert_thresholds: Mapping[str, float] | None = None, metrics: tuple[str, ...] = ()) -> Failure:
    return Failure(id, severity, alert_for, rule, dict(thresholds or {}), dict(alert_thresholds or {}), metrics)


# the precursor rules' drift detector (rlobs.detect.DriftDetector, fast-drift mode): the median of the last
# ``window`` steps vs the median of the ``baseline`` steps ending ``lag`` steps earlier, ``h`` robust sigmas (noise
# floored at ``min_rel`` x level and ``min_abs``) and ``min_effect`` apart; ``h`` and ``min_effect`` chosen on the
# doctor's calibration runs (bench/doctor_calib.py, third pass; README, "Early warning"). Window 5 / baseline 8 /
# lag 5 (was 3 / 4 / 3) since the doctor's sixth calibration pass: a 100-step run gives the detector ~100 looks, and at a 3-step window
# two consecutive natural grad-norm steps of 11-17x (or two all-zero-std steps) moved the median; a 4-step baseline's
# MAD is noise itself. On the 90 healthy development runs of doctor_calib passes 4-5 (12-200 steps, every mode) the
# old window warned on 4, this one on none (tests/early_warning/test_precursors.py replays the 4); on the collapse
# records neither warns before the drop (README, "How accurate is the doctor", sixth pass). ``k`` is unused here.
_DRIFT = {"lag": 5, "baseline": 8, "window": 5, "skip": 0, "h": 3.0, "k": 1.0, "min_rel": 0.1, "min_abs": 1e-3}

# A task the policy solved outright, not a failure: over the flagged steps the training reward (bounded in [0, 1])
# holds >= solved_reward and held-out success (an exact check on unseen prompts) is >= solved_heldout and within
# solved_gap of it. The doctor's zero-std and entropy-collapse rules answer such steps at info, and the zero-std
# alert stays quiet (a grader constant at 1 lifts the training reward, not held-out success). Set from `make main
# MODEL=smollm2` (reward 0.83 -> 1.0 by step 5, held-out 0.62 -> 0.99), scored in bench/solved_task.py.
SOLVED = {"solved_reward": 0.9, "solved_heldout": 0.85, "solved_gap": 0.1,
          # the reward must hold over the whole stretch, not on average: its lowest 5-step mean (review, 4 Dec 2026)
          "solved_window": 5}

FAILURES: dict[str, Failure] = {f.id: f for f in (
    # liveness
    _f("process-down", "critical", "30s", rule=False),
    _f("no-progress", "critical", "0m", rule=False,
       alert_thresholds={"floor_seconds": 60.0, "step_multiple": 5.0, "pause_multiple": 5.0,
                         "pause_floor_seconds": 600.0}),
    _f("heartbeat-lost", "critical", "1m", thresholds={"silence_s": 120.0}),
    _f("incident-declared", "warning", "0m", rule=False),
    _f("record-damaged", "warning", None),
    _f("telemetry-drops", "warning", "2m"),
    # staleness and the ledger
    _f("staleness-over-bound", "warning", "2m", thresholds={"warn_versions": 4}),
    _f("staleness-jump-after-resume", "critical", None),
    _f("staleness-growing", "warning", None),
    # a configuration's risk, not a precursor (twenty-second run of bench/early_warning.py: as a warning it caught
    # every fall and warned on the runs that learned too): no correction at a 5-step median staleness of 3+ versions
    # (the lag-4 runs' 2.9-3.9 from step 5; a max-staleness-2 run cannot reach it), 2 steps running
    _f("staleness-uncorrected", "info", None, thresholds={"window": 5, "min_versions": 3.0, "min_steps": 2}),
    _f("ledger-samples-repeated", "critical", "0m"),
    _f("ledger-samples-skipped", "critical", None),
    _f("selection-bias", "warning", None, thresholds={"length_ratio": 1.5, "reward_gap": 0.25, "min_drop_share": 0.1,
                                                      "min_samples": 20, "z": 4.0, "warn_drop_share": 0.5,
                                                      "length_strata": 10},
       metrics=("rlobs_samples_total", "rlobs_goodput_tokens_total", "rlobs_rollout_completion_tokens")),
    # weight sync
    _f("weight-sync-boundary-failed", "critical", "0m"),
    _f("weight-sync-fingerprint-mismatch", "critical", "0m"),
    _f("weight-sync-cache-not-reset", "critical", "0m"),
    _f("weight-sync-slow", "warning", "5m", alert_thresholds={"boundary_mean_seconds": 30.0}),
    _f("weight-sync-incomplete-dump", "critical", None),
    _f("weight-sync-torn-read", "critical", None),
    # gradients and advantages
    _f("grad-norm-nonfinite", "critical", "0m"),
    _f("grad-norm-spike", "info", "0m", thresholds=dict(SPIKE)),
    _f("no-gradient", "warning", None),
    _f("advantage-denominator-collapse", "critical", "1m", thresholds={"max_abs_advantage": 10.0}),
    _f("advantage-rank-disagreement", "critical", "0m"),
    _f("advantage-zero-std-groups", "warning", "5m", thresholds={"ratio": 0.75, "min_share": 0.7, **SOLVED}),
    _f("entropy-collapse", "warning", None, thresholds=dict(SOLVED)),
    _f("response-length-clipped", "warning", None),
    # graders and throughput
    _f("grader-timeouts", "warning", "2m", thresholds={"share": 0.05}),
    _f("grader-slow", "warning", "2m", thresholds={"ratio": 3.0, "min_seconds": 0.1}),
    _f("grader-backlog", "warning", "1m", rule=False, alert_thresholds={"ratio": 0.5, "min_seconds": 2.0}),
    _f("grader-hung", "critical", "2m"),
    _f("grading-dominates-step", "warning", None),
    _f("trainer-starved", "warning", "5m", thresholds={"ratio": 3.0, "min_steps": 3}, alert_thresholds={"wait_share": 0.7, "vs_baseline": 1.5},
       metrics=("rlobs_trainer_reward_wait_seconds_total", "rlobs_phase_seconds_total")),
    _f("trainer-idle", "warning", None),
    # train / serve parity
    _f("parity-drift", "warning", "2m", thresholds={"warn": 0.005, "critical": 0.01}),
    _f("parity-config-mismatch", "critical", "0m"),
    _f("parity-prob-drift", "warning", None),
    # early warning (issue 18): precursors of a coming collapse, before the reward shows it
    # (rlobs.doctor.rules.precursors; live alerts compare the last minutes with the run's first ones)
    # min_effect 9 (10x; was 5, 2 Dec 2026, eighth run of bench/early_warning.py): over its 180 records the rule was
    # never the first warning of a collapse, and it warned on two runs that did not collapse (no IS at max
    # staleness 4, seed 11: 6.2x while the run learned; staleness-no-is seed 12: 7.5x). 9 is the next value of
    # doctor_calib's grid; it silences both (7 silences seed 11 only). Frozen before staleness-no-is-lag4 seeds
    # 13-22 were trained. On this model no collapse class has a grad-norm precursor: the rule stays for the
    # explosive drifts it names
    _f("precursor-grad-norm-drift", "warning", "1m", thresholds={**_DRIFT, "h": 6.0, "min_effect": 9.0,
                                                                  "impact_ratio": 10.0}),
    # solved_reward (forty-sixth early-warning run, 6 Dec 2026): silent while the training reward sits at or over it,
    # as the zero-std rule is. A policy that has solved most of its task sharpens as it converges (README "Long runs
    # that converge"): the live alert paged the forty-second run's healthy-dp2-completion-s228 at step 56 (reward
    # 0.8-0.98, entropy 0.06-0.26, held-out success 0.74); over the 420 pooled runs the doctor's rule never warned and
    # the alert never came first on a collapse
    _f("precursor-entropy-decline", "warning", "1m",
       thresholds={**_DRIFT, "h": 6.0, "min_effect": 0.8, "impact_ratio": 0.2, "learning_gain": 0.05,
                   "solved_reward": 0.6}),
    _f("precursor-importance-truncation", "warning", "1m",
       thresholds={**_DRIFT, "min_abs": 0.005, "min_effect": 1.0, "min_level": 0.05, "impact_share": 0.5}),
    # KL climbs steadily from its first steps: CUSUM against the early level (lag 0) rather than the fast-drift
    # window, with its own 4-step baseline and 3-step window (a CUSUM accumulates evidence: the fast-drift window's
    # look-count guard is not its problem). min_rate (2 Dec 2026, after the thirteenth run of bench/early_warning.py:
    # the rule warned at steps 8-12 on all 4 healthy runs with the KL term on at the healthy lr, whose KL rises from
    # 0 as any learning run's does): the rise since the run's first step must also be fast, in nats/token per step.
    # Those four healthy runs peak at 0.005-0.011 per step over 40 steps, held-out KL blow-ups 10-13 at 0.11-0.14
    # (>= 0.05 at their warning steps); 0.03 sits between, ~3x the fastest healthy one. A blow-up after a long
    # healthy stretch is diluted by the steps before it (the rate is from the start): that case is the
    # oversized-updates rule's. Frozen before healthy-kl seeds 4-9 and kl-blow-up seeds 14-19 were trained
    # min_alarms 2 (forty-third early-warning run, 6 Dec 2026): the alarm must hold two steps running. The median
    # of 3 steps is no defence against two spikes in three: healthy-async-kl-s228 (forty-second run, held out,
    # learned 0.22 -> 0.77) logged a reference KL of 22.3 and 8.8 at steps 6 and 8 between readings of 0.01-0.1 (the
    # trainer's k3 estimate was unbounded above until the forty-fifth run bounded it at 10) and was warned at step 8;
    # a creep holds
    _f("precursor-kl-creep", "warning", "1m", thresholds={**_DRIFT, "lag": 0, "baseline": 4, "window": 3, "k": 0.5,
                                                          "h": 4.0, "min_effect": 1.0, "impact_ratio": 10.0,
                                                          "min_rate": 0.03, "min_alarms": 2}),
    _f("precursor-zero-std-rising", "warning", "1m",
       thresholds={**_DRIFT, "min_abs": 0.05, "min_effect": 1.0, "min_level": 0.8, "impact_share": 0.75,
                   "learning_gain": 0.05, "solved_reward": 0.6}),
    # a level, not a drift: chosen on bench/early_warning.py's calibration runs: staleness-without-IS seeds 0-3
    # warn at steps 6-9, 3-19 steps before held-out success fell (impact_steps: those leads, the finding's time to
    # impact); six separate_async runs without IS at max staleness 2 (which learn) keep the 5-step median ESS at
    # >= 0.89 (a 3-step median dipped to 0.77 on one: hence the 5-step window, the fast-drift rules' own).
    # min_steps 2 (sixth run of the matrix, 1 Dec 2026): a held-out no-IS control (seed 7) had one 5-step median at
    # 0.77, the next at 0.96 (three low steps close together); the collapses stay under the bar. It costs the
    # calibration collapses one step of lead (6, 19, 3, 8 -> 5, 18, 2, 7); chosen after that held-out run was
    # seen, so it was frozen before staleness-no-is seeds 10-15 and no-IS control seeds 18-29 were trained
    # fast_staleness 4 (2 Dec 2026, after the sixth run): at a window median staleness of 4+ versions one window
    # is enough. The sixth run's two misses (held-out staleness-no-is seeds 11 and 13, now seen) were under the bar
    # at step 9 at staleness 7 and broke by the step-10 evaluation; every no-IS control runs at staleness <= 2, where
    # the two-window persistence still applies. Frozen before staleness-no-is seeds 16-25, no-IS controls 30-37 and
    # the exploratory no-IS runs at max staleness 4 were scored
    # Tried and rejected on held-out data (4 Dec 2026, twenty-first run, bench/results/early_warning_run21.md): a dip
    # leg for the lag-4 family (one step's ESS under 0.25 at a 5-step median staleness of 3+). On the calibration
    # runs it took the family from 6 to 9 of 12 collapses warned ahead, controls quiet; on 12 fresh lag-4 runs it
    # added one detection (2 -> 3 of 9) and one false warning (1 -> 2 of the 3 without a drop). Single dips come
    # before a fall and on runs that do not fall alike: not a precursor. Do not re-add it without new evidence
    # Tried and rejected on held-out data (5 Dec 2026, twenty-second run, bench/results/early_warning_run22.md): a
    # staleness leg (no correction at a 5-step median staleness of 3+ versions, 2 steps running, whatever the ESS),
    # registered with its keep-or-revert criterion at 84fbd06 and frozen at a6ff6b1. On 12 fresh lag-4 runs it
    # warned ahead of all 8 falls (median lead 11.5; 2 of 8 under the rules as they are), and on all 4 runs without a
    # drop, 2 of which learned (held-out success 0.23 -> 0.53, 0.16 -> 0.46: what the no-IS controls at max staleness
    # 2 reach). It warns on every run of the setting: the setting's risk (30 of 40 lag-4 runs fell within 40 steps,
    # 4 of 40 learned), not a precursor that tells the runs apart. Do not re-add it as a warning.
    # far_staleness / far_min_below (the fiftieth early-warning run): past the lag-4 family's bound (a 5-step median
    # staleness of 5+ versions, which a max staleness of 4 cannot reach) the median ESS is too slow: the staleness
    # runs at max 8 fall by the step-10 or step-15 evaluation, and s67 and s74 were warned a step after their fall
    # (ESS 0.57 at step 5 and 0.72 at 8 on s74, the median under 0.8 only at 11). There ``far_min_below`` of the
    # last ``window`` steps under ``ess_below`` is enough. Every run of that setting in the bench fell (34 of 34)
    _f("precursor-uncorrected-off-policy", "warning", "1m",
       thresholds={"window": 5, "ess_below": 0.8, "min_staleness": 1.0, "min_steps": 2, "fast_staleness": 4.0,
                   "far_staleness": 5.0, "far_min_below": 2,
                   "impact_steps_low": 3, "impact_steps_high": 19}),
    # a level, not a drift, chosen on bench/early_warning.py's calibration runs (lr-too-high and lr-warmup seeds
    # 0-3, the 17 healthy calibration runs) and the 40 healthy doctor_calib runs of seeds 1100-1139 re-recorded with
    # policy_kl (the `tiny` model at lr 1e-3 / 3e-3 moves 0.01-0.3 nats/token per update without learning: KL alone
    # warned on up to 29 of them): 4 of the last 5 updates over 0.015 nats/token (healthy tiny-packed: median
    # 0.001-0.006, with single spikes to 0.05-0.3 once the policy is sharp: a 5-step median over 0.02 warned on 2
    # healthy runs), on a policy narrowed under 0.8 of its early entropy, once the reward has climbed 0.15 (what the
    # bench's drop takes away; runs that never learned are no-learning's business). Every neighbour (kl 0.01 / 0.02,
    # entropy off, reward_gain 0.1, window 8) kept 0 warnings there and all 6 calibration collapses. impact_steps:
    # the calibration leads (6-32)
    # heldout_gain 0.15 (2 Dec 2026, eighth run): "learned" is also the best held-out evaluation 0.15 over the first.
    # The seventh run's miss lr-too-high seed 5 (now seen) climbed 0.16 -> 0.42 held out while its training reward's
    # 5-step median rose 0.12 over a baseline already climbing at step 1; on every record of the matrix so far (the
    # 50+ healthy runs included) the held-out leg adds no warning on a run without a drop, and warns 2-8 steps earlier
    # on three lr-too-high collapses. Frozen before lr-too-high seeds 20-29 and healthy seeds 12-21 were trained.
    # Scored on them (bench/results/early_warning_run8): it won lr-too-high seed 25 (12 instead of 30, drop at 20),
    # and it alone warned on two runs without a drop (the honest-grader control at lr 7e-4, seeds 6 and 7): not met
    # early_* (2 Dec 2026, fifteenth run): the first-steps leg. The guards above keep large steps on a policy that has
    # not learned quiet, and so the leg that needs them warned late or not at all on the lr-too-high runs that fall
    # early (at 15-20, from a small gain: the misses of the seventh, eighth and twelfth runs). How far one update
    # moves a policy that cannot have learned yet is the lr's own size: on every record seen by then (62 runs at
    # lr <= 3e-4 in seven settings) no window of the first 10 steps had 4 of 5 updates over 0.02 nats/token; `tiny`
    # at its default 1e-3 (5 runs: 8x4 sync and the tests' 4x4 async) had 3 of 5 over 0.05 at most, a thin margin
    # (5 of 5 over 0.03 fired on one); lr 1.5e-3 had 7 of 10 (12th run) over 0.05
    # by step 4, the honest-grader controls at lr 7e-4 reach 0.04 (0.05 keeps them quiet). Impact: those runs fell
    # 11-35 steps after step 4. `tiny` at 3e-3 (the doctor_calib bench's third shape, counted healthy there when it
    # does not degenerate) moves 0.2-0.6 per update and warns at step 4; two seeds of it tried here lost held-out
    # success 0.09 -> 0.02 and 0.14 -> 0.02 in 20 steps: the warning is right, and doctor_calib's healthy table
    # predates the leg. Frozen before the fifteenth run (bench/early_warning.py) was scored.
    # Persistence (3 Dec 2026, seventeenth run): doctor_calib's seventh check (fresh healthy `tiny` seeds 1500-1539,
    # bench/results/doctor_calib_check7_s1500.json) had the leg on 9 of the 31 that did not degenerate: 4 at tiny's
    # default lr 1e-3 (the margin named above: its first updates are 0.05-0.3 after Adam's sign-like first steps, and
    # decay to 0.01-0.03 by step ~5) and 5 at lr 3e-3 (each of them lost 20-50 % of its training reward; 9 more at
    # 3e-3 degenerated). A too-high lr keeps its updates large: 8 of 10 over 0.04 inside the first 12 steps (windows
    # ending at steps 9-11) is reached by 8 of the re-trained lr-too-high seeds 40-49 (the two others fell late, at
    # 31 and 40, and the guarded leg warned them at 8-13), by none of the 26 tiny runs at 1e-3 (at most 6 of 10) and
    # by none of the honest-grader controls (at most 2); the lr 3e-3 runs still pass it. Leads on seeds 40-49 from
    # the new leg: 6-27. Chosen on those records (calibration for it now), frozen before the seventeenth run's
    # fresh seeds are scored
    # early_median_above (3 Dec 2026, eighteenth run): the count misses a too-high lr whose updates are very large with
    # a few small ones among them (lr-too-high s58: median 0.18 over its first 10 updates, 7 of 10 over 0.04). A
    # window of the leg whose median update is over 0.08 warns too. Chosen on bench/results/first_steps.json (the first
    # 12 steps of doctor_calib's `tiny` seeds 1500-1639 and lr-too-high seeds 40-59, re-trained): the highest window
    # median of the 52 `tiny` runs at 1e-3 is 0.065 (0.070 on the seventh check's own s1514 record, the tests' copy);
    # lr-too-high's are 0.062-0.177, 10 of 20 over 0.08, and the leg adds s58 alone (0.07 would add s53 and s42 too,
    # on no margin). `tiny` at 3e-3 passes both bars. Frozen before the eighteenth run's fresh seeds are trained
    _f("precursor-oversized-updates", "warning", "1m",
       thresholds={"window": 5, "min_steps": 4, "baseline": 5, "kl_above": 0.015, "entropy_share_below": 0.8,
                   "reward_gain": 0.15, "heldout_gain": 0.15, "impact_steps_low": 6, "impact_steps_high": 32,
                   # the first-steps leg (2 Dec 2026, fifteenth run; its persistence 3 Dec 2026, seventeenth run):
                   # see the comment above
                   "early_steps": 12, "early_window": 10, "early_min_steps": 8, "early_kl_above": 0.04,
                   "early_median_above": 0.08, "early_impact_steps_low": 6, "early_impact_steps_high": 30,
                   # annotation only (the finding names a grader loophole when the training reward is this far
                   # above the last held-out evaluation; the rule-graded runs of the bench sit within 0.1 of it)
                   "hacking_gap": 0.3,
                   # a step with no gradient (grad norm <= this; no-gradient's eps) is not judged: every group of a
                   # solved task is zero-std (4 Dec 2026, bench/solved_task.py's tune run: SmolLM2 warned at step 5)
                   "no_gradient_eps": 1e-10,
                   # the after-learning leg is silent on a solved policy: the window's median zero-std share at least
                   # this and its median training reward at least solved_reward (forty-first run, bench/early_warning.py)
                   "solved_zero_std": 0.75, "solved_reward": 0.6,
                   # where held-out success is evaluated (two or more evaluations so far), the training reward's climb
                   # reads as learning only if held-out success has gained this much too (fifty-fourth run,
                   # bench/early_warning.py). Chosen on its tune look: healthy-tiny-s249 warned at 55 on a reward
                   # +0.20 with held-out success never over its first evaluation (0.0); the loosened rule (3 of 5 over
                   # 0.01, entropy under 90 %, reward +0.1) warned 11 of 25 healthy-tiny runs, 1 with this floor;
                   # the loophole run reward-hacking-s0 (tests' data) had gained 0.13 held out when it warned at 18
                   # (heldout_gain, 0.15, would lose it: no other precursor warns it); lr-too-high-s64 moves 7 -> 9
                   "reward_heldout_floor": 0.1,
                   # held-out success's gain for heldout_gain (where it alone says the run learned) is the mean of the
                   # last 2 evaluations after the first against the first, not the best of them (fifty-fifth run,
                   # bench/early_warning.py). Chosen on the 86 records of the fifty-fourth run and the seen ones: the
                   # best of 6-11 noisy evaluations passed heldout_gain on healthy-tiny s266 (+0.16 at step 10, back to
                   # -0.01 by 50, when it warned) and s281 (+0.16; the last two +0.13); 1, 2 and 3 recent evaluations
                   # all left every collapse's first warning where it was (they warn at 2-4 evaluations); 3 kept s281,
                   # 1 is a single noisy draw. The live alert reads the same since the fifty-seventh run (the exporter's
                   # rlobs_heldout_success_recent and _best; rlobs.catalogue.HELDOUT_RECENT). The floor above keeps the
                   # best evaluation (it asks only that held-out success confirmed
                   # the reward's climb once): read at the recent level as well, the fifty-fifth run's held-out
                   # lr-warmup-too-high-s161 lost its late warning (26, drop at 20; best +0.27, recent +0.09), the whole
                   # doctor's only finding on that collapsed run (fifty-sixth run)
                   "heldout_recent": 2}),
    # a divergence, not a drift (2 Dec 2026, ninth run): the training reward's 5-step mean 0.3 over its first 5 steps'
    # while held-out success gained at most a third of that over its first evaluation, two evaluations running. Its
    # numbers were written down before the eighth run's records were trained and not changed after: on them
    # (bench/results/early_warning_run8, as bench's divergence candidate) it fired on 5 of 10 reward-hacking runs
    # (the flawed 'verbose' grader) and on none of the 46 others (the honest-grader control at the same lr, which
    # learns held out, included). Frozen here before reward-hacking seeds 10-19 and control seeds 8-13 were trained
    # (60 steps). Scored on them (bench/results/early_warning_run9): 5 of 10 hacking runs, 0 of 6 controls, 0 of 6
    # healthy 60-step runs; none of the 4 hacking runs whose held-out success fell was warned before the fall
    # the doctor's precursor findings, live (rlobs.doctor.exporter): no rule of its own, the alert reads the doctor's
    _f("doctor-precursor", "warning", "0m", rule=False),
    # ... and the watcher itself: no evaluation for max(min_seconds, interval_multiple x its interval) while the run
    # is up (an evaluation hung, the watcher stuck, the record unreadable): the doctor's alert would stay silent
    _f("doctor-behind", "warning", "1m", rule=False,
       alert_thresholds={"min_seconds": 300.0, "interval_multiple": 10.0}),
    _f("precursor-reward-hacking", "warning", "1m",
       thresholds={"smooth": 5, "reward_gain": 0.3, "heldout_share": 1 / 3, "min_evals": 2,
                   # the audit leg (2 Dec 2026, after the ninth run): trainer_ref re-grades every training sample with
                   # an exact check (--audit-grader). Chosen on calibration runs re-trained with the audit
                   # (reward-hacking seeds 0-1, control 0-1, healthy sync 0 and async 0): the 5-step mean gap stays
                   # <= 0.06 on the healthy runs and <= 0.19 on the controls (the rule grader's partial credit as
                   # the policy learns the format); on the hacking runs it starts at ~0.3 (the loophole pays from the
                   # first step) and passes 0.5 by step 10-14. Frozen before the tenth run was trained. Scored on it
                   # (bench/results/early_warning_run10): 8 of 8 held-out hacking runs at steps 10-15 (both whose
                   # held-out success fell, 10 and 26 steps ahead), 0 of 4 controls, 0 of 6 healthy; peaks 0.84-0.96
                   # hacking, 0.16-0.19 controls, 0.05-0.07 healthy
                   "audit_above": 0.4, "audit_gain": 0.2, "audit_steps": 2}),
)}


def failure(fid: str) -> Failure:
    if fid not in FAILURES:
        raise KeyError(f"unknown failure id {fid!r}; valid: {', '.join(sorted(FAILURES))}")
    return FAILURES[fid]


def thresholds(fid: str) -> dict[str, float]:
    """The shared numbers of a failure ({} for an id without a row: a rule added before its row)."""
    f = FAILURES.get(fid)
    return dict(f.thresholds) if f is not None else {}


def check_alert(alert_id: str, severity: str, for_: str, scale: Callable[[str], str] | None = None) -> None:
    """Raise when an alert's severity or ``for:`` differ from its row (called by every AlertRule); ``scale``: the
    row's ``for`` for the rule's step time (a precursor alert built for another step time)."""
    f = failure(alert_id)
    if f.alert_for is None:
        raise ValueError(f"alert {alert_id!r}: the failure table says it has no live alert")
    want = scale(f.alert_for) if scale else f.alert_for
    if (severity, for_) != (f.severity, want):
        raise ValueError(f"alert {alert_id!r}: severity/for {severity}/{for_} but the failure table says "
                         f"{f.severity}/{want}")


# ---------- rlobs explain ----------
_PANEL = re.compile(r"\*\*([^*]+?) › ([^*]+?)\*\*")


def _runbook_text(fid: str) -> str | None:
    from rlobs.runbooks import data_dir

    path = data_dir("runbooks") / f"{fid}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def panels(fid: str) -> list[tuple[str, str]]:
    """(board, panel) pairs the failure's runbook opens first."""
    text = _runbook_text(fid) or ""
    m = re.search(r"^## Panels to open\n(.*?)(?=^## )", text, flags=re.DOTALL | re.MULTILINE)
    return _PANEL.findall(m.group(1)) if m else []


def explain(fid: str) -> dict[str, Any]:
    """The chain metric -> panel -> alert -> rule -> runbook of one failure, for a newcomer."""
    from rlobs.catalogue import METRICS
    from rlobs.runbooks import runbook_link

    f = failure(fid)
    out: dict[str, Any] = {"id": fid, "severity": f.severity, "thresholds": dict(f.thresholds)}
    alert = None
    if f.alert:
        from rlobs.dashboards.alerts import rule as alert_rule

        alert = alert_rule(fid)
        out["alert"] = {"name": alert.name, "severity": alert.severity, "for": alert.for_, "expr": alert.expr,
                        "summary": alert.summary, "thresholds": dict(f.alert_thresholds)}
    names = sorted(set(re.findall(r"\brlobs_[a-z0-9_]+", alert.expr)) if alert is not None else set()) + [
        m for m in f.metrics if alert is None or m not in alert.expr]
    if alert is not None and re.search(r"\bup\b", alert.expr):
        names.append("up")
    docs = {m.name: m.help for m in METRICS}
    docs["up"] = "Prometheus' own series: 1 when the target answered its last scrape, 0 when it did not"
    out["metrics"] = [{"name": n, "help": docs.get(n, docs.get(re.sub(r"_(bucket|sum|count)$", "", n), ""))}
                      for n in names]
    out["panels"] = [f"{b} › {p}" for b, p in panels(fid)]
    if f.rule:
        from rlobs.doctor import registry

        r = registry()[fid]
        out["rule"] = {"id": r.id, "title": r.title, "needs": list(r.needs), "thresholds": dict(r.thresholds),
                       "doc": r.doc.split("\n\n")[0], "command": f"rlobs doctor RUN --rule {fid}"}
    out["runbook"] = {"path": f.runbook, "link": runbook_link(fid)}
    return out


def explain_text(fid: str) -> str:
    e = explain(fid)
    lines = [f"{e['id']}  (severity {e['severity']})", ""]
    lines.append("1. metric(s):" if e["metrics"] else "1. metric(s): none live (only the run record shows it)")
    lines += [f"     {m['name']}: {m['help']}" for m in e["metrics"]]
    lines.append("2. panel(s):" if e["panels"] else "2. panel(s): none")
    lines += [f"     {p}" for p in e["panels"]]
    if "alert" in e:
        a = e["alert"]
        lines += [f"3. alert: {a['name']} ({a['severity']}, for {a['for']})", f"     {a['summary']}",
                  f"     expr: {a['expr']}"]
        if a["thresholds"] or e["thresholds"]:
            lines.append(f"     thresholds: {({**e['thresholds'], **a['thresholds']})}")
    else:
        lines.append("3. alert: none (no live signal for this failure; the doctor reads the record)")
    if "rule" in e:
        r = e["rule"]
        lines += [f"4. doctor rule: {r['id']} ({r['title']})", f"     {r['command']}",
                  f"     needs: {', '.join(r['needs'])}; thresholds: {r['thresholds']}"]
    else:
        lines.append("4. doctor rule: none (a live-only signal)")
    lines.append(f"5. runbook: {e['runbook']['path']}  ({e['runbook']['link']})")
    return "\n".join(lines)
