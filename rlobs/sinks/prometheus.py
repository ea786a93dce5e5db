"""Prometheus sink: turns events into the catalogue's metrics and serves them on ``/metrics``.

Each process serves its own endpoint, bound to 127.0.0.1 by default (``RLOBS_METRICS_ADDR`` /
``RLOBS_METRICS_PORT`` or constructor arguments; port 0 picks a free one), and writes a Prometheus
``file_sd`` target file ``<run_dir>/prometheus_sd/<process>.json`` so that one scrape config with
``file_sd_configs: [{files: ['<run_dir>/prometheus_sd/*.json']}]`` finds every process of a run.
The file is removed on a clean close.

The metrics live in a private ``CollectorRegistry`` (never the global one), and every series carries
the implicit ``run`` and ``component`` labels. Event-to-metric routing comes from
``rlobs.catalogue``; the recorder's own counters come from a collector that reads its stats at scrape
time, so they cost nothing on the hot path.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import statistics
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rlobs.catalogue import CATALOGUE, IMPLICIT_LABELS, METRICS, MetricSpec, by_kind
from rlobs.events import EventBatch, WriterInfo
from rlobs.sinks.targets import TargetFile

log = logging.getLogger("rlobs.prometheus")



class _Registry(CollectorRegistry):
    """rlobs' private registry, without ``*_created`` samples: they double the series count and no rlobs
    query uses them. Filtered here, per registry, at scrape time: prometheus_client's
    ``disable_created_metrics()`` is process-global and would change the application's and vLLM's
    metrics too."""

    def collect(self) -> Iterable[Any]:
        for family in super().collect():
            if family.type in ("counter", "histogram", "gaugehistogram", "summary"):
                family.samples = [x for x in family.samples if not x.name.endswith("_created")]
            yield family

_ENVELOPE_INDEX = {"ts_ns": 1, "mono_ns": 2, "step": 3, "policy_version": 4}
# Label values come from event fields; a buggy caller putting ids there must not explode the series count.
MAX_SERIES_PER_METRIC = 200
OVERFLOW_LABEL = "__overflow__"


def _make(spec: MetricSpec, registry: CollectorRegistry) -> Any:
    labels = IMPLICIT_LABELS + spec.labels
    if spec.type == "counter":
        return Counter(spec.name, spec.help, labels, registry=registry)
    if spec.type == "gauge":
        return Gauge(spec.name, spec.help, labels, registry=registry)
    return Histogram(spec.name, spec.help, labels, registry=registry, buckets=spec.buckets)


class _Route:
    """Feeds one metric from one event kind."""

    __slots__ = ("spec", "metric", "op", "value_field", "value_index", "label_fields", "where", "scale",
                 "children", "base", "overflowed", "finite_only", "absent_until_set", "first", "firsts", "running",
                 "skip", "last", "runs")

    def __init__(self, spec: MetricSpec, metric: Any, base: tuple[str, str]):
        src = spec.source
        assert src is not None
        self.spec = spec
        self.metric = metric
        self.op = src.op
        self.value_field = src.field
        self.value_index = _ENVELOPE_INDEX.get(src.field or "", 0)
        self.label_fields = tuple(src.labels[name] for name in spec.labels)
        self.where = tuple((k, v, isinstance(v, tuple)) for k, v in src.where.items())  # a tuple: any of them
        self.scale = src.scale
        self.finite_only = src.finite_only
        self.absent_until_set = src.absent_until_set
        self.first = src.first
        self.firsts: dict[tuple[str, ...], list[float]] = {}  # a baseline's first values, until it is set
        self.running, self.skip, self.last = src.running, src.skip, src.last
        self.runs: dict[tuple[str, ...], tuple[int, list[float]]] = {}  # a running reading's values seen, and kept
        self.children: dict[tuple[str, ...], Any] = {}
        self.base = base
        self.overflowed = 0

    def apply(self, event: tuple) -> None:
        fields = event[6]
        for k, v, any_of in self.where:
            if (fields.get(k) not in v) if any_of else (fields.get(k) != v):
                return
        if self.absent_until_set and fields.get(self.value_field) is None and not self.children:
            return  # no value yet: no series (an unset gauge would read 0)
        if self.label_fields:
            key = tuple("" if fields.get(f) is None else str(fields.get(f)) for f in self.label_fields)
        else:
            key = ()
        if self.first:
            self._baseline(key, event, fields)
            return
        if self.running:
            self._running(key, event, fields)
            return
        child = self.children.get(key)
        if child is None:
            if len(self.children) >= MAX_SERIES_PER_METRIC:
                self.overflowed += 1
                if self.overflowed == 1:
                    log.warning("rlobs: metric %s exceeded %d label sets (ids in a label field?); further values are "
                                "folded into %r", self.spec.name, MAX_SERIES_PER_METRIC, OVERFLOW_LABEL)
                key = (OVERFLOW_LABEL,) * len(key)
                child = self.children.get(key)
            if child is None:
                child = self.metric.labels(*self.base, *key)
                self.children[key] = child
        if self.op == "count":
            child.inc()
            return
        value = event[self.value_index] if self.value_index else fields.get(self.value_field)
        if value is None:
            return
        value = float(value) * self.scale
        if self.op == "set":
            if self.finite_only and not math.isfinite(value):
                return
            child.set(value)
        elif not math.isfinite(value):
            return  # a NaN would poison a counter or histogram sum forever
        elif self.op == "sum":
            if value >= 0:
                child.inc(value)
        else:
            child.observe(value)

    def _finite(self, event: tuple, fields: Mapping[str, Any]) -> float | None:
        """The event's value, scaled, if it has a finite one (a baseline's or a running reading's input)."""
        value = event[self.value_index] if self.value_index else fields.get(self.value_field)
        if value is None or not math.isfinite(value := float(value) * self.scale):
            return None
        return value

    def _baseline(self, key: tuple[str, ...], event: tuple, fields: Mapping[str, Any]) -> None:
        """A ``first`` source: collect the label set's first finite values, then set the gauge once to their
        median (no series before: a baseline of 0 would be a claim)."""
        if key in self.children or (key not in self.firsts and len(self.firsts) + len(self.children)
                                    >= MAX_SERIES_PER_METRIC):
            return
        value = self._finite(event, fields)
        if value is None:
            return
        seen = self.firsts.setdefault(key, [])
        seen.append(value)
        if len(seen) >= self.first:
            child = self.metric.labels(*self.base, *key)
            child.set(statistics.median(seen))
            self.children[key] = child
            del self.firsts[key]

    def _running(self, key: tuple[str, ...], event: tuple, fields: Mapping[str, Any]) -> None:
        """A ``running`` source: past the label set's first ``skip`` finite values, set the gauge to the best of
        them so far ("max") or the mean of the last ``last`` ("mean"); no series before."""
        if key not in self.runs and len(self.runs) >= MAX_SERIES_PER_METRIC:
            return
        value = self._finite(event, fields)
        if value is None:
            return
        seen, kept = self.runs.setdefault(key, (0, []))
        self.runs[key] = (seen + 1, kept)
        if seen < self.skip:
            return
        kept[:] = [max([*kept, value])] if self.running == "max" else [*kept, value][-self.last:]
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = self.metric.labels(*self.base, *key)
        child.set(kept[0] if self.running == "max" else sum(kept) / len(kept))


def _build_labels() -> tuple[str, str, str]:
    import platform

    from rlobs import __version__
    from rlobs.schema import SCHEMA_VERSION

    return __version__, str(SCHEMA_VERSION), platform.python_version()


_BUILD_LABELS = _build_labels()


class _RecorderStatsCollector(Collector):
    """Exposes the recorder's own health, read at scrape time."""

    def __init__(self, stats: Callable[[], dict[str, Any]], base: tuple[str, str]):
        self._stats = stats
        self._base = base

    def collect(self) -> Iterable[Any]:
        s = self._stats()
        run, comp = self._base
        dropped = CATALOGUE["rlobs_telemetry_dropped_total"]
        c = CounterMetricFamily(dropped.name[: -len("_total")], dropped.help, labels=IMPLICIT_LABELS + dropped.labels)
        drops = {("queue_full", "recorder"): 0, **s.get("dropped", {})}  # the recorder's own drop exists at 0
        for (reason, sink), n in sorted(drops.items()):
            c.add_metric([run, comp, reason, sink], n)
        yield c
        ev = CATALOGUE["rlobs_telemetry_events_total"]
        c2 = CounterMetricFamily(ev.name[: -len("_total")], ev.help, labels=IMPLICIT_LABELS)
        c2.add_metric([run, comp], s.get("accepted", 0))
        yield c2
        qd = CATALOGUE["rlobs_telemetry_queue_depth"]
        g = GaugeMetricFamily(qd.name, qd.help, labels=IMPLICIT_LABELS)
        g.add_metric([run, comp], s.get("queue_depth", 0))
        yield g
        bi = CATALOGUE["rlobs_build_info"]
        b = GaugeMetricFamily(bi.name, bi.help, labels=IMPLICIT_LABELS + bi.labels)
        b.add_metric([run, comp, *_BUILD_LABELS], 1)
        yield b


class PrometheusSink:
    name = "prometheus"
    linger_s = 6.0  # keep answering scrapes this long after the target file is gone (see close)

    def __init__(self, info: WriterInfo, *, run_dir: Path | None = None, port: int | None = None,
                 addr: str | None = None, serve: bool = True,
                 stats: Callable[[], dict[str, Any]] | None = None):
        self.info = info
        self.registry = _Registry(auto_describe=False)
        base = (info.run_id, info.component)
        self._base = base
        self._metrics: dict[str, Any] = {}
        for spec in METRICS:
            if spec.source is not None:
                self._metrics[spec.name] = _make(spec, self.registry)
        self._routes: dict[str, list[_Route]] = {
            kind: [_Route(s, self._metrics[s.name], base) for s in specs] for kind, specs in by_kind().items()
        }
        # Label-less counters exist at 0 from the start, so increase() sees their first event (a NaN grad
        # norm, a fingerprint mismatch) instead of a series appearing out of nothing.
        for routes in self._routes.values():
            for r in routes:
                if r.spec.type == "counter" and not r.spec.labels:
                    r.children[()] = r.metric.labels(*base)
                for values in r.spec.zero:  # known label values (e.g. ledger states) also start at 0
                    r.metric.labels(*base, *values)
        if stats is not None:
            self.registry.register(_RecorderStatsCollector(stats, base))
        self.server: Any = None
        self.url: str | None = None
        self._sd_file: TargetFile | None = None
        if serve:
            self._serve(run_dir, port, addr)

    def _serve(self, run_dir: Path | None, port: int | None, addr: str | None) -> None:
        if port is None:
            port = int(os.environ.get("RLOBS_METRICS_PORT", "0"))
        self.server, self.target = serve_metrics(self.registry, port, addr)
        self.url = f"http://{self.target}/metrics"
        if run_dir is not None:
            self._sd_file = TargetFile(Path(run_dir), self.info, self.target)

    def child(self, name: str, **labels: str) -> Any:
        """A labelled child of a catalogue metric, for direct updates (``.inc()`` / ``.set()`` / ``.observe()``)."""
        spec = CATALOGUE.get(name)
        if spec is None or name not in self._metrics:
            raise ValueError(f"{name!r} is not an event-fed catalogue metric of this sink")
        missing = set(spec.labels) ^ set(labels)
        if missing:
            raise ValueError(f"{name!r} takes labels {list(spec.labels)}, got {sorted(labels)}")
        return self._metrics[name].labels(*self._base, *(labels[k] for k in spec.labels))

    def write(self, batch: EventBatch) -> None:
        routes = self._routes
        for kind in batch.kinds():
            rs = routes.get(kind)
            if not rs:
                continue
            for e in batch.raw(kind):
                for r in rs:
                    r.apply(e)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        """Remove the target file, then stop serving ``LINGER_S`` later, in the background: Prometheus applies
        a removed file_sd target up to ~5 s later, and a scrape of a closed port in that gap is ``up == 0``
        (RlobsProcessDown pending at every clean end). A process that exits sooner takes the server with it."""
        if self._sd_file is not None:
            self._sd_file.close()
        server, self.server = self.server, None
        stop_serving_later(server, self.linger_s)


def serve_metrics(registry: CollectorRegistry, port: int, addr: str | None = None) -> tuple[Any, str]:
    """Serve ``registry`` on ``/metrics`` at ``addr`` (default ``RLOBS_METRICS_ADDR``, else 127.0.0.1) and ``port``
    (0: a free one); returns the server and its ``host:port`` target (this host's name for a wildcard address)."""
    addr = addr if addr is not None else os.environ.get("RLOBS_METRICS_ADDR", "127.0.0.1")
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    host = addr if addr not in ("", "0.0.0.0", "::") else socket.gethostname()
    return server, f"{host}:{server.server_port}"


def stop_serving_later(server: Any, linger_s: float) -> None:
    """Stop ``server`` ``linger_s`` seconds from now, in the background (its target file already removed: Prometheus
    applies that up to ~5 s later, and a scrape of a closed port in that gap reads as a process down)."""
    if server is None:
        return

    def stop() -> None:
        server.shutdown()
        server.server_close()

    timer = threading.Timer(linger_s, stop)
    timer.daemon = True
    timer.start()
