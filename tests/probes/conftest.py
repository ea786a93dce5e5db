"""Fixtures for probe tests: a real run record with a real /metrics endpoint, and readers for both."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

import rlobs


class Live:
    """A recorder writing a real run record and serving a real /metrics."""

    def __init__(self, run_dir: Path, component: str = "trainer", rank: int = 0):
        self.run_dir = run_dir
        self.rec = rlobs.init(run_dir, component=component, rank=rank, memory=True, prometheus=True)

    def flush(self) -> None:
        assert self.rec.flush(10.0)

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """{sample name: [(labels without run/component, value)]} from the real endpoint."""
        self.flush()
        text = urllib.request.urlopen(self.rec.metrics_url, timeout=10).read().decode()
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = {k: v for k, v in s.labels.items() if k not in ("run", "component")}
                out.setdefault(s.name, []).append((labels, s.value))
        return out

    def value(self, name: str, **labels: str) -> float:
        """The value of one series (labels must match exactly, ``le`` included for buckets)."""
        for lab, v in self.scrape().get(name, []):
            if lab == labels:
                return v
        raise KeyError(f"no series {name}{labels}")

    def events(self, kind: str) -> list[dict[str, Any]]:
        self.flush()
        return self.rec.sink("memory").of_kind(kind)

    def assert_no_drops(self) -> None:
        self.flush()
        stats = self.rec.stats()
        assert stats["dropped_total"] == 0, stats["dropped"]

    def close_and_open(self):  # noqa: ANN201 - rlobs.store RunRecord
        """Shut the recorder down and open the record with DuckDB."""
        self.assert_no_drops()
        rlobs.shutdown()
        return rlobs.open_run(self.run_dir)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    lv = Live(tmp_path / "run")
    yield lv
    rlobs.shutdown()


def rows(record: Any, sql: str) -> list[tuple]:
    return record.con.execute(sql).fetchall()
