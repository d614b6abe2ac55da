"""The Decode tab's verifier follows a change of builder (app/settings_follow.py)."""

from __future__ import annotations

from tevviz.app.settings_follow import follow_builder


def test_speculative_sampling_gives_way_to_tev_on_a_tree_and_stays_on_the_sampled_chain():
    assert follow_builder("best-first", "speculative") == "tev"
    assert follow_builder("ddtree", "speculative") == "tev"
    assert follow_builder("sampled", "speculative") == "speculative"


def test_a_verifier_the_tree_takes_stays_as_chosen():
    for verifier in ("tev", "predraw", "residual"):
        assert follow_builder("best-first", verifier) == verifier
        assert follow_builder("sampled", verifier) == verifier
