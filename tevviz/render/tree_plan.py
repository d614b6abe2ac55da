"""What a tree drawing shows in a given width: which nodes, which labels, and where, with no two labels overlapping.

One rule for the app, the offline report and the notebook figure. Each node gets a horizontal slot as wide as its
label (or a bare marker); a parent spans its children's slots and sits over their middle, so the labels of one depth
never meet, and depths are a row apart. When the tree is wider than the room it has, in order:

1. labels off the must-set shorten (an ellipsis marks the cut);
2. the lowest-mass siblings of a parent fold into one "+N" node (a click on it unfolds them, and a "−" node after
   them folds them again), lightest first;
3. the lesser labels go, lowest by the colour metric first (the top ones stay);
4. the top-metric labels go, then the labels that must stay (accepted path, exit node and its children, bonus,
   selection) shorten;
5. what still does not fit makes the drawing wider than the room (the view scrolls) rather than overlap.

Folded by mass instead (`hidden`, the app's Fold by mass), the light nodes fold behind their parent's "+N" whether
or not there is room, and nothing else folds: what is drawn is chosen by mass, not by width.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from tevviz.render.labels import ELLIPSIS, fit_label, label_px
from tevviz.render.layout import ordered_children, tree_root

MIN_SLOT = 16.0  # px per unlabelled node: a 12 px marker and a gap (hover targets stay apart)
LABEL_GAP = 6.0  # px between neighbouring labels
MUST_CHARS = 16  # longest label kept whole on a node that must be labelled
OTHER_CHARS = 10
SHORT_OTHER_CHARS = 6
SHORT_CHARS = 4  # a must-label's last resort: three characters and an ellipsis
MAX_STRETCH = 6.0  # a small tree spreads over its room, at most this many times its tight width


def more_node(parent: Hashable) -> tuple[str, Hashable]:
    """The id of the "+N" node that stands for `parent`'s folded children."""
    return ("more", parent)


def less_node(parent: Hashable) -> tuple[str, Hashable]:
    """The id of the "−" node after an opened fold's children: a click folds them again."""
    return ("less", parent)


LESS = "\u2212"  # the "−" node's label


@dataclass(frozen=True)
class TreePlan:
    """Positions (x in px of the plot area, y = -depth) of the nodes shown, their labels, and what was folded."""

    pos: dict[Hashable, tuple[float, float]]
    text: dict[Hashable, str]  # node -> label drawn (a node without one has none)
    folded: dict[Hashable, list[Hashable]] = field(default_factory=dict)  # parent -> its children behind "+N"
    width: float = 0.0  # px the drawing needs (at least the room it was given)

    @property
    def hidden(self) -> set[Hashable]:
        """Every node not drawn (folded children and their subtrees are behind their "+N" node)."""
        return {v for v in self.pos_all if v not in self.pos}

    pos_all: frozenset = frozenset()


def plan_tree(G: nx.DiGraph, labels: Mapping[Hashable, str], must: set[Hashable], rank: Sequence[Hashable],
              mass: Callable[[Hashable], tuple], room: float, expanded: set[Hashable] = frozenset(),
              top: int = 16, hidden: Collection[Hashable] | None = None) -> TreePlan:
    """Plan the drawing of tree `G` in `room` px.

    `labels`: every node's full label; `must`: nodes whose labels and places stay (their ancestors stay too);
    `rank`: the nodes by the colour metric, highest first (the first `top` are labelled before the rest);
    `mass(v)`: a sort key, lower folds first; `expanded`: parents whose children never fold; `hidden`: fold by mass,
    these nodes fold (a parent's one light child too, its subtree gone) and no other node folds for room.
    """
    root = tree_root(G)
    children = {v: ordered_children(G, v) for v in G}
    parent = {v: u for u, v in G.edges}
    # An opened fold's parent stays drawn with its ancestors: its children were asked for, so it cannot fold away.
    fold_size = 1 if hidden is not None else 2  # a "+1" saves room only when it stands for a subtree
    opened = {u for u in expanded if u in G and len(children.get(u, ())) >= fold_size}
    keep = _with_ancestors(must | {root} | opened, parent)
    for u in opened:
        keep |= set(children.get(u, ()))
    order = {v: i for i, v in enumerate(rank)}
    topset = set(rank[:top])
    # Nodes above a top-metric node keep it reachable: they fold after every other node.
    protected = _with_ancestors(topset, parent)

    def cap(v, chars):  # at least one character, with an ellipsis where cut
        label = labels[v]
        return fit_label(label, chars * label_px("m"), min_chars=1) or (label[:1] + ELLIPSIS if label[1:] else label)

    full = {v: cap(v, MUST_CHARS if v in must else OTHER_CHARS) for v in G}
    layout = _Layout(root, children, room, opened)
    texts, folded = dict(full), {}
    if hidden is not None:
        light = set(hidden)
        folded = _fold_groups([v for v in G if v in light and v not in keep and parent.get(v) not in expanded],
                              parent, smallest=1)
    # 1. shorter labels off the must-set
    if layout.span(folded, texts) > room:
        texts = {v: t if v in must else cap(v, SHORT_OTHER_CHARS) for v, t in texts.items()}
    # 2. fold the lightest siblings, only as far as needed
    if hidden is None and layout.span(folded, texts) > room:
        candidates = sorted((v for v in G if v not in keep and parent.get(v) not in expanded),
                            key=lambda v: (v in protected, mass(v)))
        folded = _smallest_fold(layout, candidates, parent, texts)
    # 3. the lesser labels go, lowest metric first; the top ones stay
    lesser = sorted((v for v in G if v not in must and v not in topset), key=lambda v: -order.get(v, len(order)))
    if layout.span(folded, texts) > room:
        texts = _drop_labels(layout, folded, texts, lesser)
    # 4. the top labels go too
    if layout.span(folded, texts) > room:
        top_first = sorted((v for v in topset if v not in must), key=lambda v: -order[v])
        texts = _drop_labels(layout, folded, texts, top_first)
    # 5. shorten the must-labels, only as far as needed (a fan of twenty exit children cut to "⎵…" each was unreadable
    # where "⎵st…" fitted)
    if layout.span(folded, texts) > room:
        texts = _longest_fitting_cut(layout, folded, texts, must, cap)
    pos, width = layout.place(folded, texts)
    folded = {u: kids for u, kids in folded.items() if u in pos}  # a fold inside a folded subtree is not drawn
    shown_texts = {v: t for v, t in texts.items() if t and v in pos}
    for u, kids in folded.items():
        shown_texts[more_node(u)] = f"+{len(kids)}"
    shown_texts |= {less_node(u): LESS for u in opened if less_node(u) in pos}
    return TreePlan(pos, shown_texts, folded, width, frozenset(G))


def _with_ancestors(nodes: set, parent: Mapping) -> set:
    out = set()
    for v in nodes:
        while v is not None and v not in out:
            out.add(v)
            v = parent.get(v)
    return out


def _fold_groups(hide: Sequence[Hashable], parent: Mapping, smallest: int = 2) -> dict[Hashable, list[Hashable]]:
    """Parent -> its hidden children; a parent with fewer than `smallest` keeps them (for room, a "+1" node in place
    of one leaf saves none)."""
    groups: dict[Hashable, list[Hashable]] = {}
    for v in hide:
        groups.setdefault(parent[v], []).append(v)
    return {u: kids for u, kids in groups.items() if len(kids) >= smallest}


def _smallest_fold(layout: _Layout, candidates: list, parent: Mapping, texts: Mapping) -> dict:
    """The fewest of `candidates` (in order) to fold for the drawing to fit; all of them when nothing fits."""
    if layout.span({}, texts) <= layout.room:
        return {}
    lo, hi = 1, len(candidates)
    best = _fold_groups(candidates, parent)
    while lo <= hi:
        mid = (lo + hi) // 2
        groups = _fold_groups(candidates[:mid], parent)
        if layout.span(groups, texts) <= layout.room:
            best, hi = groups, mid - 1
        else:
            lo = mid + 1
    return best


def _longest_fitting_cut(layout: _Layout, folded: dict, texts: dict, must: set, cap: Callable) -> dict:
    """`texts` with the must-labels cut to the most characters (MUST_CHARS - 1 down to SHORT_CHARS) that fit."""
    def cut(chars):
        return {v: (cap(v, chars) if v in must else t) for v, t in texts.items()}

    lo, hi, best = SHORT_CHARS + 1, MUST_CHARS - 1, cut(SHORT_CHARS)
    while lo <= hi:
        mid = (lo + hi) // 2
        trial = cut(mid)
        if layout.span(folded, trial) <= layout.room:
            best, lo = trial, mid + 1
        else:
            hi = mid - 1
    return best


def _drop_labels(layout: _Layout, folded: dict, texts: dict, order: list) -> dict:
    """`texts` less the fewest labels of `order` (dropped first to last) for the drawing to fit."""
    def without(k):
        gone = set(order[:k])
        return {v: (None if v in gone else t) for v, t in texts.items()}

    lo, hi, best = 1, len(order), without(len(order))
    while lo <= hi:
        mid = (lo + hi) // 2
        trial = without(mid)
        if layout.span(folded, trial) <= layout.room:
            best, hi = trial, mid - 1
        else:
            lo = mid + 1
    return best


class _Layout:
    """Slot widths and positions of a tree with some children folded (iterative: deep chains are common)."""

    def __init__(self, root, children: Mapping, room: float, opened: set = frozenset()):
        self.root, self.children, self.room, self.opened = root, children, room, opened

    def _visible(self, folded: Mapping) -> dict:
        """node -> its drawn children (the "+N" or the "−" node last), for the nodes drawn."""
        kids, stack = {}, [self.root]
        while stack:
            v = stack.pop()
            hidden = set(folded.get(v, ()))
            shown = [c for c in self.children.get(v, ()) if c not in hidden]
            if hidden:
                shown.append(more_node(v))
            elif v in self.opened:
                shown.append(less_node(v))
            kids[v] = shown
            stack.extend(c for c in shown if not isinstance(c, tuple))
        return kids

    @staticmethod
    def _slot(v, texts: Mapping, folded: Mapping) -> float:
        text = (f"+{len(folded[v[1]])}" if v[0] == "more" else LESS) if isinstance(v, tuple) else texts.get(v)
        return max(MIN_SLOT, label_px(text) + LABEL_GAP) if text else MIN_SLOT

    def _spans(self, folded: Mapping, texts: Mapping) -> tuple[dict, dict]:
        kids = self._visible(folded)
        order, stack = [], [self.root]
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(kids.get(v, ()))
        span = {}
        for v in reversed(order):
            inner = sum(span[c] for c in kids.get(v, ()))
            span[v] = max(self._slot(v, texts, folded), inner)
        return span, kids

    def span(self, folded: Mapping, texts: Mapping) -> float:
        return self._spans(folded, texts)[0][self.root]

    def place(self, folded: Mapping, texts: Mapping) -> tuple[dict, float]:
        """Positions in px: each node over the middle of its interval; a tight tree spreads over the room."""
        span, kids = self._spans(folded, texts)
        total = span[self.root]
        stretch = min(MAX_STRETCH, self.room / total) if total < self.room else 1.0
        offset = (self.room - total * stretch) / 2 if total * stretch < self.room else 0.0
        pos, stack = {}, [(self.root, 0.0, 0)]
        while stack:
            v, left, depth = stack.pop()
            pos[v] = (offset + (left + span[v] / 2) * stretch, float(-depth))
            inner = sum(span[c] for c in kids.get(v, ()))
            at = left + (span[v] - inner) / 2
            for c in kids.get(v, ()):
                stack.append((c, at, depth + 1))
                at += span[c]
        return pos, max(self.room, total * stretch)
