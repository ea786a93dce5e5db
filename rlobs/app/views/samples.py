"""Samples: a filterable table of samples and one sample in full (prompt, completion, per-token log-probs
from the generator and the trainer, reward and grader calls, ledger history)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rlobs.app import state
from rlobs.app.data import RunData
from rlobs.app.queries import SampleFilter
from rlobs.textsafe import md

PAGE_SIZE = 200


def filters(run: RunData) -> tuple[SampleFilter, int]:
    lo, hi = state.step_range(run, "samples")
    c = st.columns(4)
    group = c[0].text_input("Group id (exact, or prefix*)", key="f_group")
    sample = c[1].text_input("Sample id", value=st.query_params.get("sample", ""), key="f_sample")
    reasons = c[2].multiselect("Finish reason", run.q("distinct_values", "rollout", "finish_reason"), key="f_finish")
    outcomes = c[3].multiselect("Grader outcome", ["ok", "timeout", "error"], key="f_outcome")
    d = st.columns(4)
    min_dlogp = d[0].number_input("Min |Δlogp| (0: any)", min_value=0.0, value=0.0, step=0.001, format="%.4f", key="f_dlogp")
    min_stale = d[1].number_input("Min staleness (0: any)", min_value=0, value=0, step=1, key="f_stale")
    page = d[2].number_input("Page", min_value=1, value=1, step=1, key="f_page")
    return SampleFilter(step_lo=lo, step_hi=hi, group=group, sample=sample, finish_reasons=list(reasons),
                        outcomes=list(outcomes), min_abs_dlogp=min_dlogp or None, min_staleness=int(min_stale) or None), int(page)


def render(run: RunData) -> None:
    st.title("Samples")
    state.problems_box(run)
    f, page = filters(run)
    table, total = run.samples_page(f, PAGE_SIZE, (page - 1) * PAGE_SIZE)
    first = (page - 1) * PAGE_SIZE + 1 if total else 0
    st.caption(f"{total:,} samples match · showing {first:,}–{min(total, page * PAGE_SIZE):,}")
    picked = st.dataframe(table, hide_index=True, key="samples_table", on_select="rerun", selection_mode="single-row",
                          column_config={"abs_dlogp": st.column_config.NumberColumn("|Δlogp|", format="%.4f"),
                                         "grader_latency_s": st.column_config.NumberColumn(format="%.3f")})
    if table.empty:
        return
    ids = table["sample_id"].tolist()
    rows = picked.selection.rows if picked is not None and hasattr(picked, "selection") else []
    wanted = ids[rows[0]] if rows and rows[0] < len(ids) else st.query_params.get("sample")
    sid = st.selectbox("Sample in full (or click a row)", ids, index=ids.index(wanted) if wanted in ids else 0,
                       key=f"sample_pick:{ids[0]}:{wanted}")
    show_sample(run, sid)


def show_sample(run: RunData, sample_id: str) -> None:
    d = run.q("sample_detail", sample_id)
    if d is None:
        st.warning(f"sample {md(sample_id)} not found")
        return
    r = d["rollout"]
    st.subheader(f"Sample {md(sample_id)}")
    stale = (r.get("policy_version") - r.get("dispatch_version")) if r.get("dispatch_version") is not None and r.get("policy_version") is not None else None
    consumed = d["ledger"][d["ledger"]["state"] == "consumed"] if len(d["ledger"]) else d["ledger"]
    if len(consumed) and pd.notna(consumed.iloc[0]["staleness"]):
        stale = int(consumed.iloc[0]["staleness"])
    c = st.columns(6)
    c[0].metric("Step", r.get("step"))
    c[1].metric("Group", r.get("group_id") or "—")
    c[2].metric("Reward", "—" if d["reward"] is None else f"{d['reward']:.4g}")
    c[3].metric("Staleness", "—" if stale is None else stale)
    c[4].metric("Finish reason", r.get("finish_reason") or "—")
    c[5].metric("Completion tokens", r.get("completion_tokens") if r.get("completion_tokens") is not None else "—")
    left, right = st.columns(2)
    with left:
        st.markdown("**Prompt**")
        st.code(d["prompt"] if d["prompt"] is not None else "(not recorded)", language=None, wrap_lines=True)
    with right:
        st.markdown("**Completion**")
        st.code(d["completion"] if d["completion"] is not None else "(not recorded)", language=None, wrap_lines=True)
    tokens = d["tokens"]
    st.markdown("**Per-token log-probs (generator vs trainer)**")
    if len(tokens):
        both = tokens.dropna(subset=["abs_dlogp"])
        if len(both):
            st.caption(f"{len(both)} tokens compared · mean |Δlogp| {both['abs_dlogp'].mean():.4f} · "
                       f"max {both['abs_dlogp'].max():.4f}")
        st.line_chart(tokens.set_index("position")[["generator_logprob", "trainer_logprob"]], height=200)
        st.dataframe(tokens, hide_index=True, key="tokens_table")
    else:
        st.caption("no per-token log-probs recorded for this sample")
    st.markdown("**Reward breakdown (grader calls)**")
    st.dataframe(d["grader_calls"], hide_index=True, key="grader_calls_table")
    st.markdown("**Ledger**")
    st.dataframe(d["ledger"], hide_index=True, key="ledger_table")
    with st.expander("All rollout fields"):
        st.json({k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()})


if __name__ == "__main__":
    state.page(render)
