"""Timeline: a step scrubber over reward, grad norm (spikes), staleness, denominators, parity and throughput.

Every panel shares the x axis (step or wall time) of the selected range; weight syncs, failed syncs and
declared incidents are drawn as vertical markers on all of them, and the inspected step as a blue one.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rlobs.app import charts, state
from rlobs.app.data import RunData

MAX_SYNC_MARKERS = 300


def markers(run: RunData, lo: int, hi: int) -> pd.DataFrame:
    """Vertical markers in [lo, hi]: failed syncs and incidents always, ok syncs on short ranges."""
    syncs = run.q("sync_markers")
    syncs = syncs[(syncs["step"] >= lo) & (syncs["step"] <= hi)]
    if len(syncs) > MAX_SYNC_MARKERS:
        syncs = syncs[~syncs["ok"].astype(bool)]
    rows = [{"step": int(r.step), "marker": "sync" if r.ok else "sync failed", "label": f"weight sync v{int(r.version)}"}
            for r in syncs.itertuples()]
    inc = run.q("incidents")
    rows += [{"step": int(r.step), "marker": "incident", "label": f"incident: {r.fault}"}
             for r in inc.itertuples() if pd.notna(r.step) and lo <= r.step <= hi]
    return pd.DataFrame(rows, columns=["step", "marker", "label"])


def _in(df: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    return df[(df["step"] >= lo) & (df["step"] <= hi)] if len(df) else df


def render(run: RunData) -> None:
    st.title("Timeline")
    state.problems_box(run)
    if run.steps() is None:
        st.info("this record has no step-stamped events yet")
        return
    lo, hi = state.step_range(run, "timeline")
    c1, c2 = st.columns([3, 1])
    with c1:
        focus = st.slider("Inspect step", lo, hi, min(max(state.int_param("step", lo) or lo, lo), hi),
                          key=f"focus:{lo}:{hi}") if hi > lo else lo
    with c2:
        axis_label = st.segmented_control("x axis", ["step", "wall time"], default="step", key="timeline_axis")
    train = run.q("train_series")
    clock = train[["step", "time"]]
    axis = "time" if axis_label == "wall time" and len(clock) else "step"

    def aligned(df: pd.DataFrame) -> pd.DataFrame:
        df = _in(df, lo, hi)
        return df.merge(clock, on="step", how="left") if axis == "time" and "time" not in df else df

    if axis == "time":
        span = _in(clock, lo, hi)["time"]
        domain = (span.min(), span.max()) if len(span) else (None, None)
    else:
        domain = (lo, hi)
    marks = markers(run, lo, hi)
    marks = pd.concat([marks, pd.DataFrame([{"step": focus, "marker": "inspected", "label": f"step {focus}"}])])
    marks = aligned(marks)

    tr = _in(train, lo, hi)
    adv, par, stale = (run.q(n) for n in ("advantage_series", "parity_series", "staleness_series"))
    spikes = tr[tr["spike"]]
    syncs_failed = int((marks["marker"] == "sync failed").sum())
    m = st.columns(5)
    m[0].metric("Steps shown", f"{lo}–{hi}")
    m[1].metric("Grad-norm spikes", len(spikes), help="steps flagged by the probe or by a rolling median/MAD z-score > 6")
    m[2].metric("Max grad norm", f"{tr['grad_norm'].max():.4g}" if len(tr) and tr["grad_norm"].notna().any() else "—")
    m[3].metric("Failed syncs", syncs_failed)
    m[4].metric("Incidents", int((marks["marker"] == "incident").sum()))
    _focus_row(focus, train, adv, par, stale)

    kw = {"axis": axis, "domain": domain, "markers": marks}
    left, right = st.columns(2)
    with left:
        if len(tr):
            st.altair_chart(charts.series_chart(aligned(train), "reward_mean", title="reward (batch mean)", **kw), width="stretch")
            st.altair_chart(charts.series_chart(aligned(train), "grad_norm", title="grad norm (pre-clip)", points="spike",
                                                log_y=True, **kw), width="stretch")
        else:
            st.info("no train_step events")
        if len(adv):
            st.altair_chart(charts.series_chart(aligned(adv), ["zero_std_ratio", "near_zero_std_ratio"],
                                                title="groups with zero / near-zero reward std", **kw), width="stretch")
            st.altair_chart(charts.series_chart(aligned(adv), "denom_min", title="smallest advantage denominator",
                                                log_y=True, **kw), width="stretch")
    with right:
        if len(stale):
            st.altair_chart(charts.series_chart(aligned(stale), ["mean_staleness", "max_staleness"], title="staleness (versions)",
                                                **kw), width="stretch")
        hist = run.q("staleness_histogram", lo, hi)
        if len(hist):
            st.altair_chart(charts.histogram(hist, "staleness", "samples", title=f"staleness of consumed samples, steps {lo}–{hi}",
                                             height=150), width="stretch")
        if len(par):
            st.altair_chart(charts.series_chart(aligned(par), ["mean_abs_dlogp", "max_abs_dlogp"], title="train/serve |Δlogp|",
                                                thresholds=[(0.005, "healthy < 0.005"), (0.01, "problem > 0.01")],
                                                log_y=True, **kw), width="stretch")
        thr = run.q("throughput_series")
        if len(thr):
            st.altair_chart(charts.series_chart(aligned(thr), "value", color="series", title="throughput (samples/s)", **kw),
                            width="stretch")
    inc = run.q("incidents")
    if len(inc):
        st.subheader("Declared incidents")
        st.dataframe(inc.drop(columns=["ts_ns"]), hide_index=True)
    if len(spikes):
        st.subheader("Grad-norm spikes in range")
        st.dataframe(spikes[["step", "grad_norm", "spike_z", "nonfinite", "loss", "reward_mean"]], hide_index=True)


def _focus_row(step: int, train: pd.DataFrame, adv: pd.DataFrame, par: pd.DataFrame, stale: pd.DataFrame) -> None:
    def at(df: pd.DataFrame, col: str) -> str:
        row = df[df["step"] == step] if len(df) else df
        if not len(row) or pd.isna(row.iloc[0][col]):
            return "—"
        return f"{row.iloc[0][col]:.4g}"

    c = st.columns(5)
    c[0].metric(f"reward @ {step}", at(train, "reward_mean"))
    c[1].metric(f"grad norm @ {step}", at(train, "grad_norm"))
    c[2].metric(f"max staleness @ {step}", at(stale, "max_staleness"))
    c[3].metric(f"zero-std groups @ {step}", at(adv, "zero_std_ratio"))
    c[4].metric(f"mean |Δlogp| @ {step}", at(par, "mean_abs_dlogp"))


if __name__ == "__main__":
    state.page(render)
