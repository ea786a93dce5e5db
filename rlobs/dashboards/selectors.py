"""PromQL built from the metric catalogue: the shared selectors every panel and alert uses.

Nothing here hard-codes a metric list: each helper takes a catalogue metric name, checks it (and
its label matchers) against ``rlobs.catalogue`` when the query is *built*, and returns the PromQL
text. A typo in a dashboard or alert therefore fails ``rlobs dashboards build``, not a 3 a.m. page.

A ``Scope`` is the set of matchers added to every series: dashboards filter by the ``$run`` and
``$component`` template variables, alert rules see every run (``ALERT``) and keep the labels in
``GROUP`` so that one alert fires per run and component.

    >>> rate("rlobs_train_steps_total", DASHBOARD)
    'rate(rlobs_train_steps_total{run=~"$run",component=~"$component"}[$__rate_interval])'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from rlobs.catalogue import CATALOGUE, IMPLICIT_LABELS, MetricSpec

# Labels an rlobs series carries besides the catalogue's: the implicit ones, what Prometheus adds
# at scrape time (job, instance) and what the file_sd target file adds (rank).
SCRAPE_LABELS = ("job", "instance", "rank")
# Prometheus' own series a query may name besides catalogue metrics.
BUILTIN_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})
GROUP = ("run", "component")  # what alerts aggregate by
RATE_WINDOW = "$__rate_interval"  # Grafana picks it from the scrape interval


@dataclass(frozen=True, slots=True)
class Scope:
    """Matchers added to every series selector, and the range window for rates."""

    matchers: tuple[tuple[str, str, str], ...]
    window: str

    def with_window(self, window: str) -> "Scope":
        return Scope(self.matchers, window)


DASHBOARD = Scope((("run", "=~", "$run"), ("component", "=~", "$component")), RATE_WINDOW)
ALERT = Scope((), "5m")

Matcher = str | tuple[str, str]  # "value" means =, (op, value) for !=, =~, !~


def _spec_for(series: str) -> tuple[MetricSpec, str]:
    """The catalogue spec behind an exposed series name, and the suffix (_bucket/_sum/_count or '')."""
    spec = CATALOGUE.get(series)
    if spec is not None:
        if spec.type == "histogram":
            raise ValueError(f"{series!r} is a histogram: select {series}_bucket, _sum or _count")
        return spec, ""
    for suffix in ("_bucket", "_sum", "_count"):
        if series.endswith(suffix):
            spec = CATALOGUE.get(series[: -len(suffix)])
            if spec is not None and spec.type == "histogram":
                return spec, suffix
    raise ValueError(f"{series!r} is not a series of any metric in rlobs.catalogue")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def series(name: str, scope: Scope, **labels: Matcher) -> str:
    """``name{scope matchers, labels}``, checked against the catalogue."""
    spec, suffix = _spec_for(name)
    allowed = set(IMPLICIT_LABELS) | set(spec.labels) | set(SCRAPE_LABELS) | ({"le"} if suffix == "_bucket" else set())
    parts = [f"{k}{op}{_quote(v)}" for k, op, v in scope.matchers]
    for key, m in labels.items():
        if key not in allowed:
            raise ValueError(f"{name!r} has no label {key!r}; labels: {sorted(allowed)}")
        op, value = ("=", m) if isinstance(m, str) else m
        if op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"bad matcher operator {op!r} for {key!r}")
        parts.append(f"{key}{op}{_quote(value)}")
    return f"{name}{{{','.join(parts)}}}" if parts else name


TARGET_LABELS = ("run", "component", "rank", "job", "instance")  # what `up` carries (file_sd + scrape)


def up(scope: Scope, **labels: Matcher) -> str:
    """Prometheus' own ``up`` of rlobs targets (the file_sd target labels, see rlobs.sinks.targets)."""
    parts = [f"{k}{op}{_quote(v)}" for k, op, v in scope.matchers]
    for key, m in labels.items():
        if key not in TARGET_LABELS:
            raise ValueError(f"up has no label {key!r}; labels: {TARGET_LABELS}")
        op, value = ("=", m) if isinstance(m, str) else m
        parts.append(f"{key}{op}{_quote(value)}")
    return f"up{{{','.join(parts)}}}" if parts else "up"


def _by(labels: Iterable[str]) -> str:
    return ", ".join(labels)


def agg(op: str, expr: str, by: Iterable[str] = ()) -> str:
    """``op by (labels) (expr)``; ``by=()`` aggregates everything away."""
    by = tuple(by)
    return f"{op} by ({_by(by)}) ({expr})" if by else f"{op}({expr})"


def rate(name: str, scope: Scope, **labels: Matcher) -> str:
    return f"rate({series(name, scope, **labels)}[{scope.window}])"


def increase(name: str, scope: Scope, **labels: Matcher) -> str:
    return f"increase({series(name, scope, **labels)}[{scope.window}])"


def new_or_increase(name: str, scope: Scope, **labels: Matcher) -> str:
    """Increase over the window that also counts a counter series *born* inside it.

    prometheus_client creates a labelled child on its first increment, so the series appears at 1
    and ``increase()`` alone would never see that first event (the classic missed first error).
    A series absent one window ago contributes its whole value instead.
    """
    s = series(name, scope, **labels)
    return f"(({s} unless {s} offset {scope.window}) or increase({s}[{scope.window}]))"


def quantile(q: float, histogram: str, scope: Scope, by: Iterable[str] = (), **labels: Matcher) -> str:
    """``histogram_quantile`` over the rate of a catalogue histogram's buckets."""
    inner = agg("sum", rate(histogram + "_bucket", scope, **labels), ("le", *by))
    return f"histogram_quantile({q:g}, {inner})"


def histogram_mean(histogram: str, scope: Scope, by: Iterable[str] = (), **labels: Matcher) -> str:
    """Mean observation over the window: rate of ``_sum`` over rate of ``_count``."""
    by = tuple(by)
    num = agg("sum", rate(histogram + "_sum", scope, **labels), by)
    den = agg("sum", rate(histogram + "_count", scope, **labels), by)
    return f"{num} / {den}"


def heatmap_buckets(histogram: str, scope: Scope, **labels: Matcher) -> str:
    """Per-bucket increase, the input of a Grafana heatmap panel (format=heatmap)."""
    return agg("sum", increase(histogram + "_bucket", scope, **labels), ("le",))


def gauge(name: str, scope: Scope, op: str = "max", by: Iterable[str] = (), **labels: Matcher) -> str:
    return agg(op, series(name, scope, **labels), by)


def share(numerator: str, denominator: str) -> str:
    """``(a) / (b)`` with both sides parenthesised."""
    return f"({numerator}) / ({denominator})"


def share_where(metric: str, scope: Scope, by: tuple[str, ...], **labels: Matcher) -> str:
    """The share of a counter's rate whose labels match ``labels``, per ``by``; 0 (not "no data") where
    the counter moved but never with those labels (no timeouts yet is a 0 % timeout share)."""
    total = agg("sum", rate(metric, scope), by)
    part = agg("sum", rate(metric, scope, **labels), by)
    return share(f"{part} or 0 * {total}", total)


def alerts_series(scope: Scope, **labels: str) -> str:
    """The ``ALERTS`` series of Prometheus, filtered like catalogue series (for 'current findings')."""
    parts = [f"{k}{op}{_quote(v)}" for k, op, v in scope.matchers if k == "run"]
    parts += [f"{k}={_quote(v)}" for k, v in labels.items()]
    return f"ALERTS{{{','.join(parts)}}}"


_NON_METRIC = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless",
    "sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "stddev", "stdvar", "count_values",
    "group", "inf", "nan", "time", "vector",
})


def metric_names(expr: str) -> frozenset[str]:
    """Series names a PromQL expression selects (ignores functions, keywords and label names).

    Deliberately independent of how the helpers above build queries, so tests can use it to check
    any query text (also hand-written ones) against the catalogue.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # drop string literals
    text = re.sub(r"\{[^}]*\}", "{}", text)  # drop matcher bodies (label names)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = m.group(0)
        end = m.end()
        rest = text[end:].lstrip()
        if rest.startswith("("):
            continue  # a function call
        start = m.start()
        if start > 0 and (text[start - 1].isdigit() or text[start - 1] in "$."):
            continue  # 1e-3, $run
        if word.lower() in _NON_METRIC:
            continue
        names.add(word)
    return frozenset(names)


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace Grafana ``$variables`` in a query with concrete text (for running it on Prometheus)."""
    for key in sorted(values, key=len, reverse=True):
        expr = expr.replace("$" + key, values[key])
    return expr
