"""Streamlit glue shared by the pages: the open runs, the sidebar (run, refresh, damage), and the page guard.

Runs come from ``rlobs replay`` (environment, see ``paths``) or a ``?run=NAME`` URL parameter, always
confined under the runs root. One ``RunData`` per run directory is shared by every session
(``st.cache_resource``); the *Refresh* button and the auto-refresh fragment reopen it when its files
changed. ``page(render)`` runs a page and turns any failure into a message, never a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from rlobs.app import paths
from rlobs.app.data import RunData
from rlobs.textsafe import md

AUTO_REFRESH_S = 5.0
_CONTROL_FLOW = ("StopException", "RerunException", "FragmentStorageKeyError")


@st.cache_resource(show_spinner=False, max_entries=16)
def run_data(path: str) -> RunData:
    """The shared RunData of one (already confined) run directory."""
    return RunData(path)


def runs_root() -> tuple[Path, list[Path]]:
    """(runs root, runs given at start); stops the page with a message when they are not usable."""
    try:
        return paths.from_env()
    except paths.PathOutsideRoot as exc:
        st.error(f"cannot open the run: {md(exc)}")
        st.stop()
        raise  # unreachable (st.stop raises); keeps type checkers honest


def _choices(root: Path, given: list[Path]) -> list[str]:
    names = [paths.relative_name(root, p) for p in given]
    for name in paths.list_runs(root):
        if name not in names:
            names.append(name)
    return names


def _param_run(root: Path, key: str) -> str | None:
    raw = st.query_params.get(key)
    if not raw:
        return None
    try:
        return paths.relative_name(root, paths.confine(root, raw))
    except paths.PathOutsideRoot as exc:
        st.error(f"ignored ?{md(key)}={md(raw, 200)}: {md(exc)}")
        return None


def selected(which: str = "run") -> RunData | None:
    """The RunData chosen for ``which`` ("run": the primary run, "run2": the comparison run)."""
    root, given = runs_root()
    name = st.session_state.get(which)
    if name is None:
        name = _param_run(root, which)
    if name is None:
        index = 0 if which == "run" else 1
        if len(given) > index:
            name = paths.relative_name(root, given[index])
    if name is None:
        return None
    try:
        path = paths.confine(root, name)
    except paths.PathOutsideRoot as exc:
        st.error(md(exc))
        return None
    return run_data(str(path))


def sidebar() -> None:
    """Run picker, refresh button, auto-refresh for a run being written, and the record's state."""
    root, given = runs_root()
    names = _choices(root, given)
    with st.sidebar:
        if not names:
            st.error(f"no run under {md(root)}")
            return
        current = st.session_state.get("run") or _param_run(root, "run") or names[0]
        st.selectbox("Run", names, index=names.index(current) if current in names else 0, key="run",
                     help=f"runs under {md(root)}")
        run = selected("run")
        if run is None:
            return
        if st.button("Refresh", help="re-read the record if its files changed", key="refresh"):
            changed = run.refresh()
            st.toast("record re-read" if changed else "no new events")
        live = st.toggle("Auto-refresh", value=run.still_running, key="auto_refresh",
                         help=f"re-read every {AUTO_REFRESH_S:.0f} s while the run is written")
        if live:
            _watch(str(run.path))
        _record_state(run)


@st.fragment(run_every=AUTO_REFRESH_S)
def _watch(path: str) -> None:
    run = run_data(path)
    if run.refresh():
        st.rerun(scope="app")
    st.caption(f"watching: {'writers running' if run.still_running else 'no writer running'}")


def _record_state(run: RunData) -> None:
    if run.error:
        return
    st.caption(f"**{md(run.run_id)}** · {len(run.processes)} processes · opened {time.strftime('%H:%M:%S', time.localtime(run.opened_at))}")
    if run.still_running:
        st.caption(":orange[a writer is still running: use Refresh or Auto-refresh]")
    if run.problems:
        st.warning(f"{len(run.problems)} segment(s) not read in full")


def problems_box(run: RunData) -> None:
    """What could not be read, as a table (damaged or still-open segments)."""
    if not run.problems:
        return
    bad = [p for p in run.problems if p.problem != "unsealed"]
    rows = [{"kind": p.kind, "problem": p.problem, "rows read": p.rows_read, "bytes unread": p.bytes_unread,
             "file": Path(p.path).name, "detail": p.detail[:160]} for p in run.problems]
    box = st.warning if bad else st.info
    box(f"{len(bad)} segment(s) could not be read in full; {len(run.problems) - len(bad)} still open. "
        "Everything before the damage was read.")
    st.dataframe(rows, hide_index=True)


def page(render: Callable[[RunData], Any], *, needs_run: bool = True) -> None:
    """Run one page on the selected run; report a missing or damaged record and any failure as text."""
    run = selected("run")
    if run is None:
        st.error("no run selected")
        return
    if run.error:
        st.error(f"could not open {md(run.path.name)}: {md(run.error)}")
        return
    try:
        render(run)
    except Exception as exc:  # never a traceback in front of the user: say what failed
        if type(exc).__name__ in _CONTROL_FLOW:
            raise
        st.error(f"this page could not be drawn from {md(run.path.name)}: {type(exc).__name__}: {md(exc)}")
        problems_box(run)


def int_param(name: str, default: int | None = None) -> int | None:
    raw = st.query_params.get(name)
    try:
        return int(raw) if raw not in (None, "") else default
    except ValueError:
        return default


def step_range(run: RunData, key: str, label: str = "Steps") -> tuple[int, int]:
    """A step range slider initialised from ``?lo=&hi=`` (links from Triage), shared by the pages."""
    bounds = run.steps()
    if bounds is None:
        return (0, 0)
    lo, hi = bounds
    if lo == hi:
        st.caption(f"step {lo}")
        return (lo, hi)
    init_lo = min(max(int_param("lo", lo) or lo, lo), hi)
    init_hi = max(min(int_param("hi", hi) if int_param("hi") is not None else hi, hi), init_lo)
    return st.slider(label, lo, hi, (init_lo, init_hi), key=f"{key}:{run.fingerprint[:6]}:{lo}:{hi}")
