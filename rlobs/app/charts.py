"""Altair charts aligned on one axis (step or wall time), with sync and incident markers.

Every Timeline and Compare chart goes through ``series_chart`` so that they share the x domain of the
selected step range: the same step sits at the same horizontal position in every panel. Long ranges
are thinned to ``MAX_POINTS`` per series (flagged points such as spikes are always kept).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

MAX_POINTS = 1500
LEGEND = alt.Legend(orient="bottom", direction="horizontal")
# Streamlit's default autosize "fit" squeezes the legend and title into the height: keep the plot height.
FIT_X = alt.AutoSizeParams(type="fit-x", contains="padding")
BOUNDARY_COLORS = alt.Scale(domain=["dump", "staging", "transfer", "load", "cache_reset"],
                            range=["#4c78a8", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2"])
HEIGHT = 190


def thin(df: pd.DataFrame, keep: str | None = None, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Every k-th row so that at most ``max_points`` remain; rows where ``keep`` is true always stay."""
    if len(df) <= max_points:
        return df
    k = -(-len(df) // max_points)
    mask = (pd.RangeIndex(len(df)) % k == 0)
    if keep and keep in df:
        mask = mask | df[keep].fillna(False).astype(bool).to_numpy()
    return df[mask]


def x_encoding(axis: str, domain: tuple[Any, Any]) -> alt.X:
    if axis == "time":
        return alt.X("time:T", title="wall time (UTC)", scale=alt.Scale(domain=[_iso(domain[0]), _iso(domain[1])]))
    return alt.X("step:Q", title="step", scale=alt.Scale(domain=list(domain), nice=False))


def _iso(t: Any) -> str:
    return pd.Timestamp(t).isoformat()


def series_chart(df: pd.DataFrame, y: str | list[str], *, title: str, axis: str, domain: tuple[Any, Any],
                 markers: pd.DataFrame | None = None, points: str | None = None, thresholds: list[tuple[float, str]] | None = None,
                 color: str | None = None, palette: list[str] | None = None, log_y: bool = False,
                 height: int = HEIGHT) -> alt.LayerChart:
    """Lines of ``y`` (one column, or several folded into a legend) over step/time, with overlays.

    markers: rows with ``step``/``time``, ``label`` and ``marker`` (sync ok / sync failed / incident);
    points: a boolean column whose true rows get a red dot (spikes); thresholds: horizontal rules."""
    cols = [y] if isinstance(y, str) else list(y)
    x = x_encoding(axis, domain)
    yscale = alt.Scale(type="symlog") if log_y else alt.Scale(zero=False)
    base = alt.Chart(thin(df, points))
    if color:
        line = base.mark_line(point=len(df) <= 60).encode(x, alt.Y(f"{cols[0]}:Q", title=None, scale=yscale),
                                                        color=alt.Color(f"{color}:N", title=None, legend=LEGEND,
                                                                        scale=alt.Scale(range=palette) if palette else alt.Undefined),
                                                        tooltip=["step", color, cols[0]])
    elif len(cols) == 1:
        line = base.mark_line(point=len(df) <= 60).encode(x, alt.Y(f"{cols[0]}:Q", title=None, scale=yscale),
                                                        tooltip=["step", alt.Tooltip(f"{cols[0]}:Q", format=".4g")])
    else:
        line = base.transform_fold(cols, as_=["series", "value"]).mark_line().encode(
            x, alt.Y("value:Q", title=None, scale=yscale), color=alt.Color("series:N", title=None, legend=LEGEND),
            tooltip=["step", "series:N", alt.Tooltip("value:Q", format=".4g")])
    layers: list[Any] = [line]
    if points and points in df:
        flagged = df[df[points].fillna(False).astype(bool)]
        if len(flagged):
            layers.append(alt.Chart(flagged).mark_point(color="#d62728", size=90, filled=True).encode(
                x, alt.Y(f"{cols[0]}:Q"), tooltip=["step", alt.Tooltip(f"{cols[0]}:Q", format=".4g")]))
    for value, label in thresholds or []:
        layers.append(alt.Chart(pd.DataFrame({"y": [value], "label": [label]})).mark_rule(
            strokeDash=[2, 2], color="#999").encode(y="y:Q", tooltip=["label"]))
    if markers is not None and len(markers):
        layers.append(marker_layer(markers, axis))
    return alt.layer(*layers).properties(height=height, title=title, autosize=FIT_X).resolve_scale(color="independent")


MARKER_COLORS = alt.Scale(domain=["sync", "sync failed", "incident", "inspected"],
                          range=["#c7c7c7", "#ff7f0e", "#d62728", "#1f77b4"])


def marker_layer(markers: pd.DataFrame, axis: str) -> alt.Chart:
    xfield = "time:T" if axis == "time" else "step:Q"
    return alt.Chart(markers).mark_rule(strokeWidth=1.5).encode(
        x=xfield, color=alt.Color("marker:N", scale=MARKER_COLORS, title=None, legend=LEGEND),
        strokeDash=alt.condition(alt.datum.marker == "sync", alt.value([1, 3]), alt.value([])),
        tooltip=["marker", "label", "step"])


def histogram(df: pd.DataFrame, x: str, y: str, *, title: str, color: str | None = None, log_x: bool = False,
              height: int = 220) -> alt.Chart:
    enc: dict[str, Any] = {"x": alt.X(f"{x}:{'Q' if log_x else 'O'}", title=x,
                                      scale=alt.Scale(type="log") if log_x else alt.Undefined),
                           "y": alt.Y(f"{y}:Q", title=y), "tooltip": list(df.columns)}
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=None, legend=LEGEND)
    mark = alt.Chart(df).mark_bar(opacity=0.8) if not log_x else alt.Chart(df).mark_bar(opacity=0.7, width=6)
    return mark.encode(**enc).properties(height=height, title=title, autosize=FIT_X)


def gantt(df: pd.DataFrame, *, height_per_version: int = 22) -> alt.LayerChart:
    """Boundaries of each version as bars, ms since the version's sync started; failed boundaries outlined red."""
    versions = df["version"].nunique() if len(df) else 1
    x, x2 = alt.X("start_ms:Q", title="ms since the sync started"), alt.X2("end_ms:Q")
    y = alt.Y("version:O", title="version", sort="ascending")
    tooltip = ["version", "boundary", "outcome", alt.Tooltip("start_ms:Q", format=".2f"),
               alt.Tooltip("duration_ms:Q", format=".3f")]
    tooltip += [alt.Tooltip("path:N"), alt.Tooltip("mb_per_s:Q", format=".1f", title="MB/s")] if "path" in df else []
    bars = alt.Chart(df).mark_bar(height={"band": 0.7}).encode(
        x, x2, y, color=alt.Color("boundary:N", scale=BOUNDARY_COLORS, title=None, legend=LEGEND), tooltip=tooltip)
    failed = alt.Chart(df[df["outcome"] != "ok"]).mark_bar(height={"band": 0.9}, filled=False, stroke="#d62728",
                                                           strokeWidth=2.5).encode(x, x2, y, tooltip=tooltip)
    return alt.layer(bars, failed).properties(height=min(900, max(120, versions * height_per_version)),
                                              title="Weight-sync boundaries per version (failed: red outline)",
                                              autosize=FIT_X)
