"""Find and filter in draft trees: the nodes whose token holds a text, the rounds where it was drafted, the nodes at
or above a threshold of a node metric, and the light nodes a mass threshold folds. Pure functions of round records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tevviz.engine.records.records import RoundRecord
from tevviz.render.graph import node_metric


@dataclass(frozen=True)
class RoundHit:
    """A kept round whose tree drafted the text: where it is, which nodes, and whether the round committed it."""

    position: int  # in the kept rounds' list
    index: int  # the round's own index, as titles count
    nodes: tuple[int, ...]
    accepted: bool  # a matching node lies on the accepted path
    bonus: bool  # the round's bonus token matches


def needle(query: str | None) -> tuple[str, bool] | None:
    """The text to find, casefolded, and whether it must be the whole token (the query in double quotes); None for a
    blank query. The ends' spaces go: a typed " the" finds the token " the" and "the" both."""
    text = (query or "").strip()
    whole = len(text) >= 2 and text[0] == text[-1] == '"'
    text = text[1:-1].strip() if whole else text
    return (text.casefold(), whole) if text else None


def token_matches(text: str, query: str | None) -> bool:
    found = needle(query)
    return found is not None and _holds(text, *found)


def _holds(text: str, want: str, whole: bool) -> bool:
    token = text.strip().casefold()
    return token == want if whole else want in token


def matches(r: RoundRecord, query: str | None) -> list[int]:
    """The drafted nodes (the root, last round's token, left out) whose token text holds the query, in id order."""
    found = needle(query)
    return [] if found is None else [v for v in range(1, r.size) if _holds(r.texts[v], *found)]


def rounds_with(rounds: Sequence[RoundRecord], query: str | None) -> list[RoundHit]:
    """Every kept round whose tree drafted the query, in order, with whether the round accepted it."""
    if needle(query) is None:
        return []  # every redraw asks, searching or not
    hits = []
    for position, r in enumerate(rounds):
        nodes = matches(r, query)
        if nodes:
            on_path = set(r.accepted[1:])
            hits.append(RoundHit(position, r.index, tuple(nodes), any(v in on_path for v in nodes),
                                 token_matches(r.bonus_text, query)))
    return hits


def metric_values(r: RoundRecord, metric: str) -> list[float | None]:
    """Each node's value of a colour metric (graph.METRICS), as the tree colours it; None where the record has none."""
    def attrs(v):
        return {"P": r.P[v], "w": r.w[v], "rho": r.rho[v], "missing": r.missing[v] if r.missing else [],
                "draft_logprob": None if v == 0 else r.draft_logprobs[v], "score": r.scores[v]}

    return [node_metric(attrs(v), metric) for v in range(r.size)]


def at_least(values: Sequence[float | None], threshold: float) -> list[int]:
    """The nodes whose value is at or above `threshold` (a node without a value never is)."""
    return [v for v, x in enumerate(values) if x is not None and x >= threshold]


def step_match(nodes: Sequence[int], current, direction: int) -> int | None:
    """The match after (`direction` 1) or before (-1) the node `current`, wrapping round; the first or last one when
    `current` is no match; None when there are none."""
    if not nodes:
        return None
    if current in nodes:
        return nodes[(list(nodes).index(current) + direction) % len(nodes)]
    if isinstance(current, int):  # the next match in id order from a node that is none
        later = [v for v in nodes if (v > current if direction > 0 else v < current)]
        if later:
            return later[0] if direction > 0 else later[-1]
    return nodes[0] if direction > 0 else nodes[-1]


def light_nodes(P: Sequence[float | None], threshold: float) -> frozenset[int]:
    """The drafted nodes whose target flow is below `threshold`: what Fold by mass folds (0 folds none).

    An imported tree without target flows counts them 0, so any threshold above 0 folds all of it."""
    return frozenset(v for v in range(1, len(P)) if (P[v] or 0.0) < threshold)
