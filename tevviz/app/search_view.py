"""The find-and-filter row's view of an AppState, as plain values: the nodes it lights in the shown round, the line
that counts them, and the kept rounds that drafted the token. No gradio here; the matching is render/search.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..render import METRICS
from ..render.search import at_least, matches, metric_values, needle, rounds_with
from .state import AppState


@dataclass(frozen=True)
class Search:
    """What the row asks of the tree: a token's text and a threshold on the colour metric (None: off)."""

    query: str = ""
    threshold: float | None = None

    @property
    def active(self) -> bool:
        return needle(self.query) is not None or self.threshold is not None


NO_SEARCH = Search()


def parse_threshold(text) -> float | None:
    """A threshold box's value: a finite number, or None when blank (raises ValueError on anything else)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def search_nodes(st: AppState, search: Search, metric: str) -> frozenset[int] | None:
    """The shown round's nodes the search lights: the query's matches that pass the threshold; None when no search
    is asked (nothing dimmed)."""
    r = st.round
    if r is None or not search.active:
        return None
    lit = set(range(r.size))
    if needle(search.query) is not None:
        lit &= set(matches(r, search.query))
    if search.threshold is not None:
        lit &= set(at_least(metric_values(r, metric), search.threshold))
    return frozenset(lit)


def search_markdown(st: AppState, search: Search, metric: str) -> str:
    """The count line: how many nodes match the query and pass the threshold in the round shown."""
    r = st.round
    if r is None or not search.active:
        return ""
    parts = []
    if needle(search.query) is not None:
        found = matches(r, search.query)
        parts.append(f"**{_nodes(len(found))} {'match' if len(found) != 1 else 'matches'}** "
                     f"`{search.query.strip()}` in round {r.index}")
    if search.threshold is not None:
        lit = search_nodes(st, search, metric)
        label = METRICS[metric].label
        if parts:
            parts.append(f"{len(lit)} of them with {label} ≥ {search.threshold:g}")
        else:
            parts.append(f"**{_nodes(len(lit))}** with {label} ≥ {search.threshold:g} in round {r.index}")
    return "; ".join(parts) + (" (Next and Previous step through them)" if search_nodes(st, search, metric) else "")


def search_rounds(st: AppState, search: Search) -> list[tuple[str, int]]:
    """The kept rounds whose tree drafted the query, as (label, list position): ✓ where the round accepted it."""
    out = []
    for h in rounds_with(st.rounds, search.query):
        said = "✓ accepted" if h.accepted else "drafted, not accepted"
        out.append((f"round {h.index}: {_nodes(len(h.nodes))}, {said}" + (", bonus" if h.bonus else ""), h.position))
    return out


def _nodes(n: int) -> str:
    return f"{n} node" + ("" if n == 1 else "s")
