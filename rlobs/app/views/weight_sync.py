"""Weight sync: a Gantt of the five boundaries of each version, and one sync in full.

Bars come from ``weight_sync`` events (``start_ns`` and ``duration_s``; ``ts_ns - duration`` when a probe
did not record the start); each bar's tooltip and the versions table carry the path the sync took
(shm | object_store | cuda_ipc | nccl). The drill-down shows path, bytes, bandwidth, fingerprints,
the cache reset and in-flight requests of one version, boundary by boundary.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rlobs.app import charts, state
from rlobs.app.data import RunData
from rlobs.textsafe import md

GANTT_VERSIONS = 40
DETAIL_COLUMNS = ["boundary", "outcome", "path", "duration_s", "bytes", "bandwidth_bps", "retries", "tensors_expected",
                  "tensors_present", "missing_tensors", "fingerprint", "fingerprint_match", "mismatched_tensors",
                  "lock_wait_s", "lock_hold_s", "seq_before", "seq_after", "torn", "mem_hwm_bytes", "reset_requested",
                  "reset_confirmed", "inflight_aborted", "inflight_resumed", "error", "component", "step"]


def pick_versions(versions: pd.DataFrame, n: int = GANTT_VERSIONS) -> list[int]:
    """Up to ``n`` versions: every failed one first, then the latest ok ones."""
    failed = versions[versions["failed"].notna()]["version"].tolist()
    ok = versions[versions["failed"].isna()]["version"].tolist()
    chosen = failed[:n] + ok[-max(0, n - len(failed)):] if n > len(failed) else failed[:n]
    return sorted(int(v) for v in chosen)


def render(run: RunData) -> None:
    st.title("Weight sync")
    state.problems_box(run)
    all_versions = run.q("sync_versions")
    if all_versions.empty:
        st.info("no weight_sync events in this record")
        return
    lo, hi = state.step_range(run, "weight_sync")
    versions = all_versions[(all_versions["step"] >= lo) & (all_versions["step"] <= hi)]
    failed = versions[versions["failed"].notna()]
    m = st.columns(5)
    m[0].metric("Versions synced", len(versions))
    m[1].metric("Syncs with a failed boundary", len(failed))
    m[2].metric("Median end-to-end", f"{versions['end_to_end_s'].median() * 1e3:.1f} ms" if versions["end_to_end_s"].notna().any() else "—")
    m[3].metric("Slowest transfer", f"{versions['transfer_s'].max() * 1e3:.1f} ms" if versions["transfer_s"].notna().any() else "—")
    unconfirmed = int((versions["cache_reset_confirmed"] == False).sum())
    m[4].metric("Cache resets not confirmed", unconfirmed)
    shown = pick_versions(versions)
    if shown:
        bars = run.q("sync_gantt", tuple(shown))
        st.altair_chart(charts.gantt(bars), width="stretch")
        if (bars["layout"] == "sequential").any():
            st.caption("Versions without boundary start times (start_ns) are laid out end to end in boundary order.")
        paths = versions["path"].dropna().value_counts() if "path" in versions else []
        if len(paths):
            st.caption("Path taken: " + ", ".join(f"{md(str(p))} ({n} versions)" for p, n in paths.items()))
        if len(versions) > len(shown):
            st.caption(f"Gantt shows {len(shown)} of {len(versions)} versions in range: every failed one, then the latest.")
    st.subheader("Versions")
    st.dataframe(versions, hide_index=True, key="sync_versions_table",
                 column_config={"transfer_mb_per_s": st.column_config.NumberColumn("transfer MB/s", format="%.1f")})
    st.subheader("One sync in full")
    options = versions["version"].astype(int).tolist() or all_versions["version"].astype(int).tolist()
    wanted = state.int_param("version")
    if wanted is None and state.int_param("step") is not None:
        near = versions[versions["step"] >= state.int_param("step")]
        near_failed = near[near["failed"].notna()]
        wanted = int((near_failed if len(near_failed) else near)["version"].iloc[0]) if len(near) else None
    if wanted is None and len(failed):
        wanted = int(failed["version"].iloc[0])
    default = options.index(wanted) if wanted in options else len(options) - 1
    version = st.selectbox("Version", options, index=default, key=f"sync_version:{lo}:{hi}")
    detail = run.q("sync_detail", int(version))
    row = versions[versions["version"] == version]
    if len(row) and pd.notna(row.iloc[0]["failed"]):
        st.error(f"version {version}: failed boundaries: {md(row.iloc[0]['failed'])}")
    elif len(row):
        st.success(f"version {version}: every boundary ok")
    cols = [c for c in DETAIL_COLUMNS if c in detail.columns]
    table = detail[cols].set_index("boundary").T.astype(str)
    st.dataframe(table, key="sync_detail_table", height=35 * (len(table) + 1) + 3)


if __name__ == "__main__":
    state.page(render)
