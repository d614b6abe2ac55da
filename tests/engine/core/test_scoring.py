"""Scoring a given tree with the target (core/scoring.py): the forward's inputs, the rescored record, the id check."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tevviz.engine import SamplingConfig, TevvizError
from tevviz.engine.core import scoring
from tevviz.engine.core.tree import from_parents
from tevviz.engine.records.records import RoundRecord

V = 4
MIN = torch.finfo(torch.float32).min


class RecordingModel:
    """Stands in for a causal LM: keeps what it was called with and returns the given logits (1, L, V)."""

    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, logits: torch.Tensor | None = None, vocab: int = V):
        self.logits, self.calls = logits, []
        self.head = SimpleNamespace(weight=torch.zeros(vocab, 2))

    def __call__(self, input_ids, attention_mask, position_ids):
        self.calls.append({"ids": input_ids, "mask": attention_mask, "pos": position_ids})
        length = input_ids.shape[1]
        out = torch.arange(float(length * V)).view(1, length, V) if self.logits is None else self.logits
        return SimpleNamespace(logits=out)

    def get_output_embeddings(self):
        return self.head


class Words:
    """A tokenizer that writes token i as 'w<i>'."""

    def batch_decode(self, rows):
        return [" ".join(f"w{t}" for t in row) for row in rows]


def test_tree_logits_feeds_prefix_and_tree_with_depth_positions_and_the_tree_mask():
    model = RecordingModel()
    tree = from_parents([7, 8, 9, 1], [-1, 0, 0, 1])
    out = scoring.tree_logits(model, [5, 6], tree)
    call = model.calls[0]
    assert call["ids"].tolist() == [[5, 6, 7, 8, 9, 1]]
    assert call["pos"].tolist() == [[0, 1, 2, 3, 3, 4]]  # the two siblings share a position
    visible = [[1, 0, 0, 0, 0, 0],
               [1, 1, 0, 0, 0, 0],
               [1, 1, 1, 0, 0, 0],
               [1, 1, 1, 1, 0, 0],
               [1, 1, 1, 0, 1, 0],  # node 2 sees the prefix and the root, not its sibling
               [1, 1, 1, 1, 0, 1]]
    assert call["mask"].shape == (1, 1, 6, 6)
    assert (call["mask"][0, 0] == 0).int().tolist() == visible and call["mask"].min() == MIN
    # The logits returned are the tree's rows only, node 0 first.
    assert out.tolist() == torch.arange(6.0 * V).view(6, V)[2:].tolist()


def test_tree_logits_with_an_empty_prefix_and_a_given_mask():
    model = RecordingModel()
    tree = from_parents([3, 2], [-1, 0])
    scoring.tree_logits(model, [], tree, anc=torch.eye(2, dtype=torch.bool))
    call = model.calls[0]
    assert call["ids"].tolist() == [[3, 2]] and call["pos"].tolist() == [[0, 1]]
    assert (call["mask"][0, 0] == 0).tolist() == [[True, False], [False, True]]


# The hand tree of test_exit_law.py: P = 1, .5, .3, .2, .1; rho = .2, .4, 1, 1, 1.
TOKENS, PARENTS = [3, 1, 2, 3, 0], [-1, 0, 0, 1, 1]
PROBS = torch.tensor([
    [0.15, 0.50, 0.30, 0.05],
    [0.20, 0.10, 0.30, 0.40],
    [0.40, 0.30, 0.20, 0.10],
    [0.40, 0.30, 0.20, 0.10],  # a leaf, so the flow is the same; no tie for the top missing token
    [0.10, 0.20, 0.30, 0.40],
])


def test_missing_records_keeps_positive_gains_largest_first():
    tree = from_parents(TOKENS, PARENTS)
    P = torch.tensor([1.0, 0.5, 0.3, 0.2, 0.1])
    got = scoring.missing_records(Words(), tree, PROBS, P, 3)
    # The root's children take tokens 1 and 2: only two tokens have a gain, and the third entry (gain 0) is left out.
    assert [(m["token_id"], m["text"]) for m in got[0]] == [(0, "w0"), (3, "w3")]
    assert [m["gain"] for m in got[0]] == pytest.approx([0.15, 0.05])
    assert [m["token_id"] for m in got[1]] == [2, 1]
    assert [m["gain"] for m in got[2]] == pytest.approx([0.12, 0.09, 0.06])
    assert scoring.missing_records(Words(), tree, PROBS, P, 0) == [[]] * 5


def test_rescore_fills_the_exit_law_texts_and_missing_tokens_from_the_target():
    prefix = [2, 2]
    logits = torch.cat([torch.zeros(len(prefix), V), PROBS.log()]).unsqueeze(0)
    pair = SimpleNamespace(target=RecordingModel(logits), tokenizer=Words())
    record = RoundRecord.unscored(0, "tev", TOKENS, PARENTS, [0, 1, 1, 2, 2], exit_node=3, bonus_token=1)
    out = scoring.rescore(pair, prefix, record, SamplingConfig(temperature=1.0), top=1)
    assert out.p_edge == pytest.approx([1.0, 0.5, 0.3, 0.4, 0.2])
    assert out.P == pytest.approx([1.0, 0.5, 0.3, 0.2, 0.1])
    assert out.rho == pytest.approx([0.2, 0.4, 1.0, 1.0, 1.0])
    assert out.w == pytest.approx([0.2, 0.2, 0.3, 0.2, 0.1])
    assert out.C_p == pytest.approx(1.1)
    assert out.texts == ["w3", "w1", "w2", "w3", "w0"]
    assert [m[0]["token_id"] for m in out.missing] == [0, 2, 0, 0, 3]
    # What the target does not decide stays as it was.
    assert (out.exit_node, out.bonus_token, out.accepted) == (3, 1, [0, 1, 3])
    assert record.P == [None] * 5, "the record given is not changed"


def test_check_ids_refuses_ids_outside_the_targets_vocabulary():
    pair = SimpleNamespace(target=RecordingModel(vocab=10))
    scoring.check_ids(pair, [0, 9, 3])
    for bad in (10, -1):
        with pytest.raises(TevvizError, match=f"token id {bad} is outside .* vocabulary of 10"):
            scoring.check_ids(pair, [1, bad, 99])
