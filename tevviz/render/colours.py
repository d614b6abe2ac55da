"""Node colours: a metric's values as colours on a linear or log scale, and the colour bar that reads them."""

from __future__ import annotations

import functools
import math
from typing import Any

import plotly.graph_objects as go

from tevviz.render.graph import METRICS

LOG_METRICS = ("P", "w", "rho", "q", "missing")
LOG_SPAN = 100.0  # "auto" scale: log where the positive values span two decades or more
SCALES = ("auto", "linear", "log")


def colour_bar(values: list[float], metric: str, scale: str = "auto") -> tuple[list[float], dict[str, Any]]:
    """The colours of `values` and the colour bar that reads them (`colour_scale`), as the node trace draws them."""
    colours, bar = colour_scale(values, metric, scale)
    title = bar.pop("title", METRICS[metric].label)
    return colours, {"title": {"text": title, "side": "right"}, "thickness": 12, "xpad": 4, **bar}


def colour_scale(values: list[float], metric: str, scale: str = "auto") -> tuple[list[float], dict[str, Any]]:
    """The colours of `values` and the colour bar's ticks and title: log10 of the value (zeros at the floor, a decade
    below the smallest positive value) where `scale` is "log", or "auto" and they span two decades."""
    positive = [x for x in values if x > 0]
    spread = max(positive) / min(positive) if positive else 1.0
    log = metric in LOG_METRICS and positive and (scale == "log" or (scale == "auto" and spread >= LOG_SPAN))
    if not log:
        return list(values), {}
    floor = min(positive) / 10 if len(positive) < len(values) else min(positive)
    colours = [math.log10(max(x, floor)) for x in values]
    lo, hi = math.floor(min(colours)), math.ceil(max(colours))
    step = max(1, math.ceil((hi - lo) / 6))
    ticks = list(range(hi, lo - 1, -step))[::-1]
    text = [("≤" if len(positive) < len(values) and t <= math.log10(floor) else "") + f"1e{t}" if t else "1"
            for t in ticks]
    return colours, {"tickvals": ticks, "ticktext": text, "title": f"{METRICS[metric].label}, log scale"}


def colour_range(colours: list[float]) -> tuple[float, float]:
    """The bar's (cmin, cmax) over `colours`: their range, and where they are one value, from 0 up to it (plotly
    would pad a single value both ways: a P of 1 read up to 1.4). The report's script applies the same rule."""
    lo, hi = min(colours, default=0.0), max(colours, default=1.0)
    if hi <= lo:
        lo, hi = (min(lo, 0.0), hi) if hi > 0 else (lo, lo + 1.0)
    return lo, hi


def colorscale_of(name: str) -> list[list]:
    """A named colourscale as the [[position, colour], ...] stops plotly's validator expands it to."""
    return [list(stop) for stop in _validated(name)]


@functools.cache
def _validated(name: str) -> tuple[tuple, ...]:
    return tuple(map(tuple, go.scatter.Marker(colorscale=name).to_plotly_json()["colorscale"]))
