"""The run record: manifest, append-only segments, and DuckDB views over them."""

from rlobs.store.manifest import RunRecordError, UnsupportedSchemaVersion, ensure_manifest, read_manifest
from rlobs.store.reader import ProcessInfo, ReadProblem, RunRecord, open_run, read_stream
from rlobs.store.segments import SegmentWriter, seal

__all__ = [
    "RunRecord", "RunRecordError", "UnsupportedSchemaVersion", "ReadProblem", "ProcessInfo",
    "open_run", "read_stream", "ensure_manifest", "read_manifest", "SegmentWriter", "seal",
]
