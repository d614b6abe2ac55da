"""A scan's tables (engine/analysis/scan_tables.py) as terminal text (`tevviz scan`, `scan show`, `scan compare`),
and, for the app's Scan tab, as headings and rows of text and markdown: every table written by render/table.py."""

from __future__ import annotations

from tevviz.engine.analysis.scan_tables import (
    acceptance_table,
    category_table,
    loss_table,
    missed_table,
    paired_depth_table,
    paired_table,
    worst_heading,
    worst_table,
)
from tevviz.render.table import rows, text

__all__ = ["category_rows", "comparison_text", "depth_rows", "loss_rows", "markdown_table", "missed_rows",
           "settings_line", "summary_text", "worst_heading", "worst_rows"]


def category_rows(groups) -> tuple[list[str], list[list[str]]]:
    return rows(category_table(groups))


def depth_rows(groups) -> tuple[list[str], list[list[str]]]:
    return rows(acceptance_table(groups))


def loss_rows(groups) -> tuple[list[str], list[list[str]]]:
    return rows(loss_table(groups))


def missed_rows(summary, top: int = 10) -> tuple[list[str], list[list[str]]]:
    return rows(missed_table(summary, top))


def worst_rows(summary, top: int = 10) -> tuple[list[str], list[list[str]]]:
    return rows(worst_table(summary, top))


def markdown_table(head: list[str], body: list[list[str]]) -> str:
    """Headings and rows of text as a markdown table (the app's Scan tab lays out its own titles)."""
    cell = lambda c: str(c).replace("|", "\\|")
    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, r)) + " |" for r in body])


def settings_line(manifest: dict) -> str:
    s, models = manifest.get("settings") or {}, manifest.get("models") or {}
    b, t = s.get("builder") or {}, (s.get("sampling") or {}).get("temperature")
    budget = "auto" if b.get("auto") else b.get("budget")
    return (f"target {models.get('target', {}).get('name', '?')}, draft {models.get('draft', {}).get('name', '?')}; "
            f"{b.get('name')} B={budget} H={b.get('depth')}, {s.get('verifier')}, T={t}, "
            f"{s.get('max_new_tokens')} new tokens, seed {s.get('seed')}")


def summary_text(data) -> str:
    """Everything `tevviz scan` and `tevviz scan show` print for a scan folder."""
    s = data.summary
    parts = [f"{data.folder}: {len(data.index)} prompts; {settings_line(data.manifest)}", "",
             *text(category_table(s.groups)), "", *text(acceptance_table(s.groups)), "",
             *text(loss_table({k: g for k, g in s.groups.items() if k == "all"})), ""]
    lengths = s.groups["all"].lengths
    parts += ["block lengths L: " + ", ".join(f"{k}: {v}" for k, v in sorted(lengths.items())), ""]
    if s.missed:
        parts += [*text(missed_table(s)), ""]
    if s.worst:
        parts += [*text(worst_table(s, len(s.worst))), ""]
    if data.unfinished:
        parts.append(f"note: {data.unfinished} rounds of an unfinished prompt at the end are left out")
    parts += [f"note: {p}" for p in data.problems]
    return "\n".join(parts).rstrip()


def comparison_text(a, b, result, notes: list[str]) -> str:
    parts = [f"A: {a.folder}  ({settings_line(a.manifest)})", f"B: {b.folder}  ({settings_line(b.manifest)})"]
    parts += [f"differs: {n}" for n in notes]
    parts += ["", *text(paired_table(result))]
    for kind in ("acceptance_conditional", "acceptance_marginal", "width", "leaf"):
        parts += ["", *text(paired_depth_table(result, kind))]
    if result.only_a or result.only_b:
        parts += ["", f"unpaired: {len(result.only_a)} prompts only in A, {len(result.only_b)} only in B"]
    return "\n".join(parts)
