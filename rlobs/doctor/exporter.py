"""The doctor's verdict on a growing run, served to Prometheus: ``rlobs doctor RUN --follow --metrics-port N``.

The precursor alerts of ``dashboards/alerts.yaml`` re-derive the doctor's precursor rules in PromQL over time windows,
built for one step time (``rlobs dashboards build --step-seconds``): at another pace they lose collapses and page
healthy runs, and even at theirs they are not the doctor (the early-warning bench: the live staleness alert 1-2 steps
behind, one healthy page the doctor never gave). This exporter serves the doctor's own findings instead: each
``--follow`` evaluation of the record sets, for the run (component ``doctor``):

- ``rlobs_doctor_finding{rule, severity}`` 1 per current finding (a finding that stops holding loses its series),
  and ``rlobs_doctor_finding_first_step`` its onset step;
- ``rlobs_doctor_judged_steps``: the record's last optimiser step at that evaluation;
- ``rlobs_doctor_last_evaluation_timestamp_seconds``, ``rlobs_doctor_started_timestamp_seconds``,
  ``rlobs_doctor_evaluation_seconds``, ``rlobs_doctor_interval_seconds`` and ``rlobs_doctor_evaluations_total{outcome}``
  (ok / error: a record that could not be read keeps the last verdict); ``RlobsDoctorBehind`` pages when the last
  evaluation, or the start of a doctor that never judged the run, is 10 intervals (5 min at least) old while the run
  is up.

The alert ``RlobsDoctorPrecursor`` fires on a ``precursor-*`` finding while a process of the run other than the
doctor is up: it counts steps as the doctor does, so it needs no step time. The endpoint binds 127.0.0.1 unless told
otherwise and writes the run's ``prometheus_sd`` target file (``rlobs.sinks.targets``), so ``rlobs observe`` scrapes
it with the run's other processes; the file goes at a clean close. Of the run directory the exporter writes only that
file; the record it reads. ``DoctorWatcher`` judges several runs from one thread (``rlobs observe``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from rlobs.catalogue import CATALOGUE, IMPLICIT_LABELS
from rlobs.events import WriterInfo

log = logging.getLogger("rlobs.doctor.exporter")

COMPONENT = "doctor"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one evaluation of the record found: ``(rule, severity, first_step)`` per finding."""

    findings: tuple[tuple[str, str, int | None], ...]
    judged_step: int | None
    ended_at: float  # unix time
    seconds: float

    @classmethod
    def of(cls, report: Any, judged_step: int | None, seconds: float, ended_at: float | None = None) -> "Verdict":
        return cls(tuple((f.rule, str(f.severity), f.first_step) for f in report.findings), judged_step,
                     time.time() if ended_at is None else ended_at, seconds)


def judged_step(record: Any) -> int | None:
    """The record's last optimiser step (``train_step`` events), or None before its first."""
    if not record.counts().get("train_step"):
        return None
    rows = record.sql("select max(step) from train_step").fetchall()
    return None if not rows or rows[0][0] is None else int(rows[0][0])


class _VerdictCollector(Collector):
    """The last verdict as the catalogue's ``rlobs_doctor_*`` series, built at scrape time."""

    def __init__(self, run_id: str, interval: float | None = None):
        self.run_id = run_id
        self.interval = interval
        self.started = time.time()
        self._lock = threading.Lock()
        self._verdict: Verdict | None = None
        self._outcomes = {"ok": 0, "error": 0}

    def update(self, verdict: Verdict) -> None:
        with self._lock:
            self._verdict = verdict
            self._outcomes["ok"] += 1

    def failed(self) -> None:
        with self._lock:
            self._outcomes["error"] += 1

    def collect(self) -> Iterable[Any]:
        with self._lock:
            v, outcomes = self._verdict, dict(self._outcomes)
        base = [self.run_id, COMPONENT]

        def family(name: str) -> GaugeMetricFamily:
            spec = CATALOGUE[name]
            return GaugeMetricFamily(name, spec.help, labels=list(IMPLICIT_LABELS + spec.labels))

        found, onset = family("rlobs_doctor_finding"), family("rlobs_doctor_finding_first_step")
        judged, last = family("rlobs_doctor_judged_steps"), family("rlobs_doctor_last_evaluation_timestamp_seconds")
        took = family("rlobs_doctor_evaluation_seconds")
        every = family("rlobs_doctor_interval_seconds")
        began = family("rlobs_doctor_started_timestamp_seconds")
        began.add_metric(base, self.started)
        if self.interval is not None:
            every.add_metric(base, self.interval)
        if v is not None:
            # one series per (rule, severity), its earliest onset: a rule may report several findings, and a
            # repeated label set would fail the whole scrape
            onsets: dict[tuple[str, str], int | None] = {}
            for rule, severity, first in v.findings:
                known = onsets.get((rule, severity), first)
                onsets[(rule, severity)] = first if known is None else known if first is None else min(known, first)
            for (rule, severity), first in onsets.items():
                found.add_metric([*base, rule, severity], 1)
                if first is not None:
                    onset.add_metric([*base, rule, severity], first)
            if v.judged_step is not None:
                judged.add_metric(base, v.judged_step)
            last.add_metric(base, v.ended_at)
            took.add_metric(base, v.seconds)
        spec = CATALOGUE["rlobs_doctor_evaluations_total"]
        evals = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help,
                                    labels=list(IMPLICIT_LABELS + spec.labels))
        for outcome, n in outcomes.items():
            evals.add_metric([*base, outcome], n)
        yield from (found, onset, judged, last, took, every, began, evals)


class DoctorExporter:
    """Serves the doctor's last verdict on one run at ``/metrics`` (``addr``: 127.0.0.1 unless told otherwise,
    ``RLOBS_METRICS_ADDR``; ``port`` 0: a free one) and registers it in ``run_dir/prometheus_sd`` (``register``; a
    read-only record is served without a target file, with a warning). Feed it with ``update(report, record)`` after
    each evaluation, ``failed()`` when one could not be made; ``close()`` removes the target file."""

    linger_s = 6.0  # answer scrapes this long after the target file is gone (Prometheus drops a target ~5 s later)

    def __init__(self, run_dir: Path, run_id: str, *, port: int = 0, addr: str | None = None, register: bool = True,
                 interval: float | None = None):
        from rlobs.sinks.prometheus import serve_metrics
        from rlobs.sinks.targets import TargetFile

        self.run_dir = Path(run_dir)
        self.collector = _VerdictCollector(run_id, interval)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.server, self.target = serve_metrics(self.registry, port, addr)
        self.url = f"http://{self.target}/metrics"
        self._sd_file: Any = None
        if register:
            info = WriterInfo(run_id=run_id, process=f"doctor-{uuid.uuid4().hex[:12]}", component=COMPONENT, rank=0)
            try:
                self._sd_file = TargetFile(self.run_dir, info, self.target)
            except OSError as exc:  # a record on read-only storage: serve, but Prometheus must be told the target
                log.warning("rlobs doctor: no target file in %s (%s); scrape %s yourself", self.run_dir, exc, self.url)

    def update(self, report: Any, record: Any, seconds: float | None = None) -> Verdict:
        verdict = Verdict.of(report, judged_step(record), report.seconds if seconds is None else seconds)
        self.collector.update(verdict)
        return verdict

    def failed(self) -> None:
        self.collector.failed()

    def close(self) -> None:
        from rlobs.sinks.prometheus import stop_serving_later

        if self._sd_file is not None:
            self._sd_file.close()
            self._sd_file = None
        server, self.server = self.server, None
        stop_serving_later(server, self.linger_s)

    def __enter__(self) -> "DoctorExporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DoctorWatcher:
    """The doctor watching several runs at once from one thread (``rlobs observe RUN...``, unless ``--no-doctor``;
    ``bench/early_warning_live.py --doctor``): every ``interval`` seconds each run directory is judged (``rule_ids``:
    these rules only) and its exporter updated. A run's exporter starts once its record can be opened (``rlobs
    observe`` may start before the run has written anything); a record that cannot be read or judged this time
    counts an error and keeps its last verdict. ``verdicts``: each evaluation's verdict appended with its run
    directory. ``rest``: after a pass over the runs, wait at least ``rest`` times as long as the pass took, even past
    the interval, so the watcher takes at most 1 / (1 + rest) of a core (a half by default) when its records grow long
    or its runs many (every rule on a 10,000-step record: ~4 s; ``rlobs observe`` may share the trainer's host); it
    binds only once a pass takes over 1 / (1 + rest) of the interval. ``close()`` stops the thread and every exporter
    (their target files go)."""

    def __init__(self, run_dirs: Sequence[Path], interval: float = 5.0, rule_ids: Sequence[str] | None = None,
                 thresholds: Any = None, *, addr: str | None = None,
                 verdicts: list[tuple[Path, Verdict]] | None = None, rest: float = 1.0):
        if rest < 0:
            raise ValueError(f"rest {rest}: a multiple of the pass's time, 0 or more")
        self.run_dirs = [Path(d) for d in run_dirs]
        self.rest = rest
        self.interval, self.rule_ids, self.thresholds, self.addr = interval, rule_ids, thresholds, addr
        self.verdicts = verdicts
        self.exporters: dict[Path, DoctorExporter] = {}
        self.done: set[Path] = set()  # runs whose every process has ended: judged a last time, their exporter closed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlobs-doctor-watcher", daemon=True)

    def start(self) -> "DoctorWatcher":
        self._thread.start()
        return self

    def evaluate(self, run_dir: Path) -> Verdict | None:
        """Judge one run now and update its exporter (started on its first readable record); None if not judged."""
        from rlobs.doctor import diagnose
        from rlobs.store import open_run

        t0 = time.perf_counter()
        exporter = self.exporters.get(run_dir)
        try:
            with open_run(run_dir) as record:
                if exporter is None:
                    exporter = self.exporters[run_dir] = DoctorExporter(run_dir, record.run_id, addr=self.addr,
                                                                        interval=self.interval)
                report = diagnose(record, rule_ids=self.rule_ids, thresholds=self.thresholds)
                verdict = exporter.update(report, record, seconds=time.perf_counter() - t0)
                ended = bool(record.processes) and all(p.status in ("ended", "lost") for p in record.processes)
        except Exception as exc:  # not written yet, mid-write or damaged: the next evaluation tries again
            log.debug("rlobs doctor: %s not judged this time: %s", run_dir, exc)
            if exporter is not None:
                exporter.failed()
            return None
        if self.verdicts is not None:
            self.verdicts.append((run_dir, verdict))
        if ended:  # as `rlobs doctor --follow` stops: the run is over, its doctor target goes with its processes'
            self.done.add(run_dir)
            exporter.close()
        return verdict

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            for run_dir in self.run_dirs:
                if self._stop.is_set():
                    return
                if run_dir not in self.done:
                    self.evaluate(run_dir)
            took = time.monotonic() - began
            self._stop.wait(max(0.0, self.interval - took, self.rest * took))

    def close(self, timeout: float = 60.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for exporter in self.exporters.values():
            exporter.close()
