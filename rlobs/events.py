"""Events in flight between the recorder and its sinks.

A raw event is a plain tuple, built on the hot path without allocation beyond the tuple and the
keyword dict:

    (kind, ts_ns, mono_ns, step, policy_version, span_ctx, fields)

``span_ctx`` is ``None`` or ``(trace_id: int, span_id: int)``. ``EventBatch`` groups a flush's events by
kind and converts them lazily to Arrow record batches (for the run store) or dict rows (for the
Prometheus and memory sinks).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any, Iterator

from rlobs.schema import ENVELOPE_NAMES, KINDS, arrow_schema

RawEvent = tuple  # (kind, ts_ns, mono_ns, step, policy_version, span_ctx, fields)


@dataclass(frozen=True, slots=True)
class WriterInfo:
    """Constant envelope fields of one recorder."""

    run_id: str
    process: str
    component: str
    rank: int


def hex_trace(ctx: tuple[int, int] | None) -> tuple[str | None, str | None]:
    if ctx is None:
        return None, None
    return f"{ctx[0]:032x}", f"{ctx[1]:016x}"


class InvalidEvents(Exception):
    """Raised by ``to_record_batch`` when some events do not fit their kind's schema."""

    def __init__(self, good: Any, bad: list[tuple[RawEvent, str]]):
        super().__init__(f"{len(bad)} invalid events")
        self.good = good
        self.bad = bad


_ALLOWED: dict[str, frozenset[str]] = {k: frozenset(v.field_names) for k, v in KINDS.items()}


def _columns(info: WriterInfo, kind: str, events: list[RawEvent]) -> list[Any]:
    import pyarrow as pa

    schema = arrow_schema(kind)
    n = len(events)
    _kinds, ts, mono, steps, versions, spans, fields = zip(*events)  # one C-level transpose
    cols = _envelope_arrays(info, n, ts, mono, steps, versions, spans)
    get = dict.get
    for field in list(schema)[len(ENVELOPE_NAMES):]:
        values = list(map(get, fields, repeat(field.name, n)))
        if values.count(None) == n:
            cols.append(pa.nulls(n, field.type))
        else:
            cols.append(pa.array(values, field.type))
    return cols


def to_record_batch(info: WriterInfo, kind: str, events: list[RawEvent]) -> Any:
    """Arrow record batch of one kind's events. Raises InvalidEvents (with the good rows) if some fail."""
    import pyarrow as pa

    schema = arrow_schema(kind)
    allowed = _ALLOWED[kind]
    bad: list[tuple[RawEvent, str]] = []
    if not all(map(allowed.issuperset, [e[6] for e in events])):
        keep = []
        for e in events:
            extra = e[6].keys() - allowed
            if extra:
                bad.append((e, f"unknown field(s) {sorted(extra)} for kind {kind!r}"))
            else:
                keep.append(e)
        events = keep
    if not events:
        raise InvalidEvents(pa.RecordBatch.from_pylist([], schema=schema), bad)
    try:
        batch = pa.RecordBatch.from_arrays(_columns(info, kind, events), schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        # Isolate the offending events one by one; keep the rest.
        keep = []
        for e in events:
            try:
                _columns(info, kind, [e])
                keep.append(e)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                bad.append((e, f"{type(exc).__name__}: {exc}"))
        batch = (pa.RecordBatch.from_arrays(_columns(info, kind, keep), schema=schema) if keep
                 else pa.RecordBatch.from_pylist([], schema=schema))
    if bad:
        raise InvalidEvents(batch, bad)
    return batch


def _envelope_arrays(info: WriterInfo, n: int, ts: Any, mono: Any, steps: Any, versions: Any, spans: Any) -> list[Any]:
    import pyarrow as pa

    if spans.count(None) == n:
        trace_col = span_col = pa.nulls(n, pa.string())
    else:
        trace_col = pa.array([None if t is None else f"{t[0]:032x}" for t in spans], pa.string())
        span_col = pa.array([None if t is None else f"{t[1]:016x}" for t in spans], pa.string())
    return [
        pa.array(ts, pa.int64()),
        pa.array(mono, pa.int64()),
        pa.repeat(pa.scalar(info.run_id, pa.string()), n),
        pa.repeat(pa.scalar(info.process, pa.string()), n),
        pa.repeat(pa.scalar(info.component, pa.string()), n),
        pa.repeat(pa.scalar(info.rank, pa.int32()), n),
        pa.nulls(n, pa.int64()) if steps.count(None) == n else pa.array(steps, pa.int64()),
        pa.nulls(n, pa.int64()) if versions.count(None) == n else pa.array(versions, pa.int64()),
        trace_col,
        span_col,
    ]


@dataclass(slots=True)
class FastGroup:
    """Events from one ``Recorder.emitter(kind, names)``: columns of a flat row buffer.

    ``cols`` holds 5 envelope columns (ts_ns, mono_ns, step, policy_version, span_ctx) followed by one
    column per name, each a plain list of ``n`` values.
    """

    kind: str
    names: tuple[str, ...]
    cols: list[list[Any]]
    n: int

    def to_raw(self) -> list[RawEvent]:
        """The same events in the dict form (slow path: validation fallback, row-wise sinks)."""
        kind, names = self.kind, self.names
        env = self.cols[:5]
        vals = self.cols[5:]
        return [(kind, env[0][i], env[1][i], env[2][i], env[3][i], env[4][i],
                 {name: col[i] for name, col in zip(names, vals)}) for i in range(self.n)]

    def record_batch(self, info: WriterInfo) -> Any:
        import pyarrow as pa

        schema = arrow_schema(self.kind)
        n = self.n
        c = self.cols
        arrays = _envelope_arrays(info, n, c[0], c[1], c[2], c[3], c[4])
        by_name = dict(zip(self.names, c[5:]))
        for field in list(schema)[len(ENVELOPE_NAMES):]:
            values = by_name.get(field.name)
            if values is None or values.count(None) == n:
                arrays.append(pa.nulls(n, field.type))
            else:
                arrays.append(pa.array(values, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


class EventBatch:
    """The events of one flush, grouped by kind. Shared read-only by every sink.

    Events come in two forms: dict events from ``Recorder.emit`` (``by_kind``) and column groups from
    fast emitters (``fast``). ``record_batches`` gives Arrow, ``rows`` / ``raw`` give per-event views.
    """

    __slots__ = ("info", "by_kind", "fast", "_arrow")

    def __init__(self, info: WriterInfo, by_kind: dict[str, list[RawEvent]],
                 fast: dict[str, list[FastGroup]] | None = None):
        self.info = info
        self.by_kind = by_kind
        self.fast = fast or {}
        self._arrow: dict[str, list[Any]] = {}

    def set_arrow(self, arrow: dict[str, list[Any]]) -> None:
        self._arrow.update(arrow)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_kind.values()) + sum(g.n for gs in self.fast.values() for g in gs)

    def kinds(self) -> list[str]:
        return list(dict.fromkeys([*self.by_kind, *self.fast]))

    def count(self, kind: str) -> int:
        return len(self.by_kind.get(kind, ())) + sum(g.n for g in self.fast.get(kind, ()))

    def record_batches(self, kind: str) -> list[Any]:
        """Arrow batches for ``kind`` (invalid events were removed by the recorder)."""
        rbs = self._arrow.get(kind)
        if rbs is None:
            rbs = []
            if self.by_kind.get(kind):
                try:
                    rbs.append(to_record_batch(self.info, kind, self.by_kind[kind]))
                except InvalidEvents as exc:
                    rbs.append(exc.good)
            rbs.extend(g.record_batch(self.info) for g in self.fast.get(kind, ()))
            self._arrow[kind] = rbs
        return rbs

    def raw(self, kind: str) -> Iterator[RawEvent]:
        """Each event of ``kind`` in the dict form ``(kind, ts, mono, step, version, span_ctx, fields)``."""
        yield from self.by_kind.get(kind, ())
        for g in self.fast.get(kind, ()):
            yield from g.to_raw()

    def rows(self, kind: str) -> Iterator[dict[str, Any]]:
        """Each event of ``kind`` as a dict: envelope fields then the kind's fields."""
        info = self.info
        for e in self.raw(kind):
            trace_id, span_id = hex_trace(e[5])
            row = {
                "ts_ns": e[1], "mono_ns": e[2], "run_id": info.run_id, "process": info.process,
                "component": info.component, "rank": info.rank, "step": e[3], "policy_version": e[4],
                "trace_id": trace_id, "span_id": span_id,
            }
            row.update(e[6])
            yield row
