"""Session-level figures and numbers from a list of round records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

STAGES = ("draft", "target", "verify", "other")

Round = Mapping[str, Any]


def block_length(round_dict: Round) -> int:
    """Tokens the round commits: L = d(exit) + 1 = len(accepted), since `accepted` runs root..exit."""
    return len(round_dict["graph"]["accepted"])


def summary(rounds: Sequence[Round]) -> dict[str, Any]:
    """Rounds, tokens (sum of L), tau (mean L) and mean_ceiling (mean of 1 + C_p); means are None when undefined."""
    lengths = [block_length(r) for r in rounds]
    ceilings = [1 + r["graph"]["C_p"] for r in rounds if r["graph"].get("C_p") is not None]
    return {
        "rounds": len(rounds),
        "tau": _mean(lengths),
        "mean_ceiling": _mean(ceilings),
        "tokens": sum(lengths),
    }


def stage_times_figure(rounds: Sequence[Round]) -> go.Figure:
    """Stacked bar per round of the milliseconds spent in each stage."""
    x = _round_numbers(rounds)
    fig = go.Figure(
        [go.Bar(x=x, y=[(r["graph"].get("stage_ms") or {}).get(s, 0.0) for r in rounds], name=s) for s in STAGES]
    )
    fig.update_layout(barmode="stack", title="time per round by stage", xaxis_title="round", yaxis_title="ms")
    return fig


def block_length_histogram(rounds: Sequence[Round]) -> go.Figure:
    """Number of rounds per block length L."""
    counts = Counter(block_length(r) for r in rounds)
    lengths = list(range(1, max(counts, default=1) + 1))
    fig = go.Figure(go.Bar(x=lengths, y=[counts[n] for n in lengths], name="rounds"))
    fig.update_layout(title="block length L per round", xaxis_title="L (tokens committed)", yaxis_title="rounds")
    return fig


def acceptance_by_depth(rounds: Sequence[Round]) -> dict[int, tuple[int, int]]:
    """For each depth d >= 1: (rounds whose accepted path reached d, rounds whose tree has a node at d)."""
    table: dict[int, tuple[int, int]] = {}
    for r in rounds:
        tree_depth = max(n["depth"] for n in r["nodes"])
        exit_depth = block_length(r) - 1
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


def _round_numbers(rounds: Sequence[Round]) -> list:
    return [r["graph"].get("round", i) for i, r in enumerate(rounds)]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
