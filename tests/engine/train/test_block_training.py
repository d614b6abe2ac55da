"""Training a block drafter: the blocks' attention mask and labels, the depth-decayed loss, chain acceptance, and a
short run that learns (tiny models, no shipped weights)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _dflash import dflash_config
from conftest import VOCAB, tiny_model

from tevviz.engine.draft.block_model import BlockDraftModel, parse_config
from tevviz.engine.train.block_training import block_batch, block_logits, block_loss, chain_acceptance, padded_blocks
from tevviz.engine.train.schedule import lr_scale

pytestmark = pytest.mark.usefixtures("one_thread")


def test_each_block_sees_the_context_before_its_anchor_and_itself_only():
    tokens = torch.arange(20).view(1, 20)
    feats = torch.zeros(1, 20, 4)
    b = block_batch(tokens, feats, torch.tensor([[5, 11]]), 4, mask_id=99)
    assert b.block_ids.tolist() == [[5, 99, 99, 99, 11, 99, 99, 99]]
    assert b.block_pos.tolist() == [[5, 6, 7, 8, 11, 12, 13, 14]]
    assert b.labels.tolist() == [[[6, 7, 8], [12, 13, 14]]]
    m = b.mask[0]  # (8, 20 + 8)
    for row in range(8):
        anchor = 5 if row < 4 else 11
        assert m[row, :20].tolist() == [p < anchor for p in range(20)]  # the context strictly before the anchor
        own = range(4) if row < 4 else range(4, 8)
        assert m[row, 20:].tolist() == [k in own for k in range(8)]  # its own block, both ways; no other block


def test_sequences_of_different_lengths_pad_without_changing_any_block():
    """A padded batch holds each sequence's blocks as an unpadded one would; a label past a sequence's end is -100
    and weighs nothing in the loss."""
    g = torch.Generator().manual_seed(1)
    short, long = torch.arange(3, 13), torch.arange(40, 60)
    fs, fl = torch.randn(10, 4, generator=g), torch.randn(20, 4, generator=g)
    anchors = torch.tensor([[8, 2], [5, 14]])
    b = padded_blocks([short, long], [fs, fl], anchors, 4, mask_id=99)
    alone = block_batch(long.view(1, -1), fl.view(1, 20, 4), anchors[1:], 4, mask_id=99)
    assert b.labels[1].tolist() == alone.labels[0].tolist()
    assert b.block_ids[1].tolist() == alone.block_ids[0].tolist()
    assert b.block_pos[1].tolist() == alone.block_pos[0].tolist()
    assert b.labels[0].tolist() == [[12, -100, -100], [6, 7, 8]]  # anchor 8 of a 10-token sequence: one label left
    assert torch.equal(b.ctx_feats[1, :20], fl) and torch.equal(b.ctx_feats[0, :10], fs)
    logits = torch.randn(2, 2, 3, 100, generator=g)
    kept = b.labels != -100
    hand = F.cross_entropy(logits[kept], b.labels[kept])
    assert float(block_loss(logits, b.labels, None)) == pytest.approx(float(hand), rel=1e-6)


def test_the_loss_is_the_depth_decayed_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 4, 7, generator=g)
    labels = torch.randint(0, 7, (2, 3, 4), generator=g)
    gamma = 2.0
    w = [math.exp(-k / gamma) for k in range(4)]
    ce = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), reduction="none").view(2, 3, 4)
    hand = sum(w[k] * float(ce[..., k].sum()) for k in range(4)) / (sum(w) * 6)
    assert float(block_loss(logits, labels, gamma)) == pytest.approx(hand, rel=1e-6)
    assert float(block_loss(logits, labels, None)) == pytest.approx(float(ce.mean()), rel=1e-6)


def test_chain_acceptance_counts_matching_prefixes():
    labels = torch.tensor([[[1, 2, 3], [1, 2, 3]]])
    logits = torch.zeros(1, 2, 3, 5)
    for d, t in enumerate([1, 2, 0]):  # block 0 matches depths 1-2, then misses
        logits[0, 0, d, t] = 1
    for d, t in enumerate([4, 2, 3]):  # block 1 misses at depth 1: nothing after counts
        logits[0, 1, d, t] = 1
    assert chain_acceptance(logits, labels) == [0.5, 0.5, 0.0]


def test_cosine_schedule_warms_up_then_decays_to_its_floor():
    assert lr_scale(0, 100, 10) == 0 and lr_scale(10, 100, 10) == pytest.approx(1)
    assert lr_scale(100, 100, 10, 0.1) == pytest.approx(0.1)
    assert lr_scale(55, 100, 10) == pytest.approx(0.5)


def test_a_short_run_lowers_the_loss_on_target_written_text():
    """Sixty steps on one batch of the target's own greedy text: the drafter fits it (the loss falls by half)."""
    target = tiny_model("llama", 1, layers=3)
    model = BlockDraftModel(parse_config(dflash_config(), "test", target))
    with torch.no_grad():
        seqs = target.generate(torch.randint(0, VOCAB - 1, (4, 6)), max_new_tokens=20, do_sample=False,
                               pad_token_id=0, eos_token_id=None)
        hs = target(seqs, output_hidden_states=True).hidden_states
    feats = torch.cat([hs[i + 1] for i in model.block.target_layer_ids], dim=-1)
    batch = block_batch(seqs, feats, torch.tensor([[6, 10, 14]] * 4), 6, model.block.mask_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        loss = block_loss(block_logits(model, target, batch), batch.labels, 4.0)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first
