"""One session's rounds as typed tables (analysis/table.py): its summary, one row of what the rounds add up to
(round_numbers.SESSION, each as its number declares), and its rounds, one row each (round_numbers.COLUMNS), as the
report shows them and as `tevviz inspect` does. Columns take their keys and headings from the number registry; notes
say what each number is. Torch-free; render/table.py writes them as text, markdown or HTML.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records.records import RoundRecord
from ..records.round_numbers import AGGREGATIONS, COLUMNS, MEAN, NUMBERS, SESSION, SUM, RoundNumber, round_row
from .summary import summarize
from .table import Column, Table

EXIT_NOTE = "exit node: the node where verification stopped"
NOT_A_CEILING = "best fixed tree, not a ceiling"


def summary_table(rounds: Sequence[RoundRecord]) -> Table:
    """One row: the rounds, the tokens committed, each session mean (those of the optimal tree where some round has
    one), and tokens/s where stage times were recorded. A mean some rounds lack says over how many it is taken."""
    rounds = list(rounds)
    s = summarize(rounds)
    shown = [n for n in SESSION if not n.needs_optimal or s.optimal_rounds]
    if s.numbers["tokens_per_s"] is not None:
        shown.append(NUMBERS["tokens_per_s"])
    tokens = NUMBERS["tokens"]
    cols = (Column("rounds", "rounds", "count"), Column.of_number(tokens.name, "count"),
            *(Column(n.name, _heading(n, rounds), _kind(n), n.digits) for n in shown))
    row = {"rounds": s.rounds, tokens.name: s.tokens, **{n.name: s.numbers[n.name] for n in shown}}
    return Table("summary", cols, (row,), tuple(_definition(n) for n in (tokens, *shown)), id="summary")


def rounds_table(rounds: Sequence[RoundRecord]) -> Table:
    """A row a round: its index and exit node, then each column number (round_numbers.round_row), headed by its
    label; where some round's optimal tree bounds nothing (a sampled chain under speculative sampling), a note column
    marks those rounds."""
    rounds = list(rounds)
    cols = (Column("round", "round", "count"), Column("exit", "exit node", "count"),
            *(Column(n.name, n.label, "count" if n.whole else "number", n.digits) for n in COLUMNS))
    notes = (EXIT_NOTE, *(f"{n.label}: {n.definition}" for n in COLUMNS))
    rows = tuple(round_row(r) for r in rounds)
    marks = [NOT_A_CEILING if r.optimal is not None and not r.optimal_bounds else "" for r in rounds]
    if any(marks):
        cols += (Column("note", "note", "text"),)
        rows = tuple(row | {"note": m} for row, m in zip(rows, marks))
    return Table("rounds", cols, rows, notes, id="rounds")


def _kind(n: RoundNumber) -> str:
    """A sum of whole numbers is a count; every other aggregate a number of its decimals."""
    return "count" if n.whole and n.over_rounds == SUM else "number"


def _heading(n: RoundNumber, rounds: list[RoundRecord]) -> str:
    """An aggregate's heading, with the rounds a mean is over where some lack the number (`mean drafter gap (3 of 5
    rounds)`), or why there is none (`mean drafter gap (no round it bounds)`)."""
    k = n.defined(rounds)
    if n.over_rounds != MEAN or k == len(rounds):
        return n.heading
    if k == 0:
        return f"{n.heading} ({n.undefined})" if n.undefined else n.heading
    return f"{n.heading} ({k} of {len(rounds)} rounds)"


def _definition(n: RoundNumber) -> str:
    """A summary note: the aggregate's heading, the number's definition and how it adds up over the rounds."""
    named = "" if n.heading == n.label else f"{n.label}, "
    return f"{n.heading}: {named}{n.definition} ({AGGREGATIONS[n.over_rounds]} over the rounds)"
