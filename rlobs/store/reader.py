"""Open a run record and query it with DuckDB.

``open_run(path)`` reads the manifest (refusing unknown schema majors), finds every segment,
reads open or truncated IPC streams up to their last complete batch, checks sealed Parquet files,
and creates one DuckDB view per event kind plus an ``events`` view of all envelopes. Whatever could
not be read is listed in ``RunRecord.problems``; it never raises for a damaged segment.
"""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from rlobs.schema import ENVELOPE_NAMES, KINDS, SCHEMA_MAJOR, all_fields, arrow_schema, parse_version
from rlobs.store import compact
from rlobs.store.manifest import EVENTS_DIR, PROCESSES_DIR, RunRecordError, read_manifest
from rlobs.store.safeio import (MAX_PROCESS_FILE_BYTES, RecordFileError, check_checksum, has_glob, read_json,
                               regular)
from rlobs.store.segments import ARROWS, PARQUET

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


@dataclass(frozen=True)
class ReadProblem:
    """A segment that could not be read in full."""

    path: str
    kind: str
    problem: str  # truncated | unsealed | unreadable | schema | malformed (a process file or value)
    detail: str
    rows_read: int = 0
    bytes_unread: int = 0


@dataclass
class ProcessInfo:
    process: str
    component: str = "?"
    rank: int = 0
    host: str = "?"
    pid: int = 0
    started_ns: int | None = None
    ended_ns: int | None = None
    metrics_url: str | None = None
    status: str = "unknown"  # ended | running | lost | unknown
    extra: dict[str, Any] = field(default_factory=dict)


def _schema_major(schema: pa.Schema) -> int | None:
    meta = schema.metadata or {}
    raw = meta.get(b"rlobs.schema_version")
    if raw is None:
        return None
    return parse_version(raw.decode())[0]


def read_stream(path: Path, kind: str = "?") -> tuple[pa.Table | None, ReadProblem | None]:
    """Read an Arrow IPC stream up to its last complete batch. Never raises for damaged data."""
    try:
        size = path.stat().st_size
        source = pa.memory_map(str(path), "r")
    except OSError as exc:
        return None, ReadProblem(str(path), kind, "unreadable", f"{type(exc).__name__}: {exc}")
    batches: list[pa.RecordBatch] = []
    problem: ReadProblem | None = None
    try:
        try:
            reader = pa.ipc.open_stream(source)
        except (pa.ArrowException, OSError) as exc:  # any Arrow error: ArrowNotImplementedError too
            detail = "empty file (writer killed before its first flush)" if size < 8 else str(exc)
            return None, ReadProblem(str(path), kind, "truncated", detail, 0, size)
        major = _schema_major(reader.schema)
        if major is not None and major != SCHEMA_MAJOR:
            return None, ReadProblem(str(path), kind, "schema", f"segment written with schema major {major}")
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
            except (pa.ArrowException, OSError) as exc:  # any Arrow error: ArrowNotImplementedError too
                read = sum(b.nbytes for b in batches)
                problem = ReadProblem(str(path), kind, "truncated", f"partial last batch: {exc}",
                                      sum(b.num_rows for b in batches), max(size - read, 0))
                break
        schema = reader.schema
    finally:
        source.close()
    if problem is None:
        with open(path, "rb") as fh:
            fh.seek(max(size - 8, 0))
            tail = fh.read(8)
        if tail != _EOS:
            problem = ReadProblem(str(path), kind, "unsealed",
                                  "no end-of-stream marker: writer still running or killed",
                                  sum(b.num_rows for b in batches))
    table = pa.Table.from_batches(batches, schema=schema) if batches else pa.Table.from_batches([], schema=schema)
    return table, problem


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class RunRecord:
    """A run record opened for queries. Use ``sql()`` or the per-kind views (``SELECT * FROM rollout``)."""

    def __init__(self, path: Path, manifest: dict[str, Any], con: duckdb.DuckDBPyConnection,
                 problems: list[ReadProblem], files: dict[str, list[str]], processes: list[ProcessInfo],
                 verified: bool = False, checksums: dict[str, int] | None = None):
        self.path = path
        self.verified = verified  # every sealed segment checked (checksum, or page checksums without one)
        self.checksums = checksums or {"verified": 0, "missing": 0}
        self.manifest = manifest
        self.con = con
        self.problems = problems
        self.files = files
        self.processes = processes

    @property
    def run_id(self) -> str:
        return str(self.manifest["run_id"])

    @property
    def schema_version(self) -> str:
        return str(self.manifest["schema_version"])

    def sql(self, query: str, params: Iterable[Any] | None = None) -> duckdb.DuckDBPyRelation:
        return self.con.sql(query, params=params) if params is not None else self.con.sql(query)

    def table(self, kind: str) -> pa.Table:
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}; valid: {', '.join(sorted(KINDS))}")
        return self.con.sql(f'SELECT * FROM "{kind}"').to_arrow_table()

    def counts(self) -> dict[str, int]:
        out = {}
        for kind in self.files:
            try:
                n = self.con.sql(f'SELECT count(*) FROM "{kind}"').fetchall()[0][0]
            except duckdb.Error as exc:
                self.problems.append(ReadProblem(str(self.path / "events" / kind), kind, "unreadable",
                                                 f"count failed: {exc}"))
                continue
            if n:
                out[kind] = int(n)
        return out

    def info(self) -> dict[str, Any]:
        """Summary of the record; a query that hits damaged data is reported in ``problems``, not raised."""
        counts = self.counts()
        span: tuple[Any, Any] = (None, None)
        by_process: dict[str, int] = {}
        query_errors = []
        if counts:
            try:
                span = tuple(self.con.sql("SELECT min(ts_ns), max(ts_ns) FROM events").fetchall()[0])
                for proc, n in self.con.sql("SELECT process, count(*) FROM events GROUP BY process ORDER BY process"
                                            ).fetchall():
                    by_process[proc] = int(n)
            except duckdb.Error as exc:
                query_errors.append(asdict(ReadProblem(str(self.path), "*", "unreadable",
                                                       f"query over the events failed: {exc}; "
                                                       "open with verify=True to find the damaged segment")))
        return {
            "path": str(self.path),
            "run_id": self.run_id,
            "schema_version": self.schema_version,
            "kinds": counts,
            "events": sum(counts.values()),
            "first_ts_ns": span[0],
            "last_ts_ns": span[1],
            "duration_s": (span[1] - span[0]) / 1e9 if span[0] is not None else 0.0,
            "processes": [{**asdict(p), "events": by_process.get(p.process, 0)} for p in self.processes],
            "problems": [asdict(p) for p in self.problems] + query_errors,
            "truncated": any(p.problem in ("truncated", "unreadable") for p in self.problems),
            "verified": self.verified,
            "checksums": dict(self.checksums),
        }

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "RunRecord":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_PROCESS_FIELDS: dict[str, tuple[type, ...]] = {
    "component": (str,), "rank": (int,), "host": (str,), "pid": (int,), "started_ns": (int,), "ended_ns": (int,),
    "metrics_url": (str,), "process": (str,)}
_INT_RANGE = {"rank": (0, 1 << 31), "pid": (0, 1 << 31), "started_ns": (0, 1 << 63), "ended_ns": (0, 1 << 63)}


def _load_processes(run_dir: Path, problems: list[ReadProblem]) -> list[ProcessInfo]:
    """One ``ProcessInfo`` per ``processes/*.json``; every file or value that cannot be used is listed in
    ``problems`` (the value is left at its default), never raised."""
    out: list[ProcessInfo] = []
    pdir = run_dir / PROCESSES_DIR
    if not pdir.is_dir():
        return out
    host = socket.gethostname()
    try:
        names = sorted(n for n in os.listdir(pdir) if n.endswith(".json") and not n.startswith("."))
    except OSError as exc:
        problems.append(ReadProblem(str(pdir), "process", "unreadable", f"cannot list: {exc.strerror or exc}"))
        return out
    for name in names:
        f = pdir / name
        stem = name[: -len(".json")]
        try:
            raw = read_json(f, MAX_PROCESS_FILE_BYTES)
            if not isinstance(raw, dict):
                raise RecordFileError(f"{f} holds a JSON {type(raw).__name__}, not an object")
        except RecordFileError as exc:
            problems.append(ReadProblem(str(f), "process", "malformed", str(exc)))
            out.append(ProcessInfo(process=stem, status="unknown"))
            continue
        known: dict[str, Any] = {}
        for key, types in _PROCESS_FIELDS.items():
            v = raw.get(key)
            if v is None:
                continue
            lo_hi = _INT_RANGE.get(key)
            ok = isinstance(v, types) and not isinstance(v, bool) and (lo_hi is None or lo_hi[0] <= v < lo_hi[1])
            if isinstance(v, str) and len(v) > 4096:
                ok = False
            if not ok:
                shown = repr(v)
                problems.append(ReadProblem(str(f), "process", "malformed",
                                            f"{key} = {shown[:80]}{'…' if len(shown) > 80 else ''} is not "
                                            f"{'a valid ' + types[0].__name__ if lo_hi is None else 'an integer in range'}"
                                            "; ignored"))
                continue
            known[key] = v
        process = known.pop("process", stem)
        info = ProcessInfo(process=process, **known,
                           extra={k: v for k, v in raw.items() if k not in _PROCESS_FIELDS})
        if info.ended_ns:
            info.status = "ended"
        elif info.host == host and info.pid:
            info.status = "running" if _pid_alive(info.pid) else "lost"
        out.append(info)
    return out


def verify_parquet(path: Path) -> str | None:
    """Read a sealed segment in full with page checksums; the error text if it is corrupt, else None."""
    try:
        pq.ParquetFile(path, page_checksum_verification=True).read()
    except Exception as exc:  # any decode failure means the file cannot be trusted
        return f"{type(exc).__name__}: {exc}"
    return None


def _readable_by_duckdb(con: Any, files: list[str], kind: str, problems: list[ReadProblem]) -> list[str]:
    """The files DuckDB can bind, file by file (it parses each footer itself: a flipped byte that pyarrow's
    metadata reader accepts can still fail here); the others are listed in ``problems``."""
    good = []
    for f in files:
        try:
            con.execute(f"DESCRIBE SELECT * FROM read_parquet({_sql_str(f)})").fetchall()
            good.append(f)
        except duckdb.Error:
            problems.append(ReadProblem(f, kind, "unreadable", "corrupt Parquet metadata (DuckDB cannot read it)"))
    return good


def _create_view(con: Any, kind: str, parquet: list[str], tail: str | None) -> None:
    parts = []
    if parquet:
        parts.append(f"SELECT * FROM read_parquet([{', '.join(_sql_str(p) for p in parquet)}], union_by_name=true)")
    if tail:
        parts.append(f'SELECT * FROM "{tail}"')
    # the full current schema, typed, with no rows (an SQL literal: registering an Arrow table would
    # make DuckDB import pandas, half a second on a cold start)
    parts.append("SELECT " + ", ".join(f'NULL::{_DUCK_TYPES[f.type]} AS "{f.name}"' for f in all_fields(kind))
                 + " WHERE false")
    cols = ", ".join(f'"{f.name}"' for f in arrow_schema(kind))
    con.execute(f'CREATE OR REPLACE VIEW "{kind}" AS SELECT {cols} FROM ({" UNION ALL BY NAME ".join(parts)})')


SMALL_SEGMENTS = 32  # a kind with more sealed segments than this has its small ones read in one pass, in memory
SMALL_SEGMENT_BYTES = 1 << 20
SMALL_TOTAL_BYTES = 64 << 20
MAX_GLOB_NAMED_BYTES = 256 << 20


def _check_parquet(f: Path, kind: str, verify: bool, problems: list[ReadProblem]) -> tuple[Any, bool]:
    """(the opened ParquetFile or None when unusable, checksum verified) for one sealed segment; what is
    wrong goes to ``problems``."""
    try:
        pf = pq.ParquetFile(f)
        major = _schema_major(pf.schema_arrow)
        if major is not None and major != SCHEMA_MAJOR:
            problems.append(ReadProblem(str(f), kind, "schema", f"segment written with schema major {major}"))
            return None, False
    except (pa.ArrowException, OSError, ValueError) as exc:  # NotImplemented too (a flipped footer bit)
        problems.append(ReadProblem(str(f), kind, "unreadable", f"{type(exc).__name__}: {exc}"))
        return None, False
    if not verify:
        return pf, False
    bad = check_checksum(f)
    if bad is False:  # no whole-file checksum recorded: page checksums are what there is
        if (error := verify_parquet(f)) is not None:
            problems.append(ReadProblem(str(f), kind, "unreadable", f"corrupt data: {error}"))
            return None, False
        return pf, False
    if bad is not None:
        problems.append(ReadProblem(str(f), kind, "unreadable", f"corrupt: {bad}; left out"))
        return None, False
    return pf, True


def _read_small(kind: str, files: list[tuple[Path, os.stat_result]],
                problems: list[ReadProblem]) -> tuple[pa.Table | None, list[str]]:
    """The rows of many small sealed segments as one table, from the compaction cache when it holds them."""
    k = compact.key(kind, files)
    hit = compact.load(k)
    if hit is not None:
        table, names, probs = hit
        problems += [ReadProblem(**p) for p in probs]
        return table, names
    def one(f: Path) -> tuple[pa.Table | None, list[ReadProblem]]:
        found: list[ReadProblem] = []
        pf, _ = _check_parquet(f, kind, False, found)
        if pf is None:
            return None, found
        try:
            return pf.read(use_threads=False), found
        except (pa.ArrowException, OSError, ValueError) as exc:
            return None, [ReadProblem(str(f), kind, "unreadable", f"{type(exc).__name__}: {exc}")]

    tables, names, probs = [], [], []
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # decoding releases the GIL
        for (f, _st), (table, found) in zip(files, pool.map(one, [f for f, _ in files])):
            probs += found
            if table is not None:
                tables.append(table)
                names.append(str(f))
    problems += probs
    if not tables:
        return None, []
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowException, ValueError) as exc:
        problems.append(ReadProblem(str(files[0][0].parent), kind, "schema", f"segments do not combine: {exc}"))
        return None, []
    compact.save(k, table, names, [asdict(p) for p in probs])
    return table, names


def open_run(path: str | os.PathLike[str], *, verify: bool = False) -> RunRecord:
    """Open the run record at ``path``. Raises RunRecordError / UnsupportedSchemaVersion for a bad manifest.

    ``verify``: check every sealed segment against the SHA-256 its writer recorded (segments without one
    are read in full with page checksums) and leave out corrupt ones, listing them in ``problems``.
    Only regular files are read (FIFOs, devices and symlinks are listed as problems); file names never
    reach DuckDB as glob patterns; a kind split into many small segments is read in one scan.
    """
    run_dir = Path(path)
    if not run_dir.exists():
        raise RunRecordError(f"{run_dir} does not exist")
    if not run_dir.is_dir():
        raise RunRecordError(f"{run_dir} is not a directory")
    manifest = read_manifest(run_dir)
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET parquet_metadata_cache = true")  # sealed segments never change: parse each footer once
    problems: list[ReadProblem] = []
    files: dict[str, list[str]] = {}
    checksums = {"verified": 0, "missing": 0}
    events_dir = run_dir / EVENTS_DIR
    envelope_parts = []
    for kind in KINDS:
        kdir = events_dir / kind
        parquet: list[str] = []
        in_memory: list[str] = []  # sealed segments read here (small ones of a many-segment kind, glob names)
        tails: list[pa.Table] = []
        try:
            entries = sorted(os.listdir(kdir)) if kdir.is_dir() else []
        except OSError as exc:
            problems.append(ReadProblem(str(kdir), kind, "unreadable", f"cannot list: {exc.strerror or exc}"))
            entries = []
        names = set(entries)
        # many small sealed segments: read here into one in-memory table (a compacted copy is cached, see
        # rlobs.store.compact), instead of DuckDB re-reading thousands of footers for every query
        many = sum(n.endswith(PARQUET) for n in entries) > SMALL_SEGMENTS
        small_bytes = 0
        small_files: list[tuple[Path, os.stat_result]] = []
        for name in entries:
            if name.startswith("."):
                continue
            f = kdir / name
            if f.suffix not in (PARQUET, ARROWS):
                continue
            if f.suffix == ARROWS and f.with_suffix(PARQUET).name in names:
                continue  # sealed; the .arrows is a leftover of an interrupted seal
            try:
                st = regular(f)
            except RecordFileError as exc:
                problems.append(ReadProblem(str(f), kind, "unreadable", str(exc)))
                continue
            if f.suffix == PARQUET:
                if (many and st.st_size <= SMALL_SEGMENT_BYTES and small_bytes + st.st_size <= SMALL_TOTAL_BYTES
                        and not has_glob(str(f))):
                    if verify:  # checksums first: a corrupt segment never reaches the compacted copy
                        bad = check_checksum(f)
                        recorded = bad is not False
                        if bad is False:
                            bad = verify_parquet(f)
                        if bad is not None:
                            problems.append(ReadProblem(str(f), kind, "unreadable", f"corrupt: {bad}; left out"))
                            continue
                        checksums["verified" if recorded else "missing"] += 1
                    small_files.append((f, st))
                    small_bytes += st.st_size
                    continue
                pf, checked = _check_parquet(f, kind, verify, problems)
                if pf is None:
                    continue
                if verify:
                    checksums["verified" if checked else "missing"] += 1
                glob_name = has_glob(str(f))  # DuckDB would expand it as a pattern: read it here instead
                if glob_name and st.st_size > MAX_GLOB_NAMED_BYTES:
                    problems.append(ReadProblem(str(f), kind, "unreadable", "name contains glob characters and the "
                                                "file is too large to read outside DuckDB: rename it"))
                    continue
                if glob_name:
                    try:
                        tails.append(pf.read())
                        in_memory.append(str(f))
                    except (pa.ArrowException, OSError, ValueError) as exc:
                        problems.append(ReadProblem(str(f), kind, "unreadable", f"{type(exc).__name__}: {exc}"))
                    continue
                parquet.append(str(f))
            else:
                table, problem = read_stream(f, kind)
                if problem is not None:
                    problems.append(problem)
                if table is not None and table.num_rows:
                    tails.append(table)
        if small_files:
            table, names_read = _read_small(kind, small_files, problems)
            if table is not None:
                tails.append(table)
                in_memory += names_read
        tail = None
        if tails:
            tail = f"_tail_{kind}"
            try:
                con.register(tail, pa.concat_tables(tails, promote_options="permissive"))
            except (pa.ArrowException, ValueError) as exc:
                problems.append(ReadProblem(str(kdir), kind, "schema", f"open segments do not combine: {exc}"))
                tail = None
        try:
            _create_view(con, kind, parquet, tail)
        except duckdb.Error:  # a footer DuckDB cannot parse: leave out (and list) the files it cannot bind
            parquet = _readable_by_duckdb(con, parquet, kind, problems)
            _create_view(con, kind, parquet, tail)
        if parquet or tails:
            files[kind] = parquet + in_memory + [f"<open segment {t}>" for t in range(len(tails) - len(in_memory))]
            env_cols = ", ".join(f'"{n}"' for n in ENVELOPE_NAMES)
            envelope_parts.append(f"SELECT {_sql_str(kind)} AS kind, {env_cols} FROM \"{kind}\"")
    if envelope_parts:
        con.execute("CREATE VIEW events AS " + " UNION ALL ".join(envelope_parts))
    else:
        env_cols = ", ".join(f'NULL::{_duck(n)} AS "{n}"' for n in ENVELOPE_NAMES)
        con.execute(f"CREATE VIEW events AS SELECT NULL::VARCHAR AS kind, {env_cols} WHERE false")
    processes = _load_processes(run_dir, problems)
    return RunRecord(run_dir, manifest, con, problems, files, processes, verified=verify, checksums=checksums)


_DUCK_TYPES = {"int32": "INTEGER", "int64": "BIGINT", "float64": "DOUBLE", "float32": "FLOAT", "string": "VARCHAR",
               "bool": "BOOLEAN", "list<float32>": "FLOAT[]", "list<int32>": "INTEGER[]"}


def _duck(name: str) -> str:
    return {"ts_ns": "BIGINT", "mono_ns": "BIGINT", "rank": "INTEGER", "step": "BIGINT",
            "policy_version": "BIGINT"}.get(name, "VARCHAR")


def is_run_dir(path: Path) -> bool:
    try:
        read_manifest(path)
    except RunRecordError:
        return False
    return True


__all__ = ["RunRecord", "ReadProblem", "ProcessInfo", "open_run", "read_stream", "RunRecordError", "is_run_dir"]
