"""What happened at each node of a verified round, in words: accepted, exit, rejected here, not reached; and what
the target took at each accepted node (the token, its probability, and where the drafter had put it)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import networkx as nx

ACCEPTED, EXIT, REJECTED, NOT_REACHED, ROOT = "accepted", "exit node", "rejected here", "not reached", "root"


@dataclass(frozen=True)
class TargetChoice:
    """The token the target committed after an accepted node: which child it matched (None: none, the bonus), its
    target probability there where the record knows it, and the drafter's rank and probability for it there."""

    text: str
    node: int | None  # the matching child, None when the walk left the tree (the bonus token)
    p: float | None
    draft_rank: int | None  # 1 = the drafter's most likely child there; None: not proposed
    draft_q: float | None
    siblings: int  # how many children the drafter proposed there


def verdict(G: nx.DiGraph, v: Hashable) -> str:
    """One of ROOT, ACCEPTED, EXIT, REJECTED (its parent was accepted, the target took another token), NOT_REACHED."""
    accepted, exit_node = G.graph["accepted"], G.graph["exit_node"]
    if v == exit_node:
        return EXIT
    if v == accepted[0]:
        return ROOT
    if v in accepted:
        return ACCEPTED
    parent = G.nodes[v]["parent"]
    return REJECTED if parent in accepted else NOT_REACHED


def target_choice(G: nx.DiGraph, u: int) -> TargetChoice | None:
    """What the target took after accepted node `u`: the next accepted node's token, or the bonus at the exit node."""
    accepted = G.graph["accepted"]
    if u not in accepted:
        return None
    at = accepted.index(u)
    kids = sorted(G.successors(u), key=lambda c: -_q(G.nodes[c]))
    if at + 1 < len(accepted):
        node = accepted[at + 1]
        attrs = G.nodes[node]
        rank = kids.index(node) + 1
        return TargetChoice(attrs["text"], node, attrs.get("p_edge"), rank, _q(attrs), len(kids))
    text, p = G.graph.get("bonus_text"), _bonus_p(G, u)
    return TargetChoice(text, None, p, None, None, len(kids))


def verdict_line(G: nx.DiGraph, v: Hashable, token: str = repr) -> str:
    """The verdict in one line, with the target's own token where it took another one."""
    said = verdict(G, v)
    if said == REJECTED:
        choice = target_choice(G, G.nodes[v]["parent"])
        wanted = "" if choice is None else f": the target took {token(choice.text)}"
        return f"{said}{wanted}"
    if said == EXIT:
        choice = target_choice(G, v)
        took = "" if choice is None else f" ({token(choice.text)}, the bonus token)"
        return f"exit node: accepted, and the target's next token{took} is none of its children"
    if said == ROOT:
        return "root: the last committed token" + (" (and the exit node)" if v == G.graph["exit_node"] else "")
    return said


def _q(attrs: Mapping) -> float:
    logprob = attrs.get("draft_logprob")
    return 0.0 if logprob is None or math.isnan(logprob) else math.exp(logprob)


def _bonus_p(G: nx.DiGraph, u: int) -> float | None:
    """p_u(bonus), where the record knows it: the bonus among u's missing tokens, whose gain is P(u) p_u(a)."""
    P = G.nodes[u].get("P")
    token_id = G.graph.get("bonus_token_id")
    if not P or token_id is None:
        return None
    for m in G.nodes[u].get("missing") or []:
        if m.get("token_id") == token_id:
            return m["gain"] / P
    return None
