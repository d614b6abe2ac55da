"""Two rounds' trees side by side as the Decode tree is shown: each a click-and-width view (figure_view.py) laid out
for the width its column really has, in one shared layout (render/compare_figure.pair_figure_dicts); a click on a node
selects it in both trees (matched by token path) and the details below say what each side has there
(pair_details.py); a click on "+N" unfolds it in both, the "−" after the opened children folds them again.

The Verifier comparison tab (A and B) and the ExitTrain tab (the original and the trained draft) each hold one. What a
browser session was last shown is kept here by its id, to draw again for a click or a width."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from ..render.compare_figure import PAIR_WIDTH, pair_figure_dicts, pair_tree
from ..render.tree_figure import node_key
from .figure_view import as_width, figure_view, sent
from .pair_details import Pair, pair_details
from .widgets import BROWSE, current, figure_json, remember

MAX_SESSIONS = 200  # browser sessions whose last pair is kept, to draw again for a click or a width
MIN_COLUMN = 420  # px of a tree's column: a narrower one held few labels (half a 900 px window had 340)
EVENTS = {"api_visibility": "private", "show_progress": "hidden", **BROWSE}


class PairView:
    """The two views and the details panel below them (built where it is made, inside the tab's Blocks)."""

    def __init__(self, labels: tuple[str, str], elem_id: str, details_label: str = "selected node in both trees"):
        views = []
        with gr.Row(equal_height=False):
            for label, side in zip(labels, "ab"):
                # A window too narrow for two such columns stacks the trees, each then as wide as the window.
                with gr.Column(min_width=MIN_COLUMN):
                    views.append(figure_view(label=label, elem_id=f"{elem_id}-{side}"))
        self.views = tuple(views)
        self.details = gr.Markdown("", label=details_label, elem_id=f"{elem_id}-details", elem_classes="stats-table")
        self.shown: dict[str, Pair] = {}
        self.widths: dict[str, tuple[int | None, int | None]] = {}  # px each view reported, by session id

    @property
    def outputs(self) -> list:
        return [*self.views, self.details]

    def show(self, sid: str, pair: Pair | None, empty: str = "") -> tuple[str, str, str]:
        """The views' and the details' values for `pair` (kept for clicks and widths); with none, `empty` said in
        both views."""
        if pair is None:
            self.shown.pop(sid, None)
            return _empty(empty), _empty(empty), ""
        remember(self.shown, sid, pair, MAX_SESSIONS)
        t = pair_tree(pair.a, pair.b, self.width(sid), pair.selected, pair.expanded)
        fa, fb = pair_figure_dicts(pair.a, pair.b, pair.names, pair.metric, pair.titles, selected=pair.selected,
                                   tree=t)
        return figure_json(fa), figure_json(fb), pair_details(t, pair.selected, pair.names, pair.metric)

    def width(self, sid: str) -> int:
        """The px both trees are laid out for: the narrower view's report (one layout for both), else a guess."""
        known = [w for w in self.widths.get(sid, ()) if w]
        return min(known) if known else PAIR_WIDTH

    def click(self, sid: str, key) -> tuple[str, str, str] | None:
        """A click's customdata: a node selects it (again: clears it), "+N" unfolds, "−" folds; None: nothing."""
        pair, key = self.shown.get(sid), node_key(key)
        if pair is None or key is None:
            return None
        if isinstance(key, int):
            pair = replace(pair, selected=None if key == pair.selected else key)
        elif key.startswith(("more:", "less:")) and key[5:].isdigit():
            u = int(key[5:])
            pair = replace(pair, expanded=(pair.expanded | {u}) if key[0] == "m" else (pair.expanded - {u}))
        else:
            return None
        return self.show(sid, pair)

    def resize(self, sid: str, side: int, width) -> tuple[str, str, str] | None:
        """View `side`'s width reported: both trees laid out again where the width they share changed."""
        width = as_width(width)
        if width is None:
            return None
        before = self.width(sid)
        widths = list(self.widths.get(sid, (None, None)))
        widths[side] = width
        remember(self.widths, sid, tuple(widths), MAX_SESSIONS)
        if sid not in self.shown or self.width(sid) == before:
            return None
        return self.show(sid, self.shown[sid])

    def wire(self, state: gr.State) -> None:
        """Clicks and width reports of both views, answered with both views and the details."""

        unchanged = tuple(gr.skip() for _ in self.outputs)

        def clicked(st, evt: gr.EventData):
            out = self.click(current(st).sid, sent(evt).get("key"))
            return unchanged if out is None else out

        def resized(side):
            def handler(st, evt: gr.EventData):
                if st is None:
                    return unchanged  # the page is still loading its state: the next figure drawn asks again
                out = self.resize(st.sid, side, sent(evt).get("width"))
                return unchanged if out is None else out
            return handler

        for side, view in enumerate(self.views):
            view.select(clicked, [state], self.outputs, **EVENTS)
            view.apply(resized(side), [state], self.outputs, **EVENTS)


def _empty(message: str) -> str:
    """A figure that says `message` where the trees would be."""
    return figure_json({"data": [], "layout": {
        "height": 220, "xaxis": {"visible": False}, "yaxis": {"visible": False}, "plot_bgcolor": "white",
        "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
        "annotations": [{"text": message, "showarrow": False, "font": {"size": 14, "color": "grey"}, "x": 0.5,
                         "y": 0.5, "xref": "paper", "yref": "paper"}]}})

