"""The round that drafts nothing (draft_result.root_only): the root alone, with the draft cache untouched."""

from __future__ import annotations

import torch

from tevviz.engine.draft.draft_result import DraftResult, root_only


def test_a_root_only_round_is_the_root_alone_and_drafts_nothing():
    r = root_only(42, base=17, device="cpu")
    assert isinstance(r, DraftResult)
    t = r.tree
    assert t.size == 1
    assert t.tokens.tolist() == [42] and t.parents.tolist() == [-1] and t.depths.tolist() == [0]
    assert t.draft_logprobs.tolist() == [0.0] and t.scores.tolist() == [0.0] and t.draft_probs is None
    # -1: the root was never forwarded in a tree slot, so the session must not read a draft row for it.
    assert r.slots.tolist() == [-1]
    assert r.base == 17 and r.levels == 0
    assert r.ranks.tolist() == [0] and r.reach.tolist() == [0.0] and r.rows is None


def test_its_tensors_have_the_dtypes_the_session_indexes_with():
    r = root_only(3, base=0, device=torch.device("cpu"))
    for name in ("tokens", "parents", "depths"):
        assert getattr(r.tree, name).dtype == torch.long, name
    assert r.slots.dtype == torch.long and r.ranks.dtype == torch.long
    assert r.reach.dtype.is_floating_point and r.tree.scores.dtype.is_floating_point


def test_nothing_predicted_beyond_the_root():
    """The cost model reads predicted accepted nodes as the sum of exp(reach) below the root: zero here."""
    r = root_only(5, base=3, device="cpu")
    assert float(r.reach[1:].exp().sum()) == 0.0
