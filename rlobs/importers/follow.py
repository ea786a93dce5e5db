"""``rlobs follow FORMAT PATH --out RUN``: tail a growing metric log into a run record and a ``/metrics``
endpoint, so the dashboards, the alerts and ``rlobs doctor --follow`` work on a running job with no code change.

Supported: JSON-lines logs that grow by appending (verl's FileLogger ``VERL_FILE_LOGGER_PATH``, any framework's
JSON lines with ``--framework``) and TensorBoard folders (the newest event file; CRC-checked records, one row
per step, a step emitted when the next one starts or after ``hold_s`` without new records) and TRL output
folders (the newest ``checkpoint-*/trainer_state.json``, re-read when it changes; the rows after the last step
emitted; there the marker holds that step) and wandb run folders (the newest ``run-<id>.wandb``, record by
record, CRC-checked; a record mid-write waits). Each complete line is converted with the framework's metric map (and
``--map``), emitted through the recorder (run store + Prometheus sink), and marked in the record with a
``scalar`` event ``rlobs/follow_offset`` (the byte offset after the line, emitted after the line's events).

Exactly once, across everything a tailer meets:
- **partial lines**: only complete lines (ending in a newline) are read; the rest waits for the writer;
- **its own restart** (killed, even with SIGKILL): the record is the state: on start the follower reads
  the last ``rlobs/follow_offset`` that reached the record and resumes there, so a line whose events were
  written is never read again and a line whose events were lost is read again; ``follow_state.json`` keeps
  the file's identity (device, inode) to tell a restart from a rotation;
- **truncation** (the file shrinks below the offset: ``copytruncate``, a rewritten log): reading restarts at 0;
- **rotation** (the path now names another file): the old file is read to its end, then the new one from 0.
Malformed and oversized lines are reported in ``RUN/follow_report.json``, never fatal.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rlobs.importers import readers
from rlobs.importers.mapping import MetricTable, convert, load_user_map
from rlobs.importers.report import ImportFailed, ImportReport

FORMATS = ("verl", "jsonl", "tensorboard", "trl", "wandb")
STATE_FILE = "follow_state.json"
REPORT_FILE = "follow_report.json"
OFFSET_METRIC = "rlobs/follow_offset"
_READ = 4 * 1024 * 1024


def _identity(st: os.stat_result) -> list[int]:
    return [int(st.st_dev), int(st.st_ino)]


class Follower:
    def __init__(self, fmt: str, path: str | os.PathLike[str], out: str | os.PathLike[str], *,
                 framework: str | None = None, map_file: str | os.PathLike[str] | None = None,
                 prometheus: bool = True, metrics_port: int | None = None, poll_s: float = 0.2) -> None:
        from rlobs.importers import TABLES

        if fmt not in FORMATS:
            raise ImportFailed(f"rlobs follow reads {', '.join(FORMATS)} logs; {fmt!r} is not one "
                               "(wandb run folders: import them after the run with rlobs import)")
        fw = framework or ({"verl": "verl", "trl": "trl"}.get(fmt))
        if fmt in ("tensorboard", "wandb") and fw is None:
            raise ImportFailed(f"give --framework for a {fmt} run (the metric names decide the map)")
        if fw is None or fw not in TABLES:
            raise ImportFailed(f"give --framework ({', '.join(TABLES)}) for {fmt} logs")
        table = TABLES[fw]
        if map_file is not None:
            table = MetricTable(framework=fw, exact={**table.exact, **load_user_map(map_file)},
                                patterns=table.patterns, prefixes=table.prefixes)
        self.fmt, self.framework, self.table = fmt, fw, table
        self.base, self.out = Path(path), Path(out)
        self.path = self.base
        self.poll_s = poll_s
        self.prometheus, self.metrics_port = prometheus, metrics_port
        self.report = ImportReport(source=str(self.path), source_format=f"{fmt} (followed)", framework=fw)
        self.offset = 0
        self.ident: list[int] | None = None
        self.fh: Any = None
        self.lines = 0
        self._skip_to_newline = False
        self.rec: Any = None
        self._held: tuple[int, dict[str, float], int, str] | None = None  # TensorBoard: (step, values, start, origin)
        self._last_data = time.time()
        self.hold_s = 1.0
        self._reported: set[int] = set()
        self._reported_where: set[str] = set()

    # ---- state ----
    def _resume_point(self) -> None:
        state_path = self.out / STATE_FILE
        state = {}
        if state_path.exists():
            try:
                state = json.loads(state_path.read_text())
            except (OSError, ValueError):
                state = {}
        offset = None
        if (self.out / "events").exists():
            import rlobs

            with rlobs.open_run(self.out) as rec:
                if rec.counts().get("scalar"):
                    row = rec.sql(f"SELECT value FROM scalar WHERE name = '{OFFSET_METRIC}' "
                                  "ORDER BY ts_ns DESC LIMIT 1").fetchall()
                    offset = int(row[0][0]) if row else None
        self.ident = state.get("ident")
        self.offset = offset if offset is not None else 0
        if offset is not None:
            self.report.notes.append(f"resumed at byte {offset} of {state.get('path', self.path)}")

    def _save_state(self) -> None:
        tmp = self.out / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps({"path": str(self.path), "ident": self.ident, "offset": self.offset,
                                   "lines": self.lines}))
        os.replace(tmp, self.out / STATE_FILE)
        rep = self.out / (REPORT_FILE + ".tmp")
        rep.write_text(json.dumps(self.report.to_dict(), indent=1, sort_keys=True, default=str) + "\n")
        os.replace(rep, self.out / REPORT_FILE)

    # ---- file handling ----
    def _target(self) -> Path:
        """The file to read: ``path``, or for a TensorBoard folder its newest event file (a new one = rotation)."""
        if self.fmt == "wandb" and self.base.is_dir():
            files = sorted((p for p in self.base.rglob("*.wandb") if p.is_file()),
                           key=lambda p: (p.stat().st_mtime_ns, p.name))
            return files[-1] if files else self.base / "run-none.wandb"
        if self.fmt == "tensorboard" and self.base.is_dir():
            files = sorted((p for p in self.base.rglob("events.out.tfevents*") if p.is_file()),
                           key=lambda p: (p.stat().st_mtime_ns, p.name))
            return files[-1] if files else self.base / "events.out.tfevents.none"
        return self.base

    def _open_current(self) -> bool:
        """Open the file at ``path`` if not open; handle rotation and truncation. True when a file is open."""
        self.path = self._target()
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return self.fh is not None
        ident = _identity(st)
        if self.fh is None:
            self.fh = self.path.open("rb")
            if self.ident is not None and ident != self.ident:  # rotated while we were away
                self.report.notes.append(f"{self.path} is a new file since the last run: read from byte 0")
                self.offset = 0
            self.ident = ident
            self.fh.seek(self.offset)
            return True
        if ident != self.ident:  # rotated: finish the old file, then switch
            if self._read_available() == 0:
                self._flush_held()
                self.fh.close()
                self.fh = self.path.open("rb")
                self.report.notes.append(f"{self.path} rotated after byte {self.offset}: following the new file")
                self.ident, self.offset = ident, 0
                self._skip_to_newline = False
        elif st.st_size < self.offset:  # truncated in place
            self.report.notes.append(f"{self.path} truncated to {st.st_size} bytes (was read to {self.offset}): "
                                     "reading it again from byte 0")
            self.offset = 0
            self.fh.seek(0)
            self._skip_to_newline = False
        return True

    def _read_available(self) -> int:
        if self.fmt == "tensorboard":
            return self._read_tensorboard()
        if self.fmt == "wandb":
            return self._read_wandb()
        return self._read_lines()

    def _read_wandb(self) -> int:
        """Whole, CRC-checked records of the run file after ``offset``; each history record is a row."""
        import mmap

        from wandb.proto import wandb_internal_pb2

        from rlobs.importers import wandb_binary as wb

        size = os.fstat(self.fh.fileno()).st_size
        if size <= max(self.offset, wb.FILE_HEADER):
            return 0
        data = mmap.mmap(self.fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            scratch = ImportReport(source=str(self.path))
            ends: list[int] = []
            rows = []
            for (off, raw), end in zip(wb.chunks_to_records(data, self.path.name, scratch, self.offset, ends), ends):
                rec = wandb_internal_pb2.Record.FromString(raw)
                if rec.WhichOneof("record_type") == "history":
                    row = wb.history_row(rec.history, f"{self.path.name}:byte {off}", self.report)
                    if row is not None:
                        rows.append((row, end))
                last = end
        except Exception as exc:  # noqa: BLE001 - a damaged record is reported; the rest waits or is skipped
            self.report.issue(f"{self.path.name}:byte {self.offset}", "malformed", str(exc)[:200])
            return 0
        finally:
            data.close()
        for i in scratch.issues:
            if i.problem != "truncated" and i.where not in self._reported_where:
                self._reported_where.add(i.where)
                self.report.issues.append(i)
        if not ends:
            return 0
        self._emit(rows, last)
        self.lines += len(rows)
        consumed = last - self.offset
        self.offset = last
        return consumed

    def _read_tensorboard(self) -> int:
        """Every whole, CRC-checked record after ``offset``; one row per step, emitted when the next step starts
        (or after ``hold_s`` without new records: the writer flushes a step's scalars together)."""
        from tensorboard.compat.proto import event_pb2

        from rlobs.importers import tensorboard as tb
        from rlobs.importers.mapping import MetricRow

        self.fh.seek(self.offset)
        data = self.fh.read(_READ)
        payloads, damage = tb.records(data)
        for off, problem, detail in damage:
            if problem == "truncated":  # the writer is mid-record: wait for the rest
                break
            if (self.offset + off) not in self._reported:
                self._reported.add(self.offset + off)
                self.report.issue(f"{self.path.name}:byte {self.offset + off}", problem, detail)
        end = 0
        for off, raw in payloads:
            end = off + 16 + len(raw)
            try:
                event = event_pb2.Event.FromString(raw)
            except Exception as exc:  # noqa: BLE001 - any decode failure of a CRC-valid record is reported
                self.report.issue(f"{self.path.name}:byte {self.offset + off}", "malformed", str(exc)[:200])
                continue
            if not event.HasField("summary"):
                continue
            values = {}
            for v in event.summary.value:
                x = tb._scalar(v)
                if x is not None:
                    values[v.tag] = x
            if not values:
                continue
            step = int(event.step)
            if self._held is not None and self._held[0] != step:
                self._emit_rows([(MetricRow(self._held[0], self._held[1], self._held[3]), self.offset + off)])
                self._held = None
            if self._held is None:
                self._held = (step, values, self.offset + off, f"{self.path.name}:byte {self.offset + off}")
            else:
                self._held[1].update(values)
        consumed = end
        if consumed:
            self.lines += len(payloads)
            self.offset += consumed
            self._last_data = time.time()
        elif self._held is not None and time.time() - self._last_data > self.hold_s:
            self._flush_held()
        return consumed

    def _flush_held(self) -> None:
        from rlobs.importers.mapping import MetricRow

        if self._held is not None and self.rec is not None:
            self._emit_rows([(MetricRow(self._held[0], self._held[1], self._held[3]), self.offset)])
            self._held = None
            self.rec.flush(timeout=30.0)
            self._save_state()

    def _emit_rows(self, rows: list[tuple[Any, int]]) -> None:
        self._emit(rows, rows[-1][1] if rows else self.offset)

    def _read_lines(self) -> int:
        """Read and emit every complete line after ``offset``; returns the number of bytes consumed."""
        self.fh.seek(self.offset)
        data = self.fh.read(_READ)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > readers.MAX_LINE_BYTES and not self._skip_to_newline:
                self.report.issue(f"{self.path.name}:byte {self.offset}", "oversized",
                                  f"line longer than {readers.MAX_LINE_BYTES} bytes skipped unread")
                self._skip_to_newline = True
            if self._skip_to_newline and data:
                self.offset += len(data)
                return len(data)
            return 0
        chunk = data[:end + 1]
        pos = self.offset
        rows = []
        for raw in chunk.split(b"\n")[:-1]:
            line_end = pos + len(raw) + 1
            if self._skip_to_newline:
                self._skip_to_newline = False
            elif len(raw) > readers.MAX_LINE_BYTES:
                self.report.issue(f"{self.path.name}:byte {pos}", "oversized",
                                  f"line of {len(raw)} bytes skipped (limit {readers.MAX_LINE_BYTES})")
            elif raw.strip():
                self.lines += 1
                where = f"{self.path.name}:byte {pos}"
                obj, why = readers.load_json(raw.decode("utf-8", errors="replace").strip())
                if why is not None:
                    self.report.issue(where, "malformed", why)
                elif not isinstance(obj, dict):
                    self.report.issue(where, "malformed", f"a JSON {type(obj).__name__}, not an object")
                else:
                    row = readers._row_from_object(obj, where)
                    if not readers._too_many_keys(row, self.report):
                        rows.append((row, line_end))
            pos = line_end
        self._emit(rows, pos)
        consumed = pos - self.offset
        self.offset = pos
        return consumed

    def _emit(self, rows: list[tuple[Any, int]], end_offset: int) -> None:
        src = f"{self.framework}:{self.path.name}"
        for row, line_end in rows:
            for step, kind, fields in convert([row], self.table, self.report, source=src):
                self.rec.emit(kind, step=step, **fields)
            self.rec.emit("scalar", step=row.step, name=OFFSET_METRIC, value=float(line_end), source="rlobs follow")
        if not rows and end_offset != self.offset:  # only blank / bad lines: still advance the resume point
            self.rec.emit("scalar", step=None, name=OFFSET_METRIC, value=float(end_offset), source="rlobs follow")

    # ---- main loop ----
    def start(self) -> None:
        import rlobs

        self.out.mkdir(parents=True, exist_ok=True)
        self._resume_point()
        self.rec = rlobs.init(self.out, component="trainer", rank=0, name=self.out.name,
                              config={"imported_from": str(self.path), "framework": self.framework,
                                      "source_format": f"{self.fmt} (followed)"},
                              prometheus=self.prometheus, metrics_port=self.metrics_port, otel=False,
                              set_global=False, flush_interval=0.1)

    def _read_trl(self) -> int:
        """TRL output folder (or trainer_state.json): re-read the newest checkpoint's log_history when it changes
        and emit the rows after the last step emitted (``offset`` holds that step for this format)."""
        from rlobs.importers import _trl_state_in

        state = _trl_state_in(self.base) if self.base.is_dir() else self.base
        if state is None or not state.exists():
            return 0
        st = state.stat()
        seen = [str(state), st.st_mtime_ns, st.st_size]
        if seen == self.ident:
            return 0
        scratch = ImportReport(source=str(state))
        try:
            rows = readers.read_trl_state(state, scratch)
        except ImportFailed:
            return 0  # being rewritten: try again at the next poll
        self.ident, self.path = seen, state
        new = [r for r in rows if r.step is not None and r.step > self.offset]
        if not new:
            return 0
        src = f"{self.framework}:{state.name}"
        events = convert(new, self.table, self.report, source=src)
        for i, (step, kind, fields) in enumerate(events):
            self.rec.emit(kind, step=step, **fields)
            if i + 1 == len(events) or events[i + 1][0] != step:
                self.rec.emit("scalar", step=step, name=OFFSET_METRIC, value=float(step), source="rlobs follow")
        self.lines += len(new)
        self.offset = max(r.step for r in new)
        return len(new)

    def poll_once(self) -> int:
        if self.fmt == "trl":
            n = self._read_trl()
            if n:
                self.rec.flush(timeout=30.0)
                self._save_state()
            return n
        if not self._open_current():
            return 0
        n = self._read_available()
        if n:
            self.rec.flush(timeout=30.0)
            self._save_state()
        return n

    def run(self, *, until: float | None = None, stop: Any = None) -> None:
        self.start()
        try:
            while (until is None or time.time() < until) and not (stop is not None and stop()):
                if self.poll_once() == 0:
                    time.sleep(self.poll_s)
        finally:
            self.close()

    def close(self) -> None:
        self._flush_held()
        if self.rec is not None:
            self.rec.close()
            self.rec = None
            self._save_state()
        if self.fh is not None:
            self.fh.close()
            self.fh = None
