"""The per-process recorder: a bounded in-memory queue, a background flusher, one worker per sink.

Hot path (``emit``): a length check, two clock reads and a ``deque.append`` of a tuple — about a
microsecond, no lock, no I/O, never raises. When the queue is full the event is dropped and counted.

Flusher thread: every ``flush_interval`` seconds (0.5 by default, so a SIGKILL loses at most about
a second of events) it drains the queue, groups events by kind, validates them against the schema
(invalid events are dropped, counted and logged once per kind and reason), and hands the batch to
every sink worker.

Sink workers: one thread and a bounded backlog per sink, so a slow or hanging sink (an NFS stall, an
OTLP endpoint that never answers) only delays itself; a full backlog drops batches for that sink,
counted as ``sink_backlog``; a sink that raises gets its batch counted as ``sink_error``.
All drops appear in ``rlobs_telemetry_dropped_total{reason,sink}`` and, every ``report_interval``
seconds when non-zero, as ``telemetry`` events in the run record so the doctor can report them.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import logging
import random
import threading
import time
from collections import Counter, deque
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace

from rlobs.events import (
    EventBatch,
    FastGroup,
    InvalidEvents,
    RawEvent,
    WriterInfo,
    to_record_batch,
)
from rlobs.schema import KINDS

log = logging.getLogger("rlobs.recorder")

# (trace_id, span_id) of the innermost open span in this context.
_SPAN: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("rlobs_span", default=None)

_UNSET: Any = object()
_time_ns = time.time_ns
_mono_ns = time.monotonic_ns


class _RateLimitedLog:
    def __init__(self, every_s: float = 60.0):
        self.every_s = every_s
        self._last: dict[Any, float] = {}
        self._lock = threading.Lock()

    def warning(self, key: Any, msg: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.every_s:
                return
            self._last[key] = now
        log.warning(msg, *args)


class SpanHandle:
    """An open span: add attributes while it runs, pass ``traceparent`` to other processes."""

    __slots__ = ("trace_id", "span_id", "attributes", "status")

    def __init__(self, trace_id: int, span_id: int, attributes: dict[str, Any]):
        self.trace_id = trace_id
        self.span_id = span_id
        self.attributes = attributes
        self.status = "ok"

    def set(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def fail(self) -> None:
        self.status = "error"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-01"


def _otel_current() -> tuple[int, int] | None:
    """(trace_id, span_id) of the caller's active OpenTelemetry span, if there is a valid one."""
    ctx = otel_trace.get_current_span().get_span_context()
    return (ctx.trace_id, ctx.span_id) if ctx.is_valid else None


def parse_traceparent(value: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """W3C ``traceparent`` string (or an (trace_id, span_id) tuple) -> tuple; None if absent or malformed."""
    if value is None or isinstance(value, tuple):
        return value
    parts = str(value).split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        return int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None


class _SinkWorker:
    def __init__(self, sink: Any, recorder: "Recorder", max_pending: int):
        self.sink = sink
        self.name = getattr(sink, "name", type(sink).__name__)
        self.rec = recorder
        self.max_pending = max_pending
        self.pending: deque[tuple[int, EventBatch]] = deque()
        self.cv = threading.Condition()
        self.done_seq = 0
        self.closing = False
        self.thread = threading.Thread(target=self._run, name=f"rlobs-sink-{self.name}", daemon=True)
        self.thread.start()

    def offer(self, seq: int, batch: EventBatch) -> None:
        with self.cv:
            if self.closing:
                self.rec._count_drop("sink_closed", self.name, len(batch))
                return
            if len(self.pending) >= self.max_pending:
                self.rec._count_drop("sink_backlog", self.name, len(batch))
                return
            self.pending.append((seq, batch))
            self.cv.notify_all()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.pending and not self.closing:
                    self.cv.wait()
                if not self.pending and self.closing:
                    break
                seq, batch = self.pending.popleft()
            try:
                self.sink.write(batch)
            except Exception as exc:
                self.rec._count_drop("sink_error", self.name, len(batch))
                self.rec._rlog.warning((self.name, type(exc)), "rlobs sink %r failed (%s: %s); its events are "
                                       "dropped and counted, training continues", self.name, type(exc).__name__, exc)
            with self.cv:
                self.done_seq = max(self.done_seq, seq)
                self.cv.notify_all()
        for method in ("flush", "close"):
            try:
                getattr(self.sink, method)()
            except Exception as exc:
                self.rec._rlog.warning((self.name, method), "rlobs sink %r %s failed: %s", self.name, method, exc)

    def wait_done(self, seq: int, deadline: float) -> bool:
        with self.cv:
            while self.done_seq < seq:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cv.wait(remaining)
        return True

    def close(self, deadline: float) -> bool:
        with self.cv:
            self.closing = True
            self.cv.notify_all()
        self.thread.join(max(deadline - time.monotonic(), 0.0))
        if self.thread.is_alive():
            with self.cv:
                lost = sum(len(b) for _, b in self.pending)
                self.pending.clear()
            if lost:
                self.rec._count_drop("sink_timeout", self.name, lost)
            return False
        return True


class Recorder:
    """Records events of one process into its sinks. Create with ``rlobs.init(...)``."""

    enabled = True

    def __init__(self, info: WriterInfo, sinks: list[Any], *, max_queue: int = 200_000,
                 flush_interval: float = 0.5, sink_backlog: int = 64, report_interval: float = 10.0,
                 close_timeout: float = 5.0):
        self.info = info
        self.max_queue = max_queue
        self.flush_interval = flush_interval
        self.report_interval = report_interval
        self.close_timeout = close_timeout
        self._queue: deque[RawEvent] = deque()
        self._fast: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
        # drain early when events pile up: a short queue keeps batches cache-friendly and GC passes cheap
        self._wake_at = max(min(max_queue // 4, 16_384), 1)
        self._wake = threading.Event()
        self._step: int | None = None
        self._version: int | None = None
        self._queue_full = 0
        self._accepted = 0
        self._drops: Counter[tuple[str, str]] = Counter()
        self._reported: Counter[tuple[str, str]] = Counter()
        self._stats_lock = threading.Lock()
        self._rlog = _RateLimitedLog()
        self._seq = 0
        self._flush_lock = threading.Lock()
        self._closed = False
        self._last_report = time.monotonic()
        self._workers = [_SinkWorker(s, self, sink_backlog) for s in sinks]
        self._flusher = threading.Thread(target=self._flush_loop, name="rlobs-flusher", daemon=True)
        self._flusher.start()
        atexit.register(self.close)

    # ---- hot path -------------------------------------------------------------------------------
    def emit(self, kind: str, /, step: Any = _UNSET, policy_version: Any = _UNSET, **fields: Any) -> None:
        """Record one event of ``kind``. ``step`` / ``policy_version`` override the context. Never raises."""
        q = self._queue
        n = len(q)
        if n >= self.max_queue:
            self._count_drop("queue_full", "recorder", 1)
            return
        q.append((kind, _time_ns(), _mono_ns(), self._step if step is _UNSET else step,
                  self._version if policy_version is _UNSET else policy_version, _SPAN.get(), fields))
        if n == self._wake_at:
            self._wake.set()

    def emitter(self, kind: str, fields: Sequence[str]) -> Callable[..., None]:
        """A fast emitter for one kind and a fixed list of fields: ``emit(*values, step=..., policy_version=...)``.

        For hot paths (per-sample ledger and rollout events): it appends one flat row to a buffer,
        allocating no per-event dict or container, so it costs less than ``emit`` and adds no GC
        pressure. Mistakes in ``kind`` or ``fields`` raise ``ValueError`` here, at definition; a call
        with the wrong number of values is dropped and counted, never raised.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}; valid: {', '.join(sorted(KINDS))}")
        names = tuple(fields)
        unknown = [n for n in names if n not in KINDS[kind].field_names]
        if unknown or len(set(names)) != len(names):
            raise ValueError(f"fields {unknown or names} are unknown or repeated for kind {kind!r}; "
                             f"valid: {', '.join(KINDS[kind].field_names)}")
        buf = self._fast.setdefault((kind, names), [])
        nvals = len(names)
        width = 5 + nvals
        limit = self.max_queue * width
        wake_items = self._wake_at * width
        rec = self
        extend = buf.extend
        wake = self._wake

        def emit(*values: Any, step: Any = _UNSET, policy_version: Any = _UNSET) -> None:
            if len(values) != nvals:
                rec._count_drop("invalid_event", "recorder", 1)
                rec._rlog.warning(("arity", kind), "rlobs: %s emitter got %d values for %d fields %s; dropped",
                                  kind, len(values), nvals, names)
                return
            size = len(buf)
            if size >= limit:
                rec._count_drop("queue_full", "recorder", 1)
                return
            extend((_time_ns(), _mono_ns(), rec._step if step is _UNSET else step,
                    rec._version if policy_version is _UNSET else policy_version, _SPAN.get()) + values)
            if size < wake_items <= size + width:
                wake.set()

        return emit

    def set_step(self, step: int | None) -> None:
        self._step = step

    def set_policy_version(self, version: int | None) -> None:
        self._version = version

    @property
    def step(self) -> int | None:
        return self._step

    @property
    def policy_version(self) -> int | None:
        return self._version

    def heartbeat(self, phase: str, detail: str = "") -> None:
        self.emit("heartbeat", phase=phase, detail=detail)

    @contextmanager
    def span(self, name: str, *, parent: str | tuple[int, int] | None = None, **attributes: Any) -> Iterator[SpanHandle]:
        """A span (step, weight sync, boundary, grader batch). Events emitted inside carry its ids.

        Its parent is ``parent`` (a W3C traceparent from another process) if given, else the active
        OpenTelemetry span of the caller (so rlobs spans nest under an application's own tracing), else
        the enclosing rlobs span. While it is open it is also the active OTel span (a non-recording
        handle with its ids), so the caller's OTel spans opened inside nest under it.
        """
        parent_ctx = parse_traceparent(parent) if parent is not None else (_otel_current() or _SPAN.get())
        trace_id = parent_ctx[0] if parent_ctx else (random.getrandbits(128) or 1)
        span_id = random.getrandbits(64) or 1
        handle = SpanHandle(trace_id, span_id, dict(attributes))
        token = _SPAN.set((trace_id, span_id))
        otel_token = otel_context.attach(otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(
            otel_trace.SpanContext(trace_id, span_id, is_remote=False,
                                   trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED)))))
        start = _time_ns()
        try:
            yield handle
        except BaseException:
            handle.status = "error"
            raise
        finally:
            otel_context.detach(otel_token)
            _SPAN.reset(token)
            try:
                attrs = json.dumps(handle.attributes, default=str)
            except (TypeError, ValueError):
                attrs = "{}"
            fields = {"name": name, "parent_span_id": f"{parent_ctx[1]:016x}" if parent_ctx else None,
                      "start_ns": start, "end_ns": _time_ns(), "status": handle.status, "attributes": attrs}
            q = self._queue
            if len(q) >= self.max_queue:
                self._count_drop("queue_full", "recorder", 1)
            else:
                q.append(("span", start, _mono_ns(), self._step, self._version, (trace_id, span_id), fields))

    def counter(self, name: str, **labels: str) -> Any:
        """A Prometheus child of a catalogue metric for direct ``inc()`` (no-op without a Prometheus sink)."""
        for w in self._workers:
            child = getattr(w.sink, "child", None)
            if child is not None:
                return child(name, **labels)
        return _NOOP_CHILD

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _count_drop(self, reason: str, sink: str, n: int) -> None:
        if n <= 0:
            return
        with self._stats_lock:
            self._drops[(reason, sink)] += n

    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            dropped = dict(self._drops)
        depth = len(self._queue) + sum(len(b) // (5 + len(k[1])) for k, b in list(self._fast.items()))
        return {"accepted": self._accepted, "dropped": dropped, "queue_depth": depth,
                "dropped_total": sum(dropped.values())}

    @property
    def metrics_url(self) -> str | None:
        for w in self._workers:
            url = getattr(w.sink, "url", None)
            if url:
                return url
        return None

    def sink(self, name: str) -> Any:
        for w in self._workers:
            if w.name == name:
                return w.sink
        raise KeyError(f"no sink {name!r}; sinks: {[w.name for w in self._workers]}")

    # ---- flusher --------------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._closed:
                break
            try:
                self._drain()
            except Exception as exc:  # never let the flusher die
                self._rlog.warning("flusher", "rlobs flusher error: %s: %s", type(exc).__name__, exc)

    def _drain(self) -> int:
        with self._flush_lock:
            self._maybe_report()
            q = self._queue
            n = len(q)
            by_kind: dict[str, list[RawEvent]] = {}
            popleft = q.popleft
            for _ in range(n):
                ev = popleft()
                lst = by_kind.get(ev[0])
                if lst is None:
                    by_kind[ev[0]] = lst = []
                lst.append(ev)
            fast: dict[str, list[FastGroup]] = {}
            for (kind, names), buf in list(self._fast.items()):
                size = len(buf)
                if not size:
                    continue
                rows = buf[:size]  # list slicing and deletion are atomic under the GIL, and each
                del buf[:size]     # emitter call extends by one whole row: no row is torn or lost
                width = 5 + len(names)
                cols = [rows[i::width] for i in range(width)]
                count = size // width
                fast.setdefault(kind, []).append(FastGroup(kind, names, cols, count))
                n += count
            if not n:
                return self._seq
            self._accepted += n
            batch = self._validate(by_kind, fast)
            self._seq += 1
            for w in self._workers:
                w.offer(self._seq, batch)
            return self._seq

    def _validate(self, by_kind: dict[str, list[RawEvent]], fast: dict[str, list[FastGroup]]) -> EventBatch:
        """Drop (count, log) unknown kinds and events that do not fit their schema; pre-build Arrow batches."""
        out: dict[str, list[RawEvent]] = {}
        out_fast: dict[str, list[FastGroup]] = {}
        arrow: dict[str, list[Any]] = {}
        for kind, groups in fast.items():
            for g in groups:
                try:
                    arrow.setdefault(kind, []).append(g.record_batch(self.info))
                    out_fast.setdefault(kind, []).append(g)
                except Exception:  # bad values: isolate them on the slow path below
                    by_kind.setdefault(kind, []).extend(g.to_raw())
        for kind, events in by_kind.items():
            if kind not in KINDS:
                self._count_drop("unknown_kind", "recorder", len(events))
                self._rlog.warning(("kind", kind), "rlobs: unknown event kind %r dropped (%d events); valid: %s",
                                   kind, len(events), ", ".join(sorted(KINDS)))
                continue
            try:
                arrow.setdefault(kind, []).insert(0, to_record_batch(self.info, kind, events))
                out[kind] = events
            except Exception as exc:
                if not isinstance(exc, InvalidEvents):  # a bug, not bad data: drop the kind's batch, keep going
                    self._count_drop("invalid_event", "recorder", len(events))
                    self._rlog.warning(("convert", kind), "rlobs: could not convert %r events: %s: %s",
                                       kind, type(exc).__name__, exc)
                    continue
                arrow.setdefault(kind, []).insert(0, exc.good)
                bad_ids = {id(e) for e, _ in exc.bad}
                self._count_drop("invalid_event", "recorder", len(exc.bad))
                self._rlog.warning(("invalid", kind), "rlobs: %d invalid %r events dropped, e.g. %s",
                                   len(exc.bad), kind, exc.bad[0][1])
                good = [e for e in events if id(e) not in bad_ids]
                if good:
                    out[kind] = good
        batch = EventBatch(self.info, out, out_fast)
        batch.set_arrow(arrow)
        return batch

    def _maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < self.report_interval:
            return
        self._last_report = now
        with self._stats_lock:
            current = Counter(self._drops)
        for (reason, sink), total in current.items():
            delta = total - self._reported[(reason, sink)]
            if delta > 0:
                self._reported[(reason, sink)] = total
                # bypass the bound: self-reports must not be lost to the condition they report
                self._queue.append(("telemetry", _time_ns(), _mono_ns(), self._step, self._version, None,
                                    {"reason": reason, "sink": sink, "dropped": delta,
                                     "queue_depth": len(self._queue)}))

    def flush(self, timeout: float = 10.0) -> bool:
        """Write everything emitted so far through every sink. True if all sinks caught up in time."""
        if self._closed:
            return False
        deadline = time.monotonic() + timeout
        seq = self._drain()
        done = [w.wait_done(seq, deadline) for w in self._workers]  # no short-circuit: wait for each
        return all(done)

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the threads and close the sinks (bounded by ``timeout``). Idempotent."""
        if self._closed:
            return
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        try:
            seq = self._drain()
            # let the sinks take the last batch (bounded), so their failures make it into the final report
            grace = min(deadline, time.monotonic() + 0.5 * (deadline - time.monotonic()))
            for w in self._workers:
                w.wait_done(seq, grace)
            for w in self._workers:  # sinks with their own export queue (OTLP) settle and count their losses
                settle = getattr(w.sink, "settle", None)
                if settle is not None:
                    settle(max(deadline - time.monotonic(), 0.0))
            self._maybe_report(force=True)
            self._drain()
        except Exception as exc:
            log.warning("rlobs: final drain failed: %s", exc)
        self._closed = True
        self._wake.set()
        for w in self._workers:
            w.close(deadline)
        self._flusher.join(max(deadline - time.monotonic(), 0.0))
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        for cb in getattr(self, "_on_close", ()):
            try:
                cb()
            except Exception as exc:
                log.warning("rlobs: close callback failed: %s", exc)


class _NoopChild:
    def inc(self, amount: float = 1.0) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_NOOP_CHILD = _NoopChild()


class NoopRecorder:
    """What ``rlobs.get_recorder()`` returns before ``rlobs.init``: every call does nothing."""

    enabled = False
    info = None
    step = None
    policy_version = None
    metrics_url = None

    def emit(self, kind: str, /, **fields: Any) -> None:
        pass

    def emitter(self, kind: str, fields: Sequence[str]) -> Callable[..., None]:
        def emit(*values: Any, step: Any = None, policy_version: Any = None) -> None:
            pass

        return emit

    def set_step(self, step: int | None) -> None:
        pass

    def set_policy_version(self, version: int | None) -> None:
        pass

    def heartbeat(self, phase: str, detail: str = "") -> None:
        pass

    @contextmanager
    def span(self, name: str, *, parent: Any = None, **attributes: Any) -> Iterator[SpanHandle]:
        yield SpanHandle(0, 0, dict(attributes))

    def counter(self, name: str, **labels: str) -> Any:
        return _NOOP_CHILD

    def stats(self) -> dict[str, Any]:
        return {"accepted": 0, "dropped": {}, "queue_depth": 0, "dropped_total": 0}

    def flush(self, timeout: float = 10.0) -> bool:
        return True

    def close(self, timeout: float | None = None) -> None:
        pass
