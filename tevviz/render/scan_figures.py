"""A scan's figures as plain plotly dicts: the category estimates, acceptance and the loss by depth per category, the
block lengths. Read from engine.analysis.scan_stats results; no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.colors

from tevviz.engine.analysis.scan_stats import METRIC_LABELS, METRICS, GroupStats

COLOURS = plotly.colors.qualitative.Plotly  # one colour per category, the same in every figure
HEIGHT = 360


def _colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


LEGEND_ROW = 22  # px per row of legend entries below the plot
LEGEND_PER_ROW = 3


def _figure(traces: list[dict], title: str, x: str, y: str, layout: Mapping[str, Any] | None = None,
            **extra: Any) -> dict:
    # The legend sits below the plot in a margin that grows with its rows, so it never squeezes the plot itself.
    rows = -(-sum(1 for t in traces if t.get("showlegend", True)) // LEGEND_PER_ROW)
    legend_px = LEGEND_ROW * rows + 40
    base = {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}},
            "height": HEIGHT + legend_px, "margin": {"l": 50, "r": 20, "t": 50, "b": 50 + legend_px},
            # Its top 62 px below the plot area, under the x axis's ticks and title (at -0.12 it sat on the title).
            "legend": {"orientation": "h", "yanchor": "top", "y": -62 / (HEIGHT - 100), "x": 0,
                       "entrywidth": 1 / LEGEND_PER_ROW,
                       "entrywidthmode": "fraction"}}
    return {"data": traces, "layout": base | extra | dict(layout or {})}


def category_figure(groups: Mapping[str, GroupStats], layout: Mapping[str, Any] | None = None) -> dict:
    """Per category, tau, E[L] and (where computed) 1 + C_p* with their standard errors over prompts."""
    names = list(groups)
    traces = []
    for m in METRICS:
        if m == "gap" or not any(getattr(g, m).n for g in groups.values()):
            continue
        est = [getattr(groups[n], m) for n in names]
        traces.append({"type": "bar", "name": METRIC_LABELS[m], "x": names, "y": [e.mean for e in est],
                       "error_y": {"type": "data", "array": [e.se or 0.0 for e in est], "visible": True},
                       "hovertemplate": "%{x}: %{y:.3f}<extra>" + METRIC_LABELS[m] + "</extra>"})
    return _figure(traces, "block length by category (± standard error over prompts)", "category",
                   "tokens per round", layout, barmode="group")


def acceptance_figure(groups: Mapping[str, GroupStats], layout: Mapping[str, Any] | None = None) -> dict:
    """Per category, acceptance by depth under its two names: conditional (solid: of the rounds that reached d - 1,
    the share that accepted at d) and marginal (dashed: the share of all rounds that reached d); beside them the
    exact reach (dotted: the target's probability of reaching d in the trees, GroupStats.acceptance_expected)."""
    traces = []
    for i, g in enumerate(groups.values()):
        for kind, values, dash in (("conditional", g.acceptance_conditional, "solid"),
                                   ("marginal", g.acceptance_marginal, "dash"),
                                   ("exact", g.acceptance_expected, "dot")):
            if not values:
                continue
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{g.name}: {kind}",
                           "legendgroup": g.name, "x": list(range(1, len(values) + 1)), "y": values,
                           "line": {"color": _colour(i), "dash": dash, "width": 3 if i == 0 else 2}})
    return _figure(traces, "acceptance by depth: conditional (solid), marginal (dashed), exact (dotted)", "depth d",
                   "share of rounds", layout, yaxis={"title": {"text": "share of rounds"}, "range": [0, 1.02]})


def loss_figure(groups: Mapping[str, GroupStats], layout: Mapping[str, Any] | None = None) -> dict:
    """Where the mass went, per category: the mean exit mass per round at each depth, at internal nodes (width: the
    target's token was not among the children, solid) and at leaves (the tree ended, dashed)."""
    traces = []
    for i, g in enumerate(groups.values()):
        for kind, values, dash in (("width", g.width, "solid"), ("leaf", g.leaf, "dash")):
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{g.name}: {kind}",
                           "legendgroup": g.name, "x": list(range(len(values))), "y": values,
                           "line": {"color": _colour(i), "dash": dash}})
    return _figure(traces, "where the mass went: width exits (solid) and leaf exits (dashed)", "depth of the exit node",
                   "mean exit mass per round", layout)


def length_figure(groups: Mapping[str, GroupStats], layout: Mapping[str, Any] | None = None) -> dict:
    """Per category, the share of rounds of each block length L."""
    top = max((max(g.lengths, default=1) for g in groups.values()), default=1)
    xs = list(range(1, top + 1))
    traces = []
    for i, g in enumerate(groups.values()):
        total = max(sum(g.lengths.values()), 1)
        traces.append({"type": "bar", "name": g.name, "x": xs, "y": [g.lengths.get(L, 0) / total for L in xs],
                       "marker": {"color": _colour(i)}})
    return _figure(traces, "block lengths", "L (tokens committed a round)", "share of rounds", layout, barmode="group")


def scan_figures(groups: Mapping[str, GroupStats], layout: Mapping[str, Any] | None = None) -> dict[str, dict]:
    """The figures of one scan by name (the app's plots and the report's divs)."""
    return {"categories": category_figure(groups, layout), "acceptance": acceptance_figure(groups, layout),
            "loss": loss_figure(groups, layout), "lengths": length_figure(groups, layout)}

