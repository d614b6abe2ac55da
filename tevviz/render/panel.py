"""Several figure dicts tiled into one figure of subplots, so a browser draws one plot instead of several.

A Step updates every session figure, and gradio's Plot re-mounts its plotly view on each new value and draws it
twice; one figure of five subplots draws in less than half the time of five figures (docs/app-latency.md).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

Figure = Mapping[str, Any]

AXIS = re.compile(r"^([xy])axis(\d*)$")
# Per-figure sizing and legend placement give way to the panel's own; anything else in a figure's layout
# (shapes, annotations, ...) would need its references remapped, so it is refused rather than dropped.
SIZING = {"height", "width", "margin", "legend", "template", "showlegend", "autosize"}
ROW_HEIGHT = 330
LEGEND_HEIGHT = 150  # px below the subplots for the legend's rows
LEGEND_GAP = 0.12  # paper units per row between the last subplot's axis title and the legend
H_GAP, V_GAP = 0.07, 0.16


def tile(figures: Mapping[str, Figure], rows: Sequence[Sequence[str]]) -> dict[str, Any]:
    """One figure dict holding each of `figures` as a subplot, laid out as `rows` of figure names.

    Each figure's traces keep their data and are grouped in the legend under its title (`legendgroup` is the
    figure's name); its axes are renumbered, a second axis overlaying its first stays an overlay.
    """
    names = [n for row in rows for n in row]
    if sorted(names) != sorted(figures) or len(set(names)) != len(names):
        raise ValueError(f"rows {rows} must name each of {sorted(figures)} once")
    data: list[dict] = []
    # The legend below the subplots: beside them it took half a narrow window's width and squeezed them together.
    layout: dict[str, Any] = {"height": ROW_HEIGHT * len(rows) + LEGEND_HEIGHT, "annotations": [],
                              "margin": {"l": 50, "r": 20, "t": 30, "b": 40 + LEGEND_HEIGHT},
                              "legend": {"groupclick": "toggleitem", "orientation": "h", "yanchor": "top",
                                         "y": -LEGEND_GAP / len(rows), "x": 0}}
    barmodes = set()
    used = {"x": 0, "y": 0}
    for r, row in enumerate(rows):
        top = 1 - r / len(rows)
        y_domain = [top - 1 / len(rows) + V_GAP / 2, top - V_GAP / 2]
        for c, name in enumerate(row):
            fig = figures[name]
            x_domain = [c / len(row) + H_GAP / 2, (c + 1) / len(row) - H_GAP / 2]
            own = copy.deepcopy(dict(fig.get("layout", {})))
            extra = set(own) - SIZING - {"title", "barmode"} - {k for k in own if AXIS.match(k)}
            if extra:
                raise ValueError(f"figure {name!r} has layout entries a panel cannot place: {sorted(extra)}")
            if "barmode" in own:
                barmodes.add(own["barmode"])
            ids = sorted({_axis_id(k) for k in own if AXIS.match(k)} | {"x", "y"})
            ref = {}  # the figure's axis id ("x", "y2") -> the panel's
            for a in ids:
                used[a[0]] += 1
                ref[a] = a[0] + (str(used[a[0]]) if used[a[0]] > 1 else "")
            title = (own.get("title") or {}).get("text", name)
            for a in ids:
                axis = own.get(_layout_key(a), {})
                if "overlaying" in axis:
                    axis["overlaying"] = ref[axis["overlaying"]]
                else:
                    axis["domain"] = x_domain if a[0] == "x" else y_domain
                axis["anchor"] = ref["y" if a[0] == "x" else "x"]
                layout[_layout_key(ref[a])] = axis
            for trace in fig.get("data", []):
                t = copy.deepcopy(dict(trace))
                t["xaxis"], t["yaxis"] = ref[t.get("xaxis", "x")], ref[t.get("yaxis", "y")]
                t["legendgroup"], t["legendgrouptitle"] = name, {"text": title}
                data.append(t)
            layout["annotations"].append({"text": f"<b>{title}</b>", "xref": "paper", "yref": "paper",
                                          "x": sum(x_domain) / 2, "y": y_domain[1], "xanchor": "center",
                                          "yanchor": "bottom", "showarrow": False})
    if len(barmodes) > 1:
        raise ValueError(f"figures disagree on barmode: {sorted(barmodes)}")
    if barmodes:
        layout["barmode"] = barmodes.pop()
    return {"data": data, "layout": layout}


def _axis_id(key: str) -> str:
    """ "yaxis2" -> "y2", the id traces refer to."""
    letter, number = AXIS.match(key).groups()
    return letter + number


def _layout_key(axis_id: str) -> str:
    """ "y2" -> "yaxis2", the layout entry of that axis."""
    return f"{axis_id[0]}axis{axis_id[1:]}"


def panel_traces(fig: Figure, name: str) -> list[dict]:
    """The traces of the figure `name` inside a tiled figure, in their order."""
    return [t for t in fig["data"] if t.get("legendgroup") == name]
