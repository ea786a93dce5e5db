"""The process-wide entry points: ``rlobs.init`` and ``rlobs.get_recorder``.

Instrumented code (probes) calls ``get_recorder()`` and gets a ``NoopRecorder`` until ``init`` has
run in that process, so probes cost nothing and break nothing where rlobs is not configured.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Iterable

from rlobs.events import WriterInfo
from rlobs.recorder import NoopRecorder, Recorder
from rlobs.store.manifest import PROCESSES_DIR, ProcessFile, ensure_manifest, library_versions

_current: Recorder | NoopRecorder = NoopRecorder()


def _process_name(component: str, rank: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_]+", "_", component)[:32] or "proc"
    return f"{safe}-r{rank}-{os.getpid()}-{secrets.token_hex(2)}"


def init(run_dir: str | os.PathLike[str], component: str = "main", rank: int = 0, *,
         run_id: str | None = None, name: str | None = None, config: dict[str, Any] | None = None,
         hashes: dict[str, str] | None = None, prometheus: bool = True, metrics_port: int | None = None,
         metrics_addr: str | None = None, otel: bool | None = None, otel_exporter: Any = None,
         memory: bool = False, sinks: Iterable[Any] = (), flush_interval: float = 0.5,
         max_queue: int = 200_000, segment_bytes: int = 64 << 20, segment_seconds: float = 600.0,
         set_global: bool = True) -> Recorder:
    """Start recording this process into the run directory ``run_dir``.

    component / rank: who this process is (trainer rank 0, generator 1, ...).
    prometheus: serve ``/metrics`` (127.0.0.1, free port unless ``metrics_port`` / RLOBS_METRICS_PORT)
        and write a file_sd target into the run directory.
    otel: export spans over OTLP; default: when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set.
        Spans are always kept in the run record too.
    memory: add a MemorySink (tests, notebooks).
    """
    from rlobs.sinks.memory import MemorySink
    from rlobs.sinks.runstore import RunStoreSink

    global _current
    run_path = Path(run_dir)
    manifest = ensure_manifest(run_path, run_id=run_id, name=name, config=config, hashes=hashes)
    process = _process_name(component, rank)
    info = WriterInfo(run_id=str(manifest["run_id"]), process=process, component=component, rank=int(rank))
    all_sinks: list[Any] = [RunStoreSink(run_path, process, segment_bytes=segment_bytes,
                                         segment_seconds=segment_seconds)]
    holder: dict[str, Recorder] = {}

    def stats() -> dict[str, Any]:
        rec = holder.get("rec")
        return rec.stats() if rec is not None else {}

    def on_drop(n: int, reason: str) -> None:
        rec = holder.get("rec")
        if rec is not None:
            rec._count_drop(reason, "otel", n)

    metrics_url = None
    if prometheus:
        from rlobs.sinks.prometheus import PrometheusSink

        prom = PrometheusSink(info, run_dir=run_path, port=metrics_port, addr=metrics_addr, stats=stats)
        metrics_url = prom.url
        all_sinks.append(prom)
    from rlobs.sinks.otel import otlp_configured

    if otel or (otel is None and (otel_exporter is not None or otlp_configured())):
        from rlobs.sinks.otel import OtelTraceSink

        all_sinks.append(OtelTraceSink(info, exporter=otel_exporter, on_drop=on_drop))
    if memory:
        all_sinks.append(MemorySink())
    all_sinks.extend(sinks)
    pfile = ProcessFile(run_path / PROCESSES_DIR / f"{process}.json")
    pfile.write({"process": process, "component": component, "rank": int(rank), "host": socket.gethostname(),
                 "pid": os.getpid(), "started_ns": time.time_ns(), "metrics_url": metrics_url,
                 "sinks": [getattr(s, "name", type(s).__name__) for s in all_sinks]})
    rec = Recorder(info, all_sinks, max_queue=max_queue, flush_interval=flush_interval)
    holder["rec"] = rec

    def mark_ended() -> None:
        pfile.update(ended_ns=time.time_ns(), stats={"accepted": rec.stats()["accepted"],
                                                     "dropped_total": rec.stats()["dropped_total"]})

    rec._on_close = [mark_ended]  # type: ignore[attr-defined]
    rec.emit("manifest", host=socket.gethostname(), pid=os.getpid(),
             config=json.dumps(config or {}, sort_keys=True, default=str),
             versions=json.dumps(library_versions(), sort_keys=True),
             tokenizer_hash=(hashes or {}).get("tokenizer"), chat_template_hash=(hashes or {}).get("chat_template"),
             sampling_hash=(hashes or {}).get("sampling"))
    if set_global:
        if isinstance(_current, Recorder):
            _current.close()
        _current = rec
    return rec


def get_recorder() -> Recorder | NoopRecorder:
    """The process's recorder (a no-op one before ``init``)."""
    return _current


def shutdown(timeout: float | None = None) -> None:
    """Close the process's recorder and go back to the no-op one."""
    global _current
    rec = _current
    _current = NoopRecorder()
    rec.close(timeout)
