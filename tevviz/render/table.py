"""Any engine Table (engine/analysis/table.py) as text, markdown or HTML: one way to write a value of each column kind,
one dash for a missing value, whatever the face."""

from __future__ import annotations

import html as _html

from ..engine.analysis.stats import plus_minus
from ..engine.analysis.table import Column, Table

DASH = "—"


def cell(value, column: Column) -> str:
    """A value as its column writes it: `mean ± se` for an estimate, a signed `diff ± se` for a difference."""
    d = column.digits
    if value is None:
        return DASH
    if column.kind == "estimate":
        return DASH if value.mean is None else plus_minus(value.mean, value.se, d)
    if column.kind == "difference":
        return DASH if value.diff is None else plus_minus(value.diff, value.se, d, signed=True)
    if column.kind == "number":
        return f"{value:.{d}f}"
    if column.kind == "signed":
        return f"{value:+.{d}f}"
    if column.kind == "percent":
        return f"{value:.{d}%}"
    if column.kind == "split":
        return "/".join("-" if x is None else f"{x:.{d}f}" for x in value)
    return str(value)


def _cells(table: Table) -> list[list[str]]:
    return [[cell(row[c.key], c) for c in table.columns] for row in table.rows]


def text(table: Table) -> list[str]:
    """Aligned plain-text lines (text columns to the left, numbers to the right): the title, the header, the rows,
    then the notes."""
    heads = [c.heading for c in table.columns]
    rows = _cells(table)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    # Words read from the left, numbers line up on their last digit.
    left = [c.kind == "text" for c in table.columns]
    line = lambda xs: "  ".join(x.ljust(w) if lf else x.rjust(w) for x, w, lf in zip(xs, widths, left)).rstrip()
    return [table.title, line(heads), *(line(r) for r in rows), *(f"  {n}" for n in table.notes)]


def markdown(table: Table) -> list[str]:
    """A markdown table under its title in bold, the notes in italics after it."""
    esc = lambda s: s.replace("|", "\\|")
    lines = [f"**{table.title}**", "", "| " + " | ".join(esc(c.heading) for c in table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(esc(x) for x in r) + " |" for r in _cells(table)]
    # Each note a line of its own: a hard break (two trailing spaces), or markdown runs them into one paragraph.
    return lines + ([""] + [f"*{n}*  " for n in table.notes] if table.notes else [])


def rows(table: Table) -> tuple[list[str], list[list[str]]]:
    """The headings and the rows' cells as text, for a face that lays a table out itself."""
    return [c.heading for c in table.columns], _cells(table)


def html(table: Table, titled: bool = True) -> str:
    """An HTML table (class `rounds`, the table's id and row ids where given) under an h3 title (none where the page
    heads it itself), notes after it."""
    e = _html.escape
    head = "<tr>" + "".join(f"<th>{e(c.heading)}</th>" for c in table.columns) + "</tr>"
    ids = table.row_ids or ("",) * len(table.rows)
    body = "".join((f'<tr id="{e(i)}">' if i else "<tr>") + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>"
                   for i, r in zip(ids, _cells(table)))
    tid = f' id="{e(table.id)}"' if table.id else ""
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in table.notes)
    title = f"<h3>{e(table.title)}</h3>\n" if titled else ""
    return f"{title}<table class=\"rounds\"{tid}>{head}{body}</table>\n{notes}"
