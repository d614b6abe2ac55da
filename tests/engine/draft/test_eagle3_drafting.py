"""EAGLE-3 heads drafting (docs/eagle3.md): greedy decoding equals the target's `generate` token for token with TEV,
predraw and residual on eagle and best-first trees, beside tiny Llama and Qwen3 targets, in rounds that accept
nothing and rounds that accept; the head's depth-1 law equals an independent forward written here from the published
step (the shifted pairs, fc, the norms, RoPE, d2t), at round 0 and after rounds whose accepted tokens the head re-read
with the target's states; EAGLE's tree equals an independent run of EAGLE's procedure."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _dflash import qwen3_target
from conftest import VOCAB, greedy_generate, random_prompts, tiny_model
from test_eagle3_loading import head_config, head_tensors, write_head, write_target

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.kv import causal_visibility
from tevviz.engine.decode.sizing import AutoSizing
from tevviz.engine.draft.drafters import layer_outputs, tree_for
from tevviz.engine.draft.eagle3_model import HeadKV
from tevviz.engine.draft.eagle_tree import eagle_builder
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")

# hidden_states indices: of a 3-layer Llama, its first two layers' outputs and its last (normed); of a 4-layer Qwen3,
# written by SpecForge as outputs of layers 1, 2, 3 (a leading 1: SGLang's first-id rule adds 1)
IDS = {"llama": (1, 2, 3), "qwen3": (2, 3, 4)}
N = 40
TRAIN = random_prompts(10, 0, lo=2, hi=6)  # the trained head's prompts; its drafts below TRAIN[5] go deep


def trained(pair, steps: int = 60):
    """Fit the head's depth-1 law to the target's own greedy text (about a second), so that its drafts get
    accepted and rounds commit several tokens."""
    head = pair.draft
    texts = [p + greedy_generate(pair.target, p, 40) for p in TRAIN]
    with torch.no_grad():
        data = [(layer_outputs(pair.target(input_ids=torch.tensor([t[:-1]]), output_hidden_states=True)
                               .hidden_states, head.target_layers)[0], torch.tensor(t)) for t in texts]
    head.requires_grad_(True)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    with torch.enable_grad():
        for _ in range(steps):
            opt.zero_grad()
            loss = 0.0
            for feats, ids in data:  # the pair (state t, token t + 1) predicts token t + 2
                n = len(ids) - 2
                h = head.layer(head.fuse(feats[:n]), ids[1:-1], torch.arange(n), causal_visibility(n, 0, "cpu"),
                               HeadKV())
                loss = loss + F.cross_entropy(head.target_logits(h), ids[2:])
            loss.backward()
            opt.step()
    head.requires_grad_(False)
    return pair


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pairs(request, tmp_path_factory):
    """A random head with a reduced draft vocabulary (few acceptances) and a trained one with the full vocabulary
    (many), beside a target of each family; SpecForge's dialect for Qwen3, vLLM's for Llama."""
    root = tmp_path_factory.mktemp(request.param)
    target = write_target(root / "target", tiny_model("llama", 1, layers=3) if request.param == "llama"
                          else qwen3_target(1, layers=4))
    dialect, ids = ("vllm" if request.param == "llama" else "specforge"), IDS[request.param]
    rand = write_head(root / "random", head_config(dialect, ids=ids), head_tensors(seed=1))
    full = write_head(root / "full", head_config(dialect, ids=ids, vd=VOCAB), head_tensors(seed=2, vd=VOCAB))
    return {"random": load_pair(str(target), str(rand), device="cpu"),
            "trained": trained(load_pair(str(target), str(full), device="cpu")), "ids": ids}


BUILDERS = {"eagle": eagle_builder(total_tokens=24, depth=4, top_k=6),
            "best-first": BuilderConfig(name="best-first", budget=16, depth=5, children=4, width=4)}


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("verifier", ["tev", "predraw", "residual"])
def test_greedy_decoding_is_the_targets_generate(pairs, builder, verifier):
    accepted = []
    for name in ("random", "trained"):
        pair = pairs[name]
        # A prompt of the trained head's text (deep acceptance), and one token: a first round with no pair to read
        for prompt in (TRAIN[5], [11]):
            cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=BUILDERS[builder], verifier=verifier,
                               max_new_tokens=N, stop_on_eos=False)
            s = DecodeSession(pair, prompt, cfg)
            s.run()
            assert s.generated == greedy_generate(pair.target, prompt, N), (name, prompt)
            accepted += [len(r.accepted) - 1 for r in s.rounds]
    assert 0 in accepted and max(accepted) >= 3, accepted  # rounds that accept nothing, and deep ones


def test_an_automatic_budget_sizes_best_first_trees_on_the_head_and_stays_exact(pairs):
    pair = pairs["trained"]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=N, stop_on_eos=False,
                       builder=BuilderConfig(name="best-first", budget=16, depth=5, auto=True))
    s = DecodeSession(pair, TRAIN[5], cfg)
    s.run()
    assert s.generated == greedy_generate(pair.target, TRAIN[5], N)
    assert isinstance(s.sizing, AutoSizing) and len({r.size for r in s.rounds}) > 1  # rounds sized apart


# ------------------------------------------------------------------------------ the published step, by hand


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta: float):
    """Llama's RoPE on (heads, n, d) at positions 0..n-1: the halves rotated by angle pos * theta^(-2i/d)."""
    n, d = x.shape[-2], x.shape[-1]
    angle = torch.arange(n).float()[:, None] * theta ** (-torch.arange(0, d, 2).float() / d)
    cos, sin = angle.cos(), angle.sin()
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


@torch.no_grad()
def reference_law(pair, w: dict, context: list[int], ids, theta: float = 10000.0) -> torch.Tensor:
    """The head's law of the token after `context`, from its tensors `w`: the target's states at t (hidden_states
    `ids`, joined) paired with the token at t + 1, fc, [input_layernorm(embed), hidden_norm(h_in)], causal attention
    (4 heads, 2 key/value heads), h_in + attention, + MLP, norm, lm_head, placed at arange(Vd) + d2t."""
    hs = pair.target(input_ids=torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states
    feats = torch.cat([hs[i][0] for i in ids], dim=-1)
    tokens = torch.tensor(context[1:])
    n, p = len(tokens), "midlayer."
    h_in = feats @ w["fc.weight"].T
    emb = pair.target.get_input_embeddings().weight[tokens]
    x = torch.cat([rms(emb, w[p + "input_layernorm.weight"]), rms(h_in, w[p + "hidden_norm.weight"])], dim=-1)
    split = lambda t, heads: t.view(n, heads, -1).transpose(0, 1)
    q = rope(split(x @ w[p + "self_attn.q_proj.weight"].T, 4), theta)
    k = rope(split(x @ w[p + "self_attn.k_proj.weight"].T, 2), theta).repeat_interleave(2, 0)
    v = split(x @ w[p + "self_attn.v_proj.weight"].T, 2).repeat_interleave(2, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    h = h_in + (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(n, -1) @ w[p + "self_attn.o_proj.weight"].T
    m = rms(h, w[p + "post_attention_layernorm.weight"])
    h = h + (F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) \
        @ w[p + "mlp.down_proj.weight"].T
    q_draft = torch.softmax(rms(h[-1], w["norm.weight"]) @ w["lm_head.weight"].T, -1)
    law = torch.zeros(pair.target.get_output_embeddings().weight.shape[0])
    law[torch.arange(len(w["d2t"])) + w["d2t"]] = q_draft
    return law


def depth1(record) -> dict[int, float]:
    return {t: math.exp(lq) for t, lq, d in zip(record.tokens, record.draft_logprobs, record.depths) if d == 1}


def assert_same_law(record, law, k: int, what: str):
    got = depth1(record)  # the root's children the tree kept: its best ones, up to k
    assert 1 <= len(got) <= k and sorted(got) == sorted(torch.topk(law, len(got)).indices.tolist()), what
    assert all(abs(q - float(law[t])) < 1e-5 for t, q in got.items()), what


def test_depth1_law_at_round_0_equals_the_published_step(pairs):
    pair = pairs["random"]
    w = {k: v.float() if v.is_floating_point() else v for k, v in pair.draft.state_dict().items()}
    for prompt in random_prompts(3, seed=7, lo=2, hi=9):
        cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=BUILDERS["eagle"], max_new_tokens=4,
                           stop_on_eos=False)
        record = DecodeSession(pair, prompt, cfg).step()
        assert_same_law(record, reference_law(pair, w, prompt, pairs["ids"]), 6, f"prompt {prompt}")


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_after_each_round_the_head_has_re_read_the_accepted_tokens_with_the_targets_states(pairs, builder):
    """Round r + 1's root law is the published step on the whole committed stream: the tree's nodes left the
    head's cache and the accepted ones came back with the verification pass's states."""
    pair = pairs["trained"]
    w = {k: v.float() if v.is_floating_point() else v for k, v in pair.draft.state_dict().items()}
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=BUILDERS[builder], max_new_tokens=N,
                       stop_on_eos=False)
    s = DecodeSession(pair, TRAIN[5], cfg)  # a prompt of the head's training text
    deep = 0
    while not s.done:
        context = list(s.tokens)
        record = s.step()
        if record.size > 1:  # the last round, one token short of the limit, drafts nothing
            assert_same_law(record, reference_law(pair, w, context, pairs["ids"]), BUILDERS[builder].children,
                            f"round {record.index}")
        deep += len(record.accepted) > 2
    assert deep >= 2  # rounds that accepted two tokens or more, re-read since


def chain_law(pair, context: list[int], path: tuple[int, ...]) -> torch.Tensor:
    """The head's log law below `path` (after `context`), by a plain causal run of the head: the committed pairs,
    then each token of the path with the state of the row before it."""
    from tevviz.engine.draft.eagle3_drafting import Eagle3Step

    hs = pair.target(input_ids=torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states
    cache, n = HeadKV(), len(context) - 1
    step = Eagle3Step(pair.draft, cache, layer_outputs(hs, pair.draft.target_layers)[0])
    row = step(torch.tensor(context[1:]), torch.arange(n), causal_visibility(n, 0, "cpu"), None)
    source = n - 1
    for i, token in enumerate(path):
        row = step(torch.tensor([token]), torch.tensor([n + i]), torch.ones(1, n + i + 1, dtype=torch.bool),
                   torch.tensor([source]))
        source = 0
    return torch.log_softmax(row[-1].float(), -1)


@torch.no_grad()
def test_eagle_tree_is_eagles_procedure(pairs):
    """Top-k of the root; each level the k best of the frontier's k x k children by cumulative log q; the
    total - 1 best candidates overall, run here path by path, independently of the builder."""
    pair, context, k, depth, total = pairs["trained"], TRAIN[5], 4, 3, 20
    tree = tree_for(pair, context, eagle_builder(total_tokens=total, depth=depth, top_k=k))
    top = torch.topk(chain_law(pair, context, ()), k)
    frontier = [((t,), s) for t, s in zip(top.indices.tolist(), top.values.tolist())]
    candidates = list(frontier)
    for _ in range(depth):
        level = []
        for path, score in frontier:
            top = torch.topk(chain_law(pair, context, path), k)
            level += [(path + (t,), score + s) for t, s in zip(top.indices.tolist(), top.values.tolist())]
        candidates += level
        frontier = sorted(level, key=lambda c: -c[1])[:k]
    want = {path for path, _ in sorted(candidates, key=lambda c: -c[1])[: total - 1]}
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()

    def path_of(v):
        return () if v == 0 else path_of(parents[v]) + (tokens[v],)

    assert {path_of(v) for v in range(1, tree.size)} == want
    assert max(len(p) for p in want) == depth + 1  # EAGLE's depth counts the forwards after the root's
