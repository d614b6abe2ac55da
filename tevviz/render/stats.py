"""Session-level figures from a list of rounds (RoundRecords, or their `to_dict()` form)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from tevviz.engine.records import STAGES, RoundRecord

Round = RoundRecord | Mapping[str, Any]


def records(rounds: Sequence[Round]) -> list[RoundRecord]:
    """The rounds as RoundRecords (a dict is read with `RoundRecord.from_dict`)."""
    return [r if isinstance(r, RoundRecord) else RoundRecord.from_dict(r) for r in rounds]


def stage_times_figure(rounds: Sequence[Round]) -> go.Figure:
    """Stacked bar per round of the milliseconds spent in each stage."""
    rs = records(rounds)
    x = [r.index for r in rs]
    fig = go.Figure([go.Bar(x=x, y=[r.stage_ms.get(s, 0.0) for r in rs], name=s) for s in STAGES])
    fig.update_layout(barmode="stack", title="time per round by stage", xaxis_title="round", yaxis_title="ms")
    return fig


def block_length_histogram(rounds: Sequence[Round]) -> go.Figure:
    """Number of rounds per block length L."""
    counts = Counter(r.block_length for r in records(rounds))
    lengths = list(range(1, max(counts, default=1) + 1))
    fig = go.Figure(go.Bar(x=lengths, y=[counts[n] for n in lengths], name="rounds"))
    fig.update_layout(title="block length L per round", xaxis_title="L (tokens committed)", yaxis_title="rounds")
    return fig


def acceptance_by_depth(rounds: Sequence[Round]) -> dict[int, tuple[int, int]]:
    """For each depth d >= 1: (rounds whose accepted path reached d, rounds whose tree has a node at d)."""
    table: dict[int, tuple[int, int]] = {}
    for r in records(rounds):
        tree_depth, exit_depth = max(r.depths), r.block_length - 1
        for d in range(1, tree_depth + 1):
            reached, present = table.get(d, (0, 0))
            table[d] = (reached + (exit_depth >= d), present + 1)
    return dict(sorted(table.items()))


def acceptance_by_depth_figure(rounds: Sequence[Round]) -> go.Figure:
    """Bar per depth d: fraction of rounds reaching d, among rounds whose tree reaches d."""
    table = acceptance_by_depth(rounds)
    depths = list(table)
    fig = go.Figure(
        go.Bar(
            x=depths,
            y=[reached / present for reached, present in table.values()],
            name="accepted to depth",
            hovertext=[f"{reached}/{present} rounds" for reached, present in table.values()],
        )
    )
    fig.update_layout(
        title="acceptance by depth", xaxis_title="depth d", yaxis_title="fraction reaching d", yaxis_range=[0, 1]
    )
    return fig


def verifier_law_figure(
    exact_w: Sequence[float], empirical: Mapping[str, Sequence[float]], node_labels: Sequence[str]
) -> go.Figure:
    """Grouped bars per node: the exact exit law w and each verifier's empirical exit frequencies."""
    for name, freqs in {"exact_w": exact_w, **empirical}.items():
        if len(freqs) != len(node_labels):
            raise ValueError(f"{name!r} has {len(freqs)} values for {len(node_labels)} node labels")
    labels = list(node_labels)
    bars = [go.Bar(x=labels, y=list(exact_w), name="exact w")]
    bars += [go.Bar(x=labels, y=list(freqs), name=name) for name, freqs in empirical.items()]
    fig = go.Figure(bars)
    fig.update_layout(barmode="group", title="exit node law", xaxis_title="exit node", yaxis_title="probability")
    return fig
