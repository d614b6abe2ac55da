"""The block drafter kind (tevviz/engine/kinds/block_kind.py): a DFlash folder is recognised and loaded as a block
drafter, it takes the ddtree builder and refuses the others (and ExitTrain's trees it cannot train on), and the
notebook API gives it its own builder and depth."""

from __future__ import annotations

import pytest
from _dflash import BS, greedy_cfg
from conftest import VOCAB, tiny_model, word_tokenizer

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession
from tevviz.engine.draft.block_model import BlockDraftModel
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import ModelPair

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_dflash_folder_loads_as_a_block_drafter(block_pair):
    d = block_pair.draft
    assert isinstance(d, BlockDraftModel) and block_pair.draft_kind == "block"
    assert d.block.block_size == BS and d.block.target_layer_ids == (0, 2) and d.block.mask_token_id == VOCAB - 2
    assert not hasattr(d, "embed_tokens") and not hasattr(d, "lm_head")  # the target's are used


def test_builders_and_drafters_must_match(block_pair):
    with pytest.raises(TevvizError, match="build its trees with the ddtree builder"):
        DecodeSession(block_pair, [1, 2, 3], DecodeConfig(builder=BuilderConfig(name="best-first")))
    ar = ModelPair(block_pair.target, tiny_model("llama", 2), word_tokenizer(), "t", "ar")
    with pytest.raises(TevvizError, match="drafts with a block drafter"):
        DecodeSession(ar, [1, 2, 3], greedy_cfg("tev"))
    with pytest.raises(TevvizError, match="the ddtree builder takes the tev, predraw, residual verifiers, not "
                                          "speculative: speculative sampling needs each token drawn"):
        greedy_cfg("speculative")


def test_training_and_auto_sizing_refuse_builders_that_do_not_support_them(block_pair):
    from tevviz.engine.train.exittrain import Context, ExitTrainer, TrainConfig

    with pytest.raises(TevvizError, match="ExitTrain cannot train on sampled trees: its chains are drawn at random"):
        TrainConfig(builder=BuilderConfig(name="sampled", budget=8, depth=4))
    with pytest.raises(TevvizError, match="ExitTrain cannot train on mixed trees: its rounds are"):
        TrainConfig(builder=BuilderConfig(name="mixed", budget=8, depth=4, auto=True))
    with pytest.raises(TevvizError, match="is a block drafter"):
        ExitTrainer(block_pair, [Context([1, 2, 3], [4, 5])], TrainConfig())
    with pytest.raises(TevvizError, match="an automatic budget sizes best-first, sampled, mixed, ddtree rounds only, "
                                          "not static trees"):
        BuilderConfig(name="static", auto=True)


def test_the_notebook_api_takes_a_block_drafter_with_its_own_builder(saved_pair):
    import tevviz

    target, draft = saved_pair
    pair = tevviz.load(target=target, draft=draft, device="cpu")
    s = tevviz.session(pair, "t5 t9 t11", max_new_tokens=8)
    assert s.cfg.builder.name == "ddtree" and s.cfg.builder.depth == BS - 1
    r = s.step()
    assert r.draft_rows is not None and tevviz.figure(r).data
