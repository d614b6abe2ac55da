"""The Decode tab's browsing: the round slider, the keys, clicks on the tree, its width, colour and scale, the node
picker and the example prompts. None of it touches the models."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from ..render.tree_figure import node_key
from .details import node_details
from .figure_view import FITS, as_width, reported_width, sent
from .navigation import on_key, select, show_round
from .search_view import search_nodes
from .updates import BROWSE_OUTPUTS, MAX_WIDTHS, NODE_OUTPUTS, position_of, search_of, shown, view_url, with_width
from .views import block_rows_plot, tree_plot
from .widgets import BROWSE, BROWSE_QUEUE, LIGHT, Panel, current, figure_json, remember


def wire_browsing(ui: Panel, by_id: dict[str, str]) -> None:
    """The round slider, the keys, clicks on the tree, its width and the node picker; then the view's options."""

    def set_view(st, metric_name, index):
        st = current(st)
        return shown(ui, show_round(st, position_of(st, index)), metric_name)

    def press(st, metric_name, evt: gr.EventData):
        st, data = current(st), sent(evt)
        key = str(data.get("key", ""))
        new = show_round(st, position_of(st, data.get("value"))) if key == "Enter" else on_key(st, key)
        return shown(ui, new, metric_name) if new is not st else gr.skip()

    def picked(st, metric_name, new):
        new = with_width(ui, new)
        return {ui.state: new, **ui.updates(tree=figure_json(drawn_tree(ui, new, metric_name)),
                                            details=node_details(new),
                                            node=new.highlight if isinstance(new.highlight, int) else None,
                                            url=view_url(new, metric_name, search_of(ui, new).query),
                                            rows_plot=figure_json(block_rows_plot(new)))}

    def click(st, metric_name, evt: gr.EventData):
        st, key = current(st), node_key(sent(evt).get("key"))
        return picked(st, metric_name, select(st, key)) if key is not None and st.round is not None else gr.skip()

    def select_node(st, metric_name, node_id):
        return picked(st, metric_name, select(current(st), node_id))

    def resize(st, metric_name, evt: gr.EventData):
        width = reported_width(evt)
        if width is None:
            return gr.skip()
        if st is None:
            return gr.skip()  # the page is still loading its state: the first figure drawn will ask again
        remember(ui.widths, st.sid, width, MAX_WIDTHS)
        # The tree alone, and only a drawn one laid out for another width: a figure that fits, or none yet (the one
        # a Step or the page's restore is returning now takes the width from `ui.widths`), is not drawn again; a
        # second drawing of the same tree a moment after a reload took a click aimed at the first.
        planned = as_width(sent(evt).get("planned"))
        if st.round is None or planned is None or abs(planned - width) <= FITS:
            return gr.skip()
        fig = drawn_tree(ui, with_width(ui, st), st.metric)
        fig["layout"]["meta"]["resized"] = True  # the browser drops it where it shows another view by now
        return {ui.tree: figure_json(fig)}

    browse = [ui.state, *ui.take(BROWSE_OUTPUTS)]
    ui.view.release(set_view, [ui.state, ui.metric, ui.view], browse, api_name="view", **BROWSE)
    ui.tree.key_up(press, [ui.state, ui.metric], browse, api_name="key", show_progress="hidden", **BROWSE)
    # A click on the drafter's rows rings that token's nodes; one on the tree boxes the node's token in the rows.
    ui.rows_plot.select(click, [ui.state, ui.metric], [ui.state, *ui.take(NODE_OUTPUTS)], api_visibility="private",
                        show_progress="hidden", **BROWSE)
    ui.tree.select(click, [ui.state, ui.metric], [ui.state, *ui.take(NODE_OUTPUTS)], api_name="click",
                   show_progress="hidden", **BROWSE)
    ui.tree.apply(resize, [ui.state, ui.metric], [ui.tree], api_visibility="private", show_progress="hidden",
                  **BROWSE)
    ui.node.select(select_node, [ui.state, ui.metric, ui.node], [ui.state, *ui.take(NODE_OUTPUTS)], api_name="node",
                   **BROWSE)
    wire_view_options(ui, by_id)


def wire_view_options(ui: Panel, by_id: dict[str, str]) -> None:
    """The node colour and scale, the ghost branches, the optimal tree every round, and the example prompts."""

    def redraw(st, metric_name, **changes):
        if current(st).round is None:
            # Nothing drawn to recolour (a redraw now would blank the page's first figure). A scale or the ghost box
            # set before the first Step is kept for it.
            return {ui.state: replace(current(st), **changes)} if changes else gr.skip()
        st = with_width(ui, replace(current(st), metric=metric_name, **changes))
        return {ui.state: st, **ui.updates(tree=figure_json(drawn_tree(ui, st, metric_name)),
                                           url=view_url(st, metric_name, search_of(ui, st).query))}

    def set_optimal_every(st, on):
        return replace(current(st), optimal_every=bool(on))

    def pick_prompt(prompt_id):
        return by_id.get(prompt_id, gr.skip())

    drawn = [ui.state, ui.tree, ui.url]
    # `input`, a person's choice alone: a restored link or an opened run sets the colour with its tree drawn, and a
    # change event fired by that drew again from the state it had read, which a Step pressed just after could beat.
    ui.metric.input(redraw, [ui.state, ui.metric], drawn, api_name="metric", **BROWSE_QUEUE)
    ui.scale.change(lambda st, m, scale: redraw(st, m, scale=scale), [ui.state, ui.metric, ui.scale], drawn,
                    api_name="scale", **BROWSE_QUEUE)
    ui.pick.change(pick_prompt, [ui.pick], [ui.prompt], api_visibility="private", **LIGHT)
    ui.ghosts.change(lambda st, m, on: redraw(st, m, ghosts=bool(on)), [ui.state, ui.metric, ui.ghosts], drawn,
                     api_name="ghosts", **BROWSE_QUEUE)
    ui.optimal_every.change(set_optimal_every, [ui.state, ui.optimal_every], [ui.state], api_name="optimal_every",
                            **BROWSE_QUEUE)


def drawn_tree(ui: Panel, st, metric: str) -> dict:
    """The shown round's tree as a figure dict, dimmed outside what the browser's find-and-filter row lights."""
    return tree_plot(st, metric, as_dict=True, matches=search_nodes(st, search_of(ui, st), metric))

