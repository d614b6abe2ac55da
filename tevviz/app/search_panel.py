"""The Decode tab's find-and-filter row: a token found in the shown round's tree (the others dimmed, Next and Previous
select its nodes in turn), the kept rounds that drafted it, a threshold on the colour metric, and fold by mass (the
nodes under a target flow fold in every round; blank: the drawing folds by its room)."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from ..render.search import step_match
from .navigation import select, show_round
from .search_view import Search, parse_threshold, search_markdown, search_nodes
from .updates import BROWSE_OUTPUTS, MAX_WIDTHS, found_updates, search_of, shown, view_url, with_width
from .url_view import read_query
from .views import tree_plot
from .widgets import BROWSE, BROWSE_QUEUE, LIGHT, Panel, current, figure_json, remember

FIND_OUTPUTS = ("tree", "url", "found", "found_rounds")  # outputs of /find


def search_row() -> dict:
    """The row's widgets, by the names the Panel keeps them under."""
    c = {}
    with gr.Row(equal_height=True, elem_id="search-row"):
        c["find"] = gr.Textbox("", label='find a token ("…": whole)', placeholder="e.g. str",
                               scale=3, min_width=200, elem_id="find-box")
        with gr.Column(scale=0, min_width=110):
            c["find_prev"] = gr.Button("◀ Previous", size="sm", elem_id="find-prev")
            c["find_next"] = gr.Button("Next ▶", size="sm", elem_id="find-next")
        c["threshold"] = gr.Textbox("", label="light: colour ≥", placeholder="off", scale=1, min_width=110,
                                    elem_id="threshold-box")
        c["fold_mass"] = gr.Number(0.05, label="fold: P <", minimum=0, maximum=1, scale=1, min_width=110,
                                   placeholder="by room", elem_id="fold-mass")
        with gr.Column(scale=0, min_width=110):
            c["fold_btn"] = gr.Button("Fold by mass", elem_id="fold-btn")
    c["found"] = gr.Markdown("", elem_id="search-count")
    c["found_rounds"] = gr.Radio([], value=None, label="rounds whose tree drafted it (✓ accepted there): click to go",
                                 visible=False, elem_id="search-rounds")
    return c


def wire_search(ui: Panel) -> None:
    """Find, Next / Previous, the rounds list, the threshold, fold by mass, and the query a link names."""
    ui.searches = {}  # session id -> its Search; read wherever the tree is drawn (updates.search_of)

    def find(st, metric_name, query, threshold):
        st = current(st)
        try:
            search = Search(query or "", parse_threshold(threshold))
        except ValueError:
            return {ui.found: f"Error: the threshold must be a number (blank: off), got {threshold!r}"}
        remember(ui.searches, st.sid, search, MAX_WIDTHS)
        if st.round is None:
            # Nothing drawn: a page still restoring its view must not have its tree or URL put back to blank.
            return {ui.found: ""}
        st = with_width(ui, st)
        lit = search_nodes(st, search, metric_name)
        return ui.updates(tree=figure_json(tree_plot(st, metric_name, as_dict=True, matches=lit)),
                          url=view_url(st, metric_name, search.query), **found_updates(st, search, metric_name))

    def step(st, metric_name, direction):
        st = current(st)
        lit = search_nodes(st, search_of(ui, st), metric_name)
        node = step_match(sorted(lit), st.highlight, direction) if lit else None
        return shown(ui, select(st, node), metric_name) if node is not None else gr.skip()

    def go(st, metric_name, position):
        """A round of the list shown, its first lit node selected."""
        st = current(st)
        if not isinstance(position, int) or not 0 <= position < len(st.rounds) or position == st.view:
            return gr.skip()
        new = show_round(st, position)
        lit = search_nodes(new, search_of(ui, new), metric_name)
        return shown(ui, select(new, min(lit)) if lit else new, metric_name)

    def fold(st, metric_name, mass):
        """Fold every node under target flow `mass` (0: unfold all) in this round and the next; blank: by room."""
        st = current(st)
        if st.round is None:
            return gr.skip()
        below = None if mass is None else min(max(float(mass), 0.0), 1.0)
        return shown(ui, replace(st, expanded=frozenset(), fold_below=below), metric_name)

    def from_link(query):
        found = read_query(query)["find"]
        return found if found else gr.skip()

    browse = [ui.state, *ui.take(BROWSE_OUTPUTS)]
    fields = [ui.state, ui.metric, ui.find, ui.threshold]
    for box in (ui.find, ui.threshold):
        box.change(find, fields, ui.take(FIND_OUTPUTS), api_name="find" if box is ui.find else "threshold",
                   show_progress="hidden", **BROWSE_QUEUE)
    ui.find.submit(lambda st, m: step(st, m, 1), [ui.state, ui.metric], browse, api_visibility="private", **BROWSE)
    ui.find_next.click(lambda st, m: step(st, m, 1), [ui.state, ui.metric], browse, api_name="find_next", **BROWSE)
    ui.find_prev.click(lambda st, m: step(st, m, -1), [ui.state, ui.metric], browse, api_name="find_previous",
                       **BROWSE)
    ui.found_rounds.input(go, [ui.state, ui.metric, ui.found_rounds], browse, api_name="find_round", **BROWSE)
    ui.fold_btn.click(fold, [ui.state, ui.metric, ui.fold_mass], browse, api_name="fold_by_mass", **BROWSE)
    # A threshold is on the colour shown: its count follows the colour (the tree is redrawn by browsing's handler).
    ui.metric.change(lambda st, m: search_markdown(current(st), search_of(ui, current(st)), m), [ui.state, ui.metric],
                     [ui.found], api_visibility="private", **LIGHT)
    ui.query_box.change(from_link, [ui.query_box], [ui.find], api_visibility="private", **LIGHT)
