"""Pure rendering: round record -> networkx graph -> tidy layout -> plotly figures (no torch, no gradio)."""

from tevviz.render.graph import METRICS, Metric, node_metric, round_graph
from tevviz.render.layout import edges_cross, tidy_layout
from tevviz.render.stats import (
    acceptance_by_depth_figure,
    block_length_histogram,
    coverage_figure,
    exit_mass_by_depth_figure,
    stage_times_figure,
    verifier_law_figure,
)
from tevviz.render.text import highlighted_blocks
from tevviz.render.training import exit_mass_change_figure, loss_figure, path_label
from tevviz.render.tree_figure import tree_figure
from tevviz.render.tree_traces import BONUS

__all__ = [
    "BONUS",
    "METRICS",
    "Metric",
    "acceptance_by_depth_figure",
    "block_length_histogram",
    "coverage_figure",
    "edges_cross",
    "exit_mass_by_depth_figure",
    "exit_mass_change_figure",
    "highlighted_blocks",
    "loss_figure",
    "node_metric",
    "path_label",
    "round_graph",
    "stage_times_figure",
    "tidy_layout",
    "tree_figure",
    "verifier_law_figure",
]
