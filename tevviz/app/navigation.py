"""Moving through what is shown, without the models: the round, the walk through its block, the selected node, the
tree's folds. One AppState in, one out: every view (slider, tree, text, details, the drafter's rows) follows it."""

from __future__ import annotations

from dataclasses import replace

from .state import AppState

ROUND_KEYS = {"ArrowLeft": -1, "ArrowRight": 1}
TOKEN_KEYS = {"ArrowDown": 1, "j": 1, "ArrowUp": -1, "k": -1}


def show_round(st: AppState, index) -> AppState:
    """Round `index` (clamped to the kept rounds), whole: no walk, no selection, folds closed."""
    if not st.rounds:
        return st
    view = min(max(int(index or 0), 0), len(st.rounds) - 1)
    return replace(st, view=view, token=None, node=None, expanded=frozenset(), cell=None)


def step_walk(st: AppState, direction: int) -> AppState:
    """The walk one token forward or back; past a round's end it goes on in the next (or previous) kept round."""
    r = st.round
    if r is None:
        return st
    last = r.block_length - 1
    if direction > 0:
        if st.token is None:
            return replace(st, token=0, node=None)
        if st.token < last:
            return replace(st, token=st.token + 1)
        if st.view + 1 < len(st.rounds):
            return replace(show_round(st, st.view + 1), token=0)
        return st
    if st.token is None:
        return replace(st, token=last, node=None)
    if st.token > 0:
        return replace(st, token=st.token - 1)
    if st.view > 0:
        previous = show_round(st, st.view - 1)
        return replace(previous, token=previous.round.block_length - 1)
    return replace(st, token=None)


def on_key(st: AppState, key: str) -> AppState:
    """A stepping key: left/right the round, up/down (k/j) the walk, Home/End the first/last round. Other keys change
    nothing."""
    if key in ROUND_KEYS:
        return show_round(st, st.view + ROUND_KEYS[key]) if st.rounds else st
    if key in TOKEN_KEYS:
        return step_walk(st, TOKEN_KEYS[key])
    if key == "Home":
        return show_round(st, 0)
    if key == "End":
        return show_round(st, len(st.rounds) - 1)
    return st


def select(st: AppState, key) -> AppState:
    """A click on the tree or the drafter's rows: a node, the bonus or a ghost is selected (the walk ends); a "+N"
    fold opens and a "−" folds it again; a rows cell (depth, token) rings that token's nodes at that depth."""
    if isinstance(key, str) and key.startswith(("more:", "less:")):
        try:
            parent = int(key.split(":", 1)[1])
        except ValueError:
            return st
        return replace(st, expanded=st.expanded | {parent} if key[0] == "m" else st.expanded - {parent})
    if isinstance(key, str) and key.startswith("cell:"):
        try:
            depth, token = (int(x) for x in key.split(":")[1:3])
        except ValueError:
            return st
        return replace(st, cell=(depth, token), node=None, token=None)
    if key is None or key == "":
        return replace(st, node=None, token=None, cell=None)
    if isinstance(key, str) and not (key == "bonus" or key.startswith("ghost:")):
        key = int(key)
    return replace(st, node=key, token=None, cell=None)
