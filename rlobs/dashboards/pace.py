"""A run's optimiser step time, measured from its record: what `--step-seconds-from RUN` builds the precursor alerts
for (``rlobs.dashboards.alerts.precursor_rules(step_seconds=...)``)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence


class PaceError(ValueError):
    """No step time can be read from the given records (none, or fewer than two steps of one process)."""


def measured_step_seconds(run_dirs: Sequence[str | os.PathLike[str]]) -> float:
    """The median wall time between consecutive ``train_step`` events of one process, over every trainer process of
    the records (a previous run of the same settings, or the run being watched once it has stepped). The median: a
    held-out evaluation or a checkpoint between two steps is one long gap among many."""
    import duckdb

    from rlobs.store import RunRecordError, open_run

    gaps: list[float] = []
    for d in run_dirs:
        try:
            rec = open_run(d)
        except (OSError, RunRecordError) as exc:
            raise PaceError(f"{d}: not a readable run record ({exc})") from None
        try:
            if not rec.counts().get("train_step"):
                continue
            gaps += [g for (g,) in rec.sql(
                "SELECT (ts_ns - lag(ts_ns) OVER (PARTITION BY process ORDER BY ts_ns)) / 1e9 FROM train_step"
            ).fetchall() if g is not None and g > 0]
        except duckdb.Error as exc:
            raise PaceError(f"{d}: its train_step events could not be read ({exc})") from None
        finally:
            rec.close()
    if not gaps:
        raise PaceError(f"no two optimiser steps of one process in {', '.join(map(str, run_dirs))}: give "
                        "--step-seconds instead")
    return statistics.median(gaps)
