"""ExitTrain on block drafters: the training trees are the inference trees, each node's loss comes from its depth's
row, the exit term moves the trees' mass the right way, and the CLI writes a loadable block drafter.

Faults each test was checked against once (planted by hand, then removed):
- a node's loss read from its parent's depth row (`depths - 2`): the row test fails;
- the exit term's sign flipped: the step lowers the weighted likelihood of its trees' nodes;
- training trees built from rows at another position (`start` one later): they differ from the session's trees;
- nodes weighted by P instead of w, or every node's term read from the depth-1 row: the depth-3 hand-made tree test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from _dflash import BS, dflash_config, write_drafter
from conftest import VOCAB, tiny_model, word_tokenizer

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.draft.block_model import is_block_drafter
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import load_pair
from tevviz.engine.train.block_exittrain import BlockExitTrainer, exit_terms, make_trainer, tree_for
from tevviz.engine.train.exittrain import Context, ExitTrainer, TrainConfig, target_weights

pytestmark = pytest.mark.usefixtures("one_thread")

DDTREE = BuilderConfig(name="ddtree", budget=12, depth=BS - 1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("block_exittrain")
    tiny_model("llama", 3, layers=3).save_pretrained(root / "target")
    word_tokenizer().save_pretrained(root / "target")
    write_drafter(root / "draft", dflash_config(), seed=5)
    return load_pair(str(root / "target"), str(root / "draft"))


def written(pair, prompt: list[int], n: int) -> Context:
    """`prompt` and the target's greedy continuation of n tokens (target-written text, as training uses)."""
    ids = torch.tensor([prompt])
    out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, pad_token_id=0, eos_token_id=None)
    return Context(prompt, out[0, len(prompt):].tolist())


def test_training_trees_are_the_trees_decoding_builds(pair):
    """`tree_for` (ExitTrain's trees and the before/after table's) equals the first round's tree of a session."""
    for prompt in ([5, 9, 2], [11, 3, 7, 8, 20, 4]):
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=DDTREE, max_new_tokens=8,
                           stop_on_eos=False)
        first = DecodeSession(pair, prompt, cfg).run(1)[0]
        mine = tree_for(pair, prompt, DDTREE)
        assert mine.tokens.tolist() == first.tokens and mine.parents.tolist() == first.parents


def test_each_step_trains_on_the_trees_its_drafter_builds_at_each_anchor(pair):
    """The trees of a step are DDTree's trees of the drafter before the step, rooted at each anchor's token."""
    ctx = [written(pair, [4, 8, 15, 16], 12), written(pair, [23, 42], 10)]
    trainer = BlockExitTrainer(pair, ctx, TrainConfig(builder=DDTREE, batch=2, lr=1e-3, seed=3))
    for _ in range(2):
        before = load_like(pair, trainer)
        trainer.step()
        assert trainer.trees, "a step with the exit objective records its trees"
        for context, tree in trainer.trees:
            want = tree_for(before, context, DDTREE)
            assert tree.tokens.tolist() == want.tokens.tolist() and tree.parents.tolist() == want.parents.tolist()


def load_like(pair, trainer):
    """The pair with a frozen copy of the trainer's current drafter."""
    from tevviz.engine.load.models import ModelPair

    return ModelPair(pair.target, trainer.trained_draft(), pair.tokenizer, pair.target_name, "copy")


def test_each_node_takes_its_loss_from_its_depths_row(pair):
    """exit_terms = -sum_v weight(v) log q_{d(v)}(x_v), node by node, on a real tree and its exit law."""
    prompt = [6, 2, 19, 4]
    tree = tree_for(pair, prompt, DDTREE)
    ex, _ = target_weights(pair.target, prompt, tree, 1.0)
    g = torch.Generator().manual_seed(0)
    logq = torch.log_softmax(torch.randn(BS - 1, VOCAB, generator=g), -1)
    by_hand = 0.0
    for v in range(1, tree.size):
        by_hand -= float(ex.w[v]) * float(logq[int(tree.depths[v]) - 1, int(tree.tokens[v])])
    assert float(exit_terms(logq, tree, ex, "exit")) == pytest.approx(by_hand, rel=1e-5)
    scaled = ex.P * ex.w[1:].sum() / ex.P[1:].sum()
    by_hand_p = -sum(float(scaled[v]) * float(logq[int(tree.depths[v]) - 1, int(tree.tokens[v])])
                     for v in range(1, tree.size))
    assert float(exit_terms(logq, tree, ex, "prefix")) == pytest.approx(by_hand_p, rel=1e-5)


def test_exit_terms_on_a_hand_made_tree_of_depth_3_where_w_is_not_p():
    """On a tree of depth 3 with inner nodes (so w(v) = P(v) rho(v) differs from P(v), and depths 1, 2 and 3 read
    three different rows), each node's term is w(v) log q_{d(v)}(x_v), by hand from the formulas; the prefix
    objective's is P(v) rescaled to w's total. Weighting by P for `exit`, or reading every node from the depth-1
    row, gives other numbers here (on depth-1 trees, w = P below the root and one row serves all)."""
    from tevviz.engine.core.exit_law import exit_law
    from tevviz.engine.core.tree import from_parents

    tokens, parents = [0, 3, 5, 1, 2, 4, 6], [-1, 0, 0, 1, 1, 3, 4]
    tree = from_parents(tokens, parents, [0.0] * len(tokens))
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(len(tokens), 8, generator=g)
    for v in range(1, 7):
        logits[parents[v], tokens[v]] += 2.0  # the drafted tokens likely, so inner nodes pass on much of their P
    probs = torch.softmax(logits, -1)
    ex = exit_law(tree, probs)
    logq = torch.log_softmax(torch.randn(3, 8, generator=g) * 2, -1)
    depth, P, w = [0] * 7, [1.0] * 7, [0.0] * 7
    for v in range(1, 7):
        depth[v] = depth[parents[v]] + 1
        P[v] = P[parents[v]] * float(probs[parents[v], tokens[v]])
    for v in range(7):
        w[v] = P[v] * (1 - sum(float(probs[v, tokens[u]]) for u in range(1, 7) if parents[u] == v))
    assert max(depth) == 3 and max(abs(a - b) for a, b in zip(w[1:], P[1:])) > 0.1, "test setup: w != P"
    term = [-float(logq[depth[v] - 1, tokens[v]]) for v in range(7)]
    assert len({round(float(logq[d, 1]), 6) for d in range(3)}) == 3, "test setup: the rows differ"
    want_exit = sum(w[v] * term[v] for v in range(1, 7))
    scale = sum(w[1:]) / sum(P[1:])
    want_prefix = sum(P[v] * scale * term[v] for v in range(1, 7))
    assert float(exit_terms(logq, tree, ex, "exit")) == pytest.approx(want_exit, rel=1e-5)
    assert float(exit_terms(logq, tree, ex, "prefix")) == pytest.approx(want_prefix, rel=1e-5)
    assert abs(want_exit - want_prefix) > 0.05 * abs(want_exit), "test setup: the two objectives differ"


def inference_rows(pair, context: list[int]) -> torch.Tensor:
    """(bs - 1, V) the drafter's log-rows below `context` by the decoding path (a fresh cache)."""
    from tevviz.engine.draft.block_drafting import block_rows
    from tevviz.engine.draft.block_model import ContextKV
    from tevviz.engine.train.block_exittrain import target_features

    model = pair.draft
    feats = target_features(pair.target, torch.tensor(context[:-1]), tuple(model.block.target_layer_ids))
    return block_rows(model, pair.target, context[-1], len(context) - 1, BS - 1, ContextKV(len(model.layers)), feats)


@pytest.mark.parametrize("objective", ["exit", "prefix"])
def test_a_step_is_l_tok_plus_lambda_times_the_mean_exit_term_and_moves_it_the_right_way(pair, objective):
    """The step's L_exit is sum over its trees of exit_terms / (non-root nodes), with the rows the decoding path
    gives for each anchor; and one small step raises sum_v weight(v) log q_{d(v)}(x_v) on those trees."""
    contexts = [written(pair, p, 12) for p in ([3, 14, 15], [9, 26, 5, 3])]
    cfg = TrainConfig(objective=objective, builder=DDTREE, batch=2, lr=1e-3, lambda_exit=500.0, seed=2)
    trainer = BlockExitTrainer(pair, contexts, cfg)
    before = load_like(pair, trainer)
    entry = trainer.step()
    after = load_like(pair, trainer)

    def mean_term(p) -> float:
        terms, nodes = 0.0, 0
        for context, tree in trainer.trees:
            ex, _ = target_weights(pair.target, context, tree, 1.0)
            terms += float(exit_terms(inference_rows(p, context), tree, ex, objective))
            nodes += tree.size - 1
        return terms / nodes

    assert entry.l_exit == pytest.approx(mean_term(before), rel=1e-4)
    assert entry.loss == pytest.approx(entry.l_tok + cfg.lambda_exit * entry.l_exit, rel=1e-5)
    assert mean_term(after) < entry.l_exit  # the weighted likelihood of the trees' nodes rose


def test_block_exittrain_refuses_what_it_cannot_train(pair):
    ctx = [Context([1, 2, 3], [4, 5, 6, 7, 8, 9])]
    with pytest.raises(TevvizError, match="takes --builder ddtree, not best-first"):
        BlockExitTrainer(pair, ctx, TrainConfig(builder=BuilderConfig(budget=8, depth=4)))
    with pytest.raises(TevvizError, match="a block drafter's rows are per depth"):
        BlockExitTrainer(pair, ctx, TrainConfig(objective="residual", builder=DDTREE))
    with pytest.raises(TevvizError, match="is a block drafter"):
        ExitTrainer(pair, ctx, TrainConfig(builder=DDTREE))
    assert isinstance(make_trainer(pair, ctx, TrainConfig(builder=DDTREE)), BlockExitTrainer)


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tevviz", *args], capture_output=True, text=True, cwd=cwd, check=False,
                          timeout=600)


def test_tevviz_train_on_a_block_drafter_writes_a_block_drafter(tmp_path):
    """`tevviz train --draft BLOCK` trains on DDTree trees and writes a folder that loads as a block drafter."""
    from tevviz.engine.load.pairs import assets_dir

    draft = assets_dir() / "models" / "tevviz-stdlib-block-draft"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "split": "train"}) + "\n"
                               for p in ("def parse(text):\n", "class Stack:\n    def push(self, x):\n")))
    out = tmp_path / "trained"
    done = run_cli("train", "--draft", str(draft), "--prompts", str(prompts), "--steps", "2", "--batch", "2",
                   "--budget", "8", "--collect-tokens", "16", "--threads", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert is_block_drafter(out)
    log = json.loads((out / "exittrain_log.json").read_text())
    assert "ddtree" in log["config"]["builder"] and len(log["log"]) == 2
    refused = run_cli("train", "--draft", str(draft), "--prompts", str(prompts), "--distill-steps", "3",
                      "--out", str(tmp_path / "x"))
    assert refused.returncode == 2 and "a block drafter's warm start is its own recipe" in refused.stderr


def test_the_weights_are_detached_and_the_arms_differ_and_only_a_copy_trains(pair):
    """The exit law carries no gradient; from one start and one seed, the token-only and exit arms move the drafter
    differently (the exit term is not zero there); the pair's own drafter never changes."""
    contexts = [written(pair, p, 12) for p in ([3, 14, 15], [9, 26, 5, 3])]
    own = {k: v.clone() for k, v in pair.draft.state_dict().items()}
    prompt = contexts[0].tokens
    ex, _ = target_weights(pair.target, prompt, tree_for(pair, prompt, DDTREE), 1.0)
    assert not ex.w.requires_grad and not ex.P.requires_grad
    moved = {}
    for objective in ("token", "exit"):
        trainer = BlockExitTrainer(pair, contexts, TrainConfig(objective=objective, builder=DDTREE, batch=2, lr=1e-3,
                                                               lambda_exit=50.0, seed=4))
        for _ in range(2):
            entry = trainer.step()
        assert (entry.l_exit > 0) == (objective == "exit")
        moved[objective] = trainer.trained_draft().state_dict()
    assert any(not torch.allclose(moved["token"][k], moved["exit"][k]) for k in moved["exit"])
    assert any(not torch.equal(moved["exit"][k], own[k]) for k in own)
    assert all(torch.equal(pair.draft.state_dict()[k], v) for k, v in own.items())
