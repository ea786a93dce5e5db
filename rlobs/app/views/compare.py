"""Compare: two runs overlaid on the same axes (steps), and the difference between their configs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rlobs.app import charts, paths, state
from rlobs.app.data import RunData
from rlobs.textsafe import md

SERIES = [  # (query, column, title, log scale)
    ("train_series", "reward_mean", "reward (batch mean)", False),
    ("train_series", "grad_norm", "grad norm (pre-clip)", True),
    ("staleness_series", "mean_staleness", "mean staleness", False),
    ("advantage_series", "zero_std_ratio", "groups with zero reward std", False),
    ("parity_series", "mean_abs_dlogp", "train/serve mean |Δlogp|", True),
    ("train_series", "step_seconds", "step seconds", False),
]


def overlay(a: RunData, b: RunData, query: str, column: str, labels: tuple[str, str]) -> pd.DataFrame:
    parts = []
    for run, label in zip((a, b), labels):
        df = run.q(query)
        if len(df) and column in df:
            parts.append(pd.DataFrame({"step": df["step"], column: df[column], "run": label}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["step", column, "run"])


def render(run: RunData) -> None:
    st.title("Compare")
    root, given = state.runs_root()
    names = [n for n in state._choices(root, given) if paths.confine(root, n) != run.path.resolve()]
    if not names:
        st.info("no second run under the runs root: start with `rlobs replay RUN RUN2`")
        return
    default = paths.relative_name(root, given[1]) if len(given) > 1 else None
    wanted = st.query_params.get("run2") or default
    other_name = st.selectbox("Compare with", names, index=names.index(wanted) if wanted in names else 0, key="run2")
    other = state.run_data(str(paths.confine(root, other_name)))
    if other.error:
        st.error(f"could not open {md(other_name)}: {md(other.error)}")
        return
    labels = (f"A: {run.path.name}", f"B: {other.path.name}")
    st.caption(f"{md(labels[0])} ({md(run.run_id)}) vs {md(labels[1])} ({md(other.run_id)})")
    ba, bb = run.steps(), other.steps()
    if ba is None or bb is None:
        st.info("one of the runs has no steps yet")
    else:
        domain = (min(ba[0], bb[0]), max(ba[1], bb[1]))
        cols = st.columns(2)
        for i, (query, column, title, log) in enumerate(SERIES):
            df = overlay(run, other, query, column, labels)
            if df[column].notna().any():
                with cols[i % 2]:
                    st.altair_chart(charts.series_chart(df, column, color="run", title=title, axis="step",
                                                        domain=domain, log_y=log, palette=["#1f77b4", "#ff7f0e"]),
                                    width="stretch")
    st.subheader("Config diff")
    show_all = st.toggle("Show identical keys too", value=False, key="cfg_all")
    diff = _diff(run, other, show_all)
    n_diff = int(diff["differs"].sum()) if len(diff) else 0
    st.caption(f"{n_diff} key(s) differ")
    st.dataframe(diff.rename(columns={"run A": labels[0], "run B": labels[1]}), hide_index=True, key="config_diff_table")


def _diff(a: RunData, b: RunData, show_all: bool) -> pd.DataFrame:
    from rlobs.app.queries import config_diff

    return config_diff(a.q("config_of"), b.q("config_of"), only_different=not show_all)


if __name__ == "__main__":
    state.page(render)
