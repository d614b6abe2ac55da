"""The EAGLE-3 head's recipe (tevviz/recipes/eagle3.py): its training-time-test unroll equals the head drafting a
chain step by step through its own cache; training on a tiny target's written text raises held-out chain acceptance
well above the untrained head's; the saved folder loads as an eagle3 drafter whose greedy decoding is `generate`."""

from __future__ import annotations

import argparse

import pytest
import torch
from conftest import VOCAB, greedy_generate, random_prompts, tiny_model
from test_eagle3_loading import write_target

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.kv import causal_visibility
from tevviz.engine.draft.drafters import drafter_kind
from tevviz.engine.draft.eagle3_model import Eagle3Head, HeadKV
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import load_pair
from tevviz.recipes import eagle3
from tevviz.recipes.block_data import DataStore, Sequences, features_of

pytestmark = pytest.mark.usefixtures("one_thread")

LAYERS = (0, 1, 2)  # decoder layers of a 3-layer target: hidden_states 1, 2, 3
DRAFT_VOCAB = 64


def written(target, prompts: list[list[int]], new: int) -> Sequences:
    """The target's greedy continuations of `prompts` with its features at LAYERS, as the block recipe keeps them."""
    seqs = [torch.tensor(p + greedy_generate(target, p, new)) for p in prompts]
    return Sequences(seqs, features_of(target, seqs, list(LAYERS), 8), [len(p) - 1 for p in prompts])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3_recipe")
    target = tiny_model("llama", 3, layers=3)
    store = DataStore(root / "data")
    store.put("held", written(target, random_prompts(8, 11, lo=3, hi=6), 16), 0.0)
    store.put("train-000000-24", written(target, random_prompts(24, 12, lo=3, hi=6), 24), 0.0)
    held, pieces, seen = eagle3.read_data(root / "data")
    assert seen == {"train-000000-24"} and len(held) == 8
    train = Sequences.join(pieces)
    ids = eagle3.draft_vocabulary(train, VOCAB, DRAFT_VOCAB)
    vocab = torch.full((VOCAB,), -1, dtype=torch.long)
    vocab[ids] = torch.arange(ids.numel())
    return {"root": root, "target": target, "folder": write_target(root / "target", target), "held": held,
            "train": train, "ids": ids, "vocab": vocab}


def test_the_draft_vocabulary_is_the_most_frequent_written_tokens_ascending(setup):
    ids, train = setup["ids"], setup["train"]
    counts = torch.bincount(torch.cat([t[f + 1:] for t, f in zip(train.tokens, train.first)]), minlength=VOCAB)
    assert ids.numel() == DRAFT_VOCAB and bool((ids[1:] > ids[:-1]).all())
    assert int(counts[ids].min()) >= int(counts[~torch.isin(torch.arange(VOCAB), ids)].max())


def test_the_unroll_is_the_head_drafting_a_chain_through_its_own_cache(setup):
    torch.manual_seed(0)
    head = eagle3.build_head(setup["target"], LAYERS, setup["ids"])
    for p in head.parameters():  # a head far from its start, so that every weight matters
        if p.requires_grad:
            p.data.add_(torch.randn_like(p) * 0.05)
    train = setup["train"]
    b = eagle3.pack(train, [3, 5, 7])
    with torch.no_grad():
        steps = eagle3.unroll(head, b, 3, setup["vocab"])
        off = train.tokens[3].numel()  # rows of the second sequence in the pack
        s, f = train.tokens[5], train.feats[5].float()
        for r in (train.first[5] - 1, s.numel() - 5):
            j = int((b.rows == off + r).nonzero()[0, 0])
            cache = HeadKV()
            h = head.layer(head.fuse(f[: r + 1]), s[1 : r + 2], torch.arange(r + 1), causal_visibility(r + 1, 0, "cpu"),
                           cache)[-1:]
            for k in range(3):  # step k drafts token r + 2 + k; the next reads the true token at the next position
                law = head.lm_head(head.norm(h))[0]
                torch.testing.assert_close(steps[k][0][j], law, rtol=1e-4, atol=1e-4)
                assert int(steps[k][1][j]) == int(setup["vocab"][s[r + 2 + k]])
                h = head.layer(head.feedback(h), s[r + 2 + k : r + 3 + k], torch.tensor([r + 1 + k]),
                               torch.ones(1, cache.length + 1, dtype=torch.bool), cache)


def test_training_raises_held_out_acceptance_and_the_saved_head_decodes_exactly(setup, tmp_path):
    torch.manual_seed(0)
    head = eagle3.build_head(setup["target"], LAYERS, setup["ids"])
    before = eagle3.evaluate(head, setup["held"], setup["vocab"], 3)
    args = argparse.Namespace(steps=120, batch=8, lr=3e-3, warmup=10, ttt=3, decay=0.8, eval_every=40,
                              eval_depth=3, max_minutes=0.0, seed=0)
    log = eagle3.train(args, head, {"train": setup["train"], "held": setup["held"], "vocab": setup["vocab"]})
    after = eagle3.evaluate(head, setup["held"], setup["vocab"], 3)
    assert after["chain_acceptance"][0] > before["chain_acceptance"][0] + 0.3, (before, after)
    assert after["tau_chain"] == log[-1]["tau_chain"] == max(e["tau_chain"] for e in log[:-1])  # the best kept
    out = tmp_path / "head"
    eagle3.save_head(head.eval(), out, "vllm", torch.bfloat16)
    assert not any(k.startswith("embed_tokens") for k in head.state_dict())  # the target's embedding is not saved
    pair = load_pair(str(setup["folder"]), str(out), device="cpu")
    assert isinstance(pair.draft, Eagle3Head) and pair.draft.layer_ids == (1, 2, 3)
    assert torch.equal(pair.draft.d2t + torch.arange(DRAFT_VOCAB), setup["ids"])
    prompt = setup["held"].tokens[0][: setup["held"].first[0] + 1].tolist()
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), verifier="tev", max_new_tokens=24,
                       stop_on_eos=False, builder=BuilderConfig(name="best-first", budget=8, depth=4, children=2,
                                                                width=4))
    s = DecodeSession(pair, prompt, cfg)
    s.run()
    assert s.generated == greedy_generate(setup["target"], prompt, 24)
    assert max(len(r.accepted) - 1 for r in s.rounds) >= 2  # the trained head's drafts are accepted


def test_the_kind_names_the_recipe_and_bad_flags_are_refused():
    assert drafter_kind("eagle3").recipe == "eagle3" and "smollm2" in eagle3.RECIPES
    with pytest.raises(TevvizError, match="--ttt"):
        eagle3.parse_args(["smollm2", "--ttt", "0"])


def test_training_continues_from_a_saved_head_with_its_weights_and_vocabulary(setup, tmp_path):
    """--init: the saved head's weights (float32, trainable) and draft vocabulary; a head of other layers is refused."""
    torch.manual_seed(1)
    head = eagle3.build_head(setup["target"], LAYERS, setup["ids"])
    for p in head.parameters():
        if p.requires_grad:
            p.data.add_(torch.randn_like(p) * 0.05)
    eagle3.save_head(head.eval(), tmp_path / "head", "vllm", torch.bfloat16)
    args = argparse.Namespace(init=str(tmp_path / "head"), layer_ids=LAYERS, draft_vocab=8)
    again = eagle3.start_head(args, setup["target"], setup["train"])
    assert again.training and all(p.requires_grad and p.dtype == torch.float32 for p in again.parameters())
    assert torch.equal(again.t2d.nonzero().flatten(), setup["ids"])  # its own vocabulary, not one of 8 from the data
    saved = {k: v for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    for k, v in saved.items():
        want = v.to(torch.bfloat16).float() if v.dtype.is_floating_point else v
        torch.testing.assert_close(again.state_dict()[k], want, rtol=0, atol=0)
    b = eagle3.pack(setup["train"], [0, 1])
    loss = eagle3.ttt_loss(eagle3.unroll(again, b, 2, setup["vocab"]), 0.8)
    loss.backward()
    assert again.fc.weight.grad is not None and again.fc.weight.grad.abs().sum() > 0
    with pytest.raises(TevvizError, match="--layer-ids must name the head's layers"):
        eagle3.start_head(argparse.Namespace(init=str(tmp_path / "head"), layer_ids=(0, 1, 1), draft_vocab=8),
                          setup["target"], setup["train"])
    fresh = eagle3.start_head(argparse.Namespace(init=None, layer_ids=LAYERS, draft_vocab=8), setup["target"],
                              setup["train"])
    assert int(fresh.t2d.sum()) == 8
