"""Where rounds sit in the committed stream, and the ExitTrain contexts cut there (train/contexts.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.records.records import RoundRecord
from tevviz.engine.train.contexts import context_ends, fits, spread, training_contexts
from tevviz.engine.train.exittrain import Context


def rnd(index: int, root: int, committed: list[int]) -> RoundRecord:
    """A round rooted at token `root` that appended `committed` (its tree below the root does not matter here)."""
    r = RoundRecord.unscored(index, "tev", [root, 50], [-1, 0], [0, 1])
    return dataclasses.replace(r, committed=committed)


# Prompt 1 2 3; round 0 (root 3) appends 4 5, round 1 (root 5) appends 6, round 2 (root 6) appends 7 8 9.
STREAM = [1, 2, 3, 4, 5, 6, 7, 8, 9]
ROUNDS = [rnd(0, 3, [4, 5]), rnd(1, 5, [6]), rnd(2, 6, [7, 8, 9])]


def test_each_round_ends_its_context_just_past_its_root():
    assert context_ends(STREAM, ROUNDS) == [3, 5, 6]
    assert [STREAM[e - 1] for e in context_ends(STREAM, ROUNDS)] == [3, 5, 6]  # the rounds' roots


def test_counted_from_the_end_when_older_rounds_were_dropped():
    assert context_ends(STREAM, ROUNDS[1:]) == [5, 6]
    assert context_ends(STREAM, ROUNDS[2:]) == [6]
    assert context_ends(STREAM, []) == []


def test_a_round_the_stream_does_not_show_is_none():
    # An import without its prompt: round 0's root is not in the stream, the later rounds' are.
    assert context_ends(STREAM[3:], ROUNDS) == [None, 2, 3]
    # A root that is not the token before the block, and a block other than the stream's.
    wrong_root = [rnd(0, 3, [4, 5]), rnd(1, 9, [6]), rnd(2, 6, [7, 8, 9])]
    assert context_ends(STREAM, wrong_root) == [3, None, 6]
    wrong_block = [rnd(0, 3, [4, 5]), rnd(1, 5, [6]), rnd(2, 6, [7, 0, 9])]
    assert context_ends(STREAM, wrong_block)[2] is None
    # A round that appended nothing shows nowhere, and the rounds before it still count back from their own ends.
    empty = [rnd(0, 3, [4, 5]), rnd(1, 5, [6]), rnd(2, 6, [7, 8, 9]), rnd(3, 9, [])]
    assert context_ends(STREAM, empty) == [3, 5, 6, None]


@pytest.mark.parametrize("k, picked", [(4, [0, 3, 6, 9]), (2, [0, 9]), (1, [9]), (10, list(range(10))),
                                       (20, list(range(10)))])
def test_spread_keeps_the_first_and_last_and_spaces_the_rest_evenly(k, picked):
    assert spread(list(range(10)), k) == picked


def test_spread_of_none_is_empty():
    # "At most 0" once gave one item.
    assert spread([1, 2, 3], 0) == [] and spread([1, 2, 3], -1) == []


def test_spread_of_few_items_keeps_them_all():
    assert spread([], 3) == [] and spread(["a"], 3) == ["a"]
    assert spread(["a", "b", "c", "d", "e"], 3) == ["a", "c", "e"]


def test_training_contexts_are_the_stream_up_to_each_root_and_what_followed():
    contexts = training_contexts(STREAM, ROUNDS, 8)
    assert contexts == [Context([1, 2, 3], [4, 5, 6, 7, 8, 9]), Context([1, 2, 3, 4, 5], [6, 7, 8, 9]),
                        Context([1, 2, 3, 4, 5, 6], [7, 8, 9])]
    # Rounds the stream does not show are left out before the limit spreads the rest.
    assert training_contexts(STREAM[3:], ROUNDS, 8) == [Context([4, 5], [6, 7, 8, 9]), Context([4, 5, 6], [7, 8, 9])]
    assert [len(c.tokens) for c in training_contexts(STREAM, ROUNDS, 2)] == [3, 6]


def test_fits_leaves_room_for_the_builders_full_depth():
    pair = SimpleNamespace(context_length=10)
    builder = BuilderConfig(depth=3)
    assert fits(pair, list(range(7)), builder)  # 7 + 3 = 10 positions: just fits
    assert not fits(pair, list(range(8)), builder)
    assert fits(pair, list(range(4)), BuilderConfig(depth=6)) and not fits(pair, list(range(5)), BuilderConfig(depth=6))
