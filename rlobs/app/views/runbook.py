"""Runbook: the page of one doctor rule (``?rule=<id>``), read from the installed ``runbooks/<id>.md``
(package data, ``rlobs.runbooks.runbook_path``), so it renders from a wheel as from a checkout."""

from __future__ import annotations

import streamlit as st

from rlobs.app import state
from rlobs.app.data import RunData


def render(run: RunData) -> None:
    from rlobs.doctor import registry
    from rlobs.runbooks import runbook_path

    rules = registry()
    rule = st.query_params.get("rule") or st.session_state.get("runbook_rule")
    rule = st.selectbox("Rule", list(rules), index=list(rules).index(rule) if rule in rules else 0, key="runbook_rule")
    path = runbook_path(rules[rule].id)
    st.caption(f"`runbooks/{path.name}`")
    try:
        st.markdown(path.read_text(encoding="utf-8"))
    except OSError as exc:
        st.warning(f"runbook not found: {exc}")
    st.page_link(state_views() / "triage.py", label="Back to Triage", icon=":material/arrow_back:")


def state_views():
    from pathlib import Path

    return Path(__file__).resolve().parent


if __name__ == "__main__":
    state.page(render)
