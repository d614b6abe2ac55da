"""A scan's tables as terminal text (`tevviz scan`), and the markdown of the same tables (the app's Scan tab)."""

from __future__ import annotations

from tevviz.engine.records.round_numbers import NUMBERS
from tevviz.engine.records.scan_stats import METRIC_LABELS, METRICS, GroupStats
from tevviz.engine.records.stats import Estimate, PairedDiff

DEPTHS_SHOWN = 10  # depth columns in the by-depth tables


def est(e: Estimate | PairedDiff, digits: int = 3, signed: bool = False) -> str:
    """`mean ± se`, `mean` alone for one prompt, `-` when undefined."""
    if e.mean is None:
        return "-"
    mean = f"{e.mean:+.{digits}f}" if signed else f"{e.mean:.{digits}f}"
    return mean if e.se is None else f"{mean} ± {e.se:.{digits}f}"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def category_rows(groups: dict[str, GroupStats]) -> tuple[list[str], list[list[str]]]:
    """The category table: header and rows (estimates over prompts; tokens/s from the decoding wall time)."""
    shown = [m for m in METRICS if any(getattr(g, m).n for g in groups.values())]
    head = ["category", "prompts", "rounds", *(METRIC_LABELS[m] for m in shown), "tokens/s"]
    rows = [[g.name, str(g.prompts), str(g.rounds), *(est(getattr(g, m)) for m in shown), _num(g.tokens_per_s, 1)]
            for g in groups.values()]
    return head, rows


def depth_rows(groups: dict[str, GroupStats]) -> tuple[list[str], list[list[str]]]:
    """Acceptance by depth d = 1, 2, ... per category (pooled over rounds), each depth as conditional / marginal
    (counted) / exact (the target's probability of reaching d in the trees, GroupStats.acceptance_expected)."""
    top = min(max((len(g.acceptance_marginal) for g in groups.values()), default=0), DEPTHS_SHOWN)
    head = ["category", *(f"d={d} cond/marg/exact" for d in range(1, top + 1))]
    exact = lambda g, d: _num(g.acceptance_expected[d] if d < len(g.acceptance_expected) else None, 3)
    cell = lambda g, d: (f"{_num(g.acceptance_conditional[d], 3)}/{_num(g.acceptance_marginal[d], 3)}/{exact(g, d)}"
                         if d < len(g.acceptance_marginal) else "-")
    rows = [[g.name, *(cell(g, d) for d in range(top))] for g in groups.values()]
    return head, rows


def loss_rows(groups: dict[str, GroupStats]) -> tuple[list[str], list[list[str]]]:
    """The loss by depth: mean exit mass per round at internal nodes (width) and at leaves, per category."""
    top = min(max((len(g.width) for g in groups.values()), default=0), DEPTHS_SHOWN + 1)
    head = ["category", "exits", *(f"d={d}" for d in range(top))]
    rows = []
    for g in groups.values():
        for kind, values in (("width", g.width), ("leaf", g.leaf)):
            rows.append([g.name, kind, *(_num(values[d], 3) if d < len(values) else "-" for d in range(top))])
    return head, rows


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(head), *map(fmt, rows)])


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    cell = lambda c: str(c).replace("|", "\\|")
    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


def missed_rows(summary, top: int = 10) -> tuple[list[str], list[list[str]]]:
    total = max(sum(p.rounds for p in summary.prompts), 1)
    head = ["token", "id", "rounds", "share of rounds", "mass missed"]
    return head, [[repr(m.text), str(m.token_id), str(m.rounds), f"{m.rounds / total:.1%}", f"{m.mass:.3f}"]
                  for m in summary.missed[:top]]


def worst_rows(summary, top: int = 10) -> tuple[list[str], list[list[str]]]:
    """The rounds that lost most, each with the number its loss is (the drafter gap, or H - C_p)."""
    head = ["prompt", "category", "round", "lost", "lost is", "1 + C_p", "1 + C_p*", "L", "nodes"]
    return head, [[w.prompt, w.category, str(w.round), f"{w.lost:.3f}", NUMBERS[w.lost_as].label, f"{1 + w.C_p:.3f}",
                   "-" if w.C_p_star is None else f"{1 + w.C_p_star:.3f}", str(w.L), str(w.size)]
                  for w in summary.worst[:top]]


def worst_heading(worst) -> str:
    """What the worst rounds are ranked by: the drafter gap where the optimal tree bounds a round, else H - C_p."""
    kinds = [n for n in ("gap", "shortfall") if any(w.lost_as == n for w in worst)]
    said = {"gap": "the drafter gap C_p* - C_p", "shortfall": "H - C_p, the tree's depth less its coverage"}
    if len(kinds) == 2:
        return f"lost: {said['gap']} where the optimal tree bounds the round, else {said['shortfall']}"
    return f"lost: {said[kinds[0]]}" if kinds else "lost"


def settings_line(manifest: dict) -> str:
    s, models = manifest.get("settings") or {}, manifest.get("models") or {}
    b, t = s.get("builder") or {}, (s.get("sampling") or {}).get("temperature")
    budget = "auto" if b.get("auto") else b.get("budget")
    return (f"target {models.get('target', {}).get('name', '?')}, draft {models.get('draft', {}).get('name', '?')}; "
            f"{b.get('kind')} B={budget} H={b.get('depth')}, {s.get('verifier')}, T={t}, "
            f"{s.get('max_new_tokens')} new tokens, seed {s.get('seed')}")


def summary_text(data) -> str:
    """Everything `tevviz scan` and `tevviz scan show` print for a scan folder."""
    s = data.summary
    parts = [f"{data.folder}: {len(data.index)} prompts; {settings_line(data.manifest)}", "",
             text_table(*category_rows(s.groups)), "",
             ("acceptance by depth, conditional/marginal: of the rounds reaching d - 1 the share accepting at d / the "
              "share of all rounds reaching d"),
             text_table(*depth_rows(s.groups)), "", "where the mass went: mean exit mass per round by depth",
             text_table(*loss_rows({k: g for k, g in s.groups.items() if k == "all"})), ""]
    lengths = s.groups["all"].lengths
    parts += ["block lengths L: " + ", ".join(f"{k}: {v}" for k, v in sorted(lengths.items())), ""]
    if s.missed:
        parts += ["target tokens the trees missed most (each round's best missing child)",
                  text_table(*missed_rows(s)), ""]
    if s.worst:
        parts += [f"rounds that lost most ({worst_heading(s.worst)})", text_table(*worst_rows(s, len(s.worst))), ""]
    if data.unfinished:
        parts.append(f"note: {data.unfinished} rounds of an unfinished prompt at the end are left out")
    parts += [f"note: {p}" for p in data.problems]
    return "\n".join(parts).rstrip()


def comparison_rows(result, metrics: bool = True) -> tuple[list[str], list[list[str]]]:
    """Per category, B - A of each metric with its paired standard error."""
    shown = [m for m in METRICS if any(g.metrics[m].n for g in result.groups.values())]
    head = ["category", "paired prompts"] + [h for m in shown for h in (f"{METRIC_LABELS[m]} A", "B - A")]
    rows = []
    for g in result.groups.values():
        row = [g.name, str(g.metrics["tau"].n)]
        for m in shown:
            d = g.metrics[m]
            row += [_num(d.a, 3), est(d, 3, signed=True)]
        rows.append(row)
    return head, rows


def comparison_depth_rows(result, kind: str = "acceptance_marginal") -> tuple[list[str], list[list[str]]]:
    """Per category and depth, B - A of acceptance (conditional or marginal) or of the width / leaf exit mass, with
    its paired standard error."""
    first = 1 if kind.startswith("acceptance") else 0
    top = min(max((len(getattr(g, kind)) for g in result.groups.values()), default=0), DEPTHS_SHOWN)
    head = ["category", *(f"d={d + first}" for d in range(top))]
    rows = [[g.name, *(est(getattr(g, kind)[d], 3, signed=True) if d < len(getattr(g, kind)) else "-"
                       for d in range(top))] for g in result.groups.values()]
    return head, rows


def comparison_text(a, b, result, notes: list[str]) -> str:
    parts = [f"A: {a.folder}  ({settings_line(a.manifest)})", f"B: {b.folder}  ({settings_line(b.manifest)})"]
    parts += [f"differs: {n}" for n in notes]
    parts += ["", "B - A per category, paired over prompts (mean ± standard error of the paired difference)",
              text_table(*comparison_rows(result)), "",
              "acceptance by depth, conditional (of the rounds reaching d - 1, the share accepting at d), B - A",
              text_table(*comparison_depth_rows(result, "acceptance_conditional")), "",
              "acceptance by depth, marginal (the share of all rounds reaching d), B - A",
              text_table(*comparison_depth_rows(result, "acceptance_marginal")), "", "width exit mass by depth, B - A",
              text_table(*comparison_depth_rows(result, "width")), "", "leaf exit mass by depth, B - A",
              text_table(*comparison_depth_rows(result, "leaf"))]
    if result.only_a or result.only_b:
        parts += ["", f"unpaired: {len(result.only_a)} prompts only in A, {len(result.only_b)} only in B"]
    return "\n".join(parts)


def html_table(head: list[str], rows: list[list[str]], table_id: str) -> str:
    """A table for the scan report (cells escaped)."""
    import html

    esc = lambda c: html.escape(str(c))
    top = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="rounds" id="{table_id}"><tr>{top}</tr>{body}</table>'
