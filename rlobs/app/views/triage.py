"""Triage: the doctor's findings for the run, ranked (causes first), each linking to its evidence and runbook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from rlobs.app import state
from rlobs.app.data import RunData
from rlobs.textsafe import md, md_code

VIEWS = Path(__file__).resolve().parent
# doctor concern -> page that shows its evidence
EVIDENCE_PAGE = {
    "weight_sync": ("weight_sync.py", "Weight sync"), "grader": ("graders.py", "Graders"),
    "ledger": ("samples.py", "Samples"),
}
DEFAULT_PAGE = ("timeline.py", "Timeline")
SEVERITY_COLOR = {"critical": "red", "warning": "orange", "info": "blue"}
MARGIN = 2


def evidence_link(finding: Any, concern: str, bounds: tuple[int, int] | None) -> tuple[Path, str, dict[str, str]]:
    """(page, label, query params) of the view that shows a finding's evidence around its steps."""
    page, title = EVIDENCE_PAGE.get(concern, DEFAULT_PAGE)
    params: dict[str, str] = {}
    label = f"Evidence: {title}"
    if finding.first_step is not None:
        lo, hi = finding.first_step - MARGIN, (finding.last_step if finding.last_step is not None else finding.first_step) + MARGIN
        if bounds:
            lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
        params = {"lo": str(lo), "hi": str(hi), "step": str(finding.first_step)}
        label += f", steps {lo}–{hi}"
    return VIEWS / page, label, params


def render(run: RunData) -> None:
    from rlobs.doctor import registry

    st.title("Triage")
    st.caption(f"run **{md(run.run_id)}** · {md_code(run.path)}")
    state.problems_box(run)
    with st.spinner("running the doctor…"):
        report = run.report()
    rules = registry()
    findings = report.findings
    crit = sum(1 for f in findings if str(f.severity) == "critical")
    warn = sum(1 for f in findings if str(f.severity) == "warning")
    c = st.columns(4)
    c[0].metric("Findings", len(findings))
    c[1].metric("Critical", crit)
    c[2].metric("Warnings", warn)
    c[3].metric("Rules without data", len(report.insufficient))
    if not findings:
        st.success(f"No findings: {len(report.healthy)} rules found nothing wrong; "
                   f"{len(report.insufficient)} lacked the data they need (listed below).")
    bounds = run.steps()
    for i, f in enumerate(findings, 1):
        sev = str(f.severity)
        with st.container(border=True):
            st.markdown(f"#### {i}. {md(f.title)}")
            where = (f"steps {f.first_step}–{f.last_step}" if f.first_step is not None else "whole run")
            explained = f" · explained by {md_code(f.explained_by)}" if f.explained_by else ""
            st.markdown(f":{SEVERITY_COLOR.get(sev, 'gray')}-badge[{md(sev.upper())}] {md_code(f.rule)} · {md(where)} · "
                        f"confidence {f.confidence:.2f}{explained}")
            st.markdown(f"**Root cause:** {md(f.root_cause)}")
            if len(f.chain) > 1:
                st.caption("Chain (symptom → cause): " + " → ".join(md(c) for c in f.chain))
            if f.evidence:
                st.dataframe([{"metric": e.metric, "observed": str(e.observed), "threshold": "" if e.threshold is None else str(e.threshold),
                               "steps": "" if e.steps is None else f"{e.steps[0]}–{e.steps[1]}", "note": e.note}
                              for e in f.evidence], hide_index=True, key=f"ev-{i}")
            concern = rules[f.rule].concern if f.rule in rules else ""
            page, label, params = evidence_link(f, concern, bounds)
            left, right = st.columns(2)
            with left:
                st.page_link(page, label=label, icon=":material/query_stats:", query_params=params)
            with right:
                # the rule id comes from the doctor's registry, not from the record: no escaping needed
                st.page_link(VIEWS / "runbook.py", label=f"Runbook: runbooks/{f.rule}.md", icon=":material/menu_book:",
                             query_params={"rule": f.rule})
            if f.remediation:
                with st.expander("Remediation"):
                    st.markdown("\n".join(f"- {md(r)}" for r in f.remediation))
    if report.insufficient:
        with st.expander(f"{len(report.insufficient)} rule(s) lacked data"):
            st.dataframe([{"rule": k, "why": v} for k, v in sorted(report.insufficient.items())], hide_index=True)
    if report.errors:
        st.error(f"{len(report.errors)} rule(s) failed on this record: " +
                 "; ".join(f"{md(k)}: {md(v)}" for k, v in sorted(report.errors.items())))
    st.caption(f"doctor ran {len(rules)} rules in {report.seconds:.2f} s")


if __name__ == "__main__":
    state.page(render)
