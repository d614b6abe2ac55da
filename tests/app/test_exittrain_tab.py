"""The ExitTrain tab trains on trees that train: a decode on sampled chains (the embedded pair's default) or the mixed
builder trains on the drafter's own builder at a fixed B, and says so."""

from __future__ import annotations

from conftest import tiny_pair

from tevviz.app.exittrain_tab import trainable
from tevviz.app.state import decode_settings


def settings(builder: str, auto: bool = False, stop_below: float = 0.0):
    return decode_settings("t1 t2 t3", 1.0, 0, 1.0, 0, builder, 16, 4, 2, 4, "4,2", "speculative", 24,
                           auto_budget=auto, stop_below=stop_below)[1]


def test_a_sampled_chain_trains_on_the_drafters_own_tree_and_says_so():
    draft = tiny_pair("llama").draft
    cfg, said = trainable(settings("sampled", auto=True), draft)
    assert (cfg.builder.name, cfg.builder.budget, cfg.builder.auto) == ("best-first", 32, False)
    assert "Trained on best-first trees of B = 32: sampled trees do not train" in said
    same, nothing = trainable(settings("best-first"), draft)
    assert same == settings("best-first") and nothing == ""


def test_a_stopped_chain_trains_on_the_drafters_own_tree_without_the_stop():
    """Both named pairs start at T = 0 on a chain with a stop (BuilderConfig.stop_below), which a tree has no use
    for: the tab trains on the drafter's own tree, the stop left behind."""
    cfg, said = trainable(settings("sampled", stop_below=0.4), tiny_pair("llama").draft)
    assert (cfg.builder.name, cfg.builder.stop_below) == ("best-first", 0.0) and "sampled trees do not train" in said
