"""Settings that follow one another in the Decode tab: a builder switched away from the sampled chain takes the
tree verifier with it, so a run never reads "speculative" over a tree it verifies by the residual rule."""

from __future__ import annotations

import gradio as gr

from ..engine.draft.builder_kinds import builder_kind
from .widgets import LIGHT, Panel

CHAIN_VERIFIER = "speculative"  # drawn for a sampled chain; on a deterministic tree it runs the residual rule
TREE_VERIFIER = "tev"


def follow_builder(builder: str, verifier: str) -> str:
    """The verifier to show once `builder` is chosen: TEV in place of speculative sampling where the builder draws
    no sampled chain, else the verifier as it is."""
    if verifier == CHAIN_VERIFIER and not builder_kind(builder).chain:
        return TREE_VERIFIER
    return verifier


def wire_settings_follow(ui: Panel) -> None:
    """A change of builder by the person (not by a reopened run filling the boxes) moves the verifier with it."""
    ui.builder.input(lambda b, v: gr.update(value=follow_builder(b, v)), [ui.builder, ui.verifier], [ui.verifier],
                     show_progress="hidden", **LIGHT)
