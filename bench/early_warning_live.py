"""The live precursor alerts on real runs: which of them a real Prometheus fires, run by run.

    python bench/early_warning_live.py --runs DIR --only A,B,... --out bench/results/NAME [--batch 8]

Each named run's record (a ``bench/early_warning.py`` run) is read back to its per-step signals
(``early_warning.run_signals``) and replayed through a real rlobs recorder (the Prometheus sink serves ``/metrics``
and writes its file_sd target, as a trainer does), one step per ``PERIOD`` seconds, scraped every second by
Debian's Prometheus (``LocalPrometheus``), which evaluates the precursor rules of
``rlobs.dashboards.alerts.precursor_rules``: the committed expressions and thresholds with their time windows
scaled (``SCALE``: the last 10 min vs the hour before become 5 s vs 30 s; ``for`` likewise, at least 1 s: 1 min
becomes 1 s, 10 min 5 s), so a replayed step stands for two minutes of a real run (``--step-seconds P``: P seconds,
the windows scaled to that pace; ``--rules-step-seconds S``: the rules built for steps of S seconds,
``rlobs dashboards build --step-seconds``). A batch of runs shares one
Prometheus; every precursor alert that fires for a run is listed with the step it went active at. ``tests/early_warning/test_precursor_alerts.py`` drives the
same replay on the extracted runs of ``tests/early_warning/data``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlobs.dashboards.alerts import rule  # noqa: E402

PERIOD = 1.0  # seconds per replayed step
SCALE = {"recent": "5s", "history": "30s"}
REAL_SECONDS_PER_SECOND = 120  # the windows' scale: the last 10 min -> 5 s, a replayed step stands for two minutes
RULES_STEP_SECONDS = 120  # the step time the replayed rules are built for (the committed windows: 120)
WAIT_S = 30.0  # after the last step: the alerts' windows and `for` catching up
DOCTOR_INTERVAL = 0.5  # --doctor: seconds between the watcher's passes over the batch's records
DOCTOR_ALERT = rule("doctor-precursor").name  # RlobsDoctorPrecursor
GATE_READ_S = 0.25  # replay seconds between reads of a gate's value from Prometheus (query_range's step)
FRESH_SINCE_STEP = 5  # the fresh-data gate is read from a run's sixth step on (bench/progress_gaps.py's span too)


def set_pace(step_seconds: float, rules_step_seconds: float | None = None) -> None:
    """Replay each step as ``step_seconds`` of a real run (default 120: the committed windows hold 5 steps and 30)
    under the rules built for steps of ``rules_step_seconds`` (``rlobs dashboards build --step-seconds``; default:
    the committed windows, 10 min and 1 h, whatever the pace). At 300 s a step the committed rules' last 10 min
    holds two steps, and the replay shows what that does; built for 300 s they hold 5 again."""
    global REAL_SECONDS_PER_SECOND, RULES_STEP_SECONDS, SCALE
    from rlobs.dashboards.alerts import duration_seconds, precursor_windows

    REAL_SECONDS_PER_SECOND = step_seconds / PERIOD
    RULES_STEP_SECONDS = rules_step_seconds or 120
    SCALE = {k: f"{round(duration_seconds(v) * 1000 / REAL_SECONDS_PER_SECOND)}ms"
             for k, v in precursor_windows(RULES_STEP_SECONDS).items()}


def emit_step(rec: Any, row: Mapping[str, Any], correction_cap: float | None = None,
              step_seconds: float = PERIOD) -> None:
    """Emit ``row`` (one step of extracted signals: ``early_warning.run_signals``) as the trainer and its probes
    recorded it (``correction_cap``: the run's importance-correction cap, recorded on its staleness events;
    ``step_seconds``: the step time the trainer reports, on the replay's clock)."""
    rec.set_step(int(row["step"]))
    rec.emit("train_step", loss=0.0, grad_norm=row.get("grad_norm"), reward_mean=row.get("reward"),
             entropy=row.get("entropy"), kl=row.get("kl"), policy_kl=row.get("policy_kl"), lr=row.get("lr"),
             step_seconds=step_seconds, clipped=row.get("clipped"))  # clipped: where the extracted row says
    if row.get("heldout") is not None:  # a held-out evaluation after this step (trainer_ref's driver emits it)
        rec.emit("scalar", name="eval_reward_mean", value=row["heldout"], source="trainer_ref")
    if row.get("audit_gap") is not None:  # the grader audit of the step's samples (trainer_ref's driver emits it)
        rec.emit("scalar", name="grader_audit_gap", value=row["audit_gap"], source="trainer_ref")
    if row.get("zero_std") is not None:
        rec.emit("advantage", groups=8, zero_std_groups=round(8 * row["zero_std"]), zero_std_ratio=row["zero_std"])
    if row.get("is_clipped") is not None or row.get("ess") is not None:
        rec.emit("staleness", samples=64, is_clipped_ratio=row.get("is_clipped"), ess_ratio=row.get("ess"),
                 mean_staleness=row.get("staleness"), is_correction_cap=correction_cap)


def for_seconds(for_: str) -> int:
    """A rule's ``for`` on the replay's clock, in seconds: scaled as the windows are (``REAL_SECONDS_PER_SECOND``), at
    least one (the rules are evaluated every second): 1m -> 1, 10m -> 5."""
    from rlobs.dashboards.alerts import duration_seconds, scaled_duration

    real = duration_seconds(scaled_duration(for_, RULES_STEP_SECONDS))  # the rules' own `for` at their step time
    return max(1, round(real / REAL_SECONDS_PER_SECOND))


def scaled_for(for_: str) -> str:
    """``for_seconds`` as a Prometheus duration: 1m -> 1s, 10m -> 5s."""
    return f"{for_seconds(for_)}s"


def gate_thresholds() -> Any:
    """The no-progress thresholds of the precursor alerts' stepping gate on the replay's clock: the committed multiples,
    the floors scaled as the windows are (``REAL_SECONDS_PER_SECOND``: 60 s -> 0.5 s, 600 s -> 5 s)."""
    import dataclasses

    from rlobs.dashboards.alerts import T

    return dataclasses.replace(T, no_progress_floor_seconds=T.no_progress_floor_seconds / REAL_SECONDS_PER_SECOND,
                               no_progress_pause_floor_seconds=T.no_progress_pause_floor_seconds
                               / REAL_SECONDS_PER_SECOND)


def rules_file(path: Path, gated: bool = False) -> Path:
    """The committed precursor alert rules, their windows and ``for`` scaled (``SCALE``, ``scaled_for``), as a rules
    file; ``gated``: with the stepping gate the thirty-third run tried (not committed; its floors scaled,
    ``gate_thresholds``). With them the doctor's alert as committed (``RlobsDoctorPrecursor``: no window, for 0m;
    it fires only where ``replay(doctor=True)`` runs the doctor's exporter)."""
    from rlobs.dashboards.alerts import precursor_rules
    from rlobs.dashboards.model import to_yaml

    def entry(r: Any, for_: str) -> dict[str, Any]:
        return {"alert": r.name, "expr": r.expr, "for": for_, "labels": r.labels, "annotations": r.annotations()}

    doctor = rule("doctor-precursor")
    # the fresh-data gate's pause floor scaled too (rules from before that gate take no ``pause``)
    pause = {"pause": gate_thresholds()} if "pause" in inspect.signature(precursor_rules).parameters else {}
    doc = {"groups": [{"name": "rlobs-precursors-scaled", "interval": "1s", "rules": [
        entry(r, scaled_for(r.for_))
        for r in precursor_rules(**SCALE, gate=gate_thresholds() if gated else None, **pause)]
        + [entry(doctor, doctor.for_)]}]}
    path.write_text(to_yaml(doc), encoding="utf-8")
    return path


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", rfc3339.replace("Z", "+00:00"))).timestamp()


def step_at(times: list[float], rfc3339: str, later_s: float = 0.0) -> int:
    """Index of the replayed step whose emission last preceded ``rfc3339`` (an alert's activeAt: when it went
    pending) plus ``later_s`` (its scaled ``for``: when it fired); -1 before any."""
    at = _seconds(rfc3339) + later_s
    return max((i for i, t in enumerate(times) if t <= at), default=-1)


def after_last_step(times: list[float], rfc3339: str) -> bool:
    """Whether an alert went active only after the replay's last step had had its ``PERIOD``: on a record that no
    longer grows (its last values held, as a hung trainer's are), not on a run that is stepping."""
    return bool(times) and _seconds(rfc3339) > times[-1] + PERIOD


def seconds_after_last_step(times: list[float], rfc3339: str) -> float:
    """How long after the replay's last step an alert went active (negative: before it), in replay seconds: a
    stepping gate of ``m`` step intervals can only stop what went active more than ``m * PERIOD`` after it."""
    return round(_seconds(rfc3339) - times[-1], 1)


def pace(steps: list[Mapping[str, Any]], real_timing: bool = False) -> list[tuple[float, float]]:
    """Per replayed step: the seconds to wait after it and the step time to report. One ``PERIOD`` each; with
    ``real_timing``, the run's own pace: its wall gaps between steps and its optimiser-plus-data-wait seconds
    (``run_signals``' ``wall`` and ``busy``), scaled together so that the mean gap is one ``PERIOD`` (a step stands
    for two minutes on average, and a slow step, an evaluation or a weight sync is as much longer than the
    no-progress alert's yardstick as it was in the run). The last step waits a mean gap; a record without timing is
    replayed at one ``PERIOD`` a step."""
    walls = [r.get("wall") for r in steps]
    gaps = [b - a for a, b in zip(walls, walls[1:])] if None not in walls else []
    if not real_timing or not gaps or sum(gaps) <= 0:
        return [(PERIOD, PERIOD)] * len(steps)
    scale = PERIOD * len(gaps) / sum(gaps)
    return [(g * scale, float(r.get("busy") or 0.0) * scale) for g, r in zip([*gaps, PERIOD / scale], steps)]


def gap_ratio(steps: list[Mapping[str, Any]]) -> tuple[float, int] | None:
    """The largest wall gap between two steps of a run over the no-progress yardstick at that step (the mean
    optimiser-plus-data-wait seconds of the steps before it: the whole of a run shorter than the yardstick's hour),
    and the step it ended at; None without timing. Over the no-progress multiple, that run would have been paged as
    not progressing while it was stepping, wherever the floor does not bind."""
    walls = [r.get("wall") for r in steps]
    if len(steps) < 2 or None in walls:
        return None
    best: tuple[float, int] | None = None
    busy = 0.0
    for i in range(1, len(steps)):
        busy += float(steps[i - 1].get("busy") or 0.0)
        if busy > 0 and (best is None or (walls[i] - walls[i - 1]) * i / busy > best[0]):
            best = ((walls[i] - walls[i - 1]) * i / busy, int(steps[i]["step"]))
    return (round(best[0], 2), best[1]) if best else None


def schedule(run: Mapping[str, Any], real_timing: bool = False) -> list[tuple[float, str, Any]]:
    """A run's replay, in order: (seconds after the replay's start, kind, what). Each step ("step", (row, its step
    time)) at ``pace``; with ``real_timing``, also each declared pause of the record (``run_signals``' ``pauses``: a
    held-out evaluation, a checkpoint save, a drain) at the same scale, as trainer_ref declares it (``probes.phase``):
    ("enter", its heartbeat name) when it began and ("exit", (its phase name, its scaled seconds)) when it ended. A
    pause before the first step (the evaluation before training) moves the whole replay later."""
    from rlobs.schema import PAUSE_PHASES

    steps = run["steps"]
    out: list[tuple[float, str, Any]] = []
    t = 0.0
    for row, (wait, step_s) in zip(steps, pace(steps, real_timing)):
        out.append((t, "step", (row, step_s)))
        t += wait
    walls = [r.get("wall") for r in steps]
    if real_timing and run.get("pauses") and len(walls) > 1 and None not in walls and walls[-1] > walls[0]:
        scale = PERIOD * (len(walls) - 1) / (walls[-1] - walls[0])  # pace's: the mean gap becomes one PERIOD
        verb = {noun: v for v, noun in PAUSE_PHASES.items()}
        for p in run["pauses"]:
            at = (p["wall"] - walls[0]) * scale
            out += [(at, "enter", verb.get(p["phase"], p["phase"])),
                    (at + p["seconds"] * scale, "exit", (p["phase"], p["seconds"] * scale))]
        first = min(o for o, _, _ in out)
        out = [(o - first, k, w) for o, k, w in out]
    order = {"exit": 0, "step": 1, "enter": 2}  # at one instant: a pause ends, then the step, then the next pause
    return sorted(out, key=lambda e: (e[0], order[e[1]]))


def fresh_gate() -> str | None:
    """The committed rules' fresh-data gate (``rlobs.dashboards.alerts.fresh_data``) as the replayed rules hold it:
    the recent window scaled (``SCALE``), the pause floor scaled (``gate_thresholds``); None for rules from before it
    (a replay of an older tree)."""
    try:
        from rlobs.dashboards.alerts import fresh_data
    except ImportError:
        return None
    return fresh_data(SCALE["recent"], gate_thresholds())


def fresh_shut(times: list[float], opened: list[float], read_from: float, since: int = FRESH_SINCE_STEP
               ) -> list[float]:
    """The reads (every ``GATE_READ_S`` from ``read_from``) at which the fresh-data gate was shut between the emission
    of a run's step ``since`` (by position) and of its last step, as seconds after its first step: where it is, the
    gated rules and the rules without the gate can differ while the run steps; nowhere, they computed the same
    alerts."""
    if len(times) <= since:
        return []
    open_at = {round((t - read_from) / GATE_READ_S) for t in opened}
    first = math.ceil((times[since] - read_from) / GATE_READ_S)
    last = math.floor((times[-1] - read_from) / GATE_READ_S)
    return [round(read_from + k * GATE_READ_S - times[0], 2) for k in range(first, last + 1) if k not in open_at]


def gate_report(times: list[float], gate: Mapping[str, Any]) -> dict[str, Any]:
    """One run's stepping gate, from ``replay``'s ``gate`` entry: its last progress (wall time of its last step or of
    its last declared pause's end, whichever is later), the moments the gate's condition held between its first and
    its last step (as seconds after the first step), and how long after the last step it first held; and the reads at
    which the committed fresh-data gate was shut while the run stepped (``fresh_shut``; None where not read), and
    those from its first step to its step 5 (reported: the gate needs a first scrape of the run's first step)."""
    last = max([*times[-1:], *gate["pause_ends"]], default=0.0)
    inside = [round(t - times[0], 2) for t in gate["stalled"] if times and times[0] <= t <= times[-1]]
    after = [t - times[-1] for t in gate["stalled"] if times and t > times[-1]]
    read = gate.get("fresh_open") is not None
    shut = fresh_shut(times, gate["fresh_open"], gate["read_from"]) if read else None
    early = fresh_shut(times[:FRESH_SINCE_STEP + 1], gate["fresh_open"], gate["read_from"], 0) if read else None
    return {"last_progress": last, "while_stepping": inside,
            "after_last_step_s": round(min(after), 2) if after else None, "fresh_shut_while_stepping": shut,
            "fresh_shut_before_step_5": early}


def gate_floors() -> dict[str, float]:
    t = gate_thresholds()
    return {"step floor": t.no_progress_floor_seconds, "pause floor": t.no_progress_pause_floor_seconds}


def _feed(rec: Any, run: Mapping[str, Any], plan: list[tuple[float, str, Any]], stop: threading.Event,
          times: list[float], pause_ends: list[float]) -> None:
    """Emit ``plan`` (``schedule(run)``) on time, noting when each step was emitted and each pause ended."""
    start = time.monotonic()
    for at, kind, what in plan:
        if stop.wait(max(0.0, start + at - time.monotonic())):
            return
        if kind == "step":
            times.append(time.time())  # wall time each step was emitted: which step an alert went active at
            emit_step(rec, what[0], correction_cap=run.get("correction_cap"), step_seconds=what[1])
        elif kind == "enter":
            rec.emit("heartbeat", phase=what, detail="")
        else:
            rec.emit("phase", phase=what[0], seconds=what[1], tokens=None)
            pause_ends.append(time.time())


def replay(runs: Mapping[str, Mapping[str, Any]], base: Path,
           done: Callable[[dict[str, set[str]]], bool] | None = None, real_timing: bool = False,
           gated: bool = False, gate: dict[str, dict] | None = None, doctor: list | None = None
           ) -> tuple[dict[str, set[str]], dict[tuple[str, str], dict], dict[str, list[float]]]:
    """Replay ``runs`` (name -> {"steps": [...], "correction_cap": ..., "pauses": [...]}) at once into one real
    Prometheus under ``base`` and watch its alerts until every replay has ended and ``done(seen)`` holds, or until the
    last event plus ``WAIT_S`` has passed (without ``done``: always that long, so an alert whose window catches up
    after the last step is seen too; ``real_timing``: each run at its own pace, with its declared pauses,
    ``schedule``; ``gated``: the rules with the stepping gate, ``rules_file``). Returns, per run, the alert names
    that fired; the first firing of each (run, alert), with its ``activeAt``; and the wall time each step was
    emitted. ``gate``, a dict, is filled per run with the wall times its declared pauses ended (``pause_ends``) and
    those at which the gate's condition (``stalled``, scaled) held, read back every 0.25 s (``stalled``).
    ``doctor``, a list: the doctor watches the batch's records as they grow (``rlobs.doctor.exporter.DoctorWatcher``,
    as ``rlobs observe --doctor`` runs it: one exporter per run, its file_sd target beside the recorder's, one thread
    judging every record with the precursor rules each ``DOCTOR_INTERVAL`` s), and each of its
    verdicts is appended as (run name, wall time, last judged step, seconds the evaluation took, precursor rules
    found)."""
    import rlobs
    from rlobs.dashboards.observe import LocalPrometheus

    dirs = {name: base / name for name in runs}
    stop = threading.Event()
    recs, threads = {}, []
    times: dict[str, list[float]] = {name: [] for name in runs}
    ends: dict[str, list[float]] = {name: [] for name in runs}
    plans = {name: schedule(run, real_timing) for name, run in runs.items()}
    seen: dict[str, set[str]] = {name: set() for name in runs}
    alerts: dict[tuple[str, str], dict] = {}
    watcher: Any = None
    with LocalPrometheus(list(dirs.values()), port=0, scrape_interval="1s",
                         rules_file=rules_file(base / "rules.yaml", gated)) as prom:
        try:
            for name, run in runs.items():
                recs[name] = rlobs.init(dirs[name], component="trainer", rank=0, run_id=f"ew-{name}",
                                        set_global=False, flush_interval=0.2)
                threads.append(threading.Thread(target=_feed, args=(recs[name], run, plans[name], stop, times[name],
                                                                    ends[name]), daemon=True))
            if doctor is not None:
                from rlobs.doctor.exporter import DoctorWatcher
                from rlobs.doctor.rules.precursors import PRECURSOR_IDS

                verdicts: list = []
                watcher = DoctorWatcher(list(dirs.values()), DOCTOR_INTERVAL, PRECURSOR_IDS, verdicts=verdicts,
                                        rest=0.0).start()  # uncapped, as the 35th-37th runs measured it
            up_by = time.monotonic() + 60  # file_sd is re-read every 5 s: replay once every target is scraped
            targets = len(recs) * (2 if watcher is not None else 1)  # with the doctor: its exporter per run
            while time.monotonic() < up_by and len(prom.query('up{run=~"ew-.*"} == 1')) < targets:
                time.sleep(0.5)
            if len(prom.query('up{run=~"ew-.*"} == 1')) != targets:
                raise RuntimeError(f"Prometheus did not scrape every replayed run within 60 s: {prom.targets()}")
            time.sleep(2.0)  # a first scrape of every target before step 0
            for t in threads:
                t.start()
            began = time.time()
            deadline = time.monotonic() + max(plans[n][-1][0] + pace(r["steps"], real_timing)[-1][0]
                                              for n, r in runs.items()) + WAIT_S
            while time.monotonic() < deadline:
                for a in prom.alerts():
                    run = a["labels"].get("run", "").removeprefix("ew-")
                    if run in seen and a.get("state") == "firing":
                        seen[run].add(a["labels"]["alertname"])
                        alerts.setdefault((run, a["labels"]["alertname"]), a)  # the first firing: its activeAt
                if done is not None and not any(t.is_alive() for t in threads) and done(seen):
                    break
                time.sleep(0.5)
            if gate is not None:
                from rlobs.dashboards.alerts import stalled

                held = prom.api("query_range", query=f"max by (run) ({stalled(gate_thresholds())})",
                                start=f"{began:.3f}", end=f"{time.time():.3f}", step="0.25")["result"]
                at = {m["metric"].get("run", "").removeprefix("ew-"): [float(ts) for ts, _ in m["values"]]
                      for m in held}
                fresh = fresh_gate()
                opened: dict[str, list[float]] = {}
                if fresh is not None:  # the fresh-data gate read back: the moments it was open, per run
                    held = prom.api("query_range", query=f"max by (run) ({fresh})", start=f"{began:.3f}",
                                    end=f"{time.time():.3f}", step=f"{GATE_READ_S:g}")["result"]
                    opened = {m["metric"].get("run", "").removeprefix("ew-"): [float(ts) for ts, _ in m["values"]]
                              for m in held}
                for name in runs:
                    gate[name] = {"pause_ends": ends[name], "stalled": at.get(name, []),
                                  "fresh_open": opened.get(name) if fresh is not None else None,
                                  "read_from": began}
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
            if watcher is not None:
                watcher.close()
            for r in recs.values():
                r.close()
            if watcher is not None:
                names = {dirs[n]: n for n in runs}
                doctor += [(names[d], v.ended_at, v.judged_step, round(v.seconds, 3),
                            sorted(r for r, _, _ in v.findings)) for d, v in verdicts]
    return seen, alerts, times


def score(rows: list[dict]) -> dict[str, dict]:
    """Per class, as ``bench/early_warning.py`` scores the doctor: a run with a drop is detected when a precursor
    alert fired while it was stepping strictly before the drop (the lead: drop - alert step); a healthy run (with a
    drop or without), or a mixed class's run without a drop, counts against the bar at any alert while stepping.
    Beside it: the doctor's detections on the same runs and how many steps the live alert came after the doctor's
    first warning."""
    from bench.early_warning import MIXED

    out: dict[str, dict] = {}
    for r in rows:
        c = out.setdefault(r["class"], {"runs": 0, "collapsed": 0, "live_detected": 0, "doctor_detected": 0,
                                        "live_leads": [], "live_lag": [], "healthy": 0, "healthy_alerted": []})
        c["runs"] += 1
        live, doc, drop = r["live_first"], r["doctor_first"], r["drop_step"]
        if r["class"] == "healthy" or (drop is None and r["class"] in MIXED):
            c["healthy"] += 1
            if live is not None:
                c["healthy_alerted"].append(r["name"])
            continue
        if drop is None:
            continue  # a collapse class's run that did not drop: neither detected nor a false alarm
        c["collapsed"] += 1
        if live is not None and live < drop:
            c["live_detected"] += 1
            c["live_leads"].append(drop - live)
        if doc is not None and doc < drop:
            c["doctor_detected"] += 1
        if live is not None and doc is not None:
            c["live_lag"].append(live - doc)
    return out


def one_alert(rows: list[dict], alert: str, rule: str, cls: str) -> dict:
    """One alert against its own doctor rule, per run: where it fired outside ``cls`` on a run the doctor's ``rule``
    did not warn (while stepping or after the last step: a false or misnamed page either way), and on ``cls``'s runs
    where it fired while stepping, beside the doctor's rule (``rows``: ``main``'s, with ``doctor_per_rule``)."""
    stray, hits, doctor_hits, members = [], [], [], []
    for r in rows:
        fired = alert in r["fired"]
        stepping = fired and alert not in r["after_last_step"]
        if r["class"] == cls:
            members.append(r["name"])
            hits += [r["name"]] if stepping else []
            doctor_hits += [r["name"]] if r["doctor_per_rule"].get(rule) is not None else []
        elif fired and r["doctor_per_rule"].get(rule) is None:
            stray.append({"name": r["name"], "class": r["class"], "step": r["first_step"][alert],
                          "after_last_step": not stepping})
    return {"alert": alert, "rule": rule, "class": cls, "class_runs": members, "fired_while_stepping": hits,
            "doctor_warned": doctor_hits, "stray": stray}


def doctor_alert(name: str, run: Mapping[str, Any], alerts: Mapping[tuple[str, str], dict], times: list[float],
                 doctor_first: int | None, verdicts: list) -> dict[str, Any]:
    """``--doctor``: one run's RlobsDoctorPrecursor against the doctor judging the original record afterwards
    (``doctor_first``: ``early_warning.judge``'s first warning): the rule it named, the onset step it gave (its
    description), and how long after the replay emitted the doctor's first-warning step it went pending (seconds of
    the replay; None where either is missing); and the live verdicts' first step with a precursor finding."""
    a = alerts.get((name, DOCTOR_ALERT))
    pos = {int(r["step"]): i for i, r in enumerate(run["steps"])}
    since = re.search(r"since step (\d+)", a["annotations"].get("description", "")) if a else None
    latency = (round(_seconds(a["activeAt"]) - times[pos[doctor_first]], 2)
               if a and doctor_first in pos and pos[doctor_first] < len(times) else None)
    first_found = next((v[2] for v in verdicts if v[4]), None)
    return {"rule": a["labels"].get("rule") if a else None, "since_step": int(since[1]) if since else None,
            "latency_s": latency, "first_verdict_step": first_found}


def evaluation_stats(verdicts: list) -> dict[str, Any]:
    """The watcher's evaluations (``replay``'s ``doctor`` entries): how many, and their seconds."""
    secs = sorted(v[3] for v in verdicts)
    if not secs:
        return {"evaluations": 0}
    return {"evaluations": len(secs), "median_s": secs[len(secs) // 2],
            "p95_s": secs[min(len(secs) - 1, int(0.95 * len(secs)))], "max_s": secs[-1]}


def main() -> None:
    global PERIOD
    import tempfile

    from bench import early_warning as ew
    from rlobs.dashboards.alerts import precursor_rules

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True, help="the bench/early_warning.py records root")
    ap.add_argument("--only", required=True, help="comma-separated run names")
    ap.add_argument("--batch", type=int, default=8, help="runs replayed at once into one Prometheus")
    ap.add_argument("--out", required=True, help="results stem (.json and .md are written)")
    ap.add_argument("--one", action="append", default=[], metavar="ALERT:RULE:CLASS",
                    help="also score one alert against its doctor rule and class (one_alert), e.g. "
                         "RlobsPrecursorRewardHacking:precursor-reward-hacking:reward-hacking")
    ap.add_argument("--real-timing", action="store_true",
                    help="replay each run at its own pace (its gaps between steps and its step times, scaled to a "
                         "mean of one PERIOD, and its declared pauses) instead of one PERIOD a step")
    ap.add_argument("--step-seconds", type=float, default=120.0,
                    help="the real step time a replayed step stands for (the windows and `for` scaled to it)")
    ap.add_argument("--rules-step-seconds", type=float, default=0.0,
                    help="the step time the rules are built for (rlobs dashboards build --step-seconds; 0: the "
                         "committed windows, 10 min / 1 h)")
    ap.add_argument("--gated", action="store_true",
                    help="the precursor rules with the stepping gate the thirty-third run tried (not committed)")
    ap.add_argument("--doctor", action="store_true",
                    help=f"score {DOCTOR_ALERT} instead: the doctor watches each replayed record as it grows "
                         "(rlobs.doctor.exporter) and Prometheus alerts on its precursor findings")
    ap.add_argument("--period", type=float, default=PERIOD,
                    help="replay seconds per step (the windows scale with it; --doctor: more than one watcher pass "
                         "over the batch, or the replay itself makes the doctor late)")
    ap.add_argument("--without", default="",
                    help="comma-separated per-step signals left out of the replay, e.g. audit_gap: the run as a "
                         "trainer without --audit-grader would have served it (the reward-hacking alert's held-out "
                         "leg alone)")
    args = ap.parse_args()
    PERIOD = args.period
    without = {k for k in args.without.split(",") if k}
    set_pace(args.step_seconds, args.rules_step_seconds or None)
    names = [n for n in args.only.split(",") if n]
    fors = {r.name: r.for_ for r in precursor_rules()}
    if args.doctor:
        fors = {DOCTOR_ALERT: "0m"}
    precursors = set(fors)
    evaluations: list = []
    classes = {e["name"]: e["class"] for e in ew.matrix()}
    rows = []
    for i in range(0, len(names), args.batch):
        batch = {n: ew.run_signals(Path(args.runs) / n) for n in names[i:i + args.batch]}
        for run in batch.values():
            run["steps"] = [{k: v for k, v in row.items() if k not in without} for row in run["steps"]]
        doctor = {n: ew.judge(Path(args.runs) / n) for n in batch}
        with tempfile.TemporaryDirectory(prefix="rlobs-ew-live-") as tmp:
            t0 = time.monotonic()
            gate: dict[str, dict] = {}
            verdicts: list | None = [] if args.doctor else None
            seen, alerts, times = replay(batch, Path(tmp), real_timing=args.real_timing, gated=args.gated,
                                         gate=gate, doctor=verdicts)
            evaluations += verdicts or []
            wall = time.monotonic() - t0
        for n, run in batch.items():
            g = gate_report(times[n], gate[n])
            fired = sorted(a for a in seen[n] if a in precursors)
            first = {a: run["steps"][max(0, step_at(times[n], alerts[(n, a)]["activeAt"]))]["step"] for a in fired}
            # the step at which it paged (pending + its scaled `for`); the stepping / after split and the scores
            # read the pending step, as they did before rules had a `for` longer than a step
            paged = {a: run["steps"][max(0, step_at(times[n], alerts[(n, a)]["activeAt"],
                                                    0 if a == DOCTOR_ALERT else for_seconds(fors[a])))]["step"]
                     for a in fired}
            after = [a for a in fired if after_last_step(times[n], alerts[(n, a)]["activeAt"])]
            after_s = {a: seconds_after_last_step(times[n], alerts[(n, a)]["activeAt"]) for a in after}
            stepping = [first[a] for a in fired if a not in after]
            rows.append({"name": n, "class": classes.get(n, "exploratory"), "steps": len(run["steps"]),
                         "fired": fired, "first_step": first, "paged_step": paged, "after_last_step": after,
                         "after_last_step_s": after_s,
                         "after_last_progress_s": {a: round(_seconds(alerts[(n, a)]["activeAt"]) - g["last_progress"], 1)
                                                   for a in fired},
                         "pauses": len(gate[n]["pause_ends"]), "gate_shut_while_stepping": g["while_stepping"],
                         "fresh_gate_shut_while_stepping": g["fresh_shut_while_stepping"],
                         "fresh_gate_shut_before_step_5": g["fresh_shut_before_step_5"],
                         "gate_shut_after_last_step_s": g["after_last_step_s"],
                         "max_gap_ratio": gap_ratio(run["steps"]),
                         "live_first": min(stepping) if stepping else None, "drop_step": run["drop_step"],
                         "doctor_first": doctor[n]["first_warning"],
                         "doctor_per_rule": {k: v for k, v in doctor[n]["per_rule"].items() if v is not None},
                         "other_alerts": sorted(seen[n] - precursors),
                         "batch_seconds": round(wall, 1)})
            if args.doctor:
                rows[-1]["doctor_alert"] = doctor_alert(n, run, alerts, times[n], doctor[n]["first_warning"],
                                                        [v for v in verdicts or [] if v[0] == n])
            print(json.dumps(rows[-1]), flush=True)
    res = {"what": (f"{DOCTOR_ALERT}: the doctor's exporter watching real runs' records as they are replayed, "
                    "alerted on by a real Prometheus" if args.doctor else
                    "the precursor alert rules (scaled windows, bench/early_warning_live.py) on real runs replayed "
                    "into a real Prometheus"), "runs_root": args.runs, "period_s": PERIOD, "doctor": args.doctor,
           "real_timing": args.real_timing, "gated": args.gated, "without": sorted(without), "scale": SCALE,
           "step_seconds": args.step_seconds, "rules_step_seconds": RULES_STEP_SECONDS,
           "for": {name: scaled_for(f) for name, f in fors.items()},
           "runs": rows, "runs_with_a_precursor_alert": [r["name"] for r in rows if r["fired"]],
           "runs_with_one_while_stepping": [r["name"] for r in rows if set(r["fired"]) - set(r["after_last_step"])],
           "by_class": score(rows), "one_alert": [one_alert(rows, *spec.split(":")) for spec in args.one],
           "doctor_evaluations": evaluation_stats(evaluations) if args.doctor else None,
           "gate_shut_while_stepping": [r["name"] for r in rows if r["gate_shut_while_stepping"]],
           "fresh_gate_read": all(r["fresh_gate_shut_while_stepping"] is not None for r in rows),
           "fresh_gate_shut_while_stepping": {r["name"]: r["fresh_gate_shut_while_stepping"] for r in rows
                                              if r["fresh_gate_shut_while_stepping"]},
           "pending_over_5s_after_last_progress": [
               {"run": r["name"], "alert": a, "s": x} for r in rows for a, x in r["after_last_progress_s"].items()
               if x > 5 * PERIOD]}
    Path(args.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Live precursor alerts (bench/early_warning_live.py)", "",
             f"{len(rows)} runs replayed from `{args.runs}` into a real Prometheus ("
             + (f"at each run's own pace, a mean of {PERIOD:g} s a step" if args.real_timing else f"{PERIOD:g} s a step")
             + f", a step standing for {args.step_seconds:g} s of a real run, the rules built for steps of "
             f"{RULES_STEP_SECONDS:g} s" + (" (the committed windows)" if RULES_STEP_SECONDS == 120 else "")
             + ", windows "
             f"{SCALE['recent']} / {SCALE['history']}, for {', '.join(sorted(set(res['for'].values())))}); runs with a "
             "precursor alert: "
             f"**{len(res['runs_with_a_precursor_alert'])}**, while the run was stepping: "
             f"**{len(res['runs_with_one_while_stepping'])}** (the others' alerts went active after the last step, on "
             "a record whose last values are held)"
             + (f"; replayed without {', '.join(sorted(without))}" if without else ""), "",
             ("With the stepping gate the thirty-third run tried (not committed; its floors scaled: " + ", ".join(
                 f"{k} {v:g} s" for k, v in gate_floors().items()) + f"): it held while a run was stepping on "
              f"**{len(res['gate_shut_while_stepping'])}** runs"
              + (f" ({', '.join(res['gate_shut_while_stepping'])})" if res["gate_shut_while_stepping"] else "") + "."
              if args.gated else "Without the thirty-third run's stepping gate (`--gated`, not committed).")
             + ((" The fresh-data gate (`fresh_data`), read back every "
                 f"{GATE_READ_S:g} s from each run's step {FRESH_SINCE_STEP} to its last: shut while stepping on **"
                 f"{len(res['fresh_gate_shut_while_stepping'])}** runs"
                 + (" (" + ", ".join(f"{k}: {len(v)} reads, first at {v[0]:g} s" for k, v in
                                     res["fresh_gate_shut_while_stepping"].items()) + ")"
                    if res["fresh_gate_shut_while_stepping"] else "") + ".")
                if res["fresh_gate_read"] else "")
             + " Alerts that went pending over 5 s after their run's last progress (its last step or declared "
             f"pause's end): **{len(res['pending_over_5s_after_last_progress'])}**"
             + (" (" + ", ".join(f"{x['run']} {x['alert']} {x['s']:g} s" for x in
                                 res["pending_over_5s_after_last_progress"]) + ")"
                if res["pending_over_5s_after_last_progress"] else "") + ".", "",
             "| run | steps | precursor alerts fired (the step it went pending, and paged where later; \"after: N s\": "
             "pending only once the record stopped growing, N replay seconds after its last step) | largest gap "
             "between two steps / the no-progress yardstick (at step) |",
             "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['steps']} | " + (", ".join(
        f"{a} ({r['first_step'][a]}"
        + (f", paged at {r['paged_step'][a]}" if r["paged_step"][a] != r["first_step"][a] else "")
        + (f", after: {r['after_last_step_s'][a]:g} s" if a in r["after_last_step"] else "") + ")" for a in r["fired"])
        or "none") + " | " + (f"{r['max_gap_ratio'][0]:g}x ({r['max_gap_ratio'][1]})" if r["max_gap_ratio"] else "-")
        + " |" for r in rows]
    lines += ["", "| class | runs | warned before the drop: live alert | doctor | live leads (steps) | live lag behind the "
              "doctor (steps) | healthy runs with an alert while stepping |", "|---|---|---|---|---|---|---|"]
    for cls, c in res["by_class"].items():
        lines.append(f"| {cls} | {c['runs']} | {c['live_detected']} of {c['collapsed']} | {c['doctor_detected']} of "
                     f"{c['collapsed']} | {c['live_leads'] or '-'} | {c['live_lag'] or '-'} | "
                     f"{len(c['healthy_alerted'])} of {c['healthy']}"
                     + (f" ({', '.join(c['healthy_alerted'])})" if c["healthy_alerted"] else "") + " |")
    if args.doctor:
        e = res["doctor_evaluations"]
        lat = sorted(r["doctor_alert"]["latency_s"] for r in rows if r["doctor_alert"]["latency_s"] is not None)
        lines += ["", f"**{DOCTOR_ALERT}**: the doctor's exporter re-judged each record every {DOCTOR_INTERVAL:g} s "
                  f"(one watcher for the batch, the precursor rules), {e['evaluations']} evaluations: median "
                  f"{e.get('median_s', 0):g} s, p95 {e.get('p95_s', 0):g} s, max {e.get('max_s', 0):g} s. From the "
                  "replay's emission of the step at which the doctor, judging the original record step by step, first "
                  "warns, to the alert going pending: "
                  + (f"median {lat[len(lat) // 2]:g} s, max {lat[-1]:g} s over {len(lat)} runs" if lat else "no run")
                  + f" (a step: {PERIOD:g} s of the replay).", "",
                  "| run | class | drop | doctor's first warning (original record) | alert: step, rule | onset it gave | "
                  "latency (s) |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            d = r["doctor_alert"]
            lines.append(f"| {r['name']} | {r['class']} | {r['drop_step'] if r['drop_step'] is not None else '-'} | "
                         f"{r['doctor_first'] if r['doctor_first'] is not None else '-'} | "
                         + (f"{r['first_step'][DOCTOR_ALERT]}, {d['rule']}" if d["rule"] else "none")
                         + (" (after the last step)" if DOCTOR_ALERT in r["after_last_step"] else "")
                         + f" | {d['since_step'] if d['since_step'] is not None else '-'} | "
                         f"{d['latency_s'] if d['latency_s'] is not None else '-'} |")
    for o in res["one_alert"]:
        lines += ["", f"**{o['alert']}** against the doctor's `{o['rule']}`: on the {len(o['class_runs'])} "
                  f"{o['class']} runs it fired while stepping on {len(o['fired_while_stepping'])} (the doctor's rule "
                  f"warned on {len(o['doctor_warned'])}); elsewhere, on a run the doctor's rule did not warn, it fired "
                  f"on {len(o['stray'])}" + (": " + ", ".join(
                      f"{x['name']} (step {x['step']}{', after the last step' if x['after_last_step'] else ''})"
                      for x in o["stray"]) if o["stray"] else "")]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
