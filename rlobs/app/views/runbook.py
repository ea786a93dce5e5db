"""Runbook: the page of one doctor rule (``?rule=<id>``), read from ``runbooks/<id>.md``."""

from __future__ import annotations

import streamlit as st

from rlobs.app import state
from rlobs.app.data import RunData


def render(run: RunData) -> None:
    from rlobs.doctor import registry
    from rlobs.doctor.model import RUNBOOKS_DIR

    rules = registry()
    rule = st.query_params.get("rule") or st.session_state.get("runbook_rule")
    rule = st.selectbox("Rule", list(rules), index=list(rules).index(rule) if rule in rules else 0, key="runbook_rule")
    path = RUNBOOKS_DIR / f"{rules[rule].runbook.rsplit('/', 1)[-1]}"
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
