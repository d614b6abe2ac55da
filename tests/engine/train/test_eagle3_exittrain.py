"""ExitTrain on EAGLE-3 heads (docs/eagle3.md, *ExitTrain*): each node's loss comes from the law it was drafted from
(its own level's, through the head's fed-back state), a few steps lower the ExitTrain loss on the training trees and
raise the expected accepted length 1 + C_p of the trees the head builds, only the head's own weights move, the
trained head saves through its kind, reloads and decodes greedy as `generate`, and `tevviz train` trains one.

Faults each test was checked against once (planted by hand, then removed):
- every node's row taken from the root's (the level-1 law at every depth): the own-level and deeper-rows tests;
- a node's state read from the target's states through fc instead of its parent's fed-back state: the own-level
  tests;
- the exit term's sign flipped: the one-step test, the own-level tests, the hand-made tree and the few-steps test;
- nodes weighted by P instead of w for `exit`: the hand-made tree test;
- the trainer's optimiser over the embedding a head carries: the weights test;
- training-time test at position t + k - 1, or reading the target's states at every step: the written-chain test.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from conftest import VOCAB, greedy_generate, random_prompts, tiny_model
from test_eagle3_loading import head_config, head_tensors, write_head, write_target

from tevviz.cli import main
from tevviz.engine import DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.exit_law import exit_law
from tevviz.engine.core.tree import from_parents
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.draft.drafters import folder_kind, make_trainer, save_drafter, tree_for
from tevviz.engine.draft.eagle_tree import eagle_builder
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import load_pair
from tevviz.engine.train.block_exittrain import target_features
from tevviz.engine.train.eagle3_exittrain import Eagle3ExitTrainer, exit_terms
from tevviz.engine.train.eagle3_rows import draft_index, tree_rows, unrolled_loss
from tevviz.engine.train.exittrain import Context, ExitTrainer, TrainConfig, contexts_from_streams, target_weights

pytestmark = pytest.mark.usefixtures("one_thread")

IDS = (1, 2, 3)  # hidden_states of a 3-layer target
EAGLE = eagle_builder(total_tokens=17, depth=3, top_k=4)  # trees 4 deep
VD = 64  # a reduced draft vocabulary: 64 of the target's 96 tokens


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny Llama target whose law at T = 1 is sharp (so C_p is not tiny), a random head over a reduced draft
    vocabulary, and the same head carrying its own embedding."""
    root = tmp_path_factory.mktemp("eagle3_exittrain")
    target = write_target(root / "target", tiny_model("llama", 1, layers=3, scale=50.0))
    head = write_head(root / "head", head_config("vllm", ids=IDS), head_tensors(seed=1))
    embedded = write_head(root / "embedded", head_config("vllm", ids=IDS), head_tensors(seed=1, embed=True))
    return {"target": target, "head": head, "embedded": embedded, "root": root}


@pytest.fixture(scope="module")
def pair(folders):
    return load_pair(str(folders["target"]), str(folders["head"]), device="cpu")


@pytest.fixture(scope="module")
def contexts(pair):
    """Contexts cut every 4 tokens from the target's greedy continuations of 6 prompts (target-written text)."""
    prompts = random_prompts(6, 3, lo=3, hi=6)
    return contexts_from_streams([(p, greedy_generate(pair.target, p, 24)) for p in prompts], every=4)


def with_head(pair, head):
    return replace(pair, draft=head, draft_call=None)


def mean_cp(pair, contexts) -> float:
    """Mean C_p at T = 1 of the trees the pair's head builds on `contexts`: E[L] - 1 under TEV."""
    return sum(float(target_weights(pair.target, c.tokens, tree_for(pair, c.tokens, EAGLE), 1.0)[0].C_p)
               for c in contexts) / len(contexts)


def rows_of(pair, context, tree, every=False) -> torch.Tensor:
    feats = target_features(pair.target, torch.tensor(context[:-1]), pair.draft.target_layers)
    with torch.no_grad():
        return tree_rows(pair.draft, feats, context, tree, every)


# ------------------------------------------------------------------------------------ each node's own level


@pytest.mark.parametrize("objective", ["exit", "prefix"])
def test_each_node_takes_its_loss_from_the_law_of_its_own_level(pair, contexts, objective):
    """The training rows below a tree's nodes are the laws drafting drew each node from (the tree's own
    log q_pa(v)(x_v), at every depth); and a step's L_exit is -sum weight(v) of those, over its trees' nodes."""
    index = draft_index(pair.draft)
    for c in contexts[:4]:
        tree = tree_for(pair, c.tokens, EAGLE)
        assert int(tree.depths.max()) == 4, "test setup: trees four levels deep"
        got = rows_of(pair, c.tokens, tree)[tree.parents[1:], index[tree.tokens[1:]]]
        assert torch.allclose(got, tree.draft_logprobs[1:], atol=1e-4), (got - tree.draft_logprobs[1:]).abs().max()
    cfg = TrainConfig(objective=objective, builder=EAGLE, batch=3, lr=1e-3, seed=2)
    trainer = Eagle3ExitTrainer(pair, contexts, cfg)
    entry = trainer.step()
    by_drafting, nodes = 0.0, 0
    for context, tree in trainer.trees:  # built by the head before the step: the pair's own head
        ex, _ = target_weights(pair.target, context, tree, 1.0)
        weight = ex.w if objective == "exit" else ex.P * ex.w[1:].sum() / ex.P[1:].sum()
        by_drafting -= float((weight[1:] * tree.draft_logprobs[1:]).sum())
        nodes += tree.size - 1
    assert len(trainer.trees) == 3 and entry.l_exit == pytest.approx(by_drafting / nodes, rel=1e-4)
    assert entry.loss == pytest.approx(entry.l_tok + cfg.lambda_exit * entry.l_exit, rel=1e-5)


def test_the_deeper_rows_differ_from_the_roots(pair, contexts):
    """Test setup for the fault above: below depth 1 the law is not the root's (a wrong row would show)."""
    tree = tree_for(pair, contexts[0].tokens, EAGLE)
    rows = rows_of(pair, contexts[0].tokens, tree)
    inner = [v for v in range(1, tree.size) if v in tree.parents.tolist()]
    assert inner and all((rows[v] - rows[0]).abs().max() > 0.1 for v in inner)


def test_exit_terms_on_a_hand_made_tree_where_w_is_not_p(pair):
    """On a hand-made tree of depth 3 with inner nodes, exit's terms are w(v) log q_{pa(v)}(x_v) by hand (in the
    draft vocabulary), prefix's are P(v) rescaled to w's total; a token outside the draft vocabulary adds nothing."""
    index = draft_index(pair.draft)
    inside = torch.nonzero(index >= 0).flatten().tolist()
    outside = int(torch.nonzero(index < 0)[0])
    tokens = [0, inside[3], inside[5], inside[1], inside[2], inside[4], outside]
    parents = [-1, 0, 0, 1, 1, 3, 4]
    tree = from_parents(tokens, parents, [0.0] * 7)
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(7, VOCAB, generator=g)
    for v in range(1, 7):
        logits[parents[v], tokens[v]] += 6.0  # likely children: inner nodes pass on most of their P
    ex = exit_law(tree, torch.softmax(logits, -1))
    logq = torch.log_softmax(torch.randn(7, VD, generator=g) * 2, -1)
    term = [0.0] * 7
    for v in range(1, 6):  # node 6 carries a token outside the draft vocabulary
        term[v] = -float(logq[parents[v], index[tokens[v]]])
    scaled = ex.P * ex.w[1:].sum() / ex.P[1:].sum()
    want = {"exit": sum(float(ex.w[v]) * term[v] for v in range(1, 7)),
            "prefix": sum(float(scaled[v]) * term[v] for v in range(1, 7))}
    assert abs(want["exit"] - want["prefix"]) > 0.01 * abs(want["exit"]), "test setup: the objectives differ"
    for objective, value in want.items():
        assert float(exit_terms(logq, tree, ex, None, objective, index)) == pytest.approx(value, rel=1e-5)


def test_the_token_loss_is_the_heads_law_along_the_written_chain(pair, contexts):
    """L_tok (training-time test) is, step k at row t, the law below the depth-k node of the chain the target wrote
    after seq[:t + 2], as drafting reads it (tree_rows on that chain): decay**k times each step's mean NLL of the
    written tokens in the draft vocabulary: the recipe's own training loss."""
    c = contexts[2]
    seq, first, steps, decay = c.tokens + c.continuation[:8], len(c.tokens), 3, 0.8
    index = draft_index(pair.draft)
    feats = target_features(pair.target, torch.tensor(seq[:-1]), pair.draft.target_layers)
    with torch.no_grad():
        got = float(unrolled_loss(pair.draft, feats, seq, first, steps, decay, index))
    per_step = [[] for _ in range(steps)]
    for t in range(first - 2, len(seq) - 2):
        chain = seq[t + 1: t + 2 + min(steps - 1, len(seq) - 3 - t)]  # the root seq[t + 1] and its written path
        tree = from_parents(chain, list(range(-1, len(chain) - 1)), [0.0] * len(chain))
        rows = rows_of(pair, seq[: t + 2], tree, every=True)
        for k in range(len(chain)):
            if index[seq[t + 2 + k]] >= 0:
                per_step[k].append(-float(rows[k, index[seq[t + 2 + k]]]))
    assert all(per_step) and any(index[x] < 0 for x in seq[first:]), "test setup: every step, and a skipped token"
    assert got == pytest.approx(sum(decay ** k * sum(n) / len(n) for k, n in enumerate(per_step)), rel=1e-4)
    # ... and it is the loss the head's recipe trains it with (tevviz pair train-drafter --kind eagle3)
    from tevviz.recipes.block_data import Sequences
    from tevviz.recipes.eagle3 import pack, ttt_loss, unroll

    full = target_features(pair.target, torch.tensor(seq), pair.draft.target_layers)
    with torch.no_grad():  # the recipe's `first` is the last prompt token's index
        recipe = ttt_loss(unroll(pair.draft, pack(Sequences([torch.tensor(seq)], [full], [first - 1]), [0]), steps,
                                 index), decay)
    assert got == pytest.approx(float(recipe), rel=1e-5)


# ------------------------------------------------------------------------------------ training moves it right


def test_a_step_raises_the_weighted_likelihood_of_its_trees(pair, contexts):
    """One step whose exit term dominates lowers sum_v w(v) (-log q_{pa(v)}(x_v)) on the trees it trained on, each
    node's q read by hand from the rows below its parent."""
    cfg = TrainConfig(objective="exit", builder=EAGLE, batch=4, lr=1e-3, lambda_exit=500.0, seed=5)
    trainer = Eagle3ExitTrainer(pair, contexts, cfg)
    trainer.step()
    index = draft_index(pair.draft)

    def weighted_nll(p) -> float:
        total, nodes = 0.0, 0
        for context, tree in trainer.trees:
            w = target_weights(pair.target, context, tree, 1.0)[0].w
            q = rows_of(p, context, tree)[tree.parents[1:], index[tree.tokens[1:]]]
            total -= float((w[1:] * q).sum())
            nodes += tree.size - 1
        return total / nodes

    assert weighted_nll(with_head(pair, trainer.trained_draft())) < 0.9 * weighted_nll(pair)


def test_a_few_steps_lower_the_loss_on_the_training_trees_and_raise_the_expected_length(pair, contexts):
    """20 steps from a random head: L = L_tok + lambda L_exit on the first step's trees falls by half, and the mean
    1 + C_p (TEV's expected block length) of the trees the head builds on the training contexts rises by 0.5 or more
    (a trainer that changed nothing would leave both where they were)."""
    cfg = TrainConfig(objective="exit", builder=EAGLE, batch=8, lr=1e-2, seed=0)
    trainer = Eagle3ExitTrainer(pair, contexts, cfg)
    first = trainer.step()
    for _ in range(19):
        trainer.step()
    after = with_head(pair, trainer.trained_draft())
    again = Eagle3ExitTrainer(after, contexts, replace(cfg, lr=1e-12))  # the same first batch and trees, scored
    assert again.step().loss < 0.5 * first.loss
    before_cp, after_cp = mean_cp(pair, contexts), mean_cp(after, contexts)
    assert after_cp > before_cp + 0.5, (before_cp, after_cp)


# ------------------------------------------------------------------------------------ weights, saving, the seam


def test_gradients_reach_only_the_heads_own_weights(folders, contexts):
    """After a step every trainable weight of the head's copy has a gradient and moved; the target, its embedding,
    an embedding the head carries, d2t and t2d have none and did not; the pair's own head is untouched; the trained
    head reads the target's own embedding (not a copy)."""
    for name in ("head", "embedded"):
        p = load_pair(str(folders["target"]), str(folders[name]), device="cpu")
        own = {k: v.clone() for k, v in p.draft.state_dict().items()}
        target_before = {k: v.clone() for k, v in p.target.state_dict().items()}
        trainer = Eagle3ExitTrainer(p, contexts, TrainConfig(objective="exit", builder=EAGLE, batch=2, lr=1e-2))
        trainer.step()
        head = trainer.draft
        for k, param in head.named_parameters():
            if k.startswith("embed_tokens."):
                assert param.grad is None and torch.equal(param, own[k]), k
            else:
                assert param.grad is not None and param.grad.abs().sum() > 0 and not torch.equal(param, own[k]), k
        assert torch.equal(head.d2t, own["d2t"]) and torch.equal(head.t2d, own["t2d"])
        assert all(q.grad is None for q in p.target.parameters())
        assert all(torch.equal(v, target_before[k]) for k, v in p.target.state_dict().items())
        assert all(torch.equal(p.draft.state_dict()[k], v) for k, v in own.items())
        trained = trainer.trained_draft()
        if name == "head":
            assert trained._target_embedding[0] is p.target.get_input_embeddings()


def test_a_trained_head_saves_reloads_and_decodes_as_generate(folders, pair, contexts, tmp_path):
    """Saved through its kind, the trained head loads as an EAGLE-3 head with the same weights and draft
    vocabulary, and decodes greedy as the target's `generate` under TEV on eagle trees."""
    trainer = Eagle3ExitTrainer(pair, contexts, TrainConfig(objective="exit", builder=EAGLE, batch=4, lr=1e-2))
    for _ in range(5):
        trainer.step()
    trained = trainer.trained_draft()
    save_drafter(trained, pair.tokenizer, tmp_path / "trained")
    assert folder_kind(tmp_path / "trained").name == "eagle3"
    back = load_pair(str(folders["target"]), str(tmp_path / "trained"), device="cpu")
    mine = trained.state_dict()
    assert all(torch.equal(v, mine[k]) for k, v in back.draft.state_dict().items() if not k.startswith("rotary."))
    assert torch.equal(back.draft.d2t, pair.draft.d2t) and back.draft.layer_ids == IDS
    prompt = contexts[3].tokens
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=EAGLE, verifier="tev", max_new_tokens=24,
                       stop_on_eos=False)
    s = DecodeSession(back, prompt, cfg)
    s.run()
    assert s.generated == greedy_generate(back.target, prompt, 24)
    assert max(len(r.accepted) for r in s.rounds) >= 3  # the trained head's drafts get accepted


def test_the_seam_trains_heads_and_refuses_what_does_not_fit(pair):
    ctx = [Context([1, 2, 3], [4, 5, 6, 7, 8, 9])]
    assert isinstance(make_trainer(pair, ctx, TrainConfig(builder=EAGLE)), Eagle3ExitTrainer)
    best_first = BuilderConfig(budget=8, depth=3)
    assert isinstance(make_trainer(pair, ctx, TrainConfig(builder=best_first)), Eagle3ExitTrainer)
    with pytest.raises(TevvizError, match="ExitTrain on them takes --builder best-first or .* or eagle, not ddtree"):
        Eagle3ExitTrainer(pair, ctx, TrainConfig(builder=BuilderConfig(name="ddtree", budget=8, depth=3)))
    with pytest.raises(TevvizError, match="is an eagle3 drafter"):
        ExitTrainer(pair, ctx, TrainConfig(builder=EAGLE))


def test_tevviz_train_on_an_eagle3_head_writes_a_head_that_decodes_as_generate(folders, tmp_path):
    """`tevviz train --target T --draft HEAD` trains on eagle trees and writes a head folder that loads and decodes
    greedy as `generate`."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": " ".join(f"t{t}" for t in p), "split": "train"}) + "\n"
                               for p in random_prompts(3, 7, lo=3, hi=5)))
    out = tmp_path / "trained"
    code = main(["train", "--target", str(folders["target"]), "--draft", str(folders["head"]), "--prompts",
                 str(prompts), "--steps", "2", "--batch", "2", "--budget", "8", "--depth", "3", "--collect-tokens",
                 "12", "--threads", "1", "--device", "cpu", "--out", str(out)])
    assert code == 0
    log = json.loads((out / "exittrain_log.json").read_text())
    assert "name='eagle'" in log["config"]["builder"] and len(log["log"]) == 2
    assert folder_kind(out).name == "eagle3"
    back = load_pair(str(folders["target"]), str(out), device="cpu")
    prompt = [4, 8, 15, 16]
    s = DecodeSession(back, prompt, DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=EAGLE,
                                                 max_new_tokens=16, stop_on_eos=False))
    s.run()
    assert s.generated == greedy_generate(back.target, prompt, 16)
