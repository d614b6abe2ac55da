"""A tree figure's frame: its width and margins, the px its nodes spread over (`plan_room`) and the plotly layout
around a plan. The Decode tree and the compared trees share it, so their labels are planned for the same room."""

from __future__ import annotations

from typing import Any

from tevviz.render.tree_plan import TreePlan
from tevviz.render.tree_traces import HIGHLIGHT_RING

WIDTH = 900
ROW_HEIGHT = 70
MAX_HEIGHT = 6000
MARGIN = {"l": 16, "r": 76, "b": 20}  # the right margin holds the colour bar, so the plot area is known in px
WIDER = "wider than its view: scroll sideways for the rest →"
TOP_LABELLED = 16  # nodes labelled before the rest, by the colour metric
# px kept clear at each side of the nodes: a ring (the selection's is the widest) on an outermost node stays whole
EDGE = HIGHLIGHT_RING // 2 + 3

# The title sits in the top margin, which grows to hold it (`automargin`: a title of two lines); the legend sits below
# the tree, where plotly grows the bottom margin to hold its rows. Above the tree, the legend wrapped to a second row
# once ghost branches were on and covered the title's last line: its underscores (C_p read "C  p").
TITLE = {"x": 0.0, "xanchor": "left", "xref": "paper", "y": 1.0, "yanchor": "top", "yref": "container",
         "pad": {"t": 12}, "automargin": True}
LEGEND = {"orientation": "h", "yanchor": "top", "y": -0.02, "x": 0.0}
# The axes are fixed, so zoom, pan and selection do nothing: their buttons only covered the end of a long title on
# hover (the modebar sits at the top right). The picture download stays.
MODEBAR_GONE = ["zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale", "resetscale", "togglespikelines",
                "hovercompare", "togglehover", "sendcharttocloud"]


def plan_room(width: int) -> float:
    """The px a tree's nodes spread over in a figure `width` px wide: its margins and the clear edges left out."""
    return max(width - MARGIN["l"] - MARGIN["r"] - 2 * EDGE, 100)


def tree_layout(plan: TreePlan, width: int, title: str | None) -> dict[str, Any]:
    """The layout dict of a figure `width` px wide around `plan`: one row per depth, the axes in the plan's px."""
    rows = 1 - min(p[1] for p in plan.pos.values())  # depth levels, bonus row included
    span = max(plan_room(width), plan.width)
    if plan.width > plan_room(width) + 1:
        # Labels that must stay did not fit: the view scrolls, and a scrollbar may be drawn only while scrolling
        # (overlay scrollbars), so the figure says it.
        title = (title + "<br>" if title else "") + f"<sup>{WIDER}</sup>"
    return {
        **({} if title is None else {"title": {"text": title, **TITLE, "pad": dict(TITLE["pad"])}}),
        "width": round(span + 2 * EDGE + MARGIN["l"] + MARGIN["r"]),
        "height": min(MAX_HEIGHT, 160 + ROW_HEIGHT * rows),
        # The x axis is the plan's px: the labels it spaced keep their distances on screen.
        "xaxis": {"visible": False, "range": [-EDGE, span + EDGE], "fixedrange": True},
        "yaxis": {"visible": False, "range": [-rows + 0.4, 0.6], "fixedrange": True},
        "plot_bgcolor": "white",
        "hovermode": "closest",
        "legend": dict(LEGEND),
        "modebar": {"remove": list(MODEBAR_GONE)},
        "margin": {**MARGIN, "t": 60 if title else 30},
        "meta": {"width": width},  # the room the labels were planned for: the app's view asks again when it differs
    }
