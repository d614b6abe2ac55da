"""Session-level figures from a list of rounds (RoundRecords, or their `to_dict()` form)."""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from tevviz.engine.analysis import summary
from tevviz.engine.analysis.summary import exit_by_depth
from tevviz.engine.records.records import STAGES, RoundRecord
from tevviz.engine.records.round_numbers import NUMBERS

Round = RoundRecord | Mapping[str, Any]
Layout = Mapping[str, Any]  # plotly layout entries, as plain values in the form plotly's validators store them


def records(rounds: Sequence[Round]) -> list[RoundRecord]:
    """The rounds as RoundRecords (a dict is read with `RoundRecord.from_dict`)."""
    return [r if isinstance(r, RoundRecord) else RoundRecord.from_dict(r) for r in rounds]


def stage_times_figure(rounds: Sequence[Round], layout: Layout | None = None,
                       as_dict: bool = False) -> go.Figure | dict:
    """Stacked bar per round of the milliseconds spent in each stage; `layout` entries override the figure's."""
    rs = records(rounds)
    x = [r.index for r in rs]
    stage = lambda s, r: NUMBERS[f"{s}_ms"].value(r) or 0.0  # a stage not timed drew nothing
    bars = [_bar(s, x, [stage(s, r) for r in rs]) for s in STAGES]
    return _figure(as_dict, bars, layout, "time per round by stage", "round", "ms", barmode="stack")


def block_length_histogram(rounds: Sequence[Round], layout: Layout | None = None,
                           as_dict: bool = False) -> go.Figure | dict:
    """Number of rounds per block length L; `layout` entries override the figure's."""
    counts = Counter(map(NUMBERS["L"].value, records(rounds)))
    lengths = list(range(1, max(counts, default=1) + 1))
    return _figure(as_dict, [_bar("rounds", lengths, [counts[n] for n in lengths])], layout, "block length L per round",
                   "L (tokens committed)", "rounds")


def acceptance_curves(rounds: Sequence[Round]) -> list[summary.DepthAcceptance]:
    """engine.analysis.summary.acceptance_curves of rounds given as records or dicts."""
    return summary.acceptance_curves(records(rounds))


CONDITIONAL = "conditional: of rounds reaching d - 1, share accepting at d"
MARGINAL = "marginal: share of all rounds reaching d"
EXPECTED = "exact: the target's probability of reaching d in the tree (sums to E[L] - 1)"
OPTIMAL = "optimal tree's probability of reaching d (sums to C_p*)"


def acceptance_by_depth_figure(rounds: Sequence[Round], layout: Layout | None = None,
                               as_dict: bool = False, engines: Sequence = ()) -> go.Figure | dict:
    """Per depth d, acceptance under its two names (summary.DepthAcceptance): conditional bars, the marginal line,
    the exact reach; and the same two curves of each serving engine's run in `engines` (EngineAcceptance)."""
    rows = acceptance_curves(rounds)
    depths = [a.depth for a in rows]
    traces = [
        _bar(CONDITIONAL, depths, [a.conditional for a in rows],
             hovertext=[f"depth {a.depth}: {a.reached} of the {a.prior} rounds that reached {a.depth - 1}"
                        for a in rows], hoverinfo="text"),
        {"type": "scatter", "mode": "lines+markers", "name": MARGINAL, "x": depths, "y": [a.marginal for a in rows],
         "hovertext": [f"depth {a.depth}: {a.reached} of all {a.rounds} rounds" for a in rows], "hoverinfo": "text"},
    ]
    # Beside the counted curves, the exact ones (summary.DepthAcceptance): what the trees' target mass promised.
    for name, values, dash in ((EXPECTED, [a.expected for a in rows], "dot"),
                               (OPTIMAL, [a.optimal for a in rows], "dash")):
        if any(v is not None for v in values):
            traces.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": depths, "y": values,
                           "line": {"dash": dash}})
    for run in engines:
        ks = list(range(1, run.depth + 1))
        for kind, values, errors, symbol in (("marginal", run.marginal, run.marginal_se, "diamond"),
                                             ("conditional", run.conditional, run.conditional_se, "square")):
            traces.append({"type": "scatter", "mode": "markers", "name": f"{run.engine} {kind} ({run.steps} steps)",
                           "x": ks, "y": values, "marker": {"symbol": symbol, "size": 9},
                           "error_y": {"type": "data", "array": [e or 0.0 for e in errors]}})
    return _figure(as_dict, traces, layout, "acceptance by depth", "depth d", "share of rounds", yaxis_range=[0, 1.02],
                   legend={"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0.0})


def exit_mass_by_depth_figure(rounds: Sequence[Round], layout: Layout | None = None,
                              as_dict: bool = False) -> go.Figure | dict:
    """Where the mass went: per depth, the session's mean exit mass at internal nodes (width) and at leaves
    (depth or budget), stacked, beside acceptance by depth on a second axis."""
    split = exit_by_depth(records(rounds))
    depths = list(range(len(split["width"])))
    acc = acceptance_curves(rounds)
    traces = [
        _bar("width exits (target left among the children)", depths, split["width"],
             hovertemplate="depth %{x}: %{y:.3f} of the exit mass at internal nodes<extra></extra>"),
        _bar("leaf exits (tree ended: depth or budget)", depths, split["leaf"],
             hovertemplate="depth %{x}: %{y:.3f} of the exit mass at leaves<extra></extra>"),
        {"type": "scatter", "mode": "lines+markers", "name": "acceptance, marginal (right axis)",
         "x": [a.depth for a in acc], "y": [a.marginal for a in acc], "yaxis": "y2"},
    ]
    return _figure(as_dict, traces, layout, f"where the mass went ({split['rounds']} rounds)", "depth of the exit node",
                   "mean exit mass", barmode="stack",
                   # Tick labels inside: outside, they pushed this title into the figure a panel tiles to the right.
                   # Ticks of its own: plotly would put them at the first axis's grid lines (0.209, 0.418, ...).
                   yaxis2={"overlaying": "y", "side": "right", "range": [0, 1], "ticklabelposition": "inside",
                           "tickmode": "linear", "tick0": 0, "dtick": 0.25},
                   # No title on the right axis: the legend names its line, and a title ran into the next subplot.
                   legend={"orientation": "h", "y": -0.25})


def coverage_figure(rounds: Sequence[Round], layout: Layout | None = None, as_dict: bool = False) -> go.Figure | dict:
    """C_p per round and, where computed, C_p* (the optimal tree of the same budget) with the gap between them."""
    rs = records(rounds)
    x = [r.index for r in rs]
    mine, star = NUMBERS["C_p"], NUMBERS["C_p_star"]
    traces = [
        {"type": "scatter", "mode": "lines+markers", "name": f"{mine.label} (draft tree)", "x": x,
         "y": [mine.value(r) for r in rs]},
        {"type": "scatter", "mode": "lines+markers", "name": f"{star.label} (optimal tree)", "x": x,
         "y": [star.value(r) for r in rs],
         "line": {"dash": "dash"}, "fill": "tonexty", "fillcolor": "rgba(150,150,150,0.25)"},
    ]
    # The y axis on the right: the panel tiles this figure to the right of where the mass went, whose second axis's
    # ticks and title on its right side would otherwise run into this one's on the left.
    return _figure(as_dict, traces, layout, "coverage per round: the drafter gap is the shaded band", "round",
                   "coverage", yaxis_side="right")


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


# The session figures are redrawn after every round, so they are built as plain dicts in the form plotly's validators
# would store (a title string becomes {"text": ...}) and wrapped without per-property validation, or handed over as
# the dicts themselves (`as_dict=True`, for the app, which serialises them directly); tests/render/test_render.py checks
# them against validated figures.


def _bar(name: str, x: list, y: list, **props: Any) -> dict[str, Any]:
    return {"type": "bar", "name": name, "x": x, "y": y, **props}


def _figure(as_dict: bool, traces: list[dict], overrides: Layout | None, title: str, xaxis_title: str,
            yaxis_title: str, yaxis_range: list | None = None, yaxis_side: str | None = None,
            **layout: Any) -> go.Figure | dict[str, Any]:
    yaxis = ({"title": {"text": yaxis_title}} | ({} if yaxis_range is None else {"range": yaxis_range})
             | ({} if yaxis_side is None else {"side": yaxis_side}))
    layout |= {"title": {"text": title}, "xaxis": {"title": {"text": xaxis_title}, **_whole_ticks(traces)},
               "yaxis": yaxis}
    fig = {"data": traces, "layout": layout | copy.deepcopy(dict(overrides or {}))}
    return fig if as_dict else go.Figure(fig, _validate=False)


def _whole_ticks(traces: list[dict]) -> dict[str, Any]:
    """Ticks at whole numbers where every x is one (rounds, depths): plotly put a 2-round axis's ticks at 0.5 and
    1.5."""
    xs = [x for t in traces for x in (t.get("x") or [])]
    if not xs or not all(isinstance(x, int) and not isinstance(x, bool) for x in xs):
        return {}
    return {"tick0": 0, "dtick": max(1, math.ceil((max(xs) - min(xs)) / 10))}
