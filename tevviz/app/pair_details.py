"""What a pair of trees shows (app/pair_view.py draws it), and the details below it: a clicked union node, what each
side has there (its node, the figure's colour metric and the others, what the verifier did and why), in the Decode
tab's words (details.py). No gradio here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.analysis.run_compare import A_ONLY, B_ONLY, BOTH
from ..engine.records.records import RoundRecord
from ..render.graph import METRICS, node_metric, round_graph
from ..render.shared_tree import SharedTree
from ..render.verdicts import verdict, verdict_line
from .details import fmt, why_not

PAIR_HINT = "Click a node in either tree to select it in both and see what each side has there; +N unfolds."
# The rows of the table, by the metric's name in render/graph.METRICS; the figure's own colour comes first, in bold.
ROWS = {"w": "exit probability w", "P": "target flow P", "q": "draft path probability q", "rho": "local exit rho"}
EDGE = "target edge probability p"


@dataclass(frozen=True)
class Pair:
    """What a pair view shows: two rounds, their names and titles, the colour, the selection and the open folds."""

    a: RoundRecord
    b: RoundRecord
    names: tuple[str, str]
    metric: str | None
    titles: tuple[str | None, str | None] = (None, None)
    selected: int | None = None  # a union node id
    expanded: frozenset[int] = frozenset()  # union ids of parents whose "+N" fold is open


def pair_details(t: SharedTree, v: int | None, names: Sequence[str], metric: str | None = None) -> str:
    """Markdown for union node `v` of a pair: its token and path, a table of each side's numbers there, and a line per
    side saying what the verifier did (and, where the target took another token, why not); the hint without one."""
    if v is None or not 0 <= v < t.size:
        return PAIR_HINT
    if v >= len(t.nodes):  # a bonus token neither tree drafted
        side = t.bonus.index(v)
        other = names[1 - side]
        whose = f"{names[side]}'s"
        return f"{_bonus_sentence((t.a, t.b)[side], whose)}\n\n{other} did not draft it."
    n = t.nodes[v]
    where = {BOTH: "in both trees", A_ONLY: f"in {names[0]}'s tree only", B_ONLY: f"in {names[1]}'s tree only"}
    path = "".join(t.nodes[u].text for u in _path(t, v)[1:])
    lines = [f"**`{n.text!r}`** at depth {n.depth}, {where[n.side]}; path `{path!r}`.", "",
             f"| | {names[0]} | {names[1]} |", "|---|---|---|"]
    sides = [(r, t.own(side, v)) for side, r in enumerate((t.a, t.b))]
    graphs = [round_graph(r.to_dict()) if u is not None else None for r, u in sides]
    lines.append("| node | " + " | ".join("not drafted" if u is None else f"#{u}" for _, u in sides) + " |")
    lines.append("| verdict | " + " | ".join("—" if u is None else verdict(G, u) for (_, u), G in zip(sides, graphs))
                 + " |")
    for key, label in _rows(metric):
        bold = "**" if key == metric else ""
        cells = [_value(G, u, key) for (_, u), G in zip(sides, graphs)]
        lines.append(f"| {bold}{label}{bold} | " + " | ".join(f"{bold}{c}{bold}" for c in cells) + " |")
    lines.append("")
    for side, ((r, u), G) in enumerate(zip(sides, graphs)):
        bonus = t.bonus[side] == v
        if u is None:
            said = "not drafted" + (f". {_bonus_sentence(r, 'Its')}" if bonus else ".")
        else:
            why = why_not(r, G, u)
            said = verdict_line(G, u) + "." + (f" {why}" if why else "")
            if bonus:
                said += f" {_bonus_sentence(r, 'Its')}"
        lines.append(f"- **{names[side]}**: {said}")
    return "\n".join(lines)


def _rows(metric: str | None) -> list[tuple[str, str]]:
    """(key, label) of the table's number rows, the figure's metric first."""
    rows = [*ROWS.items(), ("p_edge", EDGE)]
    if metric in METRICS and metric not in ROWS:
        rows.append((metric, METRICS[metric].label))
    return sorted(rows, key=lambda row: row[0] != metric)


def _value(G, u: int | None, key: str) -> str:
    if u is None:
        return "—"
    x = G.nodes[u].get("p_edge") if key == "p_edge" else node_metric(G.nodes[u], key)
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt(x)


def _bonus_sentence(r: RoundRecord, who: str) -> str:
    return (f"{who} bonus token `{r.bonus_text!r}` (token id {r.bonus_token}): drawn at exit node {r.exit_node} from "
            "its residual law p_res (the target's law less its children's tokens; p itself at a leaf).")


def _path(t: SharedTree, v: int) -> list[int]:
    path = [v]
    while t.parents[path[-1]] >= 0:
        path.append(t.parents[path[-1]])
    return path[::-1]
