"""ExitTrain: the loss of each objective against a hand computation, gradients, and that training helps."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from conftest import tiny_model, word_tokenizer

from tevviz.engine import BuilderConfig, TevvizError
from tevviz.engine.core.exit_law import exit_law
from tevviz.engine.core.tree import from_parents, path_to
from tevviz.engine.decode.streams import collect_streams
from tevviz.engine.load.models import ModelPair
from tevviz.engine.train.exittrain import (
    ExitTrainer,
    TrainConfig,
    build_training_tree,
    contexts_from_streams,
    exit_loss_terms,
    target_weights,
)

CONTEXT = [4, 9, 2, 7]
TOKENS = [7, 3, 5, 8, 1, 6]  # node 0 is the root, the context's last token
PARENTS = [-1, 0, 0, 1, 1, 2]


def hand_tree_and_law(vocab: int):
    tree = from_parents(TOKENS, PARENTS)
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(len(TOKENS), vocab, generator=g) * 3, dim=-1)
    return tree, exit_law(tree, probs), probs


def draft_logq(draft, tokens: list[int]) -> torch.Tensor:
    """log q(. | tokens) by a plain causal forward, independent of the engine's tree attention."""
    with torch.no_grad():
        return torch.log_softmax(draft(input_ids=torch.tensor([tokens])).logits[0, -1].float(), dim=-1)


def path_tokens(v: int) -> list[int]:
    tree = from_parents(TOKENS, PARENTS)
    return [TOKENS[u] for u in path_to(tree, v)[1:]]


@pytest.mark.parametrize("objective", ["exit", "prefix", "residual"])
def test_loss_equals_the_formula_on_a_hand_made_tree(objective):
    draft = tiny_model("llama", 5, layers=1, scale=1.0)
    vocab = draft.config.vocab_size
    tree, ex, probs = hand_tree_and_law(vocab)
    got = exit_loss_terms(draft, CONTEXT, tree, ex, probs, objective).item()
    w, P = ex.w.tolist(), ex.P.tolist()
    want = 0.0
    if objective in ("exit", "prefix"):
        weights = w if objective == "exit" else [p * sum(w[1:]) / sum(P[1:]) for p in P]
        for v in range(1, len(TOKENS)):
            parent_ctx = CONTEXT + path_tokens(PARENTS[v])
            want -= weights[v] * draft_logq(draft, parent_ctx)[TOKENS[v]].item()
    else:
        for v in range(len(TOKENS)):
            kids = {TOKENS[u] for u in range(1, len(TOKENS)) if PARENTS[u] == v}
            res = probs[v].clone()
            for t in kids:
                res[t] = 0
            res = res / res.sum()
            want -= w[v] * (res * draft_logq(draft, CONTEXT + path_tokens(v))).sum().item()
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("labels", ["hard", "soft", "soft-padded-target"])
def test_token_loss_equals_the_formula(labels):
    from tevviz.engine.train.exittrain import Context, token_loss

    draft = tiny_model("llama", 5, layers=1, scale=1.0)
    target = tiny_model("llama", 0, scale=5.0)
    vocab = draft.config.vocab_size
    if labels == "soft-padded-target":
        # An output layer padded past the tokenizer (as in Qwen2.5-7B vs 0.5B): extra rows are cut off.
        target.resize_token_embeddings(vocab + 8, mean_resizing=False)
    ctx = Context(tokens=CONTEXT, continuation=[3, 8, 1])
    got = token_loss(draft, ctx, None if labels == "hard" else target, temperature=0.7).item()
    want = 0.0
    for j, tok in enumerate(ctx.continuation):
        prefix = CONTEXT + ctx.continuation[:j]
        logq = draft_logq(draft, prefix)
        if labels == "hard":
            want -= logq[tok].item()
        else:
            with torch.no_grad():
                p = torch.softmax(target(input_ids=torch.tensor([prefix])).logits[0, -1].float() / 0.7, dim=-1)
            p = p[:vocab] / p[:vocab].sum()
            want -= (p * logq).sum().item()
    assert got == pytest.approx(want / len(ctx.continuation), rel=1e-4)


def test_prefix_weights_have_the_exit_weights_total():
    from tevviz.engine.train.exittrain import node_weights

    _, ex, _ = hand_tree_and_law(32)
    assert node_weights("prefix", ex)[1:].sum().item() == pytest.approx(ex.w[1:].sum().item(), rel=1e-5)
    assert node_weights("exit", ex)[0].item() == 0.0
    assert node_weights("token", ex).abs().sum().item() == 0.0


@pytest.fixture(scope="module")
def learnable_pair():
    """A sharp target and a weak one-layer draft: there is coverage to gain."""
    target = tiny_model("llama", 0, scale=20.0)
    draft = tiny_model("llama", 7, layers=1, scale=1.0)
    pair = ModelPair(target, draft, word_tokenizer(), "tiny-target", "tiny-draft")
    prompts = [[i, i + 1, i + 2] for i in range(1, 40, 4)]
    contexts = contexts_from_streams(collect_streams(pair, prompts, 1.0, 24, 0), every=4)
    return pair, contexts


def mean_coverage(pair, draft, contexts, builder) -> float:
    total = 0.0
    for c in contexts:
        ex, _ = target_weights(pair.target, c.tokens, build_training_tree(draft, c.tokens, builder), 1.0)
        total += float(ex.C_p)
    return total / len(contexts)


@pytest.mark.parametrize("objective", ["exit", "prefix", "token", "residual"])
def test_training_raises_coverage_and_touches_only_a_copy_of_the_draft(learnable_pair, objective):
    pair, contexts = learnable_pair
    builder = BuilderConfig(budget=8, depth=3)
    target_before = [p.detach().clone() for p in pair.target.parameters()]
    draft_before = [p.detach().clone() for p in pair.draft.parameters()]
    before = mean_coverage(pair, pair.draft, contexts, builder)
    trainer = ExitTrainer(pair, contexts, TrainConfig(objective=objective, lr=3e-3, batch=4, builder=builder))
    for _ in range(25):
        log = trainer.step()
    assert math.isfinite(log.loss)
    after = mean_coverage(pair, trainer.trained_draft(), contexts, builder)
    assert after > before + 0.1, (before, after)
    # No gradient reaches the target, and the pair's own drafter is untouched (the trainer has a copy).
    assert all(p.grad is None for p in pair.target.parameters())
    assert all(torch.equal(a, b) for a, b in zip(target_before, pair.target.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(draft_before, pair.draft.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(draft_before, trainer.draft.parameters()))


def test_bad_training_settings():
    with pytest.raises(TevvizError, match="unknown objective"):
        TrainConfig(objective="magic")
    with pytest.raises(TevvizError, match="learning rate"):
        TrainConfig(lr=0)
    with pytest.raises(TevvizError, match="token_labels"):
        TrainConfig(token_labels="fuzzy")


# ------------------------------------------------------------------------------------ objectives told apart


# Root children: node 1 (token 3) an internal node whose children hold 95% of its mass (small w, large P),
# node 2 (token 5) a leaf (w = P). Exit weighting must pull the root toward token 5, prefix toward token 3.
SPLIT_TOKENS = [7, 3, 5, 8, 1]
SPLIT_PARENTS = [-1, 0, 0, 1, 1]


def split_probs(vocab: int) -> torch.Tensor:
    probs = torch.full((5, vocab), 1.0)
    for row, mass in ((0, {3: 0.6, 5: 0.3}), (1, {8: 0.5, 1: 0.45})):
        rest = (1 - sum(mass.values())) / (vocab - len(mass))
        probs[row] = rest
        for t, q in mass.items():
            probs[row, t] = q
    probs[2:] = 1.0 / vocab
    return probs


def root_logit_gradient(objective: str) -> tuple[torch.Tensor, object]:
    """d L_exit-terms / d (draft logits of the root row), for a draft whose logits are all 0 (q uniform)."""
    draft = tiny_model("llama", 5, layers=1, scale=1.0).requires_grad_(True)
    with torch.no_grad():
        draft.lm_head.weight.zero_()
    vocab = draft.config.vocab_size
    tree = from_parents(SPLIT_TOKENS, SPLIT_PARENTS)
    probs = split_probs(vocab)
    ex = exit_law(tree, probs)
    seen = []

    def keep(module, inputs, out):
        out.retain_grad()
        seen.append(out)

    handle = draft.lm_head.register_forward_hook(keep)
    try:
        loss = exit_loss_terms(draft, CONTEXT, tree, ex, probs, objective)
        if loss.requires_grad:
            loss.backward()
    finally:
        handle.remove()
    out = seen[-1]
    root_row = out.shape[1] - tree.size  # the tree starts after the prefix CONTEXT[:-1]
    grad = torch.zeros(vocab) if out.grad is None else out.grad[0, root_row]
    return grad, ex


def test_exit_and_prefix_gradients_point_the_predicted_way():
    from tevviz.engine.train.exittrain import node_weights

    g_exit, ex = root_logit_gradient("exit")
    g_prefix, _ = root_logit_gradient("prefix")
    g_token, _ = root_logit_gradient("token")
    assert ex.w[1].item() == pytest.approx(0.03, abs=1e-6) and ex.w[2].item() == pytest.approx(0.3, abs=1e-6)
    # A descent step raises token 5 over token 3 under exit weights (w: 0.03 vs 0.3) and the reverse under
    # prefix weights (P: 0.6 vs 0.3); the token-only objective has no tree term at all.
    assert g_exit[5] < g_exit[3] and g_prefix[3] < g_prefix[5]
    assert torch.count_nonzero(g_token) == 0
    # Exactly: with uniform q, d/dz_a of -sum_u wt(u) log q(x_u) over the root's children is q(a) W - wt(u_a).
    vocab = g_exit.shape[0]
    for objective, g in (("exit", g_exit), ("prefix", g_prefix)):
        wt = node_weights(objective, ex)
        total = float(wt[1] + wt[2])
        want = torch.full((vocab,), total / vocab)
        want[3] -= wt[1]
        want[5] -= wt[2]
        assert torch.allclose(g, want, atol=1e-6), objective


def test_trainer_step_normalises_by_all_nodes_and_weighs_by_lambda():
    """L_exit = sum over the batch of the weighted NLL / sum_i (|V_i| - 1), and L = L_tok + lambda_exit * L_exit.

    Two contexts whose trees differ in size (one sits at the end of the positions, so its tree is cut to
    depth 2): dividing per tree, or by the batch size, gives a different number."""
    import random

    target = tiny_model("llama", 0, scale=5.0)
    draft = tiny_model("llama", 7, layers=1, scale=1.0)
    pair = ModelPair(target, draft, word_tokenizer(), "t", "d")
    g = torch.Generator().manual_seed(8)
    long = torch.randint(0, 90, (pair.context_length - 2,), generator=g).tolist()
    from tevviz.engine.train.exittrain import Context

    contexts = [Context(CONTEXT, [3, 8, 1]), Context(long, [2])]
    builder = BuilderConfig(budget=8, depth=3, children=2, width=2)  # 2 + 4 + 4 drafted: 8 kept, 6 at depth 2
    cfg = TrainConfig(objective="exit", lambda_exit=7.0, lr=1e-3, batch=3, builder=builder, token_labels="hard", seed=4)
    trainer = ExitTrainer(pair, contexts, cfg)
    before = copy.deepcopy(trainer.draft).eval()
    rng = random.Random(cfg.seed)  # the trainer draws its batch the same way
    batch = [contexts[rng.randrange(len(contexts))] for _ in range(cfg.batch)]
    assert len({len(c.tokens) for c in batch}) == 2, "test setup: both contexts in the batch"
    log = trainer.step()
    terms, nodes = 0.0, 0
    for c in batch:
        tree = build_training_tree(before, c.tokens, builder, pair.context_length - len(c.tokens))
        ex, _ = target_weights(target, c.tokens, tree, 1.0)
        tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
        for v in range(1, tree.size):
            parent_path = [tokens[u] for u in path_to(tree, parents[v])[1:]]
            terms -= ex.w[v].item() * draft_logq(before, c.tokens + parent_path)[tokens[v]].item()
        nodes += tree.size - 1
    assert len({build_training_tree(before, c.tokens, builder, pair.context_length - len(c.tokens)).size
                for c in batch}) == 2, "test setup: trees of two sizes"
    assert log.l_exit == pytest.approx(terms / nodes, rel=1e-4)
    assert log.loss == pytest.approx(log.l_tok + 7.0 * log.l_exit, rel=1e-5)


def test_stream_labels_are_hard_on_greedy_continuations_and_soft_at_their_own_temperature():
    """token_labels="stream": L_tok of a greedy context is the cross-entropy on its tokens; of a context sampled
    at T = 0.7 it is against the target's softmax(logits / 0.7) there (neither at weight_temperature 1)."""
    import random

    from tevviz.engine.train.exittrain import Context

    target = tiny_model("llama", 0, scale=5.0)
    draft = tiny_model("llama", 7, layers=1, scale=1.0)
    pair = ModelPair(target, draft, word_tokenizer(), "t", "d")
    contexts = contexts_from_streams([(CONTEXT, [3, 8, 1]), ([5, 6], [9, 2])], every=8, temperatures=[0.0, 0.7])
    assert [c.temperature for c in contexts] == [0.0, 0.7]
    cfg = TrainConfig(objective="token", lr=1e-3, batch=4, token_labels="stream", seed=2)
    trainer = ExitTrainer(pair, contexts, cfg)
    before = copy.deepcopy(trainer.draft).eval()
    rng = random.Random(cfg.seed)
    batch = [contexts[rng.randrange(len(contexts))] for _ in range(cfg.batch)]
    assert {c.temperature for c in batch} == {0.0, 0.7}, "test setup: both kinds in the batch"

    def hand(c: Context) -> float:
        ids = c.tokens + c.continuation
        total = 0.0
        for j, tok in enumerate(c.continuation):
            logq = draft_logq(before, ids[: len(c.tokens) + j])
            if c.temperature == 0:
                total -= logq[tok].item()
            else:
                with torch.no_grad():
                    tl = target(input_ids=torch.tensor([ids[: len(c.tokens) + j]])).logits[0, -1].double()
                p = torch.softmax(tl / c.temperature, -1)
                total -= (p * logq.double()).sum().item()
        return total / len(c.continuation)

    log = trainer.step()
    assert log.l_tok == pytest.approx(sum(hand(c) for c in batch) / len(batch), rel=1e-4)
    with pytest.raises(TevvizError, match="2 temperatures for 1 streams"):
        contexts_from_streams([(CONTEXT, [3])], temperatures=[0.0, 1.0])


def test_distill_loss_is_the_cross_entropy_to_the_target_law_and_moves_the_draft_toward_it(learnable_pair):
    """The warm start's first loss is -sum p log q at T = 1 on the windows its seed picks (the target unchanged),
    and after training the drafter's KL to the target on other windows has fallen. `warm_start` trains a frozen copy
    and leaves the pair's drafter as it was."""
    from tevviz.engine.train.distillation import DistillConfig, warm_start

    pair, contexts = learnable_pair
    stream = [t for c in contexts[::2] for t in c.tokens + c.continuation]
    held = torch.tensor([(c.tokens + c.continuation)[:8] for c in contexts[1::2]
                         if len(c.tokens + c.continuation) >= 8])
    cfg = DistillConfig(steps=40, batch=8, window=12, lr=3e-3, seed=5)
    draft_before, target_before = copy.deepcopy(pair.draft.state_dict()), copy.deepcopy(pair.target.state_dict())

    def kl(model) -> float:
        with torch.no_grad():
            lp = torch.log_softmax(pair.target(input_ids=held).logits.float(), -1)
            lq = torch.log_softmax(model(input_ids=held).logits.float(), -1)
        return float((lp.exp() * (lp - lq)).sum(-1).mean())

    starts = torch.randint(0, len(stream) - cfg.window + 1, (cfg.batch,), generator=torch.Generator().manual_seed(5))
    ids = torch.tensor([stream[i : i + cfg.window] for i in starts.tolist()])
    with torch.no_grad():
        p = torch.softmax(pair.target(input_ids=ids).logits.float(), -1)
        first = float(-(p * torch.log_softmax(pair.draft(input_ids=ids).logits.float(), -1)).sum(-1).mean())
    before = kl(pair.draft)
    draft, losses = warm_start(pair.target, pair.draft, stream, cfg)
    assert len(losses) == 40
    assert losses[0] == pytest.approx(first, rel=0.02)  # the target runs under bfloat16 autocast
    assert kl(draft) < 0.8 * before
    assert all(torch.equal(v, pair.target.state_dict()[k]) for k, v in target_before.items())
    assert all(torch.equal(v, pair.draft.state_dict()[k]) for k, v in draft_before.items())
    assert not draft.training and not any(q.requires_grad for q in draft.parameters())


def test_coarse_cross_entropy_merges_the_unkept_tokens_into_one_outcome():
    """With every token kept it is the full cross-entropy; with k kept it is the cross-entropy of the two laws with
    the other tokens merged into one outcome, by hand."""
    from tevviz.engine.train.distillation import coarse_cross_entropy

    gen = torch.Generator().manual_seed(3)
    logits, p = torch.randn(2, 5, 9, generator=gen), torch.softmax(2 * torch.randn(2, 5, 9, generator=gen), -1)
    logq = torch.log_softmax(logits, -1)
    every = p.topk(9, -1)
    assert float(coarse_cross_entropy(logits, every.values, every.indices)) == pytest.approx(
        float(-(p * logq).sum(-1).mean()), rel=1e-5)
    top = p.topk(3, -1)
    q = logq.exp()
    q_kept = q.gather(-1, top.indices)
    hand = -((top.values * q_kept.log()).sum(-1) + (1 - top.values.sum(-1)) * (1 - q_kept.sum(-1)).log()).mean()
    assert float(coarse_cross_entropy(logits, top.values, top.indices)) == pytest.approx(float(hand), rel=1e-5)


def test_cached_target_law_is_the_top_k_of_each_window_and_its_distillation_moves_the_draft(learnable_pair):
    """`target_law` cuts the text into consecutive windows and keeps the k most likely tokens of the target's law at
    each position (float16); `distill` with top_k trains on those windows alone and lowers the drafter's full KL."""
    from tevviz.engine.train.distillation import DistillConfig, target_law, warm_start

    pair, contexts = learnable_pair
    stream = [t for c in contexts[::2] for t in c.tokens + c.continuation]
    width = pair.draft.get_output_embeddings().weight.shape[0]
    cfg = DistillConfig(steps=40, batch=4, window=12, lr=3e-3, seed=5, top_k=6)
    law = target_law(pair.target, stream, cfg, width)
    n = len(stream) // 12
    assert law.windows.tolist() == torch.tensor(stream[: n * 12]).view(n, 12).tolist()
    with torch.no_grad():
        p = torch.softmax(pair.target(input_ids=law.windows).logits.float(), -1)
    kept = p.gather(-1, law.ids.long())
    assert torch.allclose(law.probs.float(), kept, atol=0.02)  # the target runs under bfloat16 autocast
    assert (kept >= p.topk(6, -1).values[..., -1:] - 0.02).all() and (law.probs[..., :-1] >= law.probs[..., 1:]).all()
    with pytest.raises(TevvizError, match="0 < top_k"):
        target_law(pair.target, stream, replace(cfg, top_k=width), width)

    held = torch.tensor([(c.tokens + c.continuation)[:8] for c in contexts[1::2]
                         if len(c.tokens + c.continuation) >= 8])

    def kl(model) -> float:
        with torch.no_grad():
            lp = torch.log_softmax(pair.target(input_ids=held).logits.float(), -1)
            lq = torch.log_softmax(model(input_ids=held).logits.float(), -1)
        return float((lp.exp() * (lp - lq)).sum(-1).mean())

    draft, losses = warm_start(pair.target, pair.draft, stream, cfg, law=law)
    assert len(losses) == 40 and kl(draft) < 0.8 * kl(pair.draft)


@pytest.mark.parametrize("kw, message", [({"steps": -1}, "steps >= 0"), ({"window": 1}, "at least 2 tokens"),
                                          ({"lr": 0.0}, "lr > 0"), ({"temperature": 0.0}, "temperature > 0"),
                                          ({"top_k": -1}, "top_k must be an int >= 0")])
def test_bad_distill_settings(kw, message):
    from tevviz.engine.train.distillation import DistillConfig, distill

    with pytest.raises(TevvizError, match=message):
        DistillConfig(**kw)
    with pytest.raises(TevvizError, match="more than 256 tokens"):
        distill(None, None, [1] * 100, DistillConfig(steps=1))


def test_a_train_config_read_back_from_its_json_is_the_one_written():
    """TrainConfig.from_dict (the app's ExitTrain copy on disk): asdict's JSON reads back equal, builder included;
    an objective this version does not know is refused, not trained with."""
    import json
    from dataclasses import asdict

    from tevviz.engine.train.exittrain import TrainConfig

    cfg = TrainConfig(objective="prefix", steps=7, builder=BuilderConfig(name="chain", budget=5, depth=5))
    doc = json.loads(json.dumps(asdict(cfg)))
    assert TrainConfig.from_dict(doc) == cfg
    with pytest.raises(TevvizError, match="objective"):
        TrainConfig.from_dict({**doc, "objective": "nonsense"})
