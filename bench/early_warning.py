"""Early warning: does the doctor flag a coming collapse before the reward shows it, and how early?

    python bench/early_warning.py run  [--only NAME,...]     # train the matrix (trainer_ref, real collapses)
    python bench/early_warning.py eval                       # judge the records, write bench/results/early_warning.*
    python bench/early_warning.py extract --only A,B --expect A=precursor-x,...  # per-step signals -> test data
    python bench/early_warning.py eval-calib --runs DC_ROOT --out bench/results/NAME  # doctor_calib's healthy runs,
                                                             # judged by this bench's drop too

Each run is a real ``python -m trainer_ref.run`` on ``tiny-packed`` (no injected telemetry, no fault): a class of
collapse is a configuration that collapses on its own (``CLASSES``), and healthy runs use the settings that learn
(lr 3e-4, ``bench/trainer_learning.py``) for the same number of steps.

The drop (stated, per run): the first step where the training reward's trailing ``SMOOTH``-step mean is
``DROP`` (absolute) below its running peak, or a held-out exact-match evaluation (every 5 steps, 32 prompts x 4)
is ``DROP`` below the best one before it; a run without such a step did not collapse. The twenty-fourth run
(``bench/early_warning_rescore.py``) checked this drop against a ground truth it does not read (held-out success
20 steps later) and against six stricter candidates; it stayed: on fresh runs it made the fewest errors.

The warning: the eight precursor rules (``rlobs.doctor.rules.precursors``) replayed over the record step by step as
it grew (``precursors.replay``: each step judged with only the steps up to it; the rules' detectors are online, so
this is what ``rlobs doctor --follow`` would have printed at that step). Lead time = drop step - first warning
step. A class is detected in a run when a warning comes strictly before the drop. Every warning on a healthy run
counts as a false warning. The live alerts are scored the same way by ``bench/early_warning_live.py`` (the records
replayed into a real Prometheus; twenty-sixth run).

Thresholds live in the failure table (``rlobs.failures``); they were chosen or checked with the ``calibration``
split in view (seeds 0-3 of every class, the first healthy seeds) and the tables report the ``heldout`` split
(seeds trained after the rules were frozen) separately.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DROP = 0.15  # absolute fall of the reward (0..1) that counts as the collapse showing
SMOOTH = 5  # trailing mean of the training reward, steps
STEPS = 40
COMMON = ["--model", "tiny-packed", "--eval-every", "5", "--eval-prompts", "32", "--no-progress"]
SYNC = ["--mode", "sync", "--deterministic"]
# class -> (what collapses, trainer_ref flags)
CLASSES: dict[str, tuple[str, list[str]]] = {
    "lr-too-high": ("learning rate 1.5e-3, 5x the one that learns", [*SYNC, "--lr", "1.5e-3"]),
    "lr-warmup-too-high": ("linear warm-up from 3e-4 to a 3e-3 peak over 30 steps",
                           [*SYNC, "--lr", "3e-4", "--lr-peak", "3e-3", "--lr-warmup-steps", "30"]),
    "kl-blow-up": ("KL term on (kl_coef 0.05) with a learning rate 5x", [*SYNC, "--lr", "1.5e-3", "--kl-coef", "0.05"]),
    "staleness-no-is": ("separate_async, importance correction off, max staleness 8, lr 5e-4",
                        ["--mode", "separate_async", "--lr", "5e-4", "--tis-cap", "0", "--max-staleness", "8"]),
    "staleness-no-is-lag4": ("separate_async, importance correction off, max staleness 4, lr 3e-4 (the healthy lr): "
                             "collapses on some seeds, learns on others",
                             ["--mode", "separate_async", "--lr", "3e-4", "--tis-cap", "0", "--max-staleness", "4"]),
    "reward-hacking": ("a flawed grader ('verbose': unchecked shown work earns reward) on a chain-heavy prompt mix (90 %), "
                       "lr 7e-4; held-out success on the task's own mix (15 % chains)",
                       [*SYNC, "--grader", "verbose", "--chain-prob", "0.9", "--eval-chain-prob", "0.15", "--lr", "7e-4"]),
    "reward-hacking-control": ("the same prompts and lr with the honest grader ('rule'): what the loophole adds",
                               [*SYNC, "--grader", "rule", "--chain-prob", "0.9", "--eval-chain-prob", "0.15",
                                "--lr", "7e-4"]),
    "low-temperature": ("sampling at temperature 0.3 (both sides), lr 7e-4, 60 steps: the issue's low-temperature "
                        "entropy class; on seed 0 held-out success peaked by step 5, then its groups turned "
                        "zero-std and it slid (README)", [*SYNC, "--temperature", "0.3", "--lr", "7e-4"]),
    "ppo-epochs-8": ("8 optimiser updates per step over the same batch (--ppo-epochs 8) at the healthy lr 3e-4, 60 "
                     "steps: in the twenty-first run's exploratory seed 0 it rose to 0.80 held out and slid to 0.6",
                     [*SYNC, "--lr", "3e-4", "--ppo-epochs", "8"]),
}
CLASS_STEPS = {"low-temperature": 60, "ppo-epochs-8": 60}  # classes whose runs are longer than --steps
# classes whose setting collapses on some seeds and learns on others: a run of theirs that does not collapse is
# scored as a healthy run (a warning on it counts against the rules)
MIXED = ("staleness-no-is-lag4", "reward-hacking-control", "low-temperature", "ppo-epochs-8")
# 2 Dec 2026, eighth run: reward hacking. The verbose grader at lr 1e-3 (and the chain-heavy mix the loophole needs)
# collapsed held-out success with the honest grader too (seed 0: 0.52 -> 0.28 by step 15); at lr 3e-4 / 5e-4 the
# loophole was learned (training reward +0.6) without costing held-out success in 60-80 steps. At lr 7e-4 seed 0 the
# training reward saturated at ~1.0 by step 25 and held-out success fell 0.52 -> 0.24 by step 40, while the honest
# grader's run learned to 0.60 at step 40 and fell only by step 55. Seeds 0-1 of both were looked at (exploratory:
# calibration); the rules were not changed for them. Seeds fixed before training: 2-9 (hacking), 2-7 (control)
CLASS_SEEDS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "reward-hacking": ((0, 1), tuple(range(2, 10))), "reward-hacking-control": ((0, 1), tuple(range(2, 8)))}
MIXED_CALIBRATION_SEEDS = (0, 1, 2)  # their held-out seeds are all in HELDOUT_EXTRA
# 2 Dec 2026, seventh run: staleness-no-is-lag4 was tried on seeds 0-2 (exploratory, the healthy lr at twice the
# controls' lag; seed 1 collapsed at step 10, 0 and 2 learned) with the fast_staleness change frozen; 3-12 held out
# 1 Dec 2026, second run of the matrix: kl-blow-up was lr 3e-3 and staleness-no-is lr 1e-3; both collapsed by the
# first held-out evaluations (steps 5-10 in 6 of 8 runs), where no detector with a baseline can lead by 5 steps.
# The slower settings were chosen after looking at seeds 0-1 of each (lr 1.5e-3: KL 0 -> 2-3 over 20 steps, one seed
# dropped at 25; lr 5e-4 without IS: held-out 0.25 -> 0 over 35 steps): those two seeds are not a held-out result.
# tried on one seed and left out of the matrix (they did not collapse in 40-60 steps; README "Early warning"):
# reward hacking with the flawed 'verbose' grader at lr 1e-3 (held-out 0.22 -> 0.67: the loophole was not found),
# entropy collapse by sampling at T 0.5 at lr 1e-3 (held-out 0.27 -> 0.73), T 0.3 / 0.2 at lr 3e-4 for 60 steps
# (0.43 -> 0.84, 0.54 -> 0.83: the zero-std share rises to 0.6-0.9, learning does not fall; with the rule grader on
# the 90 % chain mix 0.43 -> 0.77, 0.54 -> 0.81); T 0.3 at lr 7e-4 / 1e-3, 60 steps, seed 0 (thirteenth session):
# held-out 0.43 -> 0.75 at step 5, then noise around 0.55 to 0.42 / a slow slide to 0.36, zero-std share 0.5-1.0
# from step 6, entropy 0.92 -> 0.45 / erratic 0.5-1.8 (T 0.5 and T 1 at 7e-4 learned to 0.81 / 0.67): a stall, not
# an entropy collapse; and lr 3e-3 / 1e-2 collapse within the first 5 steps (held-out
# 0.22 -> 0.05 / 0.0 at the first evaluation): no room for a warning before the drop.
HEALTHY = [*SYNC, "--lr", "3e-4"]
# healthy separate_async (importance correction on, max staleness 2): the control with a nonzero truncation share
HEALTHY_ASYNC = ["--mode", "separate_async", "--lr", "3e-4"]
# healthy separate_async *without* importance correction at max staleness 2 (the uncorrected-off-policy rule's
# control: the same missing correction as staleness-no-is, at a lag where it does no harm)
HEALTHY_ASYNC_NO_IS = ["--mode", "separate_async", "--lr", "3e-4", "--tis-cap", "0", "--max-staleness", "2"]
# Splits (1 Dec 2026, fourth run of the matrix): "calibration" is every seed a threshold was chosen or checked
# with in view (seeds 0-3 of each class: the first thresholds used seed 0, the slower KL / staleness settings
# seeds 0-1, the uncorrected-off-policy rule seeds 0-3 and its no-IS controls 0-5); "heldout" are seeds
# trained after the rules were frozen and scored once.
CALIBRATION_SEEDS = (0, 1, 2, 3)
HELDOUT_SEEDS = (4, 5, 6, 7, 8, 9)
# 1 Dec 2026, fifth run: the learning-rate classes got a precursor (precursor-oversized-updates, frozen at c78422c);
# its first held-out scoring found 5 of 6 lr-too-high collapses, so four more held-out seeds of each lr class were
# trained afterwards to narrow that estimate, and scored with the rule unchanged
# Sixth run: precursor-uncorrected-off-policy warned on one held-out no-IS control (seed 7, a single 5-step window
# under the ESS bar); the rule then got a persistence (min_steps), frozen before seeds 10-15 of staleness-no-is and
# 18-29 of the no-IS control were trained
# Seventh run (2 Dec 2026): precursor-uncorrected-off-policy got fast_staleness (one window is enough at a window
# median staleness of 4+), chosen after the sixth run's misses (staleness-no-is seeds 11 and 13) were seen, so it was
# frozen before staleness-no-is seeds 16-25, no-IS controls 30-37 and staleness-no-is-lag4 seeds 3-12 were trained;
# lr-too-high seeds 14-19 (rules unchanged) were added to the held-out split before they were trained, their number
# fixed in advance
# Eighth run (2 Dec 2026): precursor-oversized-updates got heldout_gain (the seventh run's miss lr-too-high seed 5
# learned held out, not in its training reward); frozen before lr-too-high seeds 20-29, lr-warmup seeds 14-17,
# healthy sync seeds 12-21 and healthy async seeds 6-9 were trained (their number fixed in advance);
# precursor-grad-norm-drift min_effect 5 -> 9 (its two warnings, both on runs that did not collapse), frozen before
# staleness-no-is-lag4 seeds 13-22 were trained. Its records were lost with /tmp in a machine reset before they were
# scored into bench/results; the same runs were trained again on a rebuilt tiny-packed and scored once with
# `eval --only <the 56 runs> --out bench/results/early_warning_run8` (README "Early warning")
# Tenth run (2 Dec 2026): trainer_ref audits every training sample with an exact check (--audit-grader, on by
# default) and precursor-reward-hacking got an audit leg, chosen on seeds 0-1 of both reward-hacking classes and
# healthy sync / async seed 0 re-trained with the audit; frozen before reward-hacking seeds 20-27, control 14-17,
# healthy sync 28-31 and healthy async 10-11 were trained (40 steps), their number fixed in advance
# Eleventh check (2 Dec 2026, registered before any of these runs finished): the three honest-grader controls that
# warned (precursor-oversized-updates) without a drop in 40 steps, eighth-run seeds 6 (step 15) and 7 (30) and
# tenth-run seed 15 (35), continued to 60 steps (sync --deterministic: the first 40 steps are the same run, checked
# against the earlier records where they survive). A warning counts as confirmed if the bench's drop comes within
# the finding's stated 6-32 steps after it (s6: 21-47; s7: 36-60; s15: 41-60, the window cut at 60), otherwise as a
# false warning. The 40-step tables are not rescored: this tells whether those warnings were early or wrong.
# Ninth run (2 Dec 2026): the divergence candidate became a rule (precursor-reward-hacking, its numbers unchanged),
# frozen before reward-hacking seeds 10-19 and control seeds 8-13 were trained, at 60 steps (`run --steps 60`: in 40
# steps 1 of 8 hacking runs fell held out, the divergence came at steps 20-30), their number fixed in advance
# Twelfth run (2 Dec 2026): rules unchanged since 4e71bea; the eleventh check found today's trainer_ref draws other
# trajectories for some eighth-run seeds (lr-too-high s26 / s29, missed then, warn at 8 / 12 now: re-runs, looked at,
# not counted), so the lr-too-high estimate gets fresh seeds 30-39, kl-blow-up 10-13 (5 runs so far) and healthy sync
# 32-41, 40 steps, their number fixed before any was trained
# Fifteenth run (2 Dec 2026, registered before any of its runs was trained or scored): precursor-oversized-updates
# gets a first-steps leg (how far each update moves a policy that has not learned yet: at the healthy lr 3e-4 no run
# of any setting had 4 of 5 updates over 0.02 nats/token in its first 10 steps; at lr 1.5e-3 most pass 0.05 by step
# 4; bar: 4 of the first 10 steps' 5-step windows' updates over 0.05, no learning or entropy guard), its bar chosen on
# every record seen so far (they become calibration for it; the lr 7e-4 controls reach 0.04), frozen before lr-too-high seeds
# 40-49, honest-grader controls 18-23, healthy sync 46-55 and healthy-rule-chain 4-7 are scored (40 steps, their
# number fixed here). Scored once with every rule; every warning on a healthy run or a control without a drop counts
# Sixteenth check (3 Dec 2026, registered before any of these runs was trained): the fifteenth run's six honest-grader
# controls (seeds 18-23) continued to 60 steps, as in the eleventh check (sync --deterministic; first 40 training
# rewards checked against bench/results/early_warning_run15.json). The one warning without a drop, s23 at step 15,
# counts as confirmed if the bench's drop comes within the finding's stated 6-32 steps after it (21-47), otherwise
# as false; the other seeds tell how often this setting falls by 60 steps. The 40-step tables are not rescored
# Seventeenth run (3 Dec 2026, registered before any of its runs was trained): doctor_calib's seventh check
# (bench/results/doctor_calib_check7_s1500.json) found the first-steps leg warning on 9 of 31 fresh healthy `tiny`
# runs: 4 at tiny's default lr 1e-3, whose updates are 0.03-0.3 nats/token for a few steps after Adam's first and
# then decay, and 5 at lr 3e-3. The leg gets a persistence (most of a 10-step window, not 4 of 5), chosen on those
# 40 runs, this run's lr-too-high seeds 40-49 re-trained (the same runs: sync --deterministic) and the sixteenth
# check's controls, all calibration for it now; frozen before lr-too-high seeds 50-59 and healthy sync seeds 56-61
# (40 steps) and doctor_calib's healthy seeds 1600-1639 (bench/doctor_calib.py) are scored, their number fixed here
# Eighteenth run (3 Dec 2026, registered before any of its runs was trained): precursor-oversized-updates' first-steps
# leg gets a median bar (early_median_above 0.08, rlobs.failures), chosen on bench/results/first_steps.json; frozen
# before lr-too-high seeds 60-69 and healthy sync seeds 62-67 (40 steps) are trained, their number fixed here. Beside
# them, doctor_calib's ninth check (bench/doctor_calib.py: fresh healthy `tiny` seeds 1700-1739 at their full
# lengths) is judged by this bench's own drop (`eval-calib`): a doctor_calib run at lr 3e-3 that did not degenerate
# by doctor_calib's criterion but whose training reward fell DROP below its peak collapsed by this bench's stated
# amount, and a warning before that fall is a lead, not a false warning (the staleness-no-is-lag4 family is scored so:
# MIXED). Reported both ways. Stated before training: if that drop also comes on 10 % or more of the runs at tiny's
# default lr 1e-3, it does not tell a collapse from noise on `tiny`, and every warning on a run that did not
# degenerate stays counted as false
# Nineteenth run (3 Dec 2026, registered before any of its runs was trained, rules unchanged since a43d57c): the
# eighteenth run's 9 of 9 under the median bar, pooled with the seventeenth's 7 of 9 scored before it, is 16 of 18;
# fresh lr-too-high seeds 70-79 and healthy sync seeds 68-73 (40 steps, their number fixed here) are scored once.
# lr too high is reported under today's rules as the eighteenth and nineteenth runs pooled, and every warning on
# the six healthy runs counts against the bar
# Twentieth run (4 Dec 2026, registered before any of its runs was trained; rules as committed at 6a7ba98, i.e.
# after the solved-task changes of 4 Dec (advantage-zero-std-groups / entropy-collapse at info on a solved task,
# precursor-oversized-updates judging only steps with a gradient), none of which was scored on a collapse class):
# one fresh seed set for every class and the main healthy settings at once, 40 steps, scored once under today's
# rules, so the table states where every class stands now rather than run by run. Fresh seeds, their number fixed
# here: lr-too-high 80-85, lr-warmup-too-high 18-21, kl-blow-up 20-23, staleness-no-is 26-29, staleness-no-is-lag4
# 23-26 (mixed), reward-hacking 28-31, reward-hacking-control 24-27 (mixed), healthy sync 74-79, healthy
# separate_async 12-15, healthy separate_async without IS 38-39, healthy-colocate 4-5: 44 runs, trained in that
# order. Stated before training: the runs not finished by 19:45 UTC are listed as not run, none is dropped after
# being scored, and every warning on a healthy run (or a mixed-class run without a drop) counts against the bar.
RUN20 = {"lr-too-high": tuple(range(80, 86)), "lr-warmup-too-high": tuple(range(18, 22)),
         "kl-blow-up": tuple(range(20, 24)), "staleness-no-is": tuple(range(26, 30)),
         "staleness-no-is-lag4": tuple(range(23, 27)), "reward-hacking": tuple(range(28, 32)),
         "reward-hacking-control": tuple(range(24, 28))}
HELDOUT_EXTRA: dict[str, tuple[int, ...]] = {"lr-too-high": tuple(range(10, 80)), "kl-blow-up": tuple(range(10, 20)),
                                             "lr-warmup-too-high": (10, 11, 12, 13, 14, 15, 16, 17),
                                             "staleness-no-is": tuple(range(10, 26)),
                                             "staleness-no-is-lag4": tuple(range(3, 23)),
                                             "reward-hacking": tuple(range(10, 20)) + tuple(range(20, 28)),
                                             "reward-hacking-control": tuple(range(8, 14)) + tuple(range(14, 18)) + tuple(range(18, 24))}
HELDOUT_EXTRA = {k: v + RUN20.get(k, ()) for k, v in HELDOUT_EXTRA.items()}
# Twenty-first run (4 Dec 2026, registered before any of its runs was trained): the lag-4 family (2 of 4 in the
# twentieth run, 0 of 4 in the eighth). Its misses keep the 5-step ESS median over 0.8 while single steps dip to
# 0.1-0.4 (twentieth-run s23-s26, looked at: calibration for any change from now on), which a median cannot see.
# Calibration, trained first: staleness-no-is-lag4 seeds 27-38 and the no-IS control (max staleness 2) seeds 40-45
# (40 steps); a change to precursor-uncorrected-off-policy is chosen on them, the twentieth run's s23-s26 and
# staleness-no-is / healthy-async-nois records at hand, then frozen (committed) before the held-out seeds are
# trained: staleness-no-is-lag4 39-50 (mixed: a run without a drop is scored as healthy), healthy-async-nois 46-51
# and staleness-no-is 30-33, 40 steps, their number fixed here, scored once under the frozen rules. Stated before
# training: if no change keeps the no-IS controls and the lag-4 runs without a drop quiet on the calibration runs,
# none is made and the held-out runs are scored under the rules as they are
CLASS_SEEDS["staleness-no-is-lag4"] = (MIXED_CALIBRATION_SEEDS + tuple(range(27, 39)), ())
HELDOUT_EXTRA["staleness-no-is-lag4"] += tuple(range(39, 51))
HELDOUT_EXTRA["staleness-no-is"] += tuple(range(30, 34))
# healthy seeds 22-27 (ninth run, 60 steps like its reward-hacking runs): added while those were training, before any
# of the ninth run was scored
HEALTHY_SEEDS = {"calibration": (0, 1, 2, 3, 4, 5), "heldout": tuple(range(6, 42)) + tuple(range(46, 80))}
HEALTHY_ASYNC_SEEDS = {"calibration": (0, 1, 2), "heldout": tuple(range(3, 16))}  # 12-15: the twentieth run
# 1 Dec 2026, sixth run: policy_kl got its importance correction (trainer_ref.grpo.policy_kl, behaviour=); every
# async control was re-recorded with it and scored with the rules unchanged; seeds 12-17 of the no-IS control are
# new (0-11 had been seen, 9-11 warned in the fifth run)
# Twenty-first run, second part (4 Dec 2026, registered before any of its runs was trained): the issue's entropy
# class by its own mechanism, low temperature. T 0.3 at lr 7e-4 (thirteenth session, seed 0, looked at) peaked held
# out at step 5 and slid (0.75 -> 0.42 by step 60) with 50-100 % zero-std groups; its entropy only halved, so it
# was called a stall and left out. It is a MIXED class here (a run without a drop in 60 steps is scored as healthy),
# with its control at the healthy lr, which learned at T 0.3 (healthy-t03). Calibration, trained first and looked
# at under the rules as they are: low-temperature seeds 0-3, healthy-t03 seeds 0-1. Held out, their number fixed
# here: low-temperature 4-11, healthy-t03 2-7, 60 steps; trained after any change a calibration look leads to is
# committed, and scored once
CLASS_SEEDS["low-temperature"] = ((0, 1, 2, 3), tuple(range(4, 12)))
CLASS_SEEDS["ppo-epochs-8"] = ((0, 1, 2, 3), tuple(range(4, 10)))  # twenty-third run (below)
# Twenty-second run (5 Dec 2026, registered before any of its runs was trained): the lag-4 family once more. Its runs
# without a drop did not learn either: of the seven in the twentieth and twenty-first runs, six ended 40 steps at or
# under their step-0 held-out success (0.15-0.23, against 0.48-0.71 for healthy separate_async), one (s34) rose
# 0.23 -> 0.44. The bench's absolute drop cannot fall 0.15 from a start of 0.2. A staleness leg for
# precursor-uncorrected-off-policy: the loss applies no correction (cap 0) and the 5-step median of the mean
# staleness is 3.0+ versions at 2 consecutive steps. Chosen on the lag-4 seeds 23-50 (staleness 2.9-3.9 from step 5,
# twentieth-run records s23-s26 looked at), the no-IS controls at max staleness 2 (a median over 2 is impossible
# there) and staleness-no-is; frozen (committed) before the held-out runs are trained: staleness-no-is-lag4 51-62,
# healthy-async-nois 52-57, staleness-no-is 34-37, 40 steps, their number fixed here, scored once. Scoring as
# before: lag-4 is MIXED, and a warning on a lag-4 run without a drop counts as false. Reported beside, not
# counted: whether each lag-4 run learned (held-out success at step 40 at least 0.15 over its step-0 evaluation).
# Decided before training: the leg stays if the held-out lag-4 runs that collapse are warned ahead in 90 %+, no
# no-IS control warns, and no warned lag-4 run learned by that measure; otherwise it is reverted
HELDOUT_EXTRA["staleness-no-is-lag4"] += tuple(range(51, 63))
HELDOUT_EXTRA["staleness-no-is"] += tuple(range(34, 38))
# Twenty-fourth run (5 Dec 2026; bench/early_warning_rescore.py "Fresh test"): fresh seeds trained 60 steps, the
# drop read on steps 0-40 and judged against held-out success at steps 45-60; registered before any was trained
RUN24 = {"lr-too-high": tuple(range(86, 94)), "kl-blow-up": tuple(range(24, 30)),
         "lr-warmup-too-high": tuple(range(22, 26)), "staleness-no-is": tuple(range(38, 42)),
         "staleness-no-is-lag4": tuple(range(63, 69))}
HELDOUT_EXTRA = {k: v + RUN24.get(k, ()) for k, v in HELDOUT_EXTRA.items()}
HEALTHY_SEEDS["heldout"] += tuple(range(80, 86))
HEALTHY_ASYNC_SEEDS["heldout"] += tuple(range(16, 20))
HEALTHY_ASYNC_NO_IS_SEEDS = {"calibration": (0, 1, 2, 3, 4, 5) + tuple(range(40, 46)),  # 40-45: twenty-first
                             "heldout": tuple(range(6, 40)) + tuple(range(46, 58))}  # 38-39: twentieth; 46-51: 21st
# 52-57: the twenty-second run
# Thirteenth run (2 Dec 2026, registered before any was trained, rules unchanged since 4e71bea): the healthy runs
# so far are one setting (lr 3e-4, 8 groups x 8, T 1, exact grader, 40-60 steps) in two modes; the bar is 0 warnings
# on healthy runs, so it gets settings that learn but were never looked at while a threshold was chosen: 100 steps
# (past the plateau, where 88-100 % of groups are zero-std and entropy keeps falling), a slower lr, colocate_async,
# the honest-grader controls' prompt mix and grader at the healthy lr, the KL term on at the healthy lr, T 0.7, and
# 16 groups x 4. All held out; every warning on them counts against the bar (one that precedes a drop too, listed
# apart); a drop on one of them is a collapse no rule foresaw where it has no warning.
# name -> (what, trainer_ref flags, seeds, steps (None: the run command's --steps))
HEALTHY_VARIANTS: dict[str, tuple[str, list[str], tuple[int, ...], int | None]] = {
    "healthy-long": ("healthy sync, lr 3e-4, 100 steps", HEALTHY, (42, 43, 44, 45), 100),
    "healthy-lr1e-4": ("healthy sync, lr 1e-4 (slower)", [*SYNC, "--lr", "1e-4"], (0, 1, 2, 3), None),
    "healthy-colocate": ("healthy colocate_async, lr 3e-4", ["--mode", "colocate_async", "--lr", "3e-4"],
                         (0, 1, 2, 3, 4, 5), None),  # 4-5: the twentieth run
    "healthy-rule-chain": ("healthy sync, lr 3e-4, the controls' mix and grader (rule, chains 0.9, held out 0.15)",
                           [*SYNC, "--grader", "rule", "--chain-prob", "0.9", "--eval-chain-prob", "0.15", "--lr",
                            "3e-4"], tuple(range(8)), None),
    "healthy-kl": ("healthy sync, lr 3e-4, KL term on (kl_coef 0.05)", [*SYNC, "--lr", "3e-4", "--kl-coef", "0.05"],
                   tuple(range(10)), None),
    "healthy-t07": ("healthy sync, lr 3e-4, temperature 0.7", [*SYNC, "--lr", "3e-4", "--temperature", "0.7"],
                    (0, 1, 2, 3), None),
    "healthy-t03": ("healthy sync, lr 3e-4, temperature 0.3 (the low-temperature class's control)",
                    [*SYNC, "--lr", "3e-4", "--temperature", "0.3"], tuple(range(8)), 60),
    "healthy-ppo4": ("healthy sync, lr 3e-4, 4 optimiser updates per step (--ppo-epochs 4), 60 steps",
                     [*SYNC, "--lr", "3e-4", "--ppo-epochs", "4"], tuple(range(12)), 60),
    "healthy-g16x4": ("healthy sync, lr 3e-4, 16 groups x 4", [*SYNC, "--lr", "3e-4", "--groups-per-step", "16",
                                                             "--group-size", "4"], (0, 1, 2, 3), None),
}
# Fourteenth run (2 Dec 2026): the thirteenth's KL warnings on healthy-kl seeds 0-3 gave precursor-kl-creep a rate
# bar (min_rate, rlobs.failures), chosen on those four and on kl-blow-up seeds 10-13, which are calibration for it
# from now on; frozen before healthy-kl seeds 4-9 and kl-blow-up seeds 14-19 were trained (40 steps, their number
# fixed in advance). Scored once: every KL warning on the six healthy runs counts against the bar, and the blow-ups
# are scored as a class (warned before the drop). Other rules unchanged since 4e71bea
VARIANT_CALIBRATION: dict[str, tuple[int, ...]] = {"healthy-kl": (0, 1, 2, 3), "healthy-t03": (0, 1),
                                                   "healthy-ppo4": (0, 1, 2, 3)}
# Twenty-third run (5 Dec 2026, registered before any of its runs was trained): several optimiser updates per step.
# verl and its peers commonly take several updates per step (ppo_epochs, or mini-batches smaller than the batch);
# trainer_ref's --ppo-epochs does the same. precursor-oversized-updates' bars are per optimiser update, chosen on
# one-update runs, but train_step.policy_kl spans the step's updates: with 4 updates at the healthy lr (twenty-first
# run's exploratory seed 0, continued to 150 steps today, held-out 0.72-0.87 from step 15 to 150) its guarded leg
# warned at step 7 (step KL ~0.02, one-update healthy runs ~0.001). Calibration, trained first and looked at:
# healthy-ppo4 seeds 0-3 and ppo-epochs-8 seeds 0-3 (60 steps); a change that makes the rule judge the size of one
# update (the step's KL per update, or the first update's KL) is chosen on them and the records at hand, then frozen
# (committed) before the held-out runs are trained: healthy-ppo4 seeds 4-11 and ppo-epochs-8 seeds 4-9 (MIXED: a run
# without a drop is scored as healthy), 60 steps, their number fixed here, scored once. Every warning on a
# healthy-ppo4 run counts against the bar. Stated before training: if no change keeps the calibration healthy-ppo4
# runs quiet without costing a one-update class a detection on the records at hand, none is made

# Twenty-fifth run (5 Dec 2026, registered here before any of its runs was trained; rules unchanged since 1bf09db):
# healthy breadth. The healthy bar (0 warnings) has been judged on one trainer shape at a time; these are settings an
# expert user runs that no threshold was ever chosen or checked on: a healthy warm-up (1e-4 -> 3e-4 over 10 steps),
# 2 updates per step (60 steps), a slower lr for 60 steps, 4 groups x 16, a chain-heavier mix (0.3) with the exact
# grader, a small KL term (0.01), separate_async at max staleness 1 and with a looser TIS cap (5), colocate_async
# without importance correction, and 2 data-parallel trainer ranks. Seeds 100-103 of each (fresh for every setting),
# their number fixed here, all held out, scored once (``eval --only`` on the 40 names). Counted as before: every
# precursor warning on a run without a drop counts against the bar (one that precedes a drop is listed apart; a
# drop without a warning is a collapse no rule foresaw). Reported beside, not part of the early-warning bar: the
# whole doctor's warnings and criticals on the same records (every rule, not only the precursors; ``all_rules``). No
# rule is changed on these results in this session: a defect they show is fixed on its own registration and new
# fresh runs
RUN25_SEEDS = (100, 101, 102, 103)
HEALTHY_VARIANTS.update({
    "healthy-warmup": ("healthy sync, linear warm-up from 1e-4 to 3e-4 over 10 steps",
                       [*SYNC, "--lr", "1e-4", "--lr-peak", "3e-4", "--lr-warmup-steps", "10"], RUN25_SEEDS, None),
    "healthy-ppo2": ("healthy sync, lr 3e-4, 2 optimiser updates per step, 60 steps",
                     [*SYNC, "--lr", "3e-4", "--ppo-epochs", "2"], RUN25_SEEDS, 60),
    "healthy-lr2e-4": ("healthy sync, lr 2e-4, 60 steps", [*SYNC, "--lr", "2e-4"], RUN25_SEEDS, 60),
    "healthy-g4x16": ("healthy sync, lr 3e-4, 4 groups x 16", [*SYNC, "--lr", "3e-4", "--groups-per-step", "4",
                                                              "--group-size", "16"], RUN25_SEEDS, None),
    "healthy-chain03": ("healthy sync, lr 3e-4, 30 % chain prompts (exact grader)",
                        [*SYNC, "--lr", "3e-4", "--chain-prob", "0.3"], RUN25_SEEDS, None),
    "healthy-kl001": ("healthy sync, lr 3e-4, KL term kl_coef 0.01", [*SYNC, "--lr", "3e-4", "--kl-coef", "0.01"],
                      RUN25_SEEDS, None),
    "healthy-async-stale1": ("healthy separate_async, lr 3e-4, max staleness 1",
                             ["--mode", "separate_async", "--lr", "3e-4", "--max-staleness", "1"], RUN25_SEEDS, None),
    "healthy-async-tis5": ("healthy separate_async, lr 3e-4, TIS cap 5",
                           ["--mode", "separate_async", "--lr", "3e-4", "--tis-cap", "5"], RUN25_SEEDS, None),
    "healthy-colocate-nois": ("healthy colocate_async, lr 3e-4, importance correction off",
                              ["--mode", "colocate_async", "--lr", "3e-4", "--tis-cap", "0"], RUN25_SEEDS, None),
    "healthy-dp2": ("healthy sync, lr 3e-4, 2 data-parallel trainer ranks", [*SYNC, "--lr", "3e-4", "--dp", "2"],
                    RUN25_SEEDS, None),
})
RUN25 = [f"{k}-s{s}" for k in list(HEALTHY_VARIANTS)[-10:] for s in RUN25_SEEDS]

# Twenty-sixth run (5 Dec 2026, registered here before its runs were re-trained): the live alerts across classes.
# The precursor alert rules were shown to fire on one collapse run each (test_precursor_alerts); how often they fire
# ahead of the drop across a class, and how late next to the doctor, was never measured. The twenty-fourth run's
# fresh test (RUN24 plus healthy-s80-85 and healthy-async-s16-19, 38 runs, 60 steps; scored there by the doctor,
# never replayed live) is trained again (the sync runs reproduce bit for bit, the async ones are new runs of the
# same settings) and replayed by bench/early_warning_live.py, rules unchanged since 1bf09db. Per run: the first
# precursor alert that fires while the run is stepping against the bench's drop on the whole record (60 steps).
# Counted as the doctor's bar is: a class run is detected when an alert fires strictly before its drop; a MIXED run
# without a drop and every healthy run count against the bar at any alert while stepping (after the last step:
# reported apart). Reported beside: the doctor's first warning on the same records, and the live lag behind it
RUN26 = [f"{c}-s{s}" for c, seeds in RUN24.items() for s in seeds] + [f"healthy-s{s}" for s in range(80, 86)] + [
    f"healthy-async-s{s}" for s in range(16, 20)]


def _register_fresh(run: dict[str, tuple[int, ...]], healthy: range, ppo2: range,
                    healthy_async: range = range(0)) -> list[str]:
    """Add one registration's fresh seeds to the matrix (``run``: class -> seeds, held out; ``healthy`` sync seeds;
    ``healthy-ppo2`` seeds; ``healthy-async`` seeds) and return their run names, in training order."""
    for k in HELDOUT_EXTRA:
        HELDOUT_EXTRA[k] += run.get(k, ())
    HEALTHY_SEEDS["heldout"] += tuple(healthy)
    HEALTHY_ASYNC_SEEDS["heldout"] += tuple(healthy_async)
    what, args, seeds, steps = HEALTHY_VARIANTS["healthy-ppo2"]
    HEALTHY_VARIANTS["healthy-ppo2"] = (what, args, seeds + tuple(ppo2), steps)
    return ([f"{c}-s{s}" for c, seeds in run.items() for s in seeds] + [f"healthy-s{s}" for s in healthy]
            + [f"healthy-ppo2-s{s}" for s in ppo2] + [f"healthy-async-s{s}" for s in healthy_async])


def _register(collapses: dict[str, tuple[int, ...]], healthy: dict[str, tuple[int, ...]]) -> list[str]:
    """Add a registration's fresh seeds to the matrix (``collapses``: class -> held-out seeds; ``healthy``: a
    HEALTHY_VARIANTS setting -> seeds) and return their run names, collapses first: the shape of the registrations
    from the fifty-second run on, where ``_register_fresh`` is the earlier ones' (the sync, ppo2 and async seeds)."""
    for cls, seeds in collapses.items():
        HELDOUT_EXTRA[cls] += seeds
    for k, seeds in healthy.items():
        what, args, old, steps = HEALTHY_VARIANTS[k]
        HEALTHY_VARIANTS[k] = (what, args, old + seeds, steps)
    return ([f"{c}-s{x}" for c, xs in collapses.items() for x in xs]
            + [f"{k}-s{x}" for k, xs in healthy.items() for x in xs])


# Twenty-seventh run (5 Dec 2026, registered here before any of its runs was trained): the live reward-hacking alert
# read by steps. The twenty-fifth and twenty-sixth runs showed RlobsPrecursorRewardHacking firing where the doctor's
# rule does not: after healthy-ppo2 s102's last step (its "recent mean" over minutes was one held step) and on the
# rebounds of two honest-grader collapses (lr s88, warm-up s25; kl s28 after its last step): the alert measured the
# reward against its low decile of the hour before, the doctor against the run's first steps. The change (committed
# before these runs are scored; its numbers are the failure table's, none chosen on any run): the Prometheus sink
# exports the doctor's own levels as gauges (the mean of the last `smooth` steps, the mean of the process's first
# `smooth` steps, the first held-out evaluation; the same for the audit gap), and the alert compares those.
# Seen before (regression, not held out): lr-too-high-s88, lr-warmup-too-high-s25, kl-blow-up-s28, healthy-ppo2-s102.
# Fresh, their number fixed here, 60 steps: reward-hacking 110-115, reward-hacking-control 110-113 (mixed),
# lr-too-high 110-113, lr-warmup-too-high 110-113, kl-blow-up 110-113, healthy 110-115, healthy-ppo2 110-113.
# Every run is replayed live under the rules before the change (5f9ff27) and after it, same records. Stated before
# training: counted for the reward-hacking alert alone, per rule set: (a) runs where it fires at all, stepping or
# after the last step, outside the reward-hacking class and where the doctor's reward-hacking rule does not warn
# (false or misnamed pages), (b) reward-hacking runs where it fires while stepping, next to the doctor's rule.
# The change stays if (a) is 0 on the fresh runs and (b) is at least the old alert's count less one; otherwise it
# is reverted and reported. The other precursor alerts are unchanged and scored as before (score()).
RUN27_SEEN = ["lr-too-high-s88", "lr-warmup-too-high-s25", "kl-blow-up-s28", "healthy-ppo2-s102"]
RUN27 = {"reward-hacking": tuple(range(110, 116)), "reward-hacking-control": tuple(range(110, 114)),
         "lr-too-high": tuple(range(110, 114)), "lr-warmup-too-high": tuple(range(110, 114)),
         "kl-blow-up": tuple(range(110, 114))}
RUN27_FRESH = _register_fresh(RUN27, range(110, 116), range(110, 114))
# Scored once (bench/results/early_warning_run27_live*.md): the change fired on all 6 fresh hacking runs (the doctor's
# rule: 6) and strayed once, lr-too-high s111 at step 17 (a 2-step blip; the doctor's rule asks two held-out
# evaluations running); the alert as it was strayed 8 times on the same records. Bar missed: reverted (6e345e1).

# Twenty-eighth run (5 Dec 2026, registered here before any of its runs was trained): the twenty-seventh run's change
# again, with a persistence: `for: 10m` instead of 1m (5 steps at 2 minutes a step; the replay scales `for` as it
# scales the windows, 10m -> 5 s, 1m -> 1 s at least). Chosen on the twenty-seventh run's records (now seen): the
# condition, judged step by step, held 4 steps running at most on lr-too-high s111 and 5+ on every hacking run
# (first at steps 13-17 against 10-14 for 1 step); test_precursor_alerts' hacking runs hold it 5+ steps. Fresh,
# their number fixed here, 60 steps: reward-hacking 116-121, reward-hacking-control 114-117 (mixed), lr-too-high
# 114-117, lr-warmup-too-high 114-117, kl-blow-up 114-117, healthy 116-121, healthy-ppo2 114-117: 32 runs, replayed
# under the new rule. Stated before training, for the reward-hacking alert: (a) pages (stepping or after the last
# step) outside the reward-hacking class on a run the doctor's rule does not warn: 0; (b) reward-hacking runs where
# it fires while stepping: at least the doctor's rule's count on the same runs less one. Both hold: the change lands;
# either fails: it stays reverted and is reported. The alert as it was is replayed on the same records beside it if
# time allows (reported, not part of the bar)
RUN28 = {"reward-hacking": tuple(range(116, 122)), "reward-hacking-control": tuple(range(114, 118)),
         "lr-too-high": tuple(range(114, 118)), "lr-warmup-too-high": tuple(range(114, 118)),
         "kl-blow-up": tuple(range(114, 118))}
RUN28_FRESH = _register_fresh(RUN28, range(116, 122), range(114, 118))
# Scored once (bench/results/early_warning_run28_live.md): 6 of 6 hacking runs, no control, healthy or KL run, and one
# stray: lr-too-high s115, pending at its last step (the condition held on that one step) and firing on the held
# levels after it. A time-based persistence is met by a held state. Bar missed: reverted (8af1261).

# Twenty-ninth run (5 Dec 2026, registered here before any of its runs was trained): the twenty-eighth run's change
# with a stepping gate: the alert holds only while the trainer's last step is at most 3 of its own step intervals old
# (the no-progress alert's yardstick: optimiser plus data-wait seconds per step over the last hour; 3 < `for` 10m /
# 2-minute steps, so a trainer that stops cannot complete the `for` on its held levels; a trainer that exports no step
# time is not gated). The multiple is set by that arithmetic, not chosen on any run. The replay emits its step time
# (one PERIOD a step). Fresh, their number fixed here, 60 steps: reward-hacking 122-127, reward-hacking-control
# 118-121 (mixed), lr-too-high 118-121, lr-warmup-too-high 118-121, kl-blow-up 118-121, healthy 122-127, healthy-ppo2
# 118-121: 32 runs. The bar, stated before training, is the twenty-eighth run's: (a) 0 pages outside the
# reward-hacking class on a run the doctor's rule does not warn (stepping or after the last step); (b) reward-hacking
# runs fired on while stepping at least the doctor's rule's count less one. Both hold: it lands; else it stays
# reverted and is reported. Not finished (trained and replayed) by 11:45 UTC: not scored, reported as not run
RUN29 = {"reward-hacking": tuple(range(122, 128)), "reward-hacking-control": tuple(range(118, 122)),
         "lr-too-high": tuple(range(118, 122)), "lr-warmup-too-high": tuple(range(118, 122)),
         "kl-blow-up": tuple(range(118, 122))}
RUN29_FRESH = _register_fresh(RUN29, range(122, 128), range(118, 122))
# Scored once (bench/results/early_warning_run29_live.md): 6 of 6 hacking runs, and one stray: lr-too-high s118,
# paged at step 42 while stepping (its condition held 6 steps between two held-out evaluations). Bar missed: reverted
# (6722131).

# Thirtieth run (5 Dec 2026, registered here before any of its runs was trained): the stepping gate on every precursor
# alert. The twenty-fifth to twenty-ninth runs showed precursor alerts paging on a record that no longer grows (a hung
# trainer serves its last values; the replay holds them 30 s after the last step): the reward-hacking alert on 5 of
# 36 runs of the twenty-seventh, the grad-norm drift alert on reward-hacking s123 (twenty-ninth). The change
# (rlobs.dashboards.alerts.precursor_rules, committed before these runs are scored): each of the eight holds only
# while the no-progress condition does not (the trainer's last step older than 5 of its own step intervals,
# optimiser plus data-wait seconds per step over the last hour, and than 60 s: scaled to 0.5 s in the replay, where it
# never binds); a stopped trainer is the no-progress alert's page. Not the twenty-ninth run's 3 intervals: on seen
# runs (healthy-s110, lr-too-high-s110, healthy-async-s16, healthy-ppo2-s110) the largest wall gap between two steps
# was 1.8-2.7x the yardstick in the sync runs and 4.1x in the separate_async one (a held-out evaluation, time the
# yardstick does not count): a 3-interval gate would have shut while it was stepping. The replay runs at each run's
# own pace (early_warning_live --real-timing: its wall gaps and step times scaled to a mean of one PERIOD), so a slow
# step or an evaluation is as much longer than the yardstick as it was in the run: the gate is tested against real
# pacing, not a metronome.
# Fresh, their number fixed here, 60 steps: reward-hacking 128-131, lr-too-high 122-125, lr-warmup-too-high 122-125,
# kl-blow-up 122-125, staleness-no-is 42-45 (separate_async), healthy 128-131, healthy-ppo2 122-125, healthy-async
# 20-23 (separate_async): 32 runs. Each is replayed (--real-timing) under the rules with the gate and under the rules
# before it (the parent commit), same records. Stated before training, the change lands if all hold: (a) no collapse
# class loses a live detection before the drop (per class, gated >= ungated) and the median live lead over the
# detected runs is within 1 step of the ungated one; (b) no precursor page that went pending more than 5 mean step
# intervals (5 s) after the last step under the gate (ungated: counted and reported; pages within 5 intervals of the
# last step are reported apart: the gate cannot tell them from a slow step); (c) on every fresh run, the largest wall
# gap between two steps is under 5x the yardstick at that step (else the gate, and no-progress, would fire while that
# run was stepping at a pace where the 60 s floor does not bind). Any fails: the gate is reverted and reported. Not
# trained and replayed by 14:25 UTC: not scored, reported as not run
RUN30 = {"reward-hacking": tuple(range(128, 132)), "lr-too-high": tuple(range(122, 126)),
         "lr-warmup-too-high": tuple(range(122, 126)), "kl-blow-up": tuple(range(122, 126)),
         "staleness-no-is": tuple(range(42, 46))}
RUN30_FRESH = _register_fresh(RUN30, range(128, 132), range(122, 126), range(20, 24))
# Scored once (bench/results/early_warning_run30_live*.md, both rule sets replayed at the runs' own pace): (b) held:
# under the gate no precursor alert went pending after a last step; without it 2 did (staleness-no-is s44 zero-std,
# 2.8 s after; healthy-async s21 reward hacking, 10.2 s after). (a) missed by one step: lr-warmup-too-high s122 went
# pending at its drop step (20) under the gate, at 19 without it (2 of 4 warm-up runs warned before the drop against
# 3; the other classes equal or better, staleness-no-is 3 of 4 against 2; median live lead 16 both). (c) missed on 5
# runs: the largest gap between two steps was 5.6-11.6x the yardstick (staleness-no-is s42-s44 at steps 45-50 and
# kl-blow-up s123 at step 10: a held-out evaluation the trainer waits through, which the yardstick does not count;
# lr-warmup-too-high s122 at step 6: every step slowed 8x at once, while another job shared the machine). Against
# the mean wall gap instead of the yardstick, 6 of the 36 runs (these and healthy-async-s16) still reach 5x: no
# yardstick of step times bounds those pauses. Bar missed: reverted (the revert of c2acc52).

# Thirty-first run (5 Dec 2026, registered here before any of its runs was trained): declared pauses for the
# no-progress alert, measured by bench/no_progress_pauses.py, not a precursor. The thirtieth run's (c): healthy runs
# waited through held-out evaluations 5.6-11.6x as long as the no-progress yardstick. The change (committed before
# these runs are trained): trainer_ref declares its evaluations and checkpoint saves (telemetry.pause: heartbeat
# eval/checkpoint on entry, phase evaluation/checkpoint on exit); RlobsNoProgress counts from the last step or the
# last pause's end, whichever is later, and during a pause adds 5x that pause kind's mean length (6 h) to the 5 step
# intervals. Fresh, their number fixed here, 60 steps: staleness-no-is 46-49 (separate_async), kl-blow-up 126-129,
# healthy 132-135, healthy-async 24-27 (separate_async): 16 runs. Each record's series are rebuilt at 20 scrapes a
# second and backfilled into a real Prometheus, which evaluates the committed rule with both floors at 0 (the regime
# of a large run, where only the multiples bind) twice: as recorded, and with the pause series left out (the rule
# before). Stated before training, the change lands if: (a) as recorded, no fresh run is paged while it steps or
# evaluates; (b) every simulated hang is paged (the record cut and its series held, the processes up: in the middle of
# each mid-run evaluation, and half a step after steps 20 and 40), after the cut by no more than the rule's allowance
# at the cut plus one mean step. The undeclared rule's pages on the same runs are reported. Any fails: reverted and
# reported.
RUN31 = {"staleness-no-is": tuple(range(46, 50)), "kl-blow-up": tuple(range(126, 130))}
RUN31_FRESH = _register_fresh(RUN31, range(132, 136), range(0), range(24, 28))
# Scored once (bench/results/no_progress_pauses_run31.md, 46 s): (b) held: 208 of 208 simulated hangs paged, each
# within 0.05 s of the moment the rule's arithmetic made it due (3.4-20.8 s after the cut, 8-77 mean steps: the cold
# first evaluation before step 1, 2.7-4 s, inflates the mean pause for the early ones). But the registered
# hang-step@20/@40 cuts fell inside the evaluations after steps 20 and 40 (every 5 steps): no hang between two steps
# was simulated. (a) held by its letter, not its intent: no run was paged while it stepped or evaluated, but
# staleness-no-is s47 and s48 were paged after their last step (1.45 s and 0.6 s of page) while separate_async's
# dispatcher drained its in-flight generation before the final evaluation, a pause the trainer did not declare. The
# rule before, on the same records: those two runs paged during their mid-run evaluations (s47 at steps 20, 30, 40,
# 50; s48 at 40, 50, 55) and in the same wind-down; the other 14 runs' evaluations (0.1-1.3 s) stayed inside 5 step
# intervals. Not landed on this score alone: the drain is declared and scored on fresh runs (thirty-second run).

# Thirty-second run (5 Dec 2026, registered here before any of its runs was trained): the drain declared. The change
# (committed before these runs are trained): separate_async's wind-down (the dispatcher draining in-flight generation
# into the buffer) is a declared pause, telemetry.pause("drain"), a third kind in PAUSE_PHASES; the bench cuts hangs
# in every declared pause after step 1 (the final evaluation, the drain and the checkpoint included) and half a mean
# step after steps 22 and 42 (not evaluation steps). Fresh, their number fixed here, 60 steps: staleness-no-is 50-53
# and healthy-async 28-31 (separate_async), healthy 136-137 and kl-blow-up 130-131 (sync): 12 runs, scored by
# bench/no_progress_pauses.py as the thirty-first. Stated before training, the change lands if: (a) as recorded, no
# run is paged at any time between its first step and its last event; (b) every simulated hang is paged, after the
# cut by no more than the rule's allowance at the cut plus one mean step. The undeclared rule is reported. Any fails:
# the pause change (this and the thirty-first's) is reverted and reported.
RUN32 = {"staleness-no-is": tuple(range(50, 54)), "kl-blow-up": tuple(range(130, 132))}
RUN32_FRESH = _register_fresh(RUN32, range(136, 138), range(0), range(28, 32))
# Scored once (bench/results/no_progress_pauses_run32.md, 42 s): both held. (a) 0 pages on the 12 recorded runs,
# first step to last event; the rule before paged all 4 staleness-no-is runs during 3-7 of their evaluations each (and
# none of the 8 others). (b) 188 of 188 hangs paged, each within 0.05 s of due: 144 in evaluations (3.3-22.9 s after
# the cut, 8-72 mean steps), 8 in drains (3.8-12.7 s), 12 in checkpoint saves (3.3-23.3 s), 24 between steps (1.1-2.1
# s, 2-6 mean steps). The change lands.

# Thirty-third run (5 Dec 2026, registered here before any of its runs was trained): the stepping gate again, on the
# pause-aware no-progress condition. The thirtieth run's gate (every precursor alert silent while the trainer's last
# step is older than 5 of its step intervals) removed the held-value pages but would have shut while runs waited
# through evaluations (its bar (c)); the thirty-first and thirty-second runs made the trainer declare its pauses and
# no-progress count them (0 of 12 healthy runs stalled from first step to last event). The change (committed before
# these runs are trained): each of the eight precursor alerts holds only while rlobs.dashboards.alerts.stalled (the
# RlobsNoProgress condition: no step for 5 step intervals after the last step or declared pause's end, plus the pause
# allowance while a pause is under way) does not. The replay (early_warning_live --real-timing) now also emits each
# record's declared pauses (evaluation, checkpoint, drain: a heartbeat at entry, a phase event at exit) at their
# scaled times, and scales both floors as it scales the windows (60 s -> 0.5 s, 600 s -> 5 s).
# Fresh, their number fixed here, 60 steps: reward-hacking 138-140, lr-too-high 126-128, lr-warmup-too-high 126-128,
# kl-blow-up 132-134, staleness-no-is 54-56 (separate_async), healthy 138-140, healthy-ppo2 126-128, healthy-async
# 32-34 (separate_async): 24 runs. Each is replayed once under the gated rules and twice under the rules without the
# gate (gate=None; the thirtieth run's lesson: the replay's own jitter is a step or so), same records. Stated before
# training, the change lands if all hold: (a) per collapse class, the runs with a live warning before the drop under
# the gate >= the fewer of the two ungated replays, and the median live lead >= the lower ungated median less one
# step; (b) under the gate, no precursor alert goes pending more than 5 s (5 mean step intervals) after its run's last
# progress (its last step or the end of its last declared pause, whichever is later); (c) the gate itself (the
# stalled condition, queried from the gated replay's Prometheus every 0.25 s) is never true on any run between its
# first and its last step; (d) healthy runs paged while stepping under the gate <= the fewer of the two ungated
# replays. Ungated held-value pages are counted and reported. Any fails: the gate is reverted and reported. Not
# trained and replayed by 19:55 UTC: not scored, reported as not run
RUN33 = {"reward-hacking": tuple(range(138, 141)), "lr-too-high": tuple(range(126, 129)),
         "lr-warmup-too-high": tuple(range(126, 129)), "kl-blow-up": tuple(range(132, 135)),
         "staleness-no-is": tuple(range(54, 57))}
RUN33_FRESH = _register_fresh(RUN33, range(138, 141), range(126, 129), range(32, 35))
# Amended after training, before any scoring (the bench's new replay tried on two seen records, ew32's
# staleness-no-is-s50 and healthy-s136): the gate's condition held 0.1-0.44 s after their first step. Before step 0
# the evaluation before training had ended (a pause: progress) and no step interval existed yet, so the bare
# condition held until the first scrape after step 0; RlobsNoProgress never did (it also asks for a last step).
# stalled() now asks for it too, as the registered "RlobsNoProgress condition" does (its rule text changes, not its
# meaning; promtool suites pass); on the two seen records the gate then held 0 times while they stepped.
# Scored once (bench/results/early_warning_run33_live.md with the gate, _ungated.md and _ungated_repeat.md without):
# (a) held: each of the 5 classes 3 of 3 in all three replays, median live lead 11 in each; (b) held: no
# alert pending over 5 s after a last progress under the gate (without it: healthy-ppo2 s126's reward-hacking alert,
# 4.4-5.8 s after its last step, in both replays); (d) held: 0 healthy runs paged while stepping in all three.
# (c) missed: the gate's condition held while staleness-no-is s56 stepped, for 0.07 s before its step 49 and until
# the next scrape (its trainer starved 1.6 s for data; that step came 5.6x the run's mean step and wait after the one before; the same
# moment in the ungated replays, so not the replay's jitter; RlobsNoProgress with floors at 0 pages it too,
# bench/no_progress_pauses.py on the same records). Bar missed: the gate is reverted (precursor_rules keeps it as a
# candidate for `bench/early_warning_live.py --gated`, not in the committed rules).


# Thirty-fourth run (5 Dec 2026, a replay, no training; registered here before any replay at these paces): the live
# precursor alerts at other step times. Every live replay so far stood a replayed step for 120 s of a real run, the
# pace the committed windows assume (the last 10 min: 5 steps; the hour before: 30). A run at 300 s a step has 2 steps
# in that 10 min: the oversized-updates alert's guarded leg asks 4 changes of its gauge in it, the first-steps leg 8
# in the hour; at 30 s a step the windows hold 20 and 120 steps and the drifts are smoothed over many more steps than
# the doctor reads. Replayed with `bench/early_warning_live.py --real-timing --step-seconds P` for P = 30, 300 and
# 600, the committed rules, on the thirty-third run's 24 records (RUN33_FRESH, in /work/records/ew33; replayed twice
# at 120 s without the gate: early_warning_run33_live_ungated{,_repeat}), scored as there. The rules evaluate every
# replay second, so a `for` under a step rounds up to one step. Stated before: `rlobs dashboards build
# --step-seconds S` (every precursor window and `for` scaled to hold the same steps at S seconds a step; the committed
# alerts.yaml stays built for 120) lands if, at 300 or 600 s, the committed rules warn before the drop on fewer class
# runs than the fewer of the two 120-s replays less 1, or page a healthy run while it steps, or, at 30 s, their
# median lead is 2+ steps under the lower 120-s median; otherwise the committed rules are called pace-robust on this
# evidence and nothing is added. Rules built for S and replayed at S are the 120-s replay itself (the same windows
# and `for` in replay seconds), so they are not replayed again
RUN34_PACES = (30, 300, 600)
# Scored once (bench/results/early_warning_run34_live_{30s,300s,600s}.md; the 120-s replays: 15 of 15 class runs
# warned before the drop, twice, 0 healthy runs paged while stepping): at 300 s the committed rules warned 10 of 15
# (lr-too-high 0 of 3, warm-up 1 of 3 and that by the reward-hacking alert) and paged 2 of 9 healthy runs
# (reward hacking); at 600 s 6 of 15 (lr, warm-up and KL 0 of 3 each), 4 of 9 healthy paged; at 30 s 11 of 15, no
# healthy page, the live alert 7-12 steps behind the doctor on the lr and warm-up runs (2 at most at 120 s). The bar is met:
# `rlobs dashboards build --step-seconds` lands (the committed alerts.yaml is still built for 120 s). Not registered,
# run after the score as a check of the identity: rules built for 300 s replayed at 300 s
# (early_warning_run34_live_300s_built300.md: 15 of 15, 0 of 9 healthy paged, as at 120 s)


# Thirty-fifth run (6 Dec 2026, a replay, no training; registered here, and the alert committed at 7103409, before
# any replay of these records with it): RlobsDoctorPrecursor, the doctor's own precursor findings served live
# (`rlobs doctor RUN --follow --metrics-port N`, rlobs.doctor.exporter) and alerted on by Prometheus, on the 84
# records of the thirtieth to thirty-third runs (RUN35_RECORDS, in /work/records/ew30..ew33; every one trained after
# the precursor rules last changed). `bench/early_warning_live.py --doctor --real-timing --period 2 --batch 8`: each
# run at its own pace (a mean of 2 replay seconds a step, its declared pauses), one watcher judging the batch's 8
# records with the precursor rules every 0.5 s (~0.1 s an evaluation: a pass well under a step), a real Prometheus
# scraping every second. The doctor judges the record the replay rebuilds from the run's signals; "the doctor" below
# is `early_warning.judge` on the original record, step by step. Stated before:
# (a) per class, the runs warned before the drop while stepping by the alert equal those the doctor warns before it;
# (b) no healthy run paged while stepping;
# (c) on 95 %+ of the runs the doctor warns, the alert goes pending within 1 step of the doctor's first warning;
# (d) on 95 %+ of them it names the doctor's first rule (a tie at that step: either).
# Met: README recommends the doctor's alert as the live early warning (the PromQL precursor alerts stay, for a
# Prometheus without the doctor watching). Missed: README says where it falls short and the PromQL alerts stay the
# recommended live path.
RUN35_RECORDS = ("ew30", "ew31", "ew32", "ew33")
# Scored once (bench/results/early_warning_run35_doctor_ew3{0,1,2,3}.md, replayed by 9cc0e19's bench): 84 runs, 49
# warned by the doctor, 35 healthy. (a) held: per class the alert warned before the drop on exactly the doctor's runs
# (reward hacking 5 of 5 collapsed, lr too high 6 of 6, warm-up 5 of 7, KL 12 of 12, staleness without IS 14 of 15);
# (b) held: 0 of 35 healthy runs paged; (d) held: 49 of 49 named the doctor's first rule. (c) missed: 42 of 49 (86 %)
# within 1 step; 7 runs 2-3 steps behind (staleness-no-is s47, s48, s50, s51, s54, s55, warm-up s122), every one of
# them 1.3-2.9 s after the replay emitted the doctor's first-warning step (all 49: median 1.79 s, max 2.93 s; an
# evaluation 0.1 s, a watcher pass over 8 records ~1.3 s, a 1 s scrape and evaluation), in stretches where their
# steps came 2-4x faster than their run's mean (separate_async runs' early steps; the mean holds their evaluation
# pauses). Bar missed: the PromQL precursor alerts stay the recommended live path; README says where the doctor's
# alert falls short (steps shorter than its ~3 s latency)


# Thirty-sixth run (6 Dec 2026, a replay, no training; registered here before it): is the thirty-fifth run's lag a
# matter of seconds? The thirty-third run's 24 records (RUN33_FRESH, /work/records/ew33; replayed in the thirty-fifth
# at a mean of 2 s a step) again under RlobsDoctorPrecursor, each at its own pace at a mean of 8 s a step
# (`--doctor --real-timing --period 8 --batch 24`: one watcher for all 24, a pass ~3 s). Stated before: if the lag
# is the ~1-3 s path, at 8 s a step (the fastest stretches 2-4 s) (c) holds: the alert within 1 step of the doctor's
# first warning on 95 %+ of the runs the doctor warns; and (a), (b), (d) hold as in the thirty-fifth run. Either way
# README reports it beside the thirty-fifth run; nothing is committed on it
RUN36_PERIOD = 8.0
# Scored once (bench/results/early_warning_run36_doctor_8s.md): every bar held. (c) 15 of 15 warned runs at lag 0
# (staleness-no-is s54 and s55, 2 steps behind at 2 s a step, now at the doctor's step); (a) the same runs as the
# doctor in every class (lr 3 of 3, warm-up 2 of 3, KL 3 of 3, staleness 3 of 3, hacking 3 of 3); (b) 0 of 9 healthy
# paged; (d) 15 of 15 named the doctor's first rule. Latency from the doctor's first-warning step 0.9-4.6 s (median
# 2.2 s; a pass over 24 records). README reports it beside the thirty-fifth run


# Thirty-seventh run (6 Dec 2026, registered here before any of its runs was trained): the switch the thirty-fifth
# run's registration left for fresh runs. RlobsDoctorPrecursor (committed at 7b6476e, unchanged since the
# thirty-fifth and thirty-sixth runs) on records no alert or rule has seen. Fresh, their number fixed here, 60 steps:
# reward-hacking 141-143, lr-too-high 129-131, lr-warmup-too-high 129-131, kl-blow-up 135-137, staleness-no-is 57-59
# (separate_async), healthy 141-143, healthy-ppo2 129-131, healthy-async 35-37 (separate_async): 24 runs (RUN37_FRESH,
# /work/records/ew37). Replayed once with `bench/early_warning_live.py --doctor --real-timing --period 8 --batch 24`
# (each run at its own pace, a mean of 8 s a step: trainer steps of real models take tens of seconds to minutes; one
# watcher judging all 24 every 0.5 s) and scored against `early_warning.judge` on the original records, step by step,
# with the thirty-fifth run's bars: (a) per class, the runs warned before the drop while stepping by the alert equal
# those the doctor warns before it; (b) no healthy run paged while stepping; (c) on 95 %+ of the runs the doctor warns,
# the alert goes pending within 1 step of the doctor's first warning; (d) on 95 %+ of them it names the doctor's first
# rule (a tie at that step: either). Reported beside it, not part of the bar: the committed PromQL precursor alerts on
# the same 24 records (`--real-timing`, a replayed second a 120-s step), and the doctor's own score (`eval`).
# All of (a)-(d) hold: README recommends RlobsDoctorPrecursor as the live early warning for runs whose steps take
# seconds or more (the PromQL precursor alerts stay, for a Prometheus with no doctor watching, and below ~3 s a step),
# and `rlobs observe` runs the doctor unless told `--no-doctor`. Any misses: README reports it and nothing changes.
# Not trained and replayed by 05:00 UTC: not scored, reported as not run
RUN37 = {"reward-hacking": tuple(range(141, 144)), "lr-too-high": tuple(range(129, 132)),
         "lr-warmup-too-high": tuple(range(129, 132)), "kl-blow-up": tuple(range(135, 138)),
         "staleness-no-is": tuple(range(57, 60))}
RUN37_FRESH = _register_fresh(RUN37, range(141, 144), range(129, 132), range(35, 38))
RUN37_PERIOD = 8.0
# Scored once (bench/results/early_warning_run37_doctor_8s.md; trained 03:21-03:44 UTC, replayed 03:44-03:56): every
# bar held. (a) per class the alert warned before the drop on the doctor's runs: 3 of 3 in each of the five classes;
# (b) 0 of 9 healthy runs paged; (c) 15 of 15 within 1 step of the doctor's first warning (11 at its step; lr s129 and
# staleness s57, s58 one behind: pending 2.8-7.0 s after the step was written, a median of 4.3 s, against 2.2 s in the
# thirty-sixth run: evaluations took a median 0.16 s here, 0.11 s there, so a pass over 24 records ~3.8 s); (d) 15 of
# 15 named the doctor's first rule. The doctor (`eval`, early_warning_run37.md): 15 of 15 warned before the drop,
# median lead 12, 0 of 9 healthy warned. The committed PromQL alerts on the same records (early_warning_run37_live.md,
# a replayed second a 120-s step): 15 of 15 warned before the drop, 0 of 9 healthy paged while stepping; one
# page after a healthy run's last step (healthy-ppo2 s129, the reward-hacking alert, 5 s after: a held value).
# The switch lands: README recommends RlobsDoctorPrecursor, `rlobs observe` runs the doctor unless --no-doctor


# Thirty-eighth run (6 Dec 2026, registered here before any of its runs was trained; rules unchanged since 0de2909 and
# the ledger-end fix): healthy breadth, second pass. Ten settings an expert user runs that no threshold was chosen or
# checked on, 60 steps each: an entropy bonus (--entropy-coef 0.01, verl's entropy_coeff, new today), a tighter length
# cap (max tokens 48), 2 updates per step with a tighter ratio clip (0.1), a tighter grad clip (0.5), 8 groups x 4,
# the exact grader (no partial credit); separate_async aborting in-flight requests at a weight update, checking
# staleness on the completion's newest version, with the grader colocated in the generator; colocate_async at max
# staleness 1. Tune: seeds 200-201 of each (20 runs), trained first and looked at; a defect they show may be fixed on
# them, the fix frozen (committed) before the held-out runs are trained. Held out: seeds 202-204 of each (30 runs),
# their number fixed here, trained after the tune look (and any fix), scored once. The bar: the whole doctor (every
# rule, `all_rules`: warnings and criticals) on a run without a drop: 0; a precursor warning before a drop is listed
# apart, and a drop is reported (a setting that collapses is no healthy setting). If no fix is made, the held-out
# runs are still trained and scored
RUN38_TUNE, RUN38_HELDOUT = (200, 201), (202, 203, 204)
_ASYNC38 = ["--mode", "separate_async", "--lr", "3e-4"]
RUN38_SETTINGS = {
    "healthy-ent01": ("healthy sync, lr 3e-4, entropy bonus 0.01", [*HEALTHY, "--entropy-coef", "0.01"]),
    "healthy-tok48": ("healthy sync, lr 3e-4, max tokens 48", [*HEALTHY, "--max-tokens", "48"]),
    "healthy-ppo2-clip01": ("healthy sync, lr 3e-4, 2 updates per step, ratio clip 0.1",
                            [*HEALTHY, "--ppo-epochs", "2", "--clip-eps", "0.1"]),
    "healthy-gn05": ("healthy sync, lr 3e-4, grad clip 0.5", [*HEALTHY, "--max-grad-norm", "0.5"]),
    "healthy-g8x4": ("healthy sync, lr 3e-4, 8 groups x 4", [*HEALTHY, "--group-size", "4"]),
    "healthy-exact": ("healthy sync, lr 3e-4, exact grader", [*HEALTHY, "--grader", "exact"]),
    "healthy-async-abort": ("healthy separate_async, lr 3e-4, in-flight requests aborted at a weight update",
                            [*_ASYNC38, "--interrupt", "abort"]),
    "healthy-async-completion": ("healthy separate_async, lr 3e-4, staleness checked on the completion's version",
                                 [*_ASYNC38, "--staleness-basis", "completion"]),
    "healthy-async-gradercoloc": ("healthy separate_async, lr 3e-4, grader colocated in the generator",
                                  [*_ASYNC38, "--grader-placement", "colocated"]),
    "healthy-colocate-stale1": ("healthy colocate_async, lr 3e-4, max staleness 1",
                                ["--mode", "colocate_async", "--lr", "3e-4", "--max-staleness", "1"]),
}
HEALTHY_VARIANTS.update({k: (what, args, RUN38_TUNE + RUN38_HELDOUT, 60) for k, (what, args) in RUN38_SETTINGS.items()})
VARIANT_CALIBRATION.update({k: RUN38_TUNE for k in RUN38_SETTINGS})
RUN38_TUNE_NAMES = [f"{k}-s{s}" for k in RUN38_SETTINGS for s in RUN38_TUNE]
RUN38_HELDOUT_NAMES = [f"{k}-s{s}" for k in RUN38_SETTINGS for s in RUN38_HELDOUT]
# Tune look (bench/results/early_warning_run38_tune.md): precursors 0 of 20; the whole doctor: a staleness-over-bound
# critical on both completion-basis runs (dispatch staleness 6-7 at bound 2; the newest tokens' staleness, which the
# bound holds, at most 2), and once read on that basis, staleness-growing on one. Fix frozen at fdf9b02 (the rules
# count staleness on the bound's basis), then the held-out runs trained (09:02-09:26 UTC). Scored once
# (early_warning_run38_heldout.md; the frozen fdf9b02 and the tree after 0ef64d3, which records that staleness in
# the staleness event, give the same table): 0 warnings or criticals of any rule on the 30 held-out runs (before
# the fix: a critical on 3 of 3 completion-basis runs). The bench's drop fired on 11 of 30, held-out success within
# 0.09 of its best on 10; healthy-async-completion-s204 held out 0.56 -> 0.41 at its lowest, 0.48 at the end
# Thirty-ninth run (6 Dec 2026, registered here before any of its runs was trained; rules unchanged since fdf9b02 but
# for an insufficient-data message): healthy breadth, third pass. Ten more settings an expert user runs that no
# threshold was chosen or checked on, 60 steps each: the `tiny-dot` warm start (new today: most of its answers end in
# a full stop no grader accepts, held-out success starts near 0.1) and the clean `tiny` warm start at its default lr;
# sampling at T 0.7; lr 1e-4 (a slow learner); groups of 2 (8 x 2: half the groups zero-std by construction); a
# chain-heavy prompt mix (50 % chains, held out on the same mix); separate_async with a tight importance-ratio cap
# (--tis-cap 1), with the KL term on (0.01); colocate_async aborting in-flight requests at a weight update; 2 DP ranks
# under --staleness-basis completion. Tune: seeds 210-211 of each (20 runs), trained first and looked at; a defect
# they show may be fixed on them, the fix frozen (committed) before the held-out runs are trained. Held out: seeds
# 212-214 of each (30 runs), their number fixed here, trained after the tune look (and any fix), scored once. The bar:
# the whole doctor (every rule, `all_rules`: warnings and criticals) on every held-out run: 0. A run whose held-out
# success falls 0.15 under its best and stays there at the next evaluation (drop_step_confirmed's held-out leg) is
# listed apart with its warnings (a setting that collapses is no healthy setting); the bench's drop is reported beside
RUN39_TUNE, RUN39_HELDOUT = (210, 211), (212, 213, 214)
_ASYNC39 = ["--mode", "separate_async", "--lr", "3e-4"]
RUN39_SETTINGS = {
    "healthy-dot": ("healthy sync, lr 3e-4, the tiny-dot warm start (a format defect to unlearn)",
                    [*HEALTHY, "--model", "tiny-dot"]),
    "healthy-tiny": ("healthy sync, the clean tiny warm start at its default lr", [*SYNC, "--model", "tiny"]),
    "healthy-t07": ("healthy sync, lr 3e-4, sampling at temperature 0.7", [*HEALTHY, "--temperature", "0.7"]),
    "healthy-lr1e-4": ("healthy sync, lr 1e-4 (a slow learner)", [*SYNC, "--lr", "1e-4"]),
    "healthy-g8x2": ("healthy sync, lr 3e-4, 8 groups x 2", [*HEALTHY, "--group-size", "2"]),
    "healthy-chain05": ("healthy sync, lr 3e-4, 50 % chain prompts (held out on the same mix)",
                        [*HEALTHY, "--chain-prob", "0.5"]),
    "healthy-async-tis1": ("healthy separate_async, lr 3e-4, importance ratios truncated at 1",
                           [*_ASYNC39, "--tis-cap", "1"]),
    "healthy-async-kl": ("healthy separate_async, lr 3e-4, KL term 0.01", [*_ASYNC39, "--kl-coef", "0.01"]),
    "healthy-colocate-abort": ("healthy colocate_async, lr 3e-4, in-flight requests aborted at a weight update",
                               ["--mode", "colocate_async", "--lr", "3e-4", "--interrupt", "abort"]),
    "healthy-dp2-completion": ("healthy separate_async, lr 3e-4, 2 DP ranks, staleness checked on the completion",
                               [*_ASYNC39, "--dp", "2", "--staleness-basis", "completion"]),
}
HEALTHY_VARIANTS.update({k: (what, args, RUN39_TUNE + RUN39_HELDOUT, 60) for k, (what, args) in RUN39_SETTINGS.items()})
VARIANT_CALIBRATION.update({k: RUN39_TUNE for k in RUN39_SETTINGS})
RUN39_TUNE_NAMES = [f"{k}-s{s}" for k in RUN39_SETTINGS for s in RUN39_TUNE]
RUN39_HELDOUT_NAMES = [f"{k}-s{s}" for k in RUN39_SETTINGS for s in RUN39_HELDOUT]
# Tune look (bench/results/early_warning_run39_tune.md, trained 11:49-12:14 UTC): 0 warnings or criticals of any rule
# on the 20 runs; every run learned (held-out success 0.10-0.40 at the start, best 0.37-0.86; none fell 0.15 under
# its best and stayed). The bench's drop (training-reward leg) fired on 7 of 20. No fix: the rules stay as
# registered; the held-out runs are trained next

# Scored once (bench/results/early_warning_run39_heldout.md, trained 12:14-12:45 UTC): 2 of 30 held-out runs warned,
# the bar not met. healthy-t07-s214: precursor-oversized-updates at step 58 (4 of the last 5 updates over 0.015
# nats/token, a burst at steps 54-60 up to 0.5 on a solved policy, held-out 0.92); trained again with the same seed
# to 100 steps (sync, deterministic: the first 60 steps identical) it held 0.87-0.91 held out to step 100 with
# policy_kl under 0.007 after step 60, so the warning was false (expected impact 6-32 steps). Not fixed: the rule
# carries the lr classes, and a change needs their seeds re-scored. healthy-dp2-completion-s214: staleness-growing
# (whole doctor) at step 12: the completion-basis mean 0.94 in the first steps, at the bound of 2 for three steps
# (2 DP ranks make the trainer the slower side). Fixed: staleness within the configured bound is the lag the run
# allows (the fix frozen in the commit that registers the fortieth run)

# Fortieth run (6 Dec 2026, registered here with the staleness-growing fix frozen, before any of its runs was
# trained): the fix on fresh seeds. healthy-dp2-completion (the setting that showed it) and a new healthy-async-dp2
# (separate_async, 2 DP ranks, the dispatch basis: the same slower trainer without the completion basis), seeds
# 215-219 of each; and healthy-t07 seeds 215-219, the oversized-updates false warning's setting, rules unchanged
# there: its rate, reported, no fix. The bar: the whole doctor (every rule, warnings and criticals) on the 10
# dp2 runs: 0; beside it, the rules before the fix (45e239a) on the same records, and the t07 runs' warnings
RUN40_SEEDS = (215, 216, 217, 218, 219)
HEALTHY_VARIANTS["healthy-async-dp2"] = ("healthy separate_async, lr 3e-4, 2 DP ranks", [*_ASYNC39, "--dp", "2"],
                                         RUN40_SEEDS, 60)
VARIANT_CALIBRATION["healthy-async-dp2"] = ()
for _k in ("healthy-dp2-completion", "healthy-t07"):
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + RUN40_SEEDS, _steps)
RUN40_NAMES = [f"{k}-s{s}" for k in ("healthy-dp2-completion", "healthy-async-dp2", "healthy-t07") for s in RUN40_SEEDS]

# Forty-first run (6 Dec 2026, registered here before any of its runs was trained; rules as at 26c20ff): the
# oversized-updates false warning (healthy-t07-s214, thirty-ninth run, step 58; seen, not held out). There the window
# (steps 54-58) had 4 of 5 updates over 0.015 on a solved policy: median zero-std share 0.875, median training reward
# 0.775, held out 0.80-0.92; a too-high warm-up's window at its warning (collapse_runs.json, warm-up s0, steps 12-16)
# had a zero-std share of 0.125-0.375. Candidate fix, stated before the tune runs: the after-learning leg stays silent
# while the window's median zero-std share is at least 0.75 and its median training reward at least 0.6 (the solved
# bar zero-std-rising already uses): a policy that solves most of its groups is updated by the few left, and Adam
# scales their noise to an lr-sized step; the first-steps leg is unchanged. Tune: fresh seeds of the classes the rule
# carries, lr-too-high 132-133, lr-warmup-too-high 132-135 (the leg's main class: warnings at steps 12-25),
# kl-blow-up 138-139, reward-hacking 144-145 (10 runs), trained first: what the candidate would have suppressed on
# them; the guard's numbers may be changed on them and then frozen (committed) before the held-out runs are trained.
# Held out, their number fixed here, trained after the freeze and scored once: lr-too-high 134-137,
# lr-warmup-too-high 136-141, kl-blow-up 140-143, reward-hacking 146-148 (17 collapse runs), healthy-t07 220-227 and
# healthy sync 144-147 (12 healthy runs). The bar: (a) every held-out collapse run the rules before the fix (26c20ff,
# same records) warn before its drop, the fixed rules warn before it too, and the pooled detection per class stays
# at 90 % or more; (b) the whole doctor (every rule, warnings and criticals) on the 12 healthy runs: 0, the rules
# before the fix reported beside. If no fix is frozen, the held-out runs are still trained and scored
RUN41_TUNE = {"lr-too-high": (132, 133), "lr-warmup-too-high": (132, 133, 134, 135), "kl-blow-up": (138, 139),
              "reward-hacking": (144, 145)}
RUN41_HELDOUT = {"lr-too-high": (134, 135, 136, 137), "lr-warmup-too-high": (136, 137, 138, 139, 140, 141),
                 "kl-blow-up": (140, 141, 142, 143), "reward-hacking": (146, 147, 148)}
for _run in (RUN41_TUNE, RUN41_HELDOUT):
    for _c, _s in _run.items():
        HELDOUT_EXTRA[_c] += _s
RUN41_T07, RUN41_HEALTHY = (220, 221, 222, 223, 224, 225, 226, 227), (144, 145, 146, 147)
HEALTHY_SEEDS["heldout"] += RUN41_HEALTHY
_what, _args, _seeds, _steps = HEALTHY_VARIANTS["healthy-t07"]
HEALTHY_VARIANTS["healthy-t07"] = (_what, _args, _seeds + RUN41_T07, _steps)
RUN41_TUNE_NAMES = [f"{c}-s{s}" for c, seeds in RUN41_TUNE.items() for s in seeds]
RUN41_HELDOUT_NAMES = ([f"{c}-s{s}" for c, seeds in RUN41_HELDOUT.items() for s in seeds]
                       + [f"healthy-t07-s{s}" for s in RUN41_T07] + [f"healthy-s{s}" for s in RUN41_HEALTHY])
# Tune look (trained 14:24-14:34 UTC; each run's first warning replayed step by step with the guard and without it):
# the guard moved no warning on any of the 10 runs. The windows the rule first warned on had a median zero-std share
# of 0-0.25 (lr-too-high, warm-up: rewards 0.34-0.61), 0-0.375 (KL blow-up) and 0.625 at a reward of 0.91
# (reward-hacking s144, step 19, the reward-hacking rule first at 12): none solved. The candidate is frozen as stated
# (solved_zero_std 0.75, solved_reward 0.6, in the failure table; the PromQL alert's guarded legs carry the same
# guard), before the held-out runs are trained
# Scored once (bench/results/early_warning_run41_heldout.md, trained 14:34-14:59 UTC): (a) met: the 17 held-out
# collapse runs' first warnings are the rules before's (26c20ff, same records), every one before its drop (lr 4/4,
# warm-up 6/6, KL 4/4, hacking 2/2 that fell); (b) met: 0 of 12 healthy runs warned by any rule (the rules before: 0
# too; the T 0.7 false warning did not recur). The PromQL alert, replayed live on the same records, had lost 4 lr /
# warm-up warnings to a precedence bug in its guard (`X unless A and B`), parenthesised the next commit and replayed
# again: within a step of the alert before (early_warning_run41_live{,_before,_unparenthesised}.md)

# Forty-second run (6 Dec 2026, registered here before any of its runs was trained): the PromQL reward-hacking
# alert's held-out leg asks for the doctor's two evaluations running. Replayed live where no doctor watches, the
# committed RlobsPrecursorRewardHacking paged 7 of 127 healthy runs while stepping (the doctor none); simulated step
# by step on the 113 records at hand (/work/records ew39, ew41, dot_x: seen), the pages come from its held-out leg
# (the audit leg fired on no run outside the hacking class): a training reward that climbs 0.3 over its low decile of
# the hour before a step or two ahead of the next held-out evaluation, one reading running. The doctor asks the
# condition at two evaluations running. The change (rlobs.dashboards.alerts.precursor_rules): the held-out leg holds
# only where its condition held one `recent` window before as well (the same expression with every selector shifted
# by `recent`: 5 steps at 2 minutes a step; at an evaluation every 5 steps, two evaluations); the audit leg and the
# thresholds unchanged. Chosen on the 113 seen records (simulated): a shift of 5 steps left no run outside the
# hacking class and the held-out leg on the doctor's own steps (s144 25, s145 35, s146 30; s147-148 none, as the
# doctor's leg; the audit leg warns all 5 at 6-8); 4 steps the same, 3 steps 2 strays. The earlier tries' strays
# (lr-too-high s111, s115, s118 of the twenty-seventh to twenty-ninth runs) are retrained (sync: the same records)
# and checked before the freeze; the shift may change on them, then it is frozen (committed) before any held-out
# run is trained. Held out, their number fixed here, 60 steps, trained after the freeze and replayed once: reward-
# hacking 149-154, lr-too-high 138-141, reward-hacking-control 122-123 (honest grader, lr 7e-4: mixed), and the
# healthy settings whose runs it paged: healthy-dot, -tiny, -g8x2, -chain05, -t07, -async-kl, -dp2-completion
# seeds 228-229 (26 runs). Each replayed live (committed rules at 2 minutes a step) under the rules before (60b50b0)
# and after, same records; the hacking runs also without the audit gauge (`--without audit_gap`: a trainer without
# --audit-grader, the held-out leg alone). The bar, for RlobsPrecursorRewardHacking: (a) no page while stepping on a
# run outside the reward-hacking class where the doctor's reward-hacking rule does not warn; (b) with the audit,
# the hacking runs paged while stepping at least as many as under the rules before; (c) without it, at least the
# doctor's held-out leg's count on the same runs less one. All hold: it lands; any fails: reverted and reported.
# Pages after a run's last step (held values of a trainer that stopped stepping) are reported apart, as before
RUN42_SEEN = ["lr-too-high-s111", "lr-too-high-s115", "lr-too-high-s118"]
RUN42 = {"reward-hacking": tuple(range(149, 155)), "lr-too-high": tuple(range(138, 142)),
         "reward-hacking-control": (122, 123)}
for _c, _s in RUN42.items():
    HELDOUT_EXTRA[_c] += _s
RUN42_HEALTHY_SEEDS = (228, 229)
RUN42_HEALTHY = ("healthy-dot", "healthy-tiny", "healthy-g8x2", "healthy-chain05", "healthy-t07", "healthy-async-kl",
                 "healthy-dp2-completion")
for _k in RUN42_HEALTHY:
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + RUN42_HEALTHY_SEEDS, _steps)
RUN42_NAMES = ([f"{c}-s{s}" for c, seeds in RUN42.items() for s in seeds]
               + [f"{k}-s{s}" for k in RUN42_HEALTHY for s in RUN42_HEALTHY_SEEDS])
# Seen strays checked (retrained 17:49-17:51 UTC, simulated step by step and replayed in promtool): the held-out
# leg's condition held at no step of lr-too-high s111, s115 or s118 on one reading or two (their strays were the
# twenty-seventh to twenty-ninth runs' variants, the doctor's levels as gauges). The shift stays 5 steps (one
# `recent` window), frozen with this comment before any held-out run is trained

# Forty-third run (6 Dec 2026, registered here with its change frozen, before any of its runs was trained): the
# forty-second run's held-out healthy-async-kl-s228 (separate_async, KL term 0.01; held-out success 0.22 -> 0.77) was
# warned by precursor-kl-creep at step 8: its reference KL read 22.3 and 8.8 at steps 6 and 8 between 0.01-0.1, and
# the median of the last 3 steps was a spike. The change (the failure table, `min_alarms` 2, read by every drift
# precursor that sets it; only the KL rule does): the alarm must hold at two steps running. Chosen on seen records
# (ew41 kl-blow-up 138-143: each warned one step later, 7-16 -> 8-17, every one before its drop; s228 silent; no
# other run of ew39 / ew41 moved). Held out, their number fixed here, 60 steps, trained after this commit and scored
# once: kl-blow-up 144-147 and healthy-async-kl 230-235. The bar: (a) every fresh KL run the rules before (9a7f0cf,
# same records) warn before its drop, the new rules warn before it too; (b) the whole doctor (every rule, warnings and
# criticals) on the 6 healthy runs: 0, the rules before reported beside. Both hold: it stays; else reverted
RUN43 = {"kl-blow-up": (144, 145, 146, 147)}
HELDOUT_EXTRA["kl-blow-up"] += RUN43["kl-blow-up"]
RUN43_HEALTHY_SEEDS = (230, 231, 232, 233, 234, 235)
_what, _args, _seeds, _steps = HEALTHY_VARIANTS["healthy-async-kl"]
HEALTHY_VARIANTS["healthy-async-kl"] = (_what, _args, _seeds + RUN43_HEALTHY_SEEDS, _steps)
RUN43_NAMES = ([f"kl-blow-up-s{s}" for s in RUN43["kl-blow-up"]]
               + [f"healthy-async-kl-s{s}" for s in RUN43_HEALTHY_SEEDS])
# Scored once (bench/results/early_warning_run43.md): met. KL blow-up 4 of 4 before the drop under both rule sets;
# healthy-async-kl 0 of 6 warned by any rule (the rules before: s230, KL creep at 19 on k3 spikes of 31 and 815)

# Forty-fourth run (6 Dec 2026, registered here with its change frozen, before any of its runs was trained): the
# forty-second run's two healthy-async-kl runs drew a `grad-norm-spike` critical (clipped spikes at steps 6 and 4 at
# the trainer's k3 KL spikes), made critical by the consequence "KL blew up after the spike": the median KL of the 3
# steps after it 10x the median before, which a KL near 0 in a run's first steps (the policy starts at its reference)
# passes while the run learns (0.006 -> 0.16). The change (rlobs.doctor.rules.gradnorm): that consequence also needs
# the KL's rise per step since the run's first step at the KL-creep rule's min_rate (0.03, the failure table's number,
# not chosen here). Seen: the 151 records at hand (ew39, ew41, ew42, dot_x), where it turned those two criticals into
# info and moved nothing else (no other grad-norm-spike warning or critical under either rule). Held out, their number
# fixed here, 60 steps, trained after this commit and scored once: healthy-async-kl 236-243. The bar: the whole doctor
# (every rule, warnings and criticals) on the 8: 0, the rules before (3919ab6) reported beside. Met: it stays; else
# reverted
RUN44_HEALTHY_SEEDS = (236, 237, 238, 239, 240, 241, 242, 243)
_what, _args, _seeds, _steps = HEALTHY_VARIANTS["healthy-async-kl"]
HEALTHY_VARIANTS["healthy-async-kl"] = (_what, _args, _seeds + RUN44_HEALTHY_SEEDS, _steps)
RUN44_NAMES = [f"healthy-async-kl-s{s}" for s in RUN44_HEALTHY_SEEDS]
# Scored once (bench/results/early_warning_run44.md): met, 0 of 8 warned or critical by any rule; the rules before:
# 0 of 8 too (no fresh spike had a KL consequence: s239's 45-nat spike came at step 3, before the spike detector's
# warm-up). The change is shown on the two runs it was chosen on (a test) and moved nothing on 159 other records

# Forty-fifth run (6 Dec 2026, registered here with its change frozen, before any of its runs was trained): a trainer
# change, not a rule's. trainer_ref's KL to the reference was the unbounded k3 estimate: on separate_async batches a
# token the policy has all but dropped sent it to hundreds of nats for a step (5 of the 21 healthy-async-kl runs of
# the thirty-ninth to forty-fourth runs over 5 nats/token, up to 815; pre-clip grad norms with it up to 1404), the
# cause of the forty-third and forty-fourth runs' doctor defects. The change (trainer_ref.grpo.k3, config kl_clamp,
# default 10): k3 bounded per token at 10 in the loss and in what is logged, its log ratio clamped to [-20, 20] for
# the exponential, as verl's low_var_kl (and OpenRLHF's k3) do; a bounded token adds no KL gradient. The bench's
# KL settings take the trainer's default. Fresh runs, their number fixed here, 60 steps, trained after this commit
# and scored once: kl-blow-up 148-153 (sync, lr 1.5e-3, kl_coef 0.05), healthy-async-kl 244-251 (separate_async,
# kl_coef 0.01), healthy-kl 10-13 (sync, lr 3e-4, kl_coef 0.05). The bar: (a) no fresh run logs a reference KL over
# 10 nats/token at any step; (b) the healthy KL-term runs learn as before: each one's best held-out success 0.3+ over
# its first evaluation, as every one of the 21 unbounded healthy-async-kl runs did; (c) the whole doctor (every
# rule, warnings and criticals) on the 12 healthy runs: 0; (d) the KL blow-up class still collapses (5+ of 6 by the
# bench's drop) and the doctor warns before the drop on every one that does. (a)-(c) hold: the bound stays in the
# trainer. (d) fails: the bench's KL class is reported as changed by it and re-registered (the unbounded setting
# with --kl-clamp 0 beside the bounded one), not tuned here
RUN45 = {"kl-blow-up": (148, 149, 150, 151, 152, 153)}
HELDOUT_EXTRA["kl-blow-up"] += RUN45["kl-blow-up"]
RUN45_HEALTHY = {"healthy-async-kl": (244, 245, 246, 247, 248, 249, 250, 251), "healthy-kl": (10, 11, 12, 13)}
for _k, _s in RUN45_HEALTHY.items():
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + _s, _steps)
RUN45_NAMES = ([f"kl-blow-up-s{s}" for s in RUN45["kl-blow-up"]]
               + [f"{k}-s{s}" for k, seeds in RUN45_HEALTHY.items() for s in seeds])
# Scored once (bench/results/early_warning_run45{,_trainer}.md): met. (a) largest KL 2.2 (healthy 0.26-0.81); (b) 12 of
# 12 healthy runs learned (+0.43-0.70); (c) whole doctor 0 of 12; (d) 6 of 6 KL blow-ups fell, 6 of 6 warned before
# the drop (median lead 9). The bound stays

# Forty-sixth run (6 Dec 2026, registered here with its change frozen, before any of its runs was trained; the
# forty-fifth run's 18 records, training as this is committed and not yet looked at, are held out for it too: the
# change does not touch training). The forty-second run's held-out healthy-dp2-completion-s228 was paged by the live
# RlobsPrecursorEntropyDecline at step 56 (training reward 0.8-0.98 over its last steps, entropy 0.06-0.26, held-out
# success 0.74: a solved task's policy converging). The change: precursor-entropy-decline, rule and alert, is silent
# while the training reward sits at or over solved_reward (0.6; the zero-std rule's own guard and number, not chosen
# here). Seen: over the 420 pooled runs the doctor's rule never warned; in the 270 live replays the alert never was a
# run's first (9 collapse runs drew it 20-44 steps after their first alert, and that healthy run). Held out, their
# number fixed here, trained after this commit: healthy-dp2-completion 230-233, healthy-t07 230-232 (60 steps),
# healthy-long 46-47 (100 steps: runs that solve and sharpen), lr-too-high 142-144, lr-warmup-too-high 142-144,
# staleness-no-is 63-65 (60 steps). Scored once with the forty-fifth run's records, replayed live (committed rules at
# 2 minutes a step, no doctor) under the rules before (4689c79) and after, and by the whole doctor. The bar: (a) no
# fresh healthy run paged by RlobsPrecursorEntropyDecline while it stepped; (b) each fresh collapse run's first
# precursor page while stepping at the same step under both rule sets, and its first doctor warning too; (c) the
# whole doctor warns on none of the fresh healthy runs. All hold: it stays (reported as not exercised if the rules
# before page no fresh healthy run either); else reverted
RUN46 = {"lr-too-high": (142, 143, 144), "lr-warmup-too-high": (142, 143, 144), "staleness-no-is": (63, 64, 65)}
for _c, _s in RUN46.items():
    HELDOUT_EXTRA[_c] += _s
RUN46_HEALTHY = {"healthy-dp2-completion": (230, 231, 232, 233), "healthy-t07": (230, 231, 232),
                 "healthy-long": (46, 47)}
for _k, _s in RUN46_HEALTHY.items():
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + _s, _steps)
RUN46_NAMES = ([f"{c}-s{s}" for c, seeds in RUN46.items() for s in seeds]
               + [f"{k}-s{s}" for k, seeds in RUN46_HEALTHY.items() for s in seeds])
# Scored once (bench/results/early_warning_run46{,_live,_live_before}.md): (a) met, not exercised (0 of 21 healthy
# paged while stepping under either rule set); (c) met (0 under both). (b) not met as worded: the doctor's first
# warnings identical on all 15 collapse runs, but the live first pages differed by one step on 7 of 15, both ways, all
# on alerts the change does not touch (identical expressions): two real-time replays' jitter, which an exact-step bar
# cannot survive (the thirty-fifth to thirty-seventh runs allowed a step). Kept, reported as a deviation (log)

# Forty-seventh run (6 Dec 2026, registered here with its change frozen, before any of its runs was trained). The
# live reward-hacking alert pages healthy runs after their last step, on held values, where a trainer lingers with
# its exporter up (a final evaluation, a checkpoint upload, a hang): 5 of the forty-sixth run's 21 healthy runs and 5
# of the forty-second run's 14, pending 6.4-11.4 replay seconds (13-23 minutes of a run at 2 min a step) after the
# last step; every such page under the rules since the forty-second run went pending more than one `recent` window
# after it. A page on a run that no longer steps warns of nothing: the windows compare held readings with a history
# window that slides over fewer and fewer real steps. The change: every precursor alert holds only while its run has
# progressed within its `recent` window (its trainer's last step, or the end of a declared pause, evaluation /
# checkpoint / drain, within it: the window holds a fresh reading; alerts.fresh_data). Seen: over the 232 stored
# records the longest span without progress after step 5 is 4.63 mean steps (healthy-async-kl-s239), under the 5
# that shut the gate while a run steps. Held out, their number fixed here, trained after this commit (60 steps):
# healthy-kl 14-16, healthy-dp2-completion 234-236, healthy-g8x2 230-231, healthy-t07 233-234, healthy-tiny 230,
# staleness-no-is 66-68, kl-blow-up 154-155, lr-too-high 145, reward-hacking 155-156. Scored once, replayed live
# (committed rules, 2 minutes a step, no doctor) under the rules before (b4cc040) and after, at one step a PERIOD and
# at each run's own pace (--real-timing, its declared pauses replayed). The bar: (a) under the rules after, no
# precursor alert of a fresh run goes active more than one `recent` window (5 replay seconds) after its last step
# (the rules before: counted; not exercised if they page none after it either); (b) every precursor alert that goes
# active while a fresh run steps does so under both rule sets, at the same first step within one step (two real-time
# replays' jitter), and none goes active under one only, in both pacings; (c) none: the doctor is untouched (its
# warnings on the 19 go to the pool). (a) and (b) hold: it stays; else reverted
RUN47 = {"staleness-no-is": (66, 67, 68), "kl-blow-up": (154, 155), "lr-too-high": (145,), "reward-hacking": (155, 156)}
for _c, _s in RUN47.items():
    HELDOUT_EXTRA[_c] += _s
RUN47_HEALTHY = {"healthy-kl": (14, 15, 16), "healthy-dp2-completion": (234, 235, 236), "healthy-g8x2": (230, 231),
                 "healthy-t07": (233, 234), "healthy-tiny": (230,)}
for _k, _s in RUN47_HEALTHY.items():
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + _s, _steps)
RUN47_NAMES = ([f"{c}-s{s}" for c, seeds in RUN47.items() for s in seeds]
               + [f"{k}-s{s}" for k, seeds in RUN47_HEALTHY.items() for s in seeds])
# Scored once (bench/results/early_warning_run47_live{,_before}{,_real}.md): (a) met: the rules before paged one fresh
# run after its last step in each pacing (healthy-dp2-completion-s235 at 16.3 s, kl-blow-up-s154 at 10.3 s: both
# RlobsPrecursorRewardHacking), the rules after none. (b) not met as worded: one alert in each pacing differed, both
# RlobsPrecursorEntropyDecline on staleness-no-is runs long after their drop (s68 at step 57 before, none after, at
# one step a PERIOD; s67 at 42 before, 39 after, at their own pace). Neither is the gate's doing (an alert cannot go
# active earlier under an added `and`; s68's series evaluated by promtool at 30-s scrapes fire at the same times with
# and without it), but the gate's premise failed on the fresh records: staleness-no-is-s68 evaluated held-out success
# for 6.0 s between steps 49 and 50, 7.1 mean steps without a step or a pause's end, so the gate would have shut
# inside a declared evaluation (no alert was pending then). Reverted; the forty-eighth run registers the gate with
# the no-progress alert's pause allowance

# Forty-eighth run (6 Dec 2026, registered here with its change frozen, before any of its runs was trained). The
# forty-seventh run's gate with the no-progress alert's pause allowance: every precursor alert holds only while its
# run progressed (its last step, or a declared pause's end) within its recent window, or within the recent window
# plus the pause allowance (5x the mean pause, at least 600 s) while a declared pause is under way (alerts.fresh_data).
# Seen: all the records of the thirty-ninth to forty-seventh runs and the dot sweep (215 runs): with pauses counted as
# progress, no span without progress after step 5 over 3.37 mean steps, no pause after step 5 over its allowance
# (bench/progress_gaps.py); the forty-seventh run's replays. Held out, their number fixed here, trained after this
# commit: staleness-no-is 69-72, kl-blow-up 156, lr-warmup-too-high 145, reward-hacking 157 (60 steps),
# healthy-dp2-completion 237-239, healthy-kl 17-19, healthy-async-kl 252-253, healthy-g8x2 232 (60 steps),
# healthy-long 48 (100 steps). Scored once: bench/progress_gaps.py on the 17 records, and replayed live (committed
# rules, 2 minutes a step, no doctor) under the rules before (b4cc040) and after, at one step a PERIOD and at each
# run's own pace (--real-timing, its declared pauses replayed). The bar: (a) under the rules after no precursor
# alert of a fresh run goes active more than one recent window (5 replay seconds) after its run's last progress (its
# last step or declared pause's end), in both pacings (the rules before: counted; not exercised if none); (b1) on
# every fresh record the gate holds from step 5 to the last step: no span without progress over 5 mean steps and no
# declared pause over its allowance (bench/progress_gaps.py: the gate is the only difference between the rule sets,
# so where it holds the alerts cannot differ while the run steps); (b2) each fresh collapse run's first live page
# while stepping within one step under both rule sets, and no fresh healthy run paged while stepping under the rules
# after that the rules before did not page, in both pacings (replays of two real-time runs jitter by a step; the
# forty-seventh run's per-alert bar failed on that alone); (c) none: the doctor is untouched (its warnings on the 17
# go to the pool). (a), (b1) and (b2) hold: it stays; else reverted
RUN48 = {"staleness-no-is": (69, 70, 71, 72), "kl-blow-up": (156,), "lr-warmup-too-high": (145,),
         "reward-hacking": (157,)}
for _c, _s in RUN48.items():
    HELDOUT_EXTRA[_c] += _s
RUN48_HEALTHY = {"healthy-dp2-completion": (237, 238, 239), "healthy-kl": (17, 18, 19),
                 "healthy-async-kl": (252, 253), "healthy-g8x2": (232,), "healthy-long": (48,)}
for _k, _s in RUN48_HEALTHY.items():
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + _s, _steps)
RUN48_NAMES = ([f"{c}-s{s}" for c, seeds in RUN48.items() for s in seeds]
               + [f"{k}-s{s}" for k, seeds in RUN48_HEALTHY.items() for s in seeds])
# Scored once (bench/results/early_warning_run48_live{,_before}{,_real}.md, early_warning_run48_progress_gaps.md):
# (a) met: the rules before paged 2 of the 10 fresh healthy runs after their last step (healthy-dp2-completion-s237
# and s238, reward hacking, 9.1 and 6.1 replay seconds after it, at one step a PERIOD; none over 5 s at the runs' own
# pace), the rules after none. (b1) met: longest span without progress after step 5 2.37 mean steps, no pause over
# its allowance. (b2) not met: at the runs' own pace lr-warmup-too-high-s145's first page came at 14 under the rules
# after, 11 before (its drop at 23); at one step a PERIOD every first page within one step and no healthy page while
# stepping. By (b1) the gate held throughout that run's steps by the record's timing, so the two rule sets computed
# the same thing while it stepped if the replay kept that timing (the two replays differ by 2-3 steps or on one side
# only on 4 of 15 run-alert pairs at their own pace here; a second replay of the rules before, after scoring, put
# s145 at 10: its 14 is outside that spread, and the replay's own gate value was not read back). Reverted, as registered; the gate and its
# tests are 7cf80cd's. A next registration should measure the replays' own spread first (the same rules twice) and
# bound the live leg by it, or leave the live leg to (b1)
# Forty-ninth run (7 Dec 2026, registered before any of its runs was trained; the change frozen in the same commit):
# the forty-eighth run's fresh-data gate again (rlobs.dashboards.alerts.fresh_data, 7cf80cd's), with its pause floor
# scaled in the replay as the windows are (bench/early_warning_live.py: precursor_rules(pause=...); the forty-eighth
# replay held it at 600 replay seconds) and the gate's own value read back from Prometheus every 0.25 s while each
# run is replayed (early_warning_live.py's fresh_shut). Measured before registering, on the forty-eighth run's
# records at their own pace: lr-warmup-too-high-s145's first page under the rules before came at 11, 10 and 13 in
# three replays (batches of 10, 10, 2), under the gate at 14 and 14 with the gate read open at every read from step 5
# to its last step: the live first page moves by 3+ steps between replays of identical computations, so it is not
# a bar here. Held out: 17 fresh runs (below), 60 steps (healthy-long 100), replayed under the rules before (ef5cce8,
# a worktree with this bench) and the gate, at one step a PERIOD and at the runs' own pace (--real-timing), batch 10.
# Bar (kept if all hold; reverted otherwise):
# (a) under the gate, no precursor alert goes pending more than 5 replay seconds after its run's last progress (its
#     last step or declared pause's end), on any of the 17 runs at either pace (the rules before: reported);
# (b1) bench/progress_gaps.py on the 17 records: every run's longest span without progress after step 5, declared
#     pauses counted within their allowance, under 5 mean steps (the recent window the gate asks progress in), and
#     no pause over its allowance;
# (b2) the gate read back in both gated replays: open at every read from each run's step 5 to its last step, on all
#     17 runs (where it is open, the gated alerts are the alerts before: `(expr) and on (run) gate`);
# reported, not a bar: the live first pages and detections under both rule sets (per pair of replays), and the
# reads at which the gate was shut before step 5.
RUN49 = {"staleness-no-is": (73, 74), "kl-blow-up": (157,), "lr-too-high": (146,), "lr-warmup-too-high": (146,),
         "reward-hacking": (158,)}
for _c, _s in RUN49.items():
    HELDOUT_EXTRA[_c] += _s
RUN49_HEALTHY = {"healthy-dp2-completion": (240, 241, 242, 243), "healthy-kl": (20, 21, 22),
                 "healthy-long": (49, 50), "healthy-async-kl": (254,), "healthy-g8x2": (233,)}
for _k, _s in RUN49_HEALTHY.items():
    _what, _args, _seeds, _steps = HEALTHY_VARIANTS[_k]
    HEALTHY_VARIANTS[_k] = (_what, _args, _seeds + _s, _steps)
RUN49_NAMES = ([f"{c}-s{s}" for c, seeds in RUN49.items() for s in seeds]
               + [f"{k}-s{s}" for k, seeds in RUN49_HEALTHY.items() for s in seeds])
# Scored once (bench/results/early_warning_run49_live{,_before}{,_real}.md, early_warning_run49_progress_gaps.md,
# early_warning_run49.md): (a) met: under the gate no alert pending over 5 s after a run's last progress at either
# pace (the rules before: healthy-dp2-completion-s243, reward hacking, 10.1 s after its last step at one step a
# PERIOD; none at own pace). (b1) met: longest span without progress after step 5 2.25 mean steps, no pause over its
# allowance. (b2) met: the gate read open at every read from step 5 to the last step on all 17 runs in both gated
# replays (shut for 1-5 reads before step 5 at one step a PERIOD, the first scrape of a run's first step). Kept.
# Reported: at one step a PERIOD every first page within one step but staleness-no-is-s74's grad-norm drift (20
# before, none after: the gate was open throughout, so replay jitter); at own pace lr-warmup-too-high-s146 23 before,
# 21 after; healthy-long-s50 paged by grad-norm drift at step 4-5 at its own pace under both rule sets (its grad norm
# 10.3 at step 4), not at one step a PERIOD. The doctor missed staleness-no-is-s74 (warned 11, fell 10)
# Fiftieth run (7 Dec 2026, registered before any of its runs was trained; the change frozen in the same commit):
# precursor-uncorrected-off-policy's far leg (rlobs.failures: far_staleness 5, far_min_below 2): past the lag-4
# family's bound, a 5-step median staleness of 5+ versions, 2 of the last 5 steps' ESS under 0.8 warn without waiting
# for the 5-step median. Chosen on the 12 staleness-no-is records on disk (s63-s74, all seen): the rule's first
# warning moves earlier on 6 (s66 8->7, s67 16->7, s68 10->7, s71 9->7, s73 9->8, s74 11->8), later on none; s64
# (fell at 5) stays missed. Held out: staleness-no-is 75-82, staleness-no-is-lag4 69-72 (mixed: max staleness 4, the
# leg cannot fire there), healthy-async-nois 58-61 (no IS, max staleness 2), 60 steps. Scored once with
# `eval` and the whole doctor, under the rules before (c13bb83, a worktree) and after. Bar (kept if all hold):
# (i) the doctor's pooled staleness-no-is class (early_warning_pooled plus the 8 fresh runs, each under the rules of
#     its time) at 90 %+ warned before the drop;
# (ii) no warning of any doctor rule on the 4 fresh healthy-async-nois runs that the rules before did not give;
# (iii) on the 4 fresh lag-4 runs every doctor rule's first warning the same under both rule sets;
# (iv) on the 8 fresh staleness runs no first warning later than under the rules before.
RUN50 = {"staleness-no-is": tuple(range(75, 83)), "staleness-no-is-lag4": (69, 70, 71, 72)}
for _c, _s in RUN50.items():
    HELDOUT_EXTRA[_c] += _s
HEALTHY_ASYNC_NO_IS_SEEDS["heldout"] += (58, 59, 60, 61)
RUN50_NAMES = ([f"{c}-s{s}" for c, seeds in RUN50.items() for s in seeds]
               + [f"healthy-async-nois-s{s}" for s in (58, 59, 60, 61)])
# Scored once (bench/results/early_warning_run50{,_before}.md, early_warning_run50_whole_doctor{,_before}.json):
# (i) met: pooled staleness-no-is 38 of 42 (90.5 %), the fresh 8 of 8 (7 of 8 under the rules before: s78 warned at
# its drop step 10, now 9). (ii) met: no warning of any rule on the 4 healthy no-IS runs, before or after (s59's
# training reward dropped at 37 without a warning). (iii) met: the 4 lag-4 runs' findings identical (s70-s72 fell at
# 15-20, no precursor warned; s71's whole doctor warned entropy-collapse at 54 and precursor-reward-hacking at 60,
# under both). (iv) met: s77 9->8, s78 10->9, the other 6 unchanged, none later. Kept.
# Fifty-first run (7 Dec 2026, registered before any replay; the change frozen in the same commit): the far leg in
# the PromQL alert RlobsPrecursorUncorrectedOffPolicy (rlobs.dashboards.alerts: at a median staleness of 5+ versions
# over the recent window, the 0.25 quantile of its ESS readings, the 2nd-lowest of 5 steps, under 0.8). Held out for
# the alert: the fiftieth run's 16 records, never replayed live (the doctor's far leg was scored on them, so its
# results there are known; the alert's translation was not looked at on them), replayed at one step a PERIOD under
# the rules before (d0963ea, a worktree) and after, batch 8. Bar (kept if all hold):
# (i) the 8 staleness runs: the alerts warn before the drop on at least as many under the rules after, and on 7+;
# (ii) no precursor alert on the 4 healthy no-IS runs while stepping, under the rules after;
# (iii) the 4 lag-4 runs: RlobsPrecursorUncorrectedOffPolicy fires on no run under the rules after where it did not
#      under the rules before, and its first page no more than one step earlier where it fires under both (the far
#      leg cannot fire at a median staleness of 4; one step is the replays' spread at one step a PERIOD).
# Scored once (bench/results/early_warning_run51_live{,_before}.md): (i) met: 8 of 8 staleness runs warned live before
# the drop (7 of 8 before: s78 pending at its drop step 10, now 9; s77 9->8; s75 6->7 and s76 7->8 in this replay,
# jitter, the leg can only add). (ii) met: no alert on the 4 healthy no-IS runs. (iii) met: no uncorrected-off-policy
# alert on the 4 lag-4 runs under either rule set. Kept.
# Fifty-second run (7 Dec 2026, registered before any of its runs was trained; the change frozen in the same commit):
# the reference-steps guard on the four drift alerts (rlobs.dashboards.alerts._reference_steps: grad-norm drift,
# entropy decline, importance truncation, zero-std rising). Each compares the recent window's median with the median
# of the window before; the guard asks that window to hold ``baseline`` (8) steps' readings (changes of the step
# counter), as the doctor's drift detectors judge a run only once they have 8 reference steps before their lag. Why:
# at its own pace the forty-ninth run's healthy-long-s50 was paged by grad-norm drift at step 4-5 (its first steps
# slower than its mean, the window before holding 2-4 steps; step 4's grad norm 10.3 against 0.29-0.45), the doctor
# silent. Seen: that record (tests/early_warning/data/grad_norm_slow_start.json, the promtool test). Looked at before
# registering, at one step a PERIOD (the pooled PromQL replays, 375 runs): the four alerts paged before step 13 on 2
# runs (grad-norm drift on staleness-no-is-s54 at 7 and kl-blow-up-s123 at 9), neither its first page. Held out: the
# 18 fresh runs below, 60 steps (healthy-long 100), replayed under the rules before (e65f85d, a worktree with this
# bench) and after, at one step a PERIOD and at the runs' own pace (--real-timing), batch 9; the doctor (unchanged)
# scored on them once with `eval` for its pool. Bar (kept if all hold; reverted otherwise):
# (i) under the rules after, none of the four guarded alerts pages any of the 11 fresh healthy runs while it steps,
#     at either pace;
# (ii) at one step a PERIOD, every fresh collapse run warned before its drop under the rules before is warned before
#      its drop under the rules after;
# (iii) at one step a PERIOD, no first page of a guarded alert on a collapse run from step 14 on (where the window
#       before holds 8 steps at that pace and the guard holds) more than one step later under the rules after (one
#       step: the replays' spread at that pace).
# Reported, not a bar: every other precursor page on the healthy runs under both rule sets and paces (the guard can
# only remove pages; a difference elsewhere is replay jitter), healthy-long-s50 at its own pace under the rules after.
RUN52 = {"kl-blow-up": (158,), "lr-too-high": (147,), "lr-warmup-too-high": (147,), "staleness-no-is": (83,),
         "reward-hacking": (159,), "staleness-no-is-lag4": (73,)}
RUN52_HEALTHY = {"healthy-long": (51, 52, 53), "healthy-dp2-completion": (244, 245), "healthy-kl": (23, 24),
                 "healthy-async-kl": (255,), "healthy-g8x2": (234,), "healthy-t07": (235,), "healthy-tiny": (231,),
                 "healthy-colocate-abort": (215,)}
RUN52_NAMES = _register(RUN52, RUN52_HEALTHY)
# Scored once (bench/results/early_warning_run52_live{,_before}{,_real}.md, early_warning_run52.md,
# early_warning_run52_whole_doctor.json). The bar's "11 fresh healthy runs" is a miscount: RUN52_HEALTHY holds 12, and
# (i) is scored on all 12. (i) met: no page of the four guarded alerts on the 12 healthy runs at either pace (none
# under the rules before either). (ii) met: all 6 collapse runs warned before their drop under both rule sets at one
# step a PERIOD. (iii) met: the only guarded first pages on collapse runs, staleness-no-is-s83's entropy decline and
# zero-std rising after its drop at 15, came at 44 and 48 after, 43 and 47 before (one step). Kept. Reported:
# healthy-tiny-s231 paged by oversized-updates at 56 (55 before) at one step a PERIOD and at 16 at its own pace under
# the rules after (none before): not a guarded alert, the `tiny` warm start's noisy reward read as learning (its
# held-out success flat at 0.30-0.34), as healthy-tiny-s228 in the forty-second run; healthy-dp2-completion-s245 drew
# reward hacking after its last step at its own pace under the rules before only. The seen healthy-long-s50, replayed
# again at its own pace under the rules after: no page. The doctor (unchanged): 6 of 6 collapses warned ahead
# (lag-4 s73 too), 0 of 12 healthy runs warned by any of its rules
# Fifty-third run (7 Dec 2026, registered before any of its runs was trained; the change frozen before any of them is
# replayed or judged): RlobsPrecursorOversizedUpdates' "the run has learned" read from the run's start, as the
# doctor's rule reads it, instead of the hour before. Today the alert asks the recent training reward's mean to be
# reward_gain over the low decile of the hour before, or the recent best held-out reading heldout_gain over the lowest
# of the hour before: a noisy reward, or a held-out dip and recovery, reads as learning (healthy-tiny-s228 at step 50
# in the forty-second run, healthy-tiny-s231 at 55-56 and 16 at its own pace in the fifty-second, held-out flat at
# 0.30-0.34; s231's evaluation at step 30 read 0.17, so 0.34 at 55 was "a climb of 0.17"). Change: the Prometheus
# sink serves two baselines per run and component, set once: the median training reward of a process's first
# `baseline` (5) steps and its first held-out reading (rlobs.catalogue: a "set" source that keeps its first values);
# the alert's learned legs compare with them (recent mean reward >= reward baseline + reward_gain; recent best held-out
# >= first held-out + heldout_gain), as the doctor compares with the run's first steps and first evaluation.
# Chosen on the 275 records on disk (/work/records/ew39..ew52, all seen), the alert emulated step by step at one step
# a PERIOD (the script is kept in the session notes): healthy pages of the alert 3 (healthy-tiny s212 at 25, s228 at
# 50, s231 at 55) -> 0; KL blow-up 21/21, lr too high 19/19, warm-up 15/16 warned before the drop under both; first
# pages later on 6 (kl-blow-up-s148 7 -> 13, its drop 20; five others by 1-2 steps). The anchor for the reward alone
# (without the held-out one) left s231. Held out: the runs below, 60 steps, replayed at one step a PERIOD under the
# rules before (c6cd2d1, a worktree with this bench) and after, batch 7; the doctor (unchanged) judged once for its
# pool. Bar (kept if all hold; reverted otherwise):
# (i) no RlobsPrecursorOversizedUpdates page on any of the 6 fresh healthy runs while it steps, under the rules after;
# (ii) the 7 fresh collapse runs: warned live before the drop on at least as many under the rules after as before;
# (iii) no precursor alert other than oversized-updates changes its first page by more than one step (the change
#       touches that alert only; one step: the replays' spread).
# Reported, not a bar: each run's first page under both, the pooled PromQL classes with the fresh runs.
RUN53 = {"lr-too-high": (148, 149), "lr-warmup-too-high": (148, 149, 150), "kl-blow-up": (159, 160)}
RUN53_HEALTHY = {"healthy-tiny": (232, 233, 234, 235), "healthy-dp2-completion": (246,), "healthy-t07": (236,)}
RUN53_NAMES = _register(RUN53, RUN53_HEALTHY)
# Change frozen at 969f4c4, after the 13 runs were trained (c985f6b registered them first) and before any was
# replayed or judged. Scored once (bench/results/early_warning_run53_live{,_before}.md, early_warning_run53.md,
# early_warning_run53_whole_doctor.json): (i) met: no oversized-updates page on the 6 healthy runs under the rules
# after (none under the rules before either: the fresh runs held no case of the page; the change is shown on seen
# records, the promtool test on s231 and the emulation). (ii) met: the 7 collapses warned live before the drop under
# both (7 of 7). (iii) met: the only other first page that moved, kl-blow-up-s160's KL creep, by one step (6 -> 5).
# Kept. Reported: first pages under the rules after vs before: lr s149 7 -> 6, warm-up s148 15 -> 14, KL s160's
# oversized 8 -> 7, the rest unchanged; healthy-dp2-completion-s246 drew grad-norm drift after its last step under
# both. The doctor (unchanged) warned healthy-tiny-s235 at step 19 (precursor-oversized-updates: its first 5 steps'
# median reward 0.37, later 0.5-0.7 on a reward that moves 0.15-0.3 step to step; held-out 0.27 -> 0.31-0.36): the
# first doctor warning on a pooled healthy run (0 of 298 before it), and not one the live alert gave

# Fifty-fourth run (7 Dec 2026, registered here before any of its runs is trained): the doctor's first healthy warning
# (healthy-tiny-s235, precursor-oversized-updates at 19, fifty-third run) is not on disk any more, and the same seed
# trained again today is another run (its first 5 steps' median reward 0.46, not 0.37; the doctor is quiet on it): the
# `tiny` warm start is rebuilt on each machine. So a tune look first: 15 more healthy-tiny seeds (237-251), the noisiest
# healthy setting the bench has (its entropy swings 0.25-1.0 and its policy_kl 0.001-0.1 step to step), and 6 learning-
# rate collapses the rule carries (lr-too-high 150-152, lr-warmup-too-high 151-153), 60 steps each, judged by the whole
# doctor (every rule; warnings and criticals). A fix, if the look shows one is needed, is chosen on these and frozen in
# its own commit, with its held-out runs registered there before they are trained. No bar for the look itself: its
# count of healthy warnings is reported with the 13 pooled healthy-tiny runs (1 warned).
RUN54_TUNE = {"lr-too-high": (150, 151, 152), "lr-warmup-too-high": (151, 152, 153)}
RUN54_TUNE_HEALTHY = {"healthy-tiny": tuple(range(237, 252))}
RUN54_TUNE_NAMES = _register(RUN54_TUNE, RUN54_TUNE_HEALTHY)
# Tune look, first batch (whole doctor, /work/records/ew54): healthy-tiny-s249 warned by precursor-oversized-updates at
# 55 (4 of steps 51-55 over 0.015, median 0.022; its entropy, which swings 0.2-1.0 step to step, at a 40 % median; the
# training reward +0.20 over its first 5 steps; held-out flat, 0.37 at the first evaluation and never above it); the
# other 14 quiet. All 6 collapses warned (lr-too-high at 8-9, warm-up at 13-17). With the pool: 2 of 28 healthy-tiny
# runs warned. Second batch of the look, registered here before it is trained, so a change is chosen on more than one
# noisy warning: 8 more healthy-tiny seeds (252-259), 3 of the tiny-dot warm start (healthy-dot 237-239), and the
# other classes the rule warns on (kl-blow-up 161-162, reward-hacking 160-161, where it annotates a grader loophole).
RUN54_TUNE2 = {"kl-blow-up": (161, 162), "reward-hacking": (160, 161)}
RUN54_TUNE2_HEALTHY = {"healthy-tiny": tuple(range(252, 260)), "healthy-dot": (237, 238, 239)}
RUN54_TUNE2_NAMES = _register(RUN54_TUNE2, RUN54_TUNE2_HEALTHY)
# Second batch looked at (15 runs): no warning on the 8 healthy-tiny or 3 tiny-dot runs; kl-blow-up warned at 7 and 9
# (oversized-updates, KL creep at 8-9); reward-hacking at 10 (its own rule; oversized quiet). The change, chosen on the
# 23 healthy-tiny and 10 collapse records of the look, the 2 seen ones trained again and the tests' data: once a record
# holds two or more held-out evaluations, the after-learning leg reads the training reward's climb as learning only if
# held-out success has gained reward_heldout_floor (0.1) over its first evaluation as well (rlobs.failures: why 0.1).
# On the look: s249 quiet, every collapse's first warning unchanged; a loosened rule (3 of 5 over 0.01, entropy under
# 90 %, reward +0.1) warned 11 of 25 healthy-tiny records, 1 with the floor (0 at 0.15, which loses the tests'
# reward-hacking-s0: 0.13 held out at its warning, no other precursor warns it); of the tests' data only lr-too-high-s64
# moves (7 -> 9, its drop at 30). Frozen in the commit that registers this, before any held-out run is trained.
# Held out, trained after the freeze and scored once: 34 healthy runs (healthy-tiny 260-289, healthy-dot 240-243) and
# 14 collapses (lr-too-high 153-156, lr-warmup-too-high 154-157, kl-blow-up 163-165, reward-hacking 162-164), 60 steps.
# The bar: (i) the whole doctor under the rule after warns none of the 34 healthy runs by precursor-oversized-updates
# (any other warning or critical is listed and counted against the doctor's healthy row); (ii) every collapse the
# doctor before the change warned ahead of its drop is warned ahead of it after, and no collapse's oversized-updates
# first warning moves by more than 2 steps. Reported, not a bar: the rule before on the healthy runs (the pool's rate
# on this setting, 2 of 28, says about 2 of 34 are expected: a held-out set without one shows nothing), and the
# loosened rule's near-misses with and without the floor.
RUN54 = {"lr-too-high": (153, 154, 155, 156), "lr-warmup-too-high": (154, 155, 156, 157),
         "kl-blow-up": (163, 164, 165), "reward-hacking": (162, 163, 164)}
RUN54_HEALTHY = {"healthy-tiny": tuple(range(260, 290)), "healthy-dot": (240, 241, 242, 243)}
RUN54_NAMES = _register(RUN54, RUN54_HEALTHY)
# Trained 08:55-09:27 UTC after the freeze (32d966f), scored once (bench/results/early_warning_run54{,_live}.md,
# early_warning_run54_whole_doctor.json: the whole doctor under the floor and with it off, the rule before).
# (i) not met: the whole doctor warned 3 of the 34 healthy runs by precursor-oversized-updates (healthy-tiny s266 at
# 50, s281 at 52, s285 at 27), nothing else; the rule before warned 5 (s277 at 13 and s280 at 42 as well), so the
# pool's 2 of 28 on this setting undercounted it (the `tiny` warm start is rebuilt per machine; today's is noisier).
# The three passed the floor on held-out noise of their own: 32 prompts x 4 samples swing 0.1-0.2 between
# evaluations (s266 0.29 -> 0.45 -> 0.20 -> 0.37; s281 0.31 -> 0.48; s285 0.16 -> 0.35, which then fell to 0.20 by
# step 50 and stayed: a run that did lose what it held out, the one the live alerts paged too). (ii) met: all 14
# collapses warned where they were (lr 7-11, warm-up 12-13, KL 8 by kl-creep or oversized, hacking 9-11 by its own
# rule), no first warning moved. Reported: the loosened rule warned 16 of 30 healthy-tiny runs without the floor, 9
# with it. The live alerts (unchanged) paged 1 of 34 healthy runs (s285, oversized-updates at 29) and warned the 13
# collapses with a drop before it. Kept, with the bar's miss stated: the floor can only remove or delay a warning, it
# removed 2 of 5 on held-out healthy runs and delayed none of 14 collapses; the healthy `tiny` setting stays the
# doctor's weak spot (3 of 30, held-out noise read as learning), left for a noise-aware held-out gain

# Fifty-fifth run (7 Dec 2026, registered here with its change frozen, before any of its runs is trained). The change,
# chosen on the fifty-fourth run's 86 records (tune and held out, all seen now) and the 4 seen ones, the tests' data
# too: precursor-oversized-updates reads held-out success's gain (for heldout_gain and reward_heldout_floor) as the
# mean of its last 2 evaluations after the first against the first (heldout_recent, rlobs.failures), not the best of
# them. The best of 6-11 evaluations that swing 0.1-0.2 passed heldout_gain (0.15) on healthy-tiny s266 (+0.16 at step
# 10, -0.01 by step 50 when it warned) and s281 (+0.16; its last two +0.13); both quiet now. Every collapse's first
# warning is unchanged on all 90 records and the tests' (they warn at 2-4 evaluations, while learning); with 3 recent
# evaluations s281 stays, with 1 the level is one noisy draw. s285 (+0.15 recent; it did fall later) stays at
# 27. A noise-aware gain from each evaluation's sample count was the note's candidate; the sample count alone does
# not model these swings (s266's evaluations spread 0.076, twice the binomial 0.04 of 128 samples: the policy moves
# between them), and the recent level needed no schema change.
# Held out, trained after this commit and scored once: 27 healthy runs (healthy-tiny 290-313, healthy-dot 244-246)
# and 18 collapses (lr-too-high 157-161, lr-warmup-too-high 158-162, kl-blow-up 166-169, reward-hacking 165-168),
# 60 steps. The bar: (i) the whole doctor after the change warns none of the 27 healthy runs by
# precursor-oversized-updates (any other warning or critical listed and counted against the doctor's healthy row);
# (ii) every collapse the doctor before the change (heldout_recent 0) warned ahead of its drop is warned ahead of it
# after, and no collapse's oversized-updates first warning moves by more than 2 steps. Reported, not a bar: the rule
# before on the healthy runs (3 of 34 on the fifty-fourth's; a held-out set where it warns none shows nothing), and the
# live alerts (unchanged) on all 45.
RUN55 = {"lr-too-high": (157, 158, 159, 160, 161), "lr-warmup-too-high": (158, 159, 160, 161, 162),
         "kl-blow-up": (166, 167, 168, 169), "reward-hacking": (165, 166, 167, 168)}
RUN55_HEALTHY = {"healthy-tiny": tuple(range(290, 314)), "healthy-dot": (244, 245, 246)}
RUN55_NAMES = _register(RUN55, RUN55_HEALTHY)
# Trained 11:30-12:00 UTC after the freeze (24f2c04), scored once (bench/results/early_warning_run55{,_live}.md,
# early_warning_run55_whole_doctor.json: the whole doctor under the change and with heldout_recent 0, the rule before).
# (i) met: the whole doctor warned none of the 27 healthy runs (the rule before: healthy-tiny-s290 at 37, on held-out
# success's best, +0.18). (ii) half met: no collapse warned ahead of its drop lost or moved its warning (17 of 18 warned
# where they were: lr 7-11, warm-up 12-22, KL 8-10, hacking 11-14 by its own rule), but lr-warmup-too-high-s161's late
# warning (26, its drop at 20) is gone, and with it the whole doctor's only finding on that collapsed run: its
# held-out success had already fallen (0.44 at step 15, 0.23-0.27 at 20-25), so its recent level (+0.09) no longer
# passed reward_heldout_floor, which the fifty-fourth run read at the best evaluation (+0.27). The live alerts
# (unchanged): 2 of 27 healthy paged (s290 oversized-updates at 37, s300 at 9), 14 of the 16 collapses with a drop
# warned before it (warm-up s159 at its drop, s161 after it).

# Fifty-sixth run (7 Dec 2026, registered here with its change frozen, before any of its runs is trained). The change,
# chosen on the fifty-fifth run's lost late warning (lr-warmup-too-high-s161, seen now, like all 133 records on disk):
# reward_heldout_floor reads held-out success's best evaluation again (it asks only that held-out success confirmed the
# training reward's climb once); heldout_recent stays on the held-out leg, where held-out success alone says the run
# learned. On every record on disk (ew54, ew54h, ew55, the 4 seen ones) the rule now warns every collapse at the step
# the fifty-fourth run's rule did (s161 at 26 again) and, of the healthy runs, only healthy-tiny-s285 (27; it fell held
# out after); the fifty-fourth's rule also warned s266, s281 and s290, the fifty-fifth's none but lost s161. Test on
# s161's real series. Held out, trained after this commit and scored once: 27 healthy runs (healthy-tiny 314-337,
# healthy-dot 247-249) and 15 collapses (lr-too-high 162-165, lr-warmup-too-high 163-167, kl-blow-up 170-172,
# reward-hacking 169-171), 60 steps. The bar: (i) the whole doctor warns none of the 27 healthy runs by
# precursor-oversized-updates (any other warning or critical listed and counted against the doctor's healthy row);
# (ii) every collapse the fifty-fourth run's rule (heldout_recent 0) warns by precursor-oversized-updates, ahead of its
# drop or after it, is warned by it now within 2 steps of the same step. Reported, not a bar: the fifty-fourth's rule
# on the healthy runs, and the live alerts (unchanged) on all 42.
RUN56 = {"lr-too-high": (162, 163, 164, 165), "lr-warmup-too-high": (163, 164, 165, 166, 167),
         "kl-blow-up": (170, 171, 172), "reward-hacking": (169, 170, 171)}
RUN56_HEALTHY = {"healthy-tiny": tuple(range(314, 338)), "healthy-dot": (247, 248, 249)}
RUN56_NAMES = _register(RUN56, RUN56_HEALTHY)
# Trained 12:16-12:46 UTC after the freeze (3acd12e), scored once (bench/results/early_warning_run56{,_live}.md,
# early_warning_run56_whole_doctor.json: the whole doctor under the change and with heldout_recent 0, the fifty-fourth
# run's rule). (i) met: the whole doctor warned none of the 27 healthy runs (nor did the fifty-fourth's rule: this
# held-out set holds no case of the pattern either change is about, so the change is shown on the seen records, s161's
# test and s266/s281's). (ii) met: all 15 collapses warned at the same step under both (lr 7-9, warm-up 12-14, KL 7-8
# by oversized-updates or kl-creep, hacking 10-15 by its own rule), each ahead of its drop. Kept. The live alerts
# (unchanged): 1 of 27 healthy paged (healthy-tiny-s322, oversized-updates at 43; the doctor quiet), 14 of 15
# collapses warned before the drop (lr-too-high-s163 at 28, drop 25; the doctor at 9).

# Fifty-seventh run (7 Dec 2026, registered here before any of its runs is trained; its change is frozen in a later
# commit before any of them is replayed). The change is to the live alert only (RlobsPrecursorOversizedUpdates; the
# doctor's rule is unchanged): its after-learning leg reads what the doctor's rule reads, through three exporter
# gauges (the alert cannot index a series by step or by evaluation): the entropy share against the median of the run's
# first 5 steps (rlobs_policy_entropy_baseline, the doctor's e0; the alert read the highest reading of the hour
# before, which a noisy `tiny` entropy sets high), the training reward's climb only where held-out success has gained
# reward_heldout_floor at its best evaluation after the first (rlobs_heldout_success_best; the alert had no floor),
# and the held-out leg on the mean of the last heldout_recent evaluations after the first
# (rlobs_heldout_success_recent; the alert read the best of the last 10 minutes). Chosen on the 175 records on disk
# (ew54, ew54h, ew55, ew56, seen; all seen) with a per-step emulation of the alert (it matched the real replays' first
# step within one on 122 of the 135 scored runs; the rest differ on the first-steps leg, which is not changed): the
# healthy runs it paged, 10 of 116 before, 4 after (s285, which the doctor warns too, and three first-steps-leg
# emulation artefacts the real replay never paged); s263, s277, s290, s300, s322, s328 quiet (s300 at 8: reward +0.15
# with held-out success never over its first evaluation; s290 at 37: held-out success's best of the last 10 minutes
# +0.18, the mean of its last two +0.149; s322 at 43: entropy 0.59 of the hour before's highest reading, 1.7x its first
# steps').
# Every collapse the emulated alert warned ahead of its drop (45 of 56) stays ahead of it, 8 of them 1-2 steps later.
# Held out, trained after this commit and replayed once after the freeze: 24 healthy runs (healthy-tiny 338-361) and
# 12 collapses (lr-too-high 166-169, lr-warmup-too-high 168-171, kl-blow-up 173-174, reward-hacking 172-173), 60
# steps, each replayed live under the alerts before the change and after it. The bar: (i) after the change
# RlobsPrecursorOversizedUpdates pages none of the 24 healthy runs (any other precursor alert listed and counted
# against the live healthy row); (ii) every collapse the alert before the change warned ahead of its drop is warned
# ahead of it after, no first warning more than 2 steps later. Reported, not a bar: the alerts before the change on
# the healthy runs, and the doctor (unchanged) on all 36.
RUN57 = {"lr-too-high": (166, 167, 168, 169), "lr-warmup-too-high": (168, 169, 170, 171),
         "kl-blow-up": (173, 174), "reward-hacking": (172, 173)}
RUN57_HEALTHY = {"healthy-tiny": tuple(range(338, 362))}
RUN57_NAMES = _register(RUN57, RUN57_HEALTHY)
# Added at the freeze, after the 36 runs were trained and before any is replayed: the tests' live replay of the
# recorded collapses (tests/early_warning/data/collapse_runs.json) under the change lost reward-hacking-s0's
# oversized-updates page (15 before, drop 35; the emulation put it at 18, where the doctor warns): read against its
# first steps' median the pattern holds one step, which the 5 s windows missed, and only RlobsPrecursorRewardHacking
# paged, at 39. So a second variant is replayed on the same runs, decided now: B, the change without its entropy
# piece (the entropy against the hour before's highest reading as before; the held-out floor and the recent held-out
# level kept; emulated on the records on disk: 10 -> 6 healthy pages of 116, s322 and s263 staying). Kept: A (the
# change as registered) if it meets both bars; else B if it meets both; else neither (the alert stays as it was).
# Both replays are reported with the alert before the change.
# Replayed once after the freeze (1415655), 15:27-15:50 UTC (bench/results/early_warning_run57_live{,_b,_before}.md;
# the doctor, unchanged, early_warning_run57.md). (i) met: A paged none of the 24 healthy runs (before:
# healthy-tiny-s338 at 55; B: none). (ii) met: all 10 collapses with a drop warned ahead under A, lr-too-high-s167 at
# 10 (before 8), every other within 1 step of before. Kept: A. B warned 1-3 steps earlier and paged no healthy run.

# Fifty-eighth run (7 Dec 2026, registered here before any of its runs is trained): a measurement, no change. The
# PromQL staleness alert (RlobsPrecursorUncorrectedOffPolicy) has read the far leg since the fifty-first run, and since
# then it has met 9 staleness-no-is runs (the fiftieth run's 8, whose doctor results were known when the leg was
# chosen, and the fifty-second's s83): the pooled 29 of 35 (83 %) is mostly runs replayed under the alerts before it.
# The doctor's staleness class is at 39 of 43 (91 %) and the warm-up class at 92 % (PromQL 90 %), each a few runs
# from its bar. Held out, 60 steps, trained after this commit, nothing in rlobs changed before they are scored:
# staleness-no-is 84-99, staleness-no-is-lag4 74-77 (mixed), lr-warmup-too-high 172-175, healthy-async-nois 62-65
# (healthy: no IS, max staleness 2). Scored once: the doctor with `eval` (its pool), the alerts replayed live at one
# step a PERIOD under the committed rules (its pool). Reported, decided now: for each leg the fresh staleness and
# warm-up runs warned before the drop, the pooled classes with them, and for the PromQL staleness alert the runs
# replayed under its far leg alone (the fifty-first run's 8, s83, these 16); any warning or page of any rule on the 4
# healthy no-IS runs counts against the healthy rows; the lag-4 runs go to the mixed row. A miss is reported, not
# fixed in this run: a change chosen on these runs would be chosen on seen data.
RUN58 = {"staleness-no-is": tuple(range(84, 100)), "staleness-no-is-lag4": (74, 75, 76, 77),
         "lr-warmup-too-high": (172, 173, 174, 175)}
HEALTHY_ASYNC_NO_IS_SEEDS["heldout"] += (62, 63, 64, 65)
RUN58_NAMES = (_register(RUN58, {}) + [f"healthy-async-nois-s{s}" for s in (62, 63, 64, 65)])
# Trained 17:38-18:15 UTC after the registration (076de63), scored once (bench/results/early_warning_run58{,_live}.md,
# early_warning_run58_whole_doctor.json: every rule on the finished records). The doctor's precursors: staleness 16 of
# 16 before the drop (leads 3-13, median 4), warm-up 4 of 4, lag-4 1 of 3 falls, no warning on the 4 healthy no-IS
# runs. The PromQL alerts: staleness 16 of 16 (leads 2-13, at most 2 steps behind the doctor), warm-up 4 of 4, lag-4 1
# of 3, no page on the healthy runs. Pooled: the doctor's staleness 55 of 59, warm-up 58 of 63; PromQL staleness 45 of
# 51 (88 %), 25 of 25 under the far leg; warm-up 50 of 55. The whole doctor warned healthy-async-nois-s65 by
# entropy-collapse at 49 (a run that learned; its convergence guard's 20-step window at 49 still holds the climb, 0.58
# under `solved` 0.6): counted against the whole doctor's healthy record, not fixed here.

# Fifty-ninth run (7 Dec 2026, registered here before any of its runs is trained; the change frozen in the same
# commit): entropy-collapse's convergence guard (rlobs/doctor/rules/aggregates.py, _reward_held). Its two level legs
# (the training reward's 20-step mean at least held_gain over its early median and at least `solved`, 0.6, at every
# step from the first collapsed one) also pass on the collapsed steps' own mean (up to 20 of them, at least
# min_steps 5), where the run climbed into the collapse (the window at the first collapsed step its highest so far);
# the leg that asks the reward not to fall from its best still reads the 20-step window alone. No number is new.
# Why: the fifty-eighth run's healthy-async-nois-s65 converged within the window (reward 0.29 -> 0.8-0.95, held-out
# success at its best) and was warned at 49, where the window (steps 30-49, 0.58, its highest yet) held its climb.
# Seen: s65 and the 239 records on disk (ew54-ew58, seen/). Without the "climbed" condition the change also turned
# kl-blow-up-s167's warning (fifty-fifth run; its reward fell at 28, the window at its first collapsed step 42 0.54
# against 0.59 before) into info: the window there holds a fall, not a climb; both are tests in
# tests/doctor/test_second_pass.py. With it, entropy-collapse's severity changes on s65 alone of the 239 (checked
# before this commit). The change can only turn a warning into info. Held out, 60 steps, trained after this commit: healthy-async-nois 66-77 (the setting s65 came from),
# staleness-no-is 100-105, lr-too-high 170-173, lr-warmup-too-high 176-179 (collapses on which entropy-collapse
# warns now and then: 9 of the fifty-eighth run's 16 staleness runs, 1 of its 4 warm-up runs). Scored once: the whole
# doctor under the rule before (a worktree at this commit's parent) and after, and the precursors with `eval` (the
# early-warning pools, unchanged rules), the alerts replayed live (their pool). Bar (kept if both hold; reverted
# otherwise):
# (i) on the 14 collapse runs every entropy-collapse warning under the rule before is a warning under the rule after;
# (ii) every healthy run whose entropy-collapse warning the change turns into info ended with held-out success
#      within 0.15 of its best (the guard's own heldout_drop: a run that held what it learned).
# Reported, not a bar: how many of the 12 healthy runs the rule warns before and after (if none shows the pattern,
# the change rests on s65, seen, and the fresh runs show only that it costs no warning), every other rule's findings
# (unchanged code: any difference is a defect in this commit).
RUN59 = {"staleness-no-is": tuple(range(100, 106)), "lr-too-high": (170, 171, 172, 173),
         "lr-warmup-too-high": (176, 177, 178, 179)}
HEALTHY_ASYNC_NO_IS_SEEDS["heldout"] += tuple(range(66, 78))
RUN59_NAMES = (_register(RUN59, {}) + [f"healthy-async-nois-s{s}" for s in range(66, 78)])
# Trained 18:40-19:11 UTC after the freeze (3a9cbf9), scored once (bench/results/early_warning_run59_whole_doctor.json:
# the whole doctor before, a worktree at 4c7863e, and after; early_warning_run59{,_live}.md). (i) met: the one
# entropy-collapse warning on the 14 collapse runs (lr-warmup-too-high-s177 at 44) is a warning after. (ii) met: the
# change turned one healthy warning into info, healthy-async-nois-s75 at 47 (held-out success 0.14 -> 0.58 at its
# last evaluation, its best 0.59). Kept. Reported: before 1 of 12 healthy runs warned by entropy-collapse, after 0
# (6 others at info under both); every other rule's warnings identical before and after on all 26. The precursors
# (unchanged): staleness 5 of 5 falls ahead (s103 did not fall, warned at 7), lr 4 of 4, warm-up 4 of 4, 0 of 12
# healthy runs warned.

# Sixtieth run (7 Dec 2026, registered here before any of its runs is trained): a measurement, no change. Two settings
# an expert user runs that no threshold was chosen or checked on, both next to a collapse class: (1) the sync trainer
# at lr 5e-4 (between the healthy 3e-4 and the lr class's 1.5e-3), 80 steps: a fast converger with a long plateau,
# where entropy-collapse's convergence guard (fifty-ninth run) and oversized-updates' solved guard are read on a
# policy that has narrowed early; (2) the staleness class's own setting (separate_async, lr 5e-4, max staleness 8)
# with importance correction on (the default TIS cap 2): its corrected control, where the staleness rules see samples
# 5-8 versions old that the loss corrects. Seeds 300-307 of each, their number fixed here, 80 and 60 steps. Both are
# scored as healthy where the run does not fall (the bench's drop) and listed apart where it does (a setting that
# collapses on a seed is no healthy setting there: its warnings are reported with it, and a fall without a warning
# is a collapse no rule foresaw). Beside them staleness-no-is 106-113 (60 steps) for the pools: the PromQL staleness
# alert's far leg has met 30 fresh staleness runs. Scored once: the precursors with `eval`, the alerts replayed live
# (their pools), the whole doctor (every rule, `bench/whole_doctor.py`) on the finished records. Reported, decided now:
# every warning or critical of any rule on a run without a drop counts against the healthy rows (a defect found here
# is fixed on its own registration and fresh runs, not on these); the staleness runs warned before the drop.
RUN60_HEALTHY = {"healthy-lr5e-4": ("healthy sync, lr 5e-4, 80 steps (a fast converger)", [*SYNC, "--lr", "5e-4"],
                                    (), 80),
                 "healthy-async-stale8-tis": ("the staleness class's setting with importance correction on: "
                                              "separate_async, lr 5e-4, max staleness 8, TIS cap 2",
                                              ["--mode", "separate_async", "--lr", "5e-4", "--max-staleness", "8"],
                                              (), None)}
HEALTHY_VARIANTS.update(RUN60_HEALTHY)
RUN60 = {"staleness-no-is": tuple(range(106, 114))}
RUN60_NAMES = _register(RUN60, {k: tuple(range(300, 308)) for k in RUN60_HEALTHY})
# Trained 20:34-20:58 UTC after the registration (fae38fe), scored once under its rules (early_warning_run60{,_live}.md;
# early_warning_run60_whole_doctor.json, whose "before" is fae38fe's doctor). staleness-no-is 106-113: the doctor 8 of 8
# ahead (leads 1-9, median 3.5), the PromQL alert 7 of 8 (s106 pending at its drop step 10, the doctor at 9).
# healthy-lr5e-4: all 8 learned and held (held-out success 0.66-0.88 at step 80, each within 0.1 of its best); the
# bench's training-reward leg fired on 6 of them at the plateau (5-step means 0.15 under a peak of 0.86-0.95, held-out
# success not falling), none warned; s307 (no drop) warned by precursor-oversized-updates at 36 (4 of 5 updates over
# 0.015 after a +0.59 climb, entropy 36 % of its start; held-out 0.65 at 35, 0.85 at 80): a false warning, reported, not
# fixed here; no live page on any. healthy-async-stale8-tis: all 8 FELL (held-out success 0.18-0.36 -> 0.01-0.2 by
# steps 10-25), so the setting is no healthy control; no precursor warned ahead (s301 oversized-updates at 22, 7
# after its fall; no live page ahead); the whole doctor's staleness-over-bound named the staleness at step 5 on each,
# entropy-collapse at 45 on two (after the fall). Fixed on its own registration: the sixty-first run

# Sixty-first run (7 Dec 2026, registered here before any of its runs is trained; the change frozen in the same
# commit): precursor-uncorrected-off-policy's far leg warns with the correction on too (rlobs/doctor/rules/
# precursors.py, `far_with_correction` 1 in the failure table; RlobsPrecursorUncorrectedOffPolicy's far leg without
# its cap == 0 gate). No number is new: at a 5-step median staleness of 5+ versions, 2 of the last 5 steps' ESS under
# 0.8, as for uncorrected runs since the fiftieth run; the near (median) leg keeps the cap gate. Why: the sixtieth
# run's staleness setting with TIS cap 2 (healthy-async-stale8-tis 300-307, registered as a control) fell on 8 of 8
# seeds with no precursor ahead. Seen: those 8 and the 289 records on disk (ew54-ew60, seen/), scanned with the leg
# off and on before this commit: it changes the rule's finding on those 8 alone, a warning on each (steps 7-12, each
# before its fall at 10-25: leads 3-16). Held out, 60 steps, trained after this commit, their number fixed here: the corrected
# staleness setting as a class, staleness-tis 308-315; controls the leg could wrongly warn (TIS on, a staleness that
# can reach 5+): the same setting at the healthy lr 3e-4 (8 seeds) and at lr 1e-4 (4), both scored as healthy where
# they do not fall and as collapses where they do; the completion-basis async setting (4; its dispatch staleness
# runs past the bound). Scored once: the precursors with `eval` (the pools), the whole doctor under the rules before
# (a worktree at this commit's parent) and after, the alerts replayed live. Bar, decided now (kept if both hold;
# reverted otherwise): (i) the doctor warns before the drop on 90 %+ of the staleness-tis runs that fall; (ii) on the
# control runs without a drop, precursor-uncorrected-off-policy warns none (doctor) and its alert pages none (live).
# Reported: leads, the controls that fall and whether they were warned ahead, every other rule (unchanged code: a
# difference is a defect in this commit)
CLASSES["staleness-tis"] = ("separate_async, truncated importance sampling on (cap 2), max staleness 8, lr 5e-4: the "
                            "staleness class with the correction on (the sixtieth run: 8 of 8 fell)",
                            ["--mode", "separate_async", "--lr", "5e-4", "--max-staleness", "8"])
CLASS_SEEDS["staleness-tis"] = ((), tuple(range(308, 316)))
HEALTHY_VARIANTS.update({
    "healthy-async-stale8-tis-lr3e-4": ("separate_async, TIS cap 2, max staleness 8, the healthy lr 3e-4",
                                        ["--mode", "separate_async", "--lr", "3e-4", "--max-staleness", "8"], (), None),
    "healthy-async-stale8-tis-lr1e-4": ("separate_async, TIS cap 2, max staleness 8, lr 1e-4 (a slow learner)",
                                        ["--mode", "separate_async", "--lr", "1e-4", "--max-staleness", "8"], (), None),
})
RUN61_NAMES = ([f"staleness-tis-s{x}" for x in range(308, 316)]
               + _register({}, {"healthy-async-stale8-tis-lr3e-4": tuple(range(300, 308)),
                                "healthy-async-stale8-tis-lr1e-4": (300, 301, 302, 303),
                                "healthy-async-completion": (300, 301, 302, 303)}))
# Trained 21:17-21:44 UTC after the freeze (0edbc57), scored once (early_warning_run61{,_live}.md; the whole doctor
# before, a worktree at fae38fe whose rules are 0edbc57's parent's, and after: early_warning_run61_whole_doctor.json).
# (i) met: 6 of 6 staleness-tis falls warned ahead by the doctor (leads 3-18, median 6; s312 and s315 did not fall by
# the bench's drop, warned at 9 and 7; s315 fell 0.20 -> 0.05, a hair short of it). (ii) NOT met: of the 9 control
# runs without a drop, healthy-async-stale8-tis-lr3e-4-s303 was warned at 20 by the doctor and paged at 29 live
# (held-out success 0.29 at 5, 0.20 at 25, then 0.44 by 50: a dip, then learning). Reverted. Reported: the lr 3e-4
# setting fell on 7 of its 8 seeds, each warned ahead by the changed leg (leads 4-25); the lr 1e-4 runs (4) learned
# (held-out 0.45-0.66 at 60) and the completion-basis runs (4) held, none warned by it; staleness-over-bound warned at
# step 5 on all 20 max-staleness-8 runs, the lr 1e-4 ones included; every other rule identical before and after

def _flags(run_dir: Path) -> list[str]:
    cfg = json.loads((run_dir / "manifest.json").read_text()).get("config") or {}
    keys = ("mode", "lr", "lr_peak", "lr_warmup_steps", "temperature", "kl_coef", "kl_clamp", "tis_cap", "max_staleness", "grader",
            "chain_prob", "eval_chain_prob", "ppo_epochs", "steps", "seed")
    return [x for k in keys if k in cfg for x in (f"--{k.replace('_', '-')}", str(cfg[k]))]


def matrix(classes: list[str] | None = None) -> list[dict]:
    out = []
    unknown = set(classes or ()) - set(CLASSES) - {"healthy"}
    if unknown:
        raise SystemExit(f"unknown class(es) {', '.join(sorted(unknown))}; valid: {', '.join([*CLASSES, 'healthy'])}")
    for cls in [c for c in classes or CLASSES if c != "healthy"]:
        cal, held = CLASS_SEEDS.get(cls) or ((MIXED_CALIBRATION_SEEDS, ()) if cls in MIXED
                                             else (CALIBRATION_SEEDS, HELDOUT_SEEDS))
        for split, seeds in (("calibration", cal), ("heldout", held + HELDOUT_EXTRA.get(cls, ()))):
            out += [{"name": f"{cls}-s{s}", "class": cls, "split": split, "seed": s, "args": CLASSES[cls][1],
                     **({"steps": CLASS_STEPS[cls]} if cls in CLASS_STEPS else {})} for s in seeds]
    if classes and "healthy" not in classes:
        return out  # --classes names collapse classes only: no healthy runs with them
    for split, seeds in HEALTHY_SEEDS.items():
        out += [{"name": f"healthy-s{s}", "class": "healthy", "split": split, "seed": s, "args": HEALTHY}
                for s in seeds]
    for split, seeds in HEALTHY_ASYNC_SEEDS.items():
        out += [{"name": f"healthy-async-s{s}", "class": "healthy", "split": split, "seed": s, "args": HEALTHY_ASYNC}
                for s in seeds]
    for split, seeds in HEALTHY_ASYNC_NO_IS_SEEDS.items():
        out += [{"name": f"healthy-async-nois-s{s}", "class": "healthy", "split": split, "seed": s,
                 "args": HEALTHY_ASYNC_NO_IS, "what": "healthy (separate_async, no IS correction, max staleness 2)"}
                for s in seeds]
    for name, (what, args, seeds, steps) in HEALTHY_VARIANTS.items():
        out += [{"name": f"{name}-s{s}", "class": "healthy", "seed": s, "args": args, "what": what,
                 "split": "calibration" if s in VARIANT_CALIBRATION.get(name, ()) else "heldout",
                 **({"steps": steps} if steps else {})} for s in seeds]
    return out


def train(entry: dict, runs: Path, steps: int) -> dict:
    run_dir = runs / entry["name"]
    done = run_dir / "early_warning_run.json"
    if done.is_file():
        return json.loads(done.read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "local"}
    for attempt in range(3):  # a Ray start timeout under load is the machine, not the run: retry
        shutil.rmtree(run_dir, ignore_errors=True)
        t0 = time.time()
        log = runs / f"{entry['name']}.log"
        with open(log, "wb") as f:
            rc = subprocess.call(["nice", "-n", "15", sys.executable, "-m", "trainer_ref.run", *COMMON, "--steps",
                                  str(entry.get("steps") or steps), "--seed", str(entry["seed"]), "--run-dir", str(run_dir), *entry["args"]],
                                 cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        if rc == 0 or b"timed out during startup" not in log.read_bytes():
            break
    info = {**entry, "rc": rc, "seconds": round(time.time() - t0, 1), "attempts": attempt + 1}
    if rc == 0:
        done.write_text(json.dumps(info))
    return info


def drop_step(reward: list[tuple[int, float]], evals: list[tuple[int, float]]) -> tuple[int | None, str]:
    """First step the collapse shows (see the module doc), and which signal showed it."""
    first, why = None, ""
    peak = None
    for i in range(SMOOTH - 1, len(reward)):
        s = reward[i][0]
        m = statistics.fmean(v for _, v in reward[i - SMOOTH + 1:i + 1])
        if peak is not None and m <= peak - DROP:
            first, why = s, f"training reward {SMOOTH}-step mean {m:.3f} <= peak {peak:.3f} - {DROP}"
            break
        peak = m if peak is None else max(peak, m)
    best = None
    for s, v in evals:
        if best is not None and v <= best - DROP:
            if first is None or s < first:
                first, why = s, f"held-out success {v:.3f} <= best {best:.3f} - {DROP}"
            break
        best = v if best is None else max(best, v)
    return first, why


# Twenty-fourth run (5 Dec 2026, a rescoring of stored runs, no training; registered in
# bench/early_warning_rescore.py before any rescored figure was computed): candidates for a drop that noise at a
# plateau does not trigger. ``hold``: the training leg counts only when the 5-step mean stays DROP under the peak
# (frozen where it first fell) for ``hold`` consecutive steps; ``confirm``: the held-out leg counts only when the
# next evaluation is DROP under the same best too; ``train_leg`` False: held-out success alone.
def drop_step_confirmed(reward: list[tuple[int, float]], evals: list[tuple[int, float]], *, hold: int = 1,
                        confirm: bool = False, train_leg: bool = True) -> tuple[int | None, str]:
    """The first step a *lasting* drop shows. A fall near the run's end that has fewer than ``hold`` means left
    counts when every remaining one holds and at least ``min(hold, 3)`` remain; a held-out fall at the last
    evaluation cannot be confirmed. ``hold=1, confirm=False`` is :func:`drop_step`."""
    first, why = None, ""
    if train_leg:
        means = [(reward[i][0], statistics.fmean(v for _, v in reward[i - SMOOTH + 1:i + 1]))
                 for i in range(SMOOTH - 1, len(reward))]
        peak = None
        for j, (s, m) in enumerate(means):
            if peak is not None and m <= peak - DROP:
                after = means[j:j + hold]
                if all(x <= peak - DROP for _, x in after) and (len(after) == hold or len(after) >= min(hold, 3)):
                    first, why = s, (f"training reward {SMOOTH}-step mean {m:.3f} <= peak {peak:.3f} - {DROP}"
                                     + (f", held {len(after)} steps" if hold > 1 else ""))
                    break
            peak = m if peak is None else max(peak, m)
    best = None
    for k, (s, v) in enumerate(evals):
        if best is not None and v <= best - DROP:
            nxt = evals[k + 1][1] if k + 1 < len(evals) else None
            if not confirm or (nxt is not None and nxt <= best - DROP):
                if first is None or s < first:
                    first, why = s, (f"held-out success {v:.3f} <= best {best:.3f} - {DROP}"
                                     + (f", next {nxt:.3f}" if confirm else ""))
                break  # an unconfirmed fall: look on (the best stays)
        best = v if best is None else max(best, v)
    return first, why


REL_SHARE, REL_MIN_BEST = 1 / 3, 0.12  # the relative leg (pre-registered 2 Dec 2026, before the eighth run was scored)


def relative_drop(evals: list[tuple[int, float]]) -> int | None:
    """A second definition, reported beside the first: held-out success down to ``REL_SHARE`` of its best so far
    (a best of at least ``REL_MIN_BEST``). A run that starts low (0.15) and falls to ~0 never loses 0.15 absolute."""
    best = None
    for s, v in evals:
        if best is not None and best >= REL_MIN_BEST and v <= best * REL_SHARE:
            return s
        best = v if best is None else max(best, v)
    return None


# The reward-hacking divergence (training reward +0.3 while held-out success gains at most a third of it) was a
# candidate here, reported and counted nowhere, in the eighth run; since the ninth it is the doctor rule
# precursor-reward-hacking with the same numbers, counted like every other precursor


def judge(run_dir: Path) -> dict:
    from rlobs.doctor import diagnose
    from rlobs.doctor.context import RunContext
    from rlobs.doctor.model import Severity
    from rlobs.doctor.rules.precursors import PRECURSOR_IDS, heldout, replay, series
    from rlobs.store import open_run

    rec = open_run(run_dir)
    try:
        ctx = RunContext(rec)
        reward = series(ctx, "reward")
        evals = [(int(s), float(v)) for s, v in heldout(ctx)]  # the same held-out series the rules read
        t0 = time.perf_counter()
        first = replay(ctx)
        replay_s = time.perf_counter() - t0
        # the whole doctor (every rule, once) on the finished record: the precursors' findings among what `rlobs doctor
        # RUN` prints (the rules run independently; ranking only orders them)
        report = diagnose(rec)
        pre = [f for f in report.findings if f.rule in PRECURSOR_IDS]
        whole = {f.rule: f.first_step for f in pre}
        findings = [{"rule": f.rule, "step": f.first_step, "title": f.title} for f in pre]
        # the oversized-updates finding names a grader loophole (its training reward far above held-out success)
        loophole = any(e.metric == "training reward over held-out success" for f in pre for e in f.evidence)
        all_rules = [{"rule": f.rule, "severity": str(f.severity), "step": f.first_step, "title": f.title}
                     for f in report.findings if f.severity >= Severity.WARNING]
    finally:
        rec.close()
    warned = {k: v for k, v in first.items() if v is not None}
    warn = min(warned.values()) if warned else None
    drop, why = drop_step(reward, evals)
    rel = relative_drop(evals)
    return {"drop_step_either": min((x for x in (drop, rel) if x is not None), default=None),
            "steps": len(reward), "reward": [round(v, 4) for _, v in reward], "evals": evals,
            "drop_step": drop, "drop_why": why, "first_warning": warn,
            "first_rule": min(warned, key=lambda k: (warned[k], k)) if warned else None, "per_rule": first,
            "whole_record_first_step": whole, "replay_equals_whole_record": all(whole.get(k) == v for k, v in first.items()),
            "findings": findings, "names_loophole": loophole, "all_rules": all_rules,
            "replay_seconds": round(replay_s, 3)}


def run_signals(run_dir: Path) -> dict:
    """A finished run's per-step signals as the precursor rules read them (``steps``: one row per step with its
    held-out evaluation where there is one), its importance-correction cap and the bench's drop step: what
    ``extract`` stores for the tests and ``bench/early_warning_live.py`` replays into a real Prometheus."""
    from rlobs.doctor.context import RunContext
    from rlobs.doctor.rules.precursors import audit_gap, correction_cap, heldout, series
    from rlobs.schema import PAUSE_PHASES
    from rlobs.store import open_run

    rec = open_run(run_dir)
    try:
        ctx = RunContext(rec)
        cols = {k: dict(series(ctx, k)) for k in ("reward", "grad_norm", "entropy", "kl", "zero_std", "is_clipped",
                                                  "ess", "staleness", "policy_kl", "lr")}
        cap = correction_cap(ctx)
        evals = [(int(s), float(v)) for s, v in heldout(ctx)]
        gap = audit_gap(ctx)
        if gap:
            cols["audit_gap"] = dict(gap)
        # the step's timing, for a replay at the run's own pace: when the trainer logged it (its first rank) and the
        # no-progress yardstick's share of it (optimiser plus data-wait seconds)
        timing = rec.sql("SELECT step, min(ts_ns) / 1e9 AS wall, "
                         "max(coalesce(step_seconds, 0) + coalesce(data_wait_s, 0)) AS busy "
                         "FROM train_step WHERE step IS NOT NULL GROUP BY step").fetchall()
        cols["wall"] = {int(st): float(w) for st, w, _ in timing}
        cols["busy"] = {int(st): float(b) for st, _, b in timing}
        # the declared pauses (held-out evaluations, checkpoint saves, drains: trainer_ref's telemetry.pause), when
        # each began and how long it took, for the replay to declare them as the run did
        nouns = tuple(PAUSE_PHASES.values())
        pauses = [{"wall": round(float(end) - float(sec), 6), "seconds": round(float(sec), 6), "phase": str(ph)}
                  for end, sec, ph in rec.sql(
                      f"SELECT ts_ns / 1e9, seconds, phase FROM phase WHERE phase IN ({', '.join('?' * len(nouns))}) "
                      "AND seconds IS NOT NULL ORDER BY ts_ns", list(nouns)).fetchall()]
    finally:
        rec.close()
    steps = sorted(cols["reward"])
    drop, _why = drop_step(sorted(cols["reward"].items()), evals)
    cols["heldout"] = dict(evals)
    return {"correction_cap": cap, "drop_step": drop, "pauses": pauses,
            "steps": [{"step": s, **{k: round(v[s], 6) for k, v in cols.items() if s in v}} for s in steps]}


def extract(entries: list[dict], runs: Path, expect: dict[str, str]) -> None:
    """The per-step signals of finished runs -> tests/early_warning/data/collapse_runs.json (the live-alert test
    replays them into a real Prometheus). Runs already in the file and not named here are kept."""
    path = ROOT / "tests/early_warning/data/collapse_runs.json"
    out = json.loads(path.read_text()) if path.is_file() else {}
    out.setdefault("runs", {})
    out["source"] = "bench/early_warning.py extract (real trainer_ref runs, tiny-packed, no injected fault)"
    for e in entries:
        sig = run_signals(runs / e["name"])
        out["runs"][e["name"]] = {
            "class": e["class"], "what": CLASSES[e["class"]][0] if e["class"] in CLASSES else
            e.get("what") or ("healthy (lr 3e-4)" if e["class"] == "healthy" else "exploratory: " + " ".join(e["args"])),
            "args": e["args"], "seed": e["seed"], "correction_cap": sig["correction_cap"], "drop_step": sig["drop_step"],
            "expect": [x for x in expect.get(e["name"], "").split("+") if x], "steps": sig["steps"]}
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path} ({len(out['runs'])} runs)")


def summarise(rows: list[dict], key: str = "drop_step") -> dict:
    """Per split and class; ``key``: which drop definition (``drop_step``, or ``drop_step_either`` with the
    relative leg)."""
    rows = [{**r, "drop_step": r.get(key)} for r in rows]
    out: dict = {}
    for split in ("calibration", "heldout", "all"):
        sel = [{**r, "class": "healthy"} if r["class"] in MIXED and r["drop_step"] is None else r
               for r in rows if r["class"] != "exploratory" and (split == "all" or r["split"] == split)]
        classes: dict = {}
        for cls in sorted({r["class"] for r in sel if r["class"] != "healthy"}):
            rs = [r for r in sel if r["class"] == cls]
            collapsed = [r for r in rs if r["drop_step"] is not None]
            early = [r for r in collapsed if r["first_warning"] is not None and r["first_warning"] < r["drop_step"]]
            leads = [r["drop_step"] - r["first_warning"] for r in early]
            classes[cls] = {"runs": len(rs), "collapsed": len(collapsed), "warned_early": len(early),
                            "detection_rate": round(len(early) / len(collapsed), 3) if collapsed else None,
                            "leads": leads, "median_lead": statistics.median(leads) if leads else None,
                            "misses": [r["name"] for r in collapsed if r not in early],
                            "warned_without_drop": [r["name"] for r in rs if r["drop_step"] is None
                                                    and r["first_warning"] is not None],
                            "no_collapse": [r["name"] for r in rs if r["drop_step"] is None]}
        healthy = [r for r in sel if r["class"] == "healthy"]
        all_leads = [x for c in classes.values() for x in c["leads"]]
        out[split] = {"classes": classes, "median_lead_all": statistics.median(all_leads) if all_leads else None,
                      "healthy_runs": len(healthy),
                      "healthy_with_warning": [r["name"] for r in healthy if r["first_warning"] is not None],
                      "healthy_warnings": sum(sum(1 for v in r["per_rule"].values() if v is not None) for r in healthy),
                      "healthy_that_dropped": [r["name"] for r in healthy if r["drop_step"] is not None]}
    return out


# Where the doctor stands (5 Dec 2026, evening): every fresh run trained since its precursor rules last changed
# (ee95cc9, 02:29 on 5 Dec 2026; the twenty-fifth run's registration a519cd4 came after it), scored by the same judge:
# the twenty-fifth to thirty-third runs. No threshold was chosen or checked on any of them. The four runs the
# twenty-seventh re-replayed as seen (RUN27_SEEN) count once, from the run that first scored them (the files are
# pooled in order; the first that has a run wins). The live replays kept the doctor's first warning and the drop of
# each run (`doctor_first`, `drop_step`); the thirty-first and thirty-second runs were scored live only for
# no-progress, so their records are judged by `eval`.
def pooled_rows(results: list[Path], seen: frozenset[str] = frozenset(), leg: str = "doctor") -> list[dict]:
    """Each run's row in stored results, each run once (the first file that has it), runs in ``seen`` left out.
    ``leg`` "doctor": the doctor's warnings, from `eval` files (``first_warning``) and live replays
    (``doctor_first``); "live": the precursor alerts that went pending while the run stepped (live replays only;
    an alert pending only after the last step is left out, as `bench/early_warning_live.py` scores them)."""
    rows: dict[str, dict] = {}
    for path in results:
        for r in json.loads(path.read_text())["runs"]:
            if r["name"] in seen or r["name"] in rows or r["class"] == "exploratory":
                continue
            if leg == "live":
                if "fired" not in r:
                    raise SystemExit(f"{path}: not a live replay's results (no alerts in it); --leg live needs one")
                per_rule = {a: r["first_step"][a] for a in r["fired"] if a not in r["after_last_step"]}
            elif "first_warning" in r:
                per_rule = r["per_rule"]
            else:  # a live replay: the doctor's first warning, and per rule where the file kept it
                per_rule = r.get("doctor_per_rule") or ({} if r["doctor_first"] is None else {"?": r["doctor_first"]})
            warned = {k: v for k, v in per_rule.items() if v is not None}
            first = min(warned.values()) if warned else None
            rows[r["name"]] = {"name": r["name"], "class": r["class"], "split": "heldout", "seed": r.get("seed"),
                               "drop_step": r["drop_step"], "first_warning": first, "per_rule": per_rule,
                               "first_rule": min(warned, key=lambda k: (warned[k], k)) if warned else None,
                               "source": path.name}
    return list(rows.values())


def pool_markdown(res: dict) -> str:
    s = res["summary"]["heldout"]
    who = "the live precursor alerts (while stepping)" if res.get("leg") == "live" else "the doctor"
    lines = [f"# Early warning: {who} on every fresh run since the precursor rules last changed", "",
             f"Pooled from {', '.join(f'`{x}`' for x in res['sources'])}; left out as seen: "
             f"{', '.join(res['seen']) or 'none'}. Drop and lead as in `bench/early_warning.py`; a run of a mixed "
             "class without a drop counts as healthy.", "",
             "| class | runs | collapsed | warned before the drop | detection | median lead | leads (steps) | misses |",
             "|---|---|---|---|---|---|---|---|"]
    for cls, c in s["classes"].items():
        det = f"{c['detection_rate']:.0%}" if c["detection_rate"] is not None else "n/a"
        lines.append(f"| {cls} | {c['runs']} | {c['collapsed']} | {c['warned_early']} | {det} | "
                     f"{c['median_lead'] if c['median_lead'] is not None else '-'} | "
                     f"{', '.join(map(str, sorted(c['leads']))) or '-'} | {', '.join(c['misses']) or '-'} |")
    lines += ["", f"Median lead over every detected collapse: {s['median_lead_all']}. Healthy runs (mixed-class runs "
              f"without a drop included): {s['healthy_runs']}, with a warning: {len(s['healthy_with_warning'])} "
              f"({', '.join(s['healthy_with_warning']) or 'none'}).", ""]
    if res.get("note"):
        lines += [res["note"], ""]
    return "\n".join(lines)


def markdown(res: dict) -> str:
    intro = (f"Drop: training reward {SMOOTH}-step mean {DROP} below its running peak, or held-out exact-match "
             f"success {DROP} below its best (evaluated every 5 steps). Warning: first precursor finding, records "
             "replayed step by step as they grew. Lead = drop step - warning step.")
    lines = ["# Early warning (bench/early_warning.py)", "", intro, ""]
    for split in ("calibration", "heldout"):
        s = res["summary"][split]
        head = ("| class | runs | collapsed | warned before the drop | detection | leads (steps) | median lead | "
                f"warned, no drop in {res.get('steps', STEPS)} steps |")
        lines += [f"## {split} split", "", head, "|---|---|---|---|---|---|---|---|"]
        for cls, c in s["classes"].items():
            det = f"{c['detection_rate']:.0%}" if c["detection_rate"] is not None else "n/a"
            lines.append(f"| {cls} | {c['runs']} | {c['collapsed']} | {c['warned_early']} | {det} | "
                         f"{', '.join(map(str, c['leads'])) or '-'} | {c['median_lead'] if c['median_lead'] is not None else '-'} | "
                         f"{', '.join(c['warned_without_drop']) or '-'} |")
        tail = (f"Median lead over every detected collapse: {s['median_lead_all']}; healthy runs: "
                f"{s['healthy_runs']}, with a warning: {len(s['healthy_with_warning'])} "
                f"({', '.join(s['healthy_with_warning']) or 'none'}; {s['healthy_warnings']} warnings in all).")
        lines += ["", tail, ""]
        if "summary_with_relative_drop" in res:
            e = res["summary_with_relative_drop"][split]
            per = "; ".join(f"{cls} {c['warned_early']}/{c['collapsed']}" for cls, c in e["classes"].items())
            lines += [f"With the relative leg too (held-out success at or under {REL_SHARE:.2g} of a best of "
                      f"{REL_MIN_BEST}+): warned ahead / collapsed: {per}; median lead {e['median_lead_all']}; "
                      f"healthy with a warning: {len(e['healthy_with_warning'])} of {e['healthy_runs']}.", ""]
    lines += ["## Runs (split exploratory: settings tried on one seed, listed apart and never counted)", "", "| run | split | drop step (why) | first warning (rule) | lead |", "|---|---|---|---|---|"]
    for r in res["runs"]:
        lead = (r["drop_step"] - r["first_warning"]) if r["drop_step"] is not None and r["first_warning"] is not None else "-"
        lines.append(f"| {r['name']} | {r['split']} | {r['drop_step']} ({r['drop_why'] or 'no drop'}) | "
                     f"{r['first_warning']} ({r['first_rule'] or '-'}) | {lead} |")
    return "\n".join(lines) + "\n"


def calib_verdict(row: dict) -> str:
    """A doctor_calib healthy run by both definitions: ``degenerated`` (doctor_calib's: entropy or reward under 10 %
    of its start, or its last quarter's reward under half), ``dropped`` (this bench's: the training reward DROP below
    its running peak), else ``healthy``."""
    return "degenerated" if row["degenerated"] else "dropped" if row["drop_step"] is not None else "healthy"


def calib_summary(rows: list[dict]) -> dict:
    """Per learning rate: how many runs degenerated / dropped / stayed healthy, the precursor warnings (replayed
    online) and the whole doctor's warnings on each kind, and the leads on the runs that dropped. ``noise``: the
    share of runs at ``tiny``'s default lr 1e-3 whose reward dropped (stated before the ninth check: at 10 % or
    more the drop does not tell a collapse from noise on ``tiny``)."""
    out: dict = {}
    for lr in sorted({r["lr"] for r in rows}):
        rs = [r for r in rows if r["lr"] == lr]
        kinds = {k: [r for r in rs if calib_verdict(r) == k] for k in ("degenerated", "dropped", "healthy")}
        dropped = kinds["dropped"]
        early = [r for r in dropped if r["first_warning"] is not None and r["first_warning"] < r["drop_step"]]
        out[f"{lr:g}"] = {
            "runs": len(rs), **{k: len(v) for k, v in kinds.items()},
            "not_degenerated": len(rs) - len(kinds["degenerated"]),
            "precursor_warned": {k: [r["name"] for r in v if r["first_warning"] is not None] for k, v in kinds.items()},
            "doctor_warned": {k: [r["name"] for r in v if r["false_alarms"]] for k, v in kinds.items()},
            "dropped_warned_ahead": len(early), "leads": [r["drop_step"] - r["first_warning"] for r in early],
            "dropped_warned_at_or_after": [r["name"] for r in dropped if r not in early and r["first_warning"] is not None]}
    lo = [r for r in rows if r["lr"] == 1e-3 and not r["degenerated"]]
    fell = sum(r["drop_step"] is not None for r in lo)
    share = round(fell / len(lo), 3) if lo else None
    out["noise"] = {"runs_at_1e-3_not_degenerated": len(lo), "dropped": fell, "share": share}
    out["drop_tells_collapse_from_noise"] = share is not None and share < 0.1
    return out


def eval_calib(root: Path, out: Path) -> dict:
    """doctor_calib's healthy held-out records under ``root`` (``bench/doctor_calib.py run --split heldout --only
    healthy --root ROOT``) judged both ways: doctor_calib's (degenerated; the whole doctor's warnings) and this
    bench's (the drop; the precursors replayed step by step)."""
    from bench import doctor_calib as dc

    rows = []
    for name, spec in sorted(dc._done(root / "heldout.jsonl").items()):
        d = root / "heldout" / name
        if spec.get("fault") or spec.get("error") or not d.is_dir():
            continue
        share = dc.collapsed(d)
        lr = json.loads((d / "manifest.json").read_text())["config"]["lr"]
        row = {"name": name, "seed": spec["seed"], "mode": spec["mode"], "steps_planned": spec["steps"], "lr": lr,
               "entropy_low_share": share["entropy"], "reward_low_share": share["reward"],
               "reward_last_quarter_share": share["reward_end"], "degenerated": dc.degenerated(share),
               **dc.judge(spec, dc.diagnose_one(d, {})), **judge(d)}
        row["verdict"] = calib_verdict(row)
        rows.append(row)
        print(f"{name}: lr {lr:g} {row['verdict']} drop {row['drop_step']} precursor {row['first_warning']} "
              f"({row['first_rule']}) doctor {row['false_alarms']}", flush=True)
    res = {"what": "doctor_calib healthy `tiny` records judged by doctor_calib's degenerated criterion and by "
                   f"bench/early_warning.py's drop (training reward {SMOOTH}-step mean {DROP} below its running peak)",
           "root": str(root), "runs": rows, "summary": calib_summary(rows)}
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res["summary"], indent=1))
    return res


CONTINUED_DEGENERATE_AT_LEAST = 7  # of 8 (tenth check, stated before its runs): see eval_continued


def eval_continued(root: Path, checks: list[Path], out: Path, twins: Path | None = None) -> dict:
    """The tenth check: the settings of doctor_calib healthy runs at lr 3e-3 that had not degenerated in their 20-60
    steps and got the first-steps warning, run again to 200 steps (``bench/doctor_calib.py run ... --steps 200 --root ROOT``).
    Per run: did it degenerate by 200 steps (doctor_calib's criterion) and where (``degeneration_step``), its first
    precursor warning (replayed online) and the lead to that step, inside the finding's stated time to impact or
    not; where the short twin's record is at hand (``twins``: its doctor_calib root), whether the continued run
    repeats the twin's training rewards step for step. ``checks``: the doctor_calib results the twins were scored
    in. Stated before the runs: if at least ``CONTINUED_DEGENERATE_AT_LEAST`` degenerate, the short runs' warnings
    are reported as early warnings of a degeneration beside the doctor_calib bar (not rescored); otherwise they stay
    false. (These are new runs of the twins' settings: doctor_calib's runs are not deterministic.) The leads are
    given both to the degeneration and to this bench's drop (``drop_step``), the event the stated 6-30 steps are
    measured to."""
    from bench import doctor_calib as dc
    from rlobs.failures import FAILURES

    th = FAILURES["precursor-oversized-updates"].thresholds
    eta = (th["early_impact_steps_low"], th["early_impact_steps_high"])
    short: dict[str, dict] = {}
    for c in checks:
        data = json.loads(c.read_text())
        for r in data["runs"] if isinstance(data, dict) else data:
            short[r["name"]] = {"check": c.name, **r}
    rows = []
    for name, spec in sorted(dc._done(root / "heldout.jsonl").items()):
        d = root / "heldout" / name
        if not spec.get("continues") or spec.get("error") or not d.is_dir():
            continue
        twin = short.get(spec["continues"], {})
        share = dc.collapsed(d)
        row = {"name": name, "continues": spec["continues"], "check": twin.get("check"), "mode": spec["mode"],
               "twin_found": bool(twin), "twin_degenerated": twin.get("degenerated"),
               "twin_warnings": twin["warnings"] if "warnings" in twin else twin.get("false_alarms"),
               "entropy_low_share": share["entropy"], "reward_low_share": share["reward"],
               "reward_last_quarter_share": share["reward_end"], "degenerated": dc.degenerated(share),
               "degeneration_step": dc.degeneration_step(d), **judge(d)}
        doctor = dc.judge(spec, dc.diagnose_one(d, {}))  # the whole doctor's, beside judge()'s precursor findings
        row.update(doctor_findings=doctor["findings"], false_alarms=doctor["false_alarms"])
        w, g = row["first_warning"], row["degeneration_step"]
        row["lead"] = g - w if w is not None and g is not None and w < g else None  # a warning after it: none
        row["lead_within_eta"] = row["lead"] is not None and eta[0] <= row["lead"] <= eta[1]
        if twins is not None and (twins / "heldout" / spec["continues"]).is_dir():
            from rlobs.doctor.context import RunContext
            from rlobs.doctor.rules.precursors import series
            from rlobs.store import open_run

            with open_run(twins / "heldout" / spec["continues"]) as rec:
                old = [round(v, 4) for _, v in series(RunContext(rec), "reward")]
            row["repeats_twin"] = f"{sum(a == b for a, b in zip(old, row['reward']))} of {len(old)}"
        rows.append(row)
        print(f"{name}: degenerated {row['degenerated']} at {g}, warned {w} ({row['first_rule']}), lead {row['lead']}, "
              f"repeats twin {row.get('repeats_twin')}", flush=True)
    n = sum(r["degenerated"] for r in rows)
    leads = sorted(r["lead"] for r in rows if r["lead"] is not None)
    summary = {"runs": len(rows), "degenerated": n, "bar": CONTINUED_DEGENERATE_AT_LEAST,
               "setting_degenerates_by_the_stated_bar": len(rows) > 0 and n >= CONTINUED_DEGENERATE_AT_LEAST,
               "leads_to_the_drop": sorted(r["drop_step"] - r["first_warning"] for r in rows if r["drop_step"] is not None
                                           and r["first_warning"] is not None and r["first_warning"] < r["drop_step"]),
               "warned_ahead": len(leads), "leads": leads,
               "median_lead": statistics.median(leads) if leads else None, "eta": list(eta),
               "leads_within_eta": sum(r["lead_within_eta"] for r in rows)}
    res = {"what": "tenth check: the settings of doctor_calib's non-degenerated lr 3e-3 `tiny` runs, run again "
                   "to 200 steps (new runs: doctor_calib's runs are not deterministic)",
           "root": str(root), "runs": rows, "summary": summary}
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(summary, indent=1))
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("run", "eval", "extract", "eval-calib", "eval-continued", "pool"))
    ap.add_argument("--results", default="", help="pool: comma-separated results files (eval or live replays)")
    ap.add_argument("--leg", choices=("doctor", "live"), default="doctor", help="pool: whose warnings to score")
    ap.add_argument("--seen", default="", help="pool: comma-separated runs left out (a threshold was chosen on them)")
    ap.add_argument("--note", default="", help="pool: a line the markdown carries under its table")
    ap.add_argument("--checks", default="", help="eval-continued: comma-separated doctor_calib results of the twins")
    ap.add_argument("--twins", default="", help="eval-continued: the twins' doctor_calib root, where still at hand")
    ap.add_argument("--expect", default="", help="extract: RUN=RULE[+RULE] pairs (the live alerts the test expects)")
    ap.add_argument("--runs", default="/tmp/rlobs-early-warning", help="where the run records go")
    ap.add_argument("--only", default="", help="comma-separated run names (default: the whole matrix)")
    ap.add_argument("--classes", default="", help="comma-separated classes, 'healthy' for the healthy runs (default: all)")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--extra", default="", help="eval: comma-separated exploratory runs to judge and list apart "
                                                "(settings tried and left out of the matrix; never counted)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/early_warning"))
    args = ap.parse_args()
    if args.cmd == "eval-calib":  # --runs: a bench/doctor_calib.py --root; --out: the results file's stem
        eval_calib(Path(args.runs), Path(args.out + ".json"))
        return
    if args.cmd == "eval-continued":  # --runs: the continued runs' doctor_calib --root; --out: the results stem
        eval_continued(Path(args.runs), [Path(c) for c in args.checks.split(",") if c], Path(args.out + ".json"),
                       Path(args.twins) if args.twins else None)
        return
    if args.cmd == "pool":  # --out: the pooled results' stem
        sources = [Path(x) for x in args.results.split(",") if x]
        seen = frozenset(x for x in args.seen.split(",") if x)
        rows = pooled_rows(sources, seen, leg=args.leg)
        res = {"leg": args.leg, "sources": [x.name for x in sources], "seen": sorted(seen), "runs": rows,
               "summary": summarise(rows), **({"note": args.note} if args.note else {})}
        Path(args.out + ".json").write_text(json.dumps(res, indent=1))
        Path(args.out + ".md").write_text(pool_markdown(res))
        print(pool_markdown(res))
        return
    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    entries = matrix([c for c in args.classes.split(",") if c] or None)
    if args.only:
        names = args.only.split(",")
        known = {e["name"] for e in entries}
        # a run outside the matrix (an exploratory setting): its flags from the record's manifest
        entries = [e for e in entries if e["name"] in names] + [
            {"name": n, "class": "exploratory", "split": "exploratory", "seed": None, "args": _flags(runs / n)}
            for n in names if n not in known]
    if args.cmd == "run":
        for e in entries:
            info = train(e, runs, args.steps)
            print(json.dumps({k: info[k] for k in ("name", "rc", "seconds", "attempts") if k in info}), flush=True)
        return
    if args.cmd == "eval" and args.extra:
        entries += [{"name": n, "class": "exploratory", "split": "exploratory", "seed": None, "args": _flags(runs / n)}
                    for n in args.extra.split(",")]
    if args.cmd == "extract":
        extract(entries, runs, dict(x.split("=", 1) for x in args.expect.split(",") if x))
        return
    rows = []
    for e in entries:
        d = runs / e["name"]
        if not (d / "early_warning_run.json").is_file():
            print(f"skip {e['name']}: no finished run in {d}", flush=True)
            continue
        row = {**{k: e[k] for k in ("name", "class", "split", "seed")}, "args": e["args"], **judge(d)}
        rows.append(row)
        print(f"{row['name']}: drop {row['drop_step']} warn {row['first_warning']} ({row['first_rule']})", flush=True)
    from rlobs.failures import FAILURES

    res = {"drop": DROP, "smooth": SMOOTH, "steps": args.steps, "classes": {k: v[0] for k, v in CLASSES.items()},
           "healthy": "lr 3e-4 sync (bench/trainer_learning.py settings)", "runs": rows, "summary": summarise(rows),
           "summary_with_relative_drop": summarise(rows, "drop_step_either"),
           "relative_drop": {"share_of_best": REL_SHARE, "min_best": REL_MIN_BEST},
           "thresholds": {k: dict(f.thresholds) for k, f in FAILURES.items() if k.startswith("precursor-")}}
    Path(args.out + ".json").write_text(json.dumps(res, indent=1))
    Path(args.out + ".md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
