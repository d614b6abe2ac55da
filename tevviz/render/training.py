"""ExitTrain figures: the loss per step, and how a tree's exit mass moved between two drafters."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

CHANGE_BARS = 16  # nodes in the change-of-w bar chart


def loss_figure(log: Sequence[dict[str, Any]]) -> go.Figure:
    """L, L_tok and L_exit per ExitTrain step (docs/math.md, *ExitTrain*); L_exit, an order smaller, on its own axis."""
    steps = [e["step"] for e in log]
    fig = go.Figure([
        go.Scatter(x=steps, y=[e["l_tok"] for e in log], mode="lines+markers", name="L_tok"),
        go.Scatter(x=steps, y=[e["l_exit"] for e in log], mode="lines+markers", name="L_exit (right axis)",
                   yaxis="y2"),
        # Dashed and on top: with lambda_exit * L_exit small, L lies on L_tok.
        go.Scatter(x=steps, y=[e["loss"] for e in log], mode="lines+markers", name="L", line={"dash": "dash"}),
    ])
    return fig.update_layout(
        title="ExitTrain loss per step: L = L_tok + lambda_exit · L_exit", height=320,
        xaxis={"title": "step", "dtick": max(1, len(log) // 10)}, yaxis={"title": "L, L_tok"},
        yaxis2={"title": "L_exit", "overlaying": "y", "side": "right", "showgrid": False},
        # The legend under the step axis: above the plot its line touched the title's.
        margin={"l": 50, "r": 50, "t": 50, "b": 80},
        legend={"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0.0})


def path_label(texts: Sequence[str], limit: int = 40) -> str:
    """A node by its token path, e.g. `'def' › ' f'`; the root is "root"; long paths keep their end."""
    label = "root" if not texts else " › ".join(repr(t) for t in texts)
    return label if len(label) <= limit else "…" + label[-(limit - 1):]


def exit_mass_change_figure(changes: Sequence[dict[str, Any]], round_index: int) -> go.Figure:
    """Change of w per node (trained minus original), nodes matched by token path, the largest changes only."""
    rows = list(changes[:CHANGE_BARS])[::-1]  # largest change on top
    fig = go.Figure(go.Bar(
        x=[r["delta"] for r in rows], y=[html.escape(path_label(r["texts"])) for r in rows], orientation="h",
        marker={"color": ["#2a9d8f" if r["delta"] >= 0 else "#e76f51" for r in rows]},
        hovertext=[f"w original {r['w_before']:.4g}<br>w trained {r['w_after']:.4g}" for r in rows],
        hoverinfo="text",
    ))
    return fig.update_layout(title=f"round {round_index}: change of w per node (trained − original)",
                             xaxis_title="Δw", height=max(260, 60 + 24 * len(rows)), plot_bgcolor="white",
                             margin={"l": 10, "r": 10, "t": 50, "b": 40}, yaxis={"automargin": True})
