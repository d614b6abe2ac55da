"""A scan's analyses as typed tables (analysis/table.py): per category the scan numbers (round_numbers.SCAN) as
estimates over prompts, acceptance and exit mass by depth, the tokens the trees missed most, the rounds that lost most,
and two scans' paired differences. Torch-free; render/table.py writes them as text, markdown or HTML."""

from __future__ import annotations

from ..records.round_numbers import NUMBERS, SCAN
from .table import Column, Table

DEPTHS_SHOWN = 10  # depth columns in the by-depth tables
ESTIMATES_NOTE = "means over prompts ± their standard error; tokens/s from the decoding wall time"
ACCEPTANCE_TITLE = ("acceptance by depth, conditional/marginal/exact: of the rounds reaching d - 1 the share accepting "
                    "at d / the share of all rounds reaching d / the target's probability of reaching d in the trees")
LOSS_TITLE = "where the mass went: mean exit mass per round by depth"
PAIRED_TITLE = "B - A per category, paired over prompts (mean ± standard error of the paired difference)"
PAIRED_DEPTH_TITLES = {
    "acceptance_conditional": "acceptance by depth, conditional (of the rounds reaching d - 1, the share accepting at "
                              "d), B - A",
    "acceptance_marginal": "acceptance by depth, marginal (the share of all rounds reaching d), B - A",
    "width": "width exit mass by depth, B - A", "leaf": "leaf exit mass by depth, B - A"}


def _shown(groups) -> list:
    """The scan numbers some category estimates."""
    return [n for n in SCAN if any(n.scan in g.metrics and g.metrics[n.scan].n for g in groups)]


def category_table(groups: dict) -> Table:
    """Per category: prompts, rounds, each scan number's mean ± SE over prompts, tokens/s."""
    shown = _shown(groups.values())
    cols = (Column("category", "category", "text"), Column("prompts", "prompts", "count"),
            Column("rounds", "rounds", "count"), *(Column.of_number(n.name) for n in shown),
            Column("tokens_per_s", "tokens/s", "number", 1))
    rows = tuple({"category": g.name, "prompts": g.prompts, "rounds": g.rounds,
                  **{n.name: g.metrics[n.scan] for n in shown}, "tokens_per_s": g.tokens_per_s}
                 for g in groups.values())
    return Table("by category", cols, rows, (ESTIMATES_NOTE,), id="categories")


def _at(values: list, d: int):
    return values[d] if d < len(values) else None


def acceptance_table(groups: dict) -> Table:
    """Per category, acceptance at d = 1, 2, ... (pooled over rounds) as conditional / marginal / exact."""
    top = min(max((len(g.acceptance_marginal) for g in groups.values()), default=0), DEPTHS_SHOWN)
    cols = (Column("category", "category", "text"),
            *(Column(f"d{d}", f"d={d} cond/marg/exact", "split") for d in range(1, top + 1)))
    rows = tuple({"category": g.name, **{f"d{d + 1}": (g.acceptance_conditional[d], g.acceptance_marginal[d],
                                                       _at(g.acceptance_expected, d))
                                         if d < len(g.acceptance_marginal) else None for d in range(top)}}
                 for g in groups.values())
    return Table(ACCEPTANCE_TITLE, cols, rows, id="acceptance-table")


def loss_table(groups: dict) -> Table:
    """The mean exit mass per round at internal nodes (width) and at leaves, by depth, per category."""
    top = min(max((len(g.width) for g in groups.values()), default=0), DEPTHS_SHOWN + 1)
    cols = (Column("category", "category", "text"), Column("exits", "exits", "text"),
            *(Column(f"d{d}", f"d={d}") for d in range(top)))
    rows = tuple({"category": g.name, "exits": kind, **{f"d{d}": _at(values, d) for d in range(top)}}
                 for g in groups.values() for kind, values in (("width", g.width), ("leaf", g.leaf)))
    return Table(LOSS_TITLE, cols, rows, id="loss-table")


def missed_table(summary, top: int = 10) -> Table:
    """The target tokens that were the rounds' best missing child most, by the mass they carried."""
    total = max(sum(p.rounds for p in summary.prompts), 1)
    cols = (Column("token", "token", "text"), Column("id", "id", "count"), Column("rounds", "rounds", "count"),
            Column("share", "share of rounds", "percent", 1), Column("mass", "mass missed"))
    rows = tuple({"token": repr(m.text), "id": m.token_id, "rounds": m.rounds, "share": m.rounds / total,
                  "mass": m.mass} for m in summary.missed[:top])
    return Table("target tokens the trees missed most (each round's best missing child)", cols, rows, id="missed")


def worst_heading(worst) -> str:
    """What the worst rounds are ranked by: the drafter gap where the optimal tree bounds a round, else H - C_p."""
    kinds = [n for n in ("gap", "shortfall") if any(w.lost_as == n for w in worst)]
    said = {"gap": "the drafter gap C_p* - C_p", "shortfall": "H - C_p, the tree's depth less its coverage"}
    if len(kinds) == 2:
        return f"lost: {said['gap']} where the optimal tree bounds the round, else {said['shortfall']}"
    return f"lost: {said[kinds[0]]}" if kinds else "lost"


def worst_table(summary, top: int = 10) -> Table:
    """The rounds that lost most, each with the number its loss is (the drafter gap, or H - C_p)."""
    cols = (Column("prompt", "prompt", "text"), Column("category", "category", "text"),
            Column("round", "round", "count"), Column("lost", "lost"), Column("lost_is", "lost is", "text"),
            Column("ceiling", "1 + C_p"), Column("optimal", "1 + C_p*"), Column("L", "L", "count"),
            Column("nodes", "nodes", "count"))
    rows = tuple({"prompt": w.prompt, "category": w.category, "round": w.round, "lost": w.lost,
                  "lost_is": NUMBERS[w.lost_as].label, "ceiling": 1 + w.C_p,
                  "optimal": None if w.C_p_star is None else 1 + w.C_p_star, "L": w.L, "nodes": w.size}
                 for w in summary.worst[:top])
    return Table(f"rounds that lost most ({worst_heading(summary.worst)})", cols, rows, id="worst")


def paired_table(result) -> Table:
    """Per category, each scan number's mean over A's prompts and B - A ± its paired SE."""
    shown = _shown(result.groups.values())
    cols = (Column("category", "category", "text"), Column("paired", "paired prompts", "count"),
            *(c for n in shown for c in (Column(f"{n.name}_a", f"{n.heading} A", "number", n.digits),
                                          Column(f"{n.name}_d", "B - A", "difference", n.digits))))
    rows = tuple({"category": g.name, "paired": g.metrics[NUMBERS["L"].scan].n,
                  **{k: v for n in shown for k, v in ((f"{n.name}_a", g.metrics[n.scan].a),
                                                      (f"{n.name}_d", g.metrics[n.scan]))}}
                 for g in result.groups.values())
    return Table(PAIRED_TITLE, cols, rows, id="paired")


def paired_depth_table(result, kind: str = "acceptance_marginal") -> Table:
    """Per category and depth, B - A of acceptance (conditional or marginal) or of the width / leaf exit mass, with
    its paired SE."""
    first = 1 if kind.startswith("acceptance") else 0
    top = min(max((len(getattr(g, kind)) for g in result.groups.values()), default=0), DEPTHS_SHOWN)
    cols = (Column("category", "category", "text"),
            *(Column(f"d{d + first}", f"d={d + first}", "difference") for d in range(top)))
    rows = tuple({"category": g.name, **{f"d{d + first}": _at(getattr(g, kind), d) for d in range(top)}}
                 for g in result.groups.values())
    return Table(PAIRED_DEPTH_TITLES[kind], cols, rows, id=f"paired-{kind.replace('_', '-')}")
