"""The Decode tab's view of an AppState as widget updates: what every handler that changes the round shown returns,
so that slider, tree, details, text, rows and the URL always show the same round."""

from __future__ import annotations

import json
from dataclasses import replace

import gradio as gr

from .details import node_details
from .search_view import NO_SEARCH, Search, search_markdown, search_nodes, search_rounds
from .state import AppState
from .views import block_rows_plot, node_choices, session_panel, stats_markdown, text_spans, tree_plot
from .widgets import Panel, figure_json

# What browsing a round updates; "found" and "found_rounds" are the find-and-filter row's (app/search_panel.py).
VIEW_OUTPUTS = ("tree", "view", "node", "details", "text", "rows_plot", "url", "found", "found_rounds")
# Outputs of /step, /step_token, /run, /reset, /import_file and /rescore after the gr.State, in order.
ROUND_OUTPUTS = ("error", "stats", "session_plot", *VIEW_OUTPUTS, "run_pick")
BROWSE_OUTPUTS = (*VIEW_OUTPUTS, "error")  # outputs of /view and /key after the gr.State
NODE_OUTPUTS = ("tree", "details", "node", "url", "rows_plot")  # outputs of /node and /click after the gr.State
MAX_WIDTHS = 10_000  # browser sessions whose tree width is remembered


def shown(ui: Panel, st: AppState, metric: str) -> dict:
    """Updates of the state, error box, tree, round slider, node picker, details, text, rows, URL and the search's
    count and rounds for `st`.

    The slider counts rounds as the titles do (a run's round index, a file's own indices), not list positions."""
    st, search = with_width(ui, st), search_of(ui, st)
    first, last = (st.rounds[0].index, st.rounds[-1].index) if st.rounds else (0, 0)
    return {ui.state: st, **ui.updates(
        error="",
        tree=figure_json(tree_plot(st, metric, as_dict=True, matches=search_nodes(st, search, metric))),
        view=gr.Slider(minimum=first, maximum=max(last, first + 1), value=st.round.index if st.round else first,
                       interactive=len(st.rounds) > 1),
        node=gr.Dropdown(choices=node_choices(st), value=st.highlight if isinstance(st.highlight, int) else None),
        details=node_details(st),
        text=text_spans(st) if st.round is not None or st.prompt else [],
        rows_plot=figure_json(block_rows_plot(st)),
        url=view_url(st, metric, search.query),
        **found_updates(st, search, metric),
    )}


def found_updates(st: AppState, search: Search, metric: str) -> dict:
    """The search's count line and its rounds (the shown one picked where it is one), by widget name."""
    choices = search_rounds(st, search)
    picked = st.view if any(position == st.view for _, position in choices) else None
    return {"found": search_markdown(st, search, metric),
            "found_rounds": gr.Radio(choices=choices, value=picked, visible=bool(choices))}


def search_of(ui: Panel, st: AppState) -> Search:
    """What the browser's find-and-filter row asks, kept by session id like the tree's width (`with_width`)."""
    return getattr(ui, "searches", {}).get(st.sid, NO_SEARCH)


def view_url(st: AppState, metric: str, find: str = "") -> str:
    """The view as the page's URL keeps it (app/url_view.py): run, round, selected node, open folds, the fold by
    mass, the walk's token, the pinned run and the comparison shown, colour, the token searched for."""
    view = {"metric": metric}
    if find.strip():
        view["find"] = find.strip()
    if st.user and st.rounds:
        view |= {"run": f"{st.user}.{st.run_id}", "round": st.round.index if st.round else None}
        if st.node is not None and st.token is None:
            view["node"] = st.node
        if st.expanded:
            view["folds"] = ",".join(map(str, sorted(st.expanded)))
        if st.fold_below is not None:
            view["below"] = f"{st.fold_below:g}"
        if st.token is not None:
            view["walk"] = st.token
    if st.user and st.pinned:
        view["pin"] = f"{st.user}.{st.pinned}"
        if st.compared:
            view["cmp"] = f"{st.user}.{st.compared[0]}.{st.compared[1]}"
    return json.dumps(view)


def position_of(st: AppState, index) -> int:
    """The list position of round `index` (as titles and the slider count), the nearest kept one if it is gone."""
    if not st.rounds:
        return -1
    try:
        index = int(index)
    except (TypeError, ValueError):
        return st.view
    return min(range(len(st.rounds)), key=lambda k: abs(st.rounds[k].index - index))


def with_width(ui: Panel, st: AppState) -> AppState:
    """`st` with its browser's latest tree width: reported by the tree view (`apply`), kept by session id, since an
    event that started before the report returns a state without it."""
    width = ui.widths.get(st.sid)
    return st if width is None or width == st.width else replace(st, width=width)


def everything(ui: Panel, st: AppState, metric: str) -> dict:
    """`shown` plus the live statistics, the session figures and the run picker."""
    out = {**shown(ui, st, metric), **ui.updates(stats=stats_markdown(st), session_plot=figure_json(session_panel(st)))}
    if hasattr(ui, "run_choices"):
        out[ui.run_pick] = ui.run_choices(st)
    return out


