"""Why two engines part: the drafter's two most likely tokens read off a best-first tree equal its own softmax
(the embedded stdlib pair; no llama-server needed)."""

from __future__ import annotations

import pytest

from tevviz.engine.engines.llamacpp_causes import draft_top_two, top_two
from tevviz.engine.load.models import ModelSource


@pytest.fixture(scope="module")
def pair():
    return ModelSource(pair="stdlib", device="cpu", dtype="float32").load()


def test_tree_children_are_the_drafters_own_top_two(pair):
    ids = pair.tokenizer("def read_lines(path):\n    with open(path) as f:")["input_ids"]
    # depth 1: the children of the root are the drafter's next-token law after the context
    tree = draft_top_two(pair, ids, (), 1)
    own = top_two(pair.draft, ids)
    assert [t for t, _ in tree] == [t for t, _ in own]
    assert [q for _, q in tree] == pytest.approx([q for _, q in own], abs=1e-5)
    # depth 2, below the drafter's own first token: its law after that token
    first = own[0][0]
    deeper, direct = draft_top_two(pair, ids, (first,), 2), top_two(pair.draft, [*ids, first])
    assert [t for t, _ in deeper] == [t for t, _ in direct]
    assert [q for _, q in deeper] == pytest.approx([q for _, q in direct], abs=1e-5)
    # a path the tree does not hold (a token the drafter does not rank in its top two) gives None
    assert draft_top_two(pair, ids, (own[1][0] + 1 if own[1][0] + 1 != first else own[1][0] + 2,), 2) is None
