"""The drafter's side of a block round: per depth, its top tokens with their marginal q_d, and where the token the
round committed at that depth sits among them (with the target's probability of it where the record has it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from tevviz.engine.records.records import RoundRecord

Layout = Mapping[str, Any]


@dataclass(frozen=True)
class CommittedAtDepth:
    """The token a round committed at depth d, its rank in the drafter's row d (None: beyond the recorded top K),
    its q_d, and the target's probability of it given the path (None for the bonus token, which the record does
    not score)."""

    depth: int
    token: int
    text: str
    rank: int | None
    q: float | None
    target_p: float | None
    accepted: bool  # a tree node the verifier accepted (False: the bonus token)


def committed_by_depth(record: RoundRecord) -> list[CommittedAtDepth]:
    """Each depth of the round's output block against the drafter's row of that depth."""
    rows = record.draft_rows or []
    path = record.accepted[1:]
    out = []
    block = [(record.tokens[v], record.texts[v], record.p_edge[v], True) for v in path]
    block.append((record.bonus_token, record.bonus_text, None, False))
    for d, (token, text, p, accepted) in enumerate(block, start=1):
        if d > len(rows):
            break
        ids = [e["token_id"] for e in rows[d - 1]]
        rank = ids.index(token) if token in ids else None
        q = math.exp(rows[d - 1][rank]["logprob"]) if rank is not None else None
        out.append(CommittedAtDepth(d, token, text, rank, q, p, accepted))
    return out


def block_rows_figure(record: RoundRecord, ranks: int = 12, layout: Layout | None = None,
                      selected: tuple[int, int] | None = None) -> go.Figure:
    """Depth-by-rank heat map of q_d with each token's text, a marker on the committed token of each depth, and a
    black one on the `selected` (depth, token id) cell. Each cell's customdata is "cell:<depth>:<token id>", which
    the app's click bridge sends back (a click on a cell rings that token's nodes at that depth in the tree)."""
    rows = record.draft_rows or []
    shown = [row[:ranks] for row in rows]
    width = max((len(r) for r in shown), default=0)
    z = [[math.exp(e["logprob"]) for e in row] + [None] * (width - len(row)) for row in shown]
    text = [[e["text"] for e in row] + [""] * (width - len(row)) for row in shown]
    cells = [[f"cell:{d}:{e['token_id']}" for e in row] + [None] * (width - len(row))
             for d, row in enumerate(shown, start=1)]
    depths = list(range(1, len(rows) + 1))
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(width)), y=depths, text=text, texttemplate="%{text}", colorscale="Blues", zmin=0, zmax=1,
        customdata=cells, colorbar={"title": {"text": "q_d"}},
        hovertemplate="depth %{y}, rank %{x}: %{text}<br>q_d = %{z:.3f}<br>click: its nodes in the tree"
                      "<extra></extra>"))
    if selected is not None and 1 <= selected[0] <= len(shown):
        ids = [e["token_id"] for e in shown[selected[0] - 1]]
        if selected[1] in ids:
            fig.add_scatter(x=[ids.index(selected[1])], y=[selected[0]], mode="markers", name="selected",
                            marker={"symbol": "square-open", "size": 34, "color": "black", "line": {"width": 3}},
                            hoverinfo="skip")
    marks = [c for c in committed_by_depth(record) if c.rank is not None and c.rank < ranks]
    if marks:
        fig.add_scatter(
            x=[c.rank for c in marks], y=[c.depth for c in marks], mode="markers", name="committed token",
            marker={"symbol": "square-open", "size": 26, "line": {"width": 3},
                    "color": ["#2ca02c" if c.accepted else "#d62728" for c in marks]},
            hovertext=[_said(c) for c in marks], hoverinfo="text")
    missed = [c for c in committed_by_depth(record) if c.rank is None or c.rank >= ranks]
    for c in missed:
        where = "not in the drafter's row" if c.rank is None else f"rank {c.rank}"
        fig.add_annotation(x=width - 0.5, y=c.depth, xanchor="left", showarrow=False,
                           text=f"committed {c.text!r}: {where}")
    fig.update_layout(title={"text": f"round {record.index}: the drafter's rows (green: accepted, red: bonus)"},
                      xaxis={"title": {"text": "rank in the drafter's row"}, "dtick": 1},
                      yaxis={"title": {"text": "depth d"}, "autorange": "reversed", "dtick": 1},
                      # A row's height of its own per depth: with plotly's default height in a view that sets none
                      # (the app's, drawn while its accordion was closed) the panel came out 30 px tall.
                      height=max(260, 130 + 40 * len(depths)), margin={"r": 160}, **(dict(layout) if layout else {}))
    return fig


def _said(c: CommittedAtDepth) -> str:
    kind = "accepted" if c.accepted else "bonus"
    target = f", target p = {c.target_p:.3f}" if c.target_p is not None else ""
    return f"depth {c.depth}: {kind} {c.text!r}, rank {c.rank}, q_d = {c.q:.3f}{target}"
