"""Graders: latency distribution per grader kind, timeouts and errors over steps, the slowest calls with their samples."""

from __future__ import annotations

import streamlit as st

from rlobs.app import charts, state
from rlobs.app.data import RunData
from rlobs.textsafe import md

VIEWS = __import__("pathlib").Path(__file__).resolve().parent


def render(run: RunData) -> None:
    st.title("Graders")
    state.problems_box(run)
    summary = run.q("grader_summary")
    if summary.empty:
        st.info("no grader_call events in this record")
        return
    m = st.columns(4)
    m[0].metric("Grader calls", f"{int(summary['calls'].sum()):,}")
    m[1].metric("Timeouts", f"{int(summary['timeouts'].sum()):,}")
    m[2].metric("Errors", f"{int(summary['errors'].sum()):,}")
    m[3].metric("Worst p99", f"{summary['p99_s'].max():.3g} s")
    st.subheader("Latency per grader kind")
    st.dataframe(summary, hide_index=True, key="grader_summary_table",
                 column_config={c: st.column_config.NumberColumn(format="%.4f") for c in
                                ("p50_s", "p95_s", "p99_s", "max_s", "mean_queue_wait_s")})
    left, right = st.columns(2)
    with left:
        st.altair_chart(charts.histogram(run.q("grader_latency_histogram"), "latency_s", "calls", color="grader_kind",
                                         title="latency distribution (log bins)", log_x=True), width="stretch")
    with right:
        lo, hi = state.step_range(run, "graders")
        by_step = run.q("grader_by_step")
        by_step = by_step[(by_step["step"] >= lo) & (by_step["step"] <= hi)]
        if len(by_step):
            st.altair_chart(charts.series_chart(by_step, "timeouts", color="grader_kind", title="timeouts per step",
                                                axis="step", domain=(lo, hi)), width="stretch")
            st.altair_chart(charts.series_chart(by_step, "p95_s", color="grader_kind", title="p95 latency per step (s)",
                                                axis="step", domain=(lo, hi), log_y=True), width="stretch")
        else:
            st.info("no grader calls tied to a step in this range")
    st.subheader("Slowest calls")
    kinds = ["all", *summary["grader_kind"].dropna().astype(str).tolist()]
    kind = st.selectbox("Grader kind", kinds, key="slow_kind")
    slow = run.q("slowest_calls", 20, None if kind == "all" else kind)
    st.dataframe(slow, hide_index=True, key="slowest_table")
    if len(slow):
        sid = st.selectbox("Open the sample of a slow call", slow["sample_id"].tolist(), key="slow_sample")
        st.page_link(VIEWS / "samples.py", label=f"Sample {md(sid)} in full", icon=":material/open_in_new:",
                     query_params={"sample": sid})


if __name__ == "__main__":
    state.page(render)
