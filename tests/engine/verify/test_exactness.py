"""Exactness on tiny random models: greedy output equals `generate`, caches stay in line, masks mean what they say.

Exactness (docs/math.md, *One decoding round*): every verifier on every builder commits, at
temperature 0, the target's own greedy output token for token; after each round the target cache
holds every committed token but the root, and the draft cache every committed token but the
pending ones.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import (
    EOS,
    assert_caches_in_line,
    fresh_cache,
    greedy_generate,
    perturbed,
    random_prompts,
    tiny_model,
    tiny_pair,
    word_tokenizer,
)

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, autoregressive
from tevviz.engine.core.kv import additive_mask, tree_visibility
from tevviz.engine.core.sampling import processed_probs
from tevviz.engine.core.tree import ancestor_mask, from_parents, path_to, position_ids
from tevviz.engine.verify.verifiers import VERIFIERS

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILIES = ("llama", "qwen2", "gpt2")
NEW = 64
GREEDY = SamplingConfig(temperature=0.0)
BUILDERS = {
    "best-first-default": BuilderConfig(),
    "best-first-small": BuilderConfig(budget=8, depth=3, children=2, width=4),
    "best-first-wide": BuilderConfig(budget=48, depth=8, children=6, width=12),
    "best-first-deep-narrow": BuilderConfig(budget=5, depth=10, children=1, width=1),
    "static-42211": BuilderConfig(name="static", branching=(4, 2, 2, 1, 1)),
    "static-33": BuilderConfig(name="static", branching=(3, 3)),
    "chain-5": BuilderConfig(name="chain", depth=5),
    "chain-1": BuilderConfig(name="chain", depth=1),
    "sampled-4": BuilderConfig(name="sampled", depth=4),  # at T = 0 the draft's greedy chain
}

_pairs: dict = {}


def pair_of(family: str, attn: str = "sdpa"):
    """One tiny pair per (family, attention), built on first use."""
    key = (family, attn)
    if key not in _pairs:
        _pairs[key] = tiny_pair(family, seed=0, attn=attn)
    return _pairs[key]


def greedy_cfg(builder: BuilderConfig | None = None, verifier: str = "tev", **kw) -> DecodeConfig:
    opts = {"max_new_tokens": NEW, "stop_on_eos": False, "missing_top": 0} | kw
    return DecodeConfig(sampling=GREEDY, builder=builder or BuilderConfig(), verifier=verifier, **opts)


def decode(pair, prompt: list[int], cfg: DecodeConfig, check_caches: bool = True) -> DecodeSession:
    s = DecodeSession(pair, prompt, cfg)
    while not s.done:
        rec = s.step()
        assert rec.committed == s.generated[len(s.generated) - len(rec.committed):]
        if check_caches:
            assert_caches_in_line(pair, s)
    return s


def assert_greedy(pair, prompts, cfg: DecodeConfig, check_caches: bool = True) -> None:
    for prompt in prompts:
        ref = greedy_generate(pair.target, prompt, NEW)
        s = decode(pair, prompt, cfg, check_caches)
        assert len(s.generated) == NEW
        first = next((i for i, (a, b) in enumerate(zip(s.generated, ref)) if a != b), None)
        assert s.generated == ref, (
            f"{cfg.verifier}/{cfg.builder.name} diverges from generate at new token {first} for prompt {prompt}"
        )


# --------------------------------------------------------------------------------------------- greedy equivalence


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tev_best_first_ten_prompts(family):
    """Ten prompts x 64 tokens per family, TEV on the default best-first tree, caches checked every round."""
    pair = pair_of(family)
    prompts = random_prompts(10, seed=100 + FAMILIES.index(family))
    assert_greedy(pair, prompts + [[7]], greedy_cfg())  # plus a one-token prompt (no prefill at all)


@pytest.mark.parametrize("verifier", [v for v in VERIFIERS if v != "tev"])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_other_verifiers(family, verifier):
    """Every other verifier: two prompts on best-first, one on static and one on chain (the speculative verifier's
    own sampled chain for it)."""
    pair = pair_of(family)
    prompts = random_prompts(4, seed=200 + FAMILIES.index(family))
    assert_greedy(pair, prompts[:2], greedy_cfg(verifier=verifier))
    assert_greedy(pair, prompts[2:3], greedy_cfg(BUILDERS["static-42211"], verifier))
    chain = BUILDERS["sampled-4" if verifier == "speculative" else "chain-5"]
    assert_greedy(pair, prompts[3:], greedy_cfg(chain, verifier))


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_every_builder(family, builder):
    """TEV on every builder shape (several (B, H, K, W), static, chain): two prompts each."""
    pair = pair_of(family)
    prompts = random_prompts(2, seed=300 + 10 * FAMILIES.index(family) + list(BUILDERS).index(builder))
    assert_greedy(pair, prompts, greedy_cfg(BUILDERS[builder]))


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_eager_attention(family):
    """Eager attention adds the mask to the scores; the engine's additive mask must still give greedy output."""
    pair = pair_of(family, "eager")
    prompts = random_prompts(4, seed=400 + FAMILIES.index(family))
    assert_greedy(pair, prompts[:2], greedy_cfg())
    assert_greedy(pair, prompts[2:3], greedy_cfg(verifier="residual"))
    assert_greedy(pair, prompts[3:], greedy_cfg(BUILDERS["static-33"], "predraw"))


def test_greedy_stops_on_eos_like_generate():
    """Both stopping on EOS: the session ends with the EOS that generate ends with."""
    pair = copy.deepcopy(pair_of("llama"))
    prompt = random_prompts(1, seed=500)[0]
    plain = greedy_generate(pair.target, prompt, NEW)
    # Make EOS the greedy choice wherever a token from the middle of the plain output was: its head row,
    # scaled up a little, beats that token's row wherever that token's logit is positive.
    t = plain[20]
    with torch.no_grad():
        for model in (pair.target, pair.draft):
            head = model.get_output_embeddings().weight
            head[EOS] = head[t] * 1.05
    ref = greedy_generate(pair.target, prompt, NEW, stop_on_eos=True)
    assert EOS in ref and len(ref) < NEW, "test setup: the edited target should stop early on EOS"
    for verifier in VERIFIERS:
        s = decode(pair, prompt, DecodeConfig(sampling=GREEDY, verifier=verifier, max_new_tokens=NEW, missing_top=0))
        assert s.done and s.generated == ref, f"{verifier}: {s.generated} vs generate {ref}"


@pytest.mark.parametrize("n", [1, 2, 5])
def test_greedy_short_budgets(n):
    """With n new tokens left the tree is cut to depth n - 1, so no block overshoots and the output is exact."""
    pair = pair_of("gpt2")
    prompt = random_prompts(1, seed=550 + n)[0]
    for verifier in VERIFIERS:
        s = decode(pair, prompt, greedy_cfg(verifier=verifier, max_new_tokens=n))
        assert s.generated == greedy_generate(pair.target, prompt, n), verifier
        assert all(max(r.depths) <= n - 1 for r in s.rounds)


def test_records_are_consistent_with_the_stream():
    """Each round's record: committed = accepted path tokens + bonus, block length = depth(exit) + 1."""
    pair = pair_of("qwen2")
    s = decode(pair, random_prompts(1, seed=600)[0], greedy_cfg(missing_top=3), check_caches=False)
    stream = []
    for rec in s.rounds:
        assert rec.accepted == path_to(from_parents(rec.tokens, rec.parents), rec.exit_node)
        assert rec.committed == [rec.tokens[v] for v in rec.accepted[1:]] + [rec.bonus_token]
        assert rec.block_length == rec.depths[rec.exit_node] + 1
        assert rec.tokens[0] == (s.prompt_ids + stream)[-1], "the root is the last committed token"
        assert rec.P[rec.exit_node] == pytest.approx(1.0) and rec.w[rec.exit_node] == pytest.approx(1.0)
        # At T = 0 the only target mass outside the tree is the bonus token at the exit node.
        missing = [(v, m["token_id"], m["gain"]) for v, ms in enumerate(rec.missing) for m in ms]
        assert missing == [(rec.exit_node, rec.bonus_token, pytest.approx(1.0))]
        stream += rec.committed
    assert stream == s.generated


# ------------------------------------------------------------------------------------------------------ mask guards

PREFIX = [3, 14, 15, 92, 65, 35, 89, 79]
GUARD_TREE = ([PREFIX[-1], 7, 8, 9, 10, 11, 12, 13, 7, 21], [-1, 0, 0, 1, 1, 3, 2, 5, 7, 8])


@torch.no_grad()
def tree_logits(model, variant: str) -> torch.Tensor:
    """Target logits of GUARD_TREE on top of a cache of PREFIX[:-1], with the mask and positions of `variant`."""
    tree = from_parents(*GUARD_TREE)
    past, dev = len(PREFIX) - 1, model.device
    visible = tree_visibility(ancestor_mask(tree), past).to(dev)  # (N, past + N) bool
    pos = position_ids(tree, past).to(dev)
    kw = {
        "additive": {"attention_mask": additive_mask(visible, model.dtype), "position_ids": pos},
        "bool-4d": {"attention_mask": visible[None, None], "position_ids": pos},
        "additive-3d": {"attention_mask": additive_mask(visible, model.dtype)[0], "position_ids": pos},
        "no-position-ids": {"attention_mask": additive_mask(visible, model.dtype)},
    }[variant]
    cache = fresh_cache(model, PREFIX[:-1])
    return model(input_ids=tree.tokens[None].to(dev), cache=cache, use_cache=True, **kw).logits[0]  # (N, V)


@torch.no_grad()
def path_logits(model) -> torch.Tensor:
    """Each node's logits from a plain causal forward of PREFIX + path(node)."""
    tree = from_parents(*GUARD_TREE)
    rows = []
    for v in range(tree.size):
        toks = PREFIX + [int(tree.tokens[u]) for u in path_to(tree, v)[1:]]
        rows.append(model(input_ids=torch.tensor([toks], device=model.device)).logits[0, -1])
    return torch.stack(rows)


# Which ways of passing the tree are wrong on which model (found by running them): eager attention adds a
# bool mask as 0/1; GPT-2 has absolute positions and reads a 3-D mask as a padding mask; Llama-style models
# refuse a 3-D mask.
MODELS = [("llama", "eager"), ("llama", "sdpa"), ("qwen2", "eager"), ("gpt2", "eager"), ("gpt2", "sdpa")]
WRONG = {
    ("llama", "eager"): ("bool-4d", "additive-3d", "no-position-ids"),
    ("llama", "sdpa"): ("additive-3d", "no-position-ids"),
    ("qwen2", "eager"): ("bool-4d", "additive-3d", "no-position-ids"),
    ("gpt2", "eager"): ("bool-4d", "additive-3d", "no-position-ids"),
    ("gpt2", "sdpa"): ("additive-3d", "no-position-ids"),
}


@pytest.mark.parametrize("family,attn", MODELS)
def test_tree_forward_mask_guards(family, attn):
    """The engine's additive 4-D mask with depth positions reproduces every path's causal logits; the others don't."""
    model = tiny_model(family, seed=3, attn=attn)
    ref = path_logits(model)
    err = (tree_logits(model, "additive") - ref).abs().max().item()
    assert err <= 1e-4, f"{family}/{attn}: tree forward differs from the path forwards by {err:.3g}"
    if model.device.type != "cpu":
        return  # a wrong mask can fail as a device-side assert on a GPU, which ends the process's CUDA context
    for variant in WRONG[(family, attn)]:
        try:
            bad = (tree_logits(model, variant) - ref).abs().max().item()
        except (IndexError, RuntimeError, ValueError):
            continue  # refused outright: also not a silent wrong answer
        assert bad > 1e-3, f"{family}/{attn}: {variant} should give wrong logits here (off by only {bad:.3g})"


def test_engine_passes_additive_mask_and_depth_positions():
    """The session's target call uses a float 4-D mask in the model's dtype and depth position ids."""
    pair = copy.deepcopy(pair_of("gpt2", "eager"))
    seen = []

    def grab(module, args, kwargs):
        seen.append((kwargs.get("attention_mask"), kwargs.get("position_ids"), kwargs["input_ids"].shape[1]))

    handle = pair.target.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        s = DecodeSession(pair, [4, 5, 6], greedy_cfg())
        rec = s.step()
    finally:
        handle.remove()
    mask, pos, n = seen[-1]
    assert mask is not None and mask.dim() == 4 and mask.dtype == pair.target.dtype
    assert mask.shape[-2:] == (n, 2 + n) and n == rec.size
    assert pos.tolist() == [[2 + d for d in rec.depths]]


# ------------------------------------------------------------------------------------------------ sampling baseline


@pytest.mark.parametrize("family", FAMILIES)
def test_autoregressive_greedy_equals_generate(family):
    pair = pair_of(family)
    for prompt in random_prompts(2, seed=700 + FAMILIES.index(family)):
        got = autoregressive(pair, prompt, greedy_cfg()).token_ids
        assert got == greedy_generate(pair.target, prompt, NEW)


def hand_processed(row: list[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """Temperature, then top-k, then top-p (the smallest prefix reaching top_p), in plain Python."""
    if temperature == 0:
        best = max(range(len(row)), key=lambda i: (row[i], -i))
        return [1.0 if i == best else 0.0 for i in range(len(row))]
    x = [v / temperature for v in row]
    order = sorted(range(len(x)), key=lambda i: -x[i])
    keep = order[:top_k] if top_k else order
    z = sum(math.exp(x[i]) for i in keep)
    kept, mass = [], 0.0
    for i in keep:
        kept.append(i)
        mass += math.exp(x[i]) / z
        if mass >= top_p:
            break
    z = sum(math.exp(x[i]) for i in kept)
    return [math.exp(x[i]) / z if i in kept else 0.0 for i in range(len(x))]


ROW = [2.0, 1.0, 0.5, 0.1, -1.0, 3.0, 0.0, -0.5, 1.7, 2.2]


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (0.7, 5, 1.0), (0.7, 0, 0.8), (0.7, 5, 0.8), (1.3, 3, 0.5), (2.0, 0, 0.3),
    (0.5, 1, 1.0), (1.0, 0, 0.05), (0.0, 0, 1.0),
])
def test_processed_probs_matches_hand_computation(temperature, top_k, top_p):
    cfg = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    got = processed_probs(torch.tensor([ROW, ROW[::-1]]), cfg)
    for r, row in enumerate((ROW, ROW[::-1])):
        want = hand_processed(row, temperature, top_k, top_p)
        assert got[r].tolist() == pytest.approx(want, abs=1e-6), f"row {r}"


def test_processed_probs_matches_transformers_warpers():
    """The processed law is the one `generate(do_sample=True)` samples: HF's temperature, top-k, top-p warpers."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g) * 3
    for t, k, p in [(1.0, 0, 1.0), (0.7, 10, 1.0), (0.7, 0, 0.9), (1.2, 20, 0.75), (0.6, 5, 0.5)]:
        x = TemperatureLogitsWarper(t)(None, logits.clone())
        if k:
            x = TopKLogitsWarper(k)(None, x)
        if p < 1:
            x = TopPLogitsWarper(p)(None, x)
        want = torch.softmax(x, dim=-1)
        got = processed_probs(logits, SamplingConfig(temperature=t, top_k=k, top_p=p))
        assert torch.allclose(got, want, atol=1e-6), (t, k, p)


def test_greedy_ties_pick_the_lowest_index():
    row = torch.tensor([[0.5, 2.0, 2.0, 1.0]])
    assert processed_probs(row, GREEDY).tolist() == [[0.0, 1.0, 0.0, 0.0]]


@pytest.mark.parametrize("top_p,kept", [(0.5, 1), (0.75, 2), (0.875, 3), (0.876, 4)])
def test_top_p_keeps_the_smallest_prefix_reaching_p(top_p, kept):
    """Probabilities 1/2, 1/4, 1/8, 1/8 are exact in float: a prefix whose mass equals top_p is enough."""
    logits = torch.tensor([[2 * math.log(2), math.log(2), 0.0, 0.0]])
    got = processed_probs(logits, SamplingConfig(temperature=1.0, top_p=top_p))[0]
    assert int((got > 0).sum()) == kept
    # At 0.875 the last two tokens tie; which one stays is transformers' rule (pinned in test_laws), so the
    # hand computation is compared as a multiset and the kept set against transformers' own warper.
    assert sorted(got.tolist()) == pytest.approx(sorted(hand_processed(logits[0].tolist(), 1.0, 0, top_p)), abs=1e-6)
    from transformers import TopPLogitsWarper

    want = torch.softmax(TopPLogitsWarper(top_p)(None, logits.clone()), -1)[0]
    assert got.tolist() == pytest.approx(want.tolist(), abs=1e-6)


# ------------------------------------------------------------------------------------------------ sampling at T > 0

SAMPLED = {"t1-top5": SamplingConfig(temperature=1.0, top_k=5),
           "t1.2-topp0.95": SamplingConfig(temperature=1.2, top_p=0.95),
           "t1.5-top8-topp0.9": SamplingConfig(temperature=1.5, top_k=8, top_p=0.9)}


@pytest.mark.parametrize("setting", list(SAMPLED))
@pytest.mark.parametrize("verifier", list(VERIFIERS))
def test_caches_in_line_after_every_sampled_round(verifier, setting):
    """At T > 0 the accepted path leaves the greedy branch; both caches still equal a fresh prefill every round
    (the speculative verifier on its sampled chain, whose accepted prefix is cut at a random depth)."""
    pair = pair_of("llama")
    sampled = verifier == "speculative"
    builder = BuilderConfig(name="sampled", depth=4) if sampled else BUILDERS["best-first-small"]
    cfg = DecodeConfig(sampling=SAMPLED[setting], builder=builder, verifier=verifier,
                       max_new_tokens=20, seed=list(VERIFIERS).index(verifier), stop_on_eos=False, missing_top=0)
    off_first_branch = cut_short = 0
    # More prompts where a check needs an event (a path off the first branch; a chain cut short) to have power.
    count = 4 if sampled else 2 if setting == "t1-top5" else 1
    for prompt in random_prompts(count, seed=900 + list(SAMPLED).index(setting)):
        s = decode(pair, prompt, cfg)
        cut_short += sum(0 < r.exit_node < r.size - 1 for r in s.rounds)
        for r in s.rounds:
            first = {}  # each node's first (most likely by the draft) child
            for v, p in enumerate(r.parents):
                first.setdefault(p, v)
            off_first_branch += any(first[r.parents[v]] != v for v in r.accepted[1:])
        assert len(s.generated) == 20
    if setting == "t1-top5" and not sampled:
        assert off_first_branch > 0, "test setup: some round should accept a path off the first branch"
    if sampled:
        assert cut_short > 0, "test setup: some chain should be cut short by a rejection"


STREAM_V = 8
STREAM_SESSIONS = 2000
STREAM_SAMPLING = SamplingConfig(temperature=1.0, top_k=3)


def stream_pair():
    """A one-layer Llama pair over 8 tokens: small enough for thousands of sessions, the law over 3 tokens 27 cells."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tevviz.engine.load.models import ModelPair

    cfg = LlamaConfig(vocab_size=STREAM_V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      eos_token_id=STREAM_V - 1, bos_token_id=STREAM_V - 1, pad_token_id=STREAM_V - 1)
    torch.manual_seed(21)
    target = LlamaForCausalLM(cfg)
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)
    target = target.eval().requires_grad_(False)
    return ModelPair(target, perturbed(target, 22, noise=0.5), word_tokenizer(STREAM_V), "stream", "stream-draft")


@torch.no_grad()
def first_three_law(model, prompt: list[int], sampling: SamplingConfig) -> dict[tuple[int, int, int], float]:
    """Pr(x1, x2, x3) of plain autoregressive sampling, from one batched forward over all (x1, x2) continuations."""
    pairs = [(a, b) for a in range(STREAM_V) for b in range(STREAM_V)]
    ids = torch.tensor([prompt + [a, b] for a, b in pairs])
    p = processed_probs(model(input_ids=ids).logits[:, -3:].double(), sampling)  # (V^2, 3, V)
    law = {}
    for i, (a, b) in enumerate(pairs):
        for c in range(STREAM_V):
            q = float(p[i, 0, a] * p[i, 1, b] * p[i, 2, c])
            if q > 0:
                law[(a, b, c)] = q
    return law


@pytest.mark.parametrize("auto", ["fixed", "auto-budget", "auto-no-draft", "sampled-auto", "mixed"])
def test_first_three_tokens_follow_autoregressive_sampling(auto):
    """Tree decoding (best-first, TEV) at T = 1 with top-k: over 2,000 seeded sessions the first three committed
    tokens follow plain autoregressive sampling (chi-square), across round boundaries and cache commits; also
    with --budget auto, whose trees change size from round to round, and with auto's rounds without a draft
    (a cost model under which trees lose: one undrafted round, then a drafted one that catches the draft up);
    and speculative sampling on sampled chains, auto-sized (each session's warm-up drafts depths 3, 1, 2); and the
    mixed builder, whose warm-up drafts a speculative chain, then a TEV tree below whatever the chain committed."""
    from conftest import losing_cost_model

    from tevviz.engine.verify.comparison import chi_square_p

    pair = stream_pair()
    prompt = [4]  # one token: no prefill forward, so a session costs about four tiny forwards
    law = first_three_law(pair.target, prompt, STREAM_SAMPLING)
    counts: dict[tuple[int, ...], int] = {}
    rounds = 0
    sampled = auto.startswith("sampled")
    builder = (BuilderConfig(name="sampled", depth=3, auto=auto == "sampled-auto") if sampled else
               BuilderConfig(name="mixed" if auto == "mixed" else "best-first", budget=6, depth=3, children=3, width=3,
                             auto=auto != "fixed"))
    undrafted, arms = 0, []
    with torch.inference_mode():
        for seed in range(STREAM_SESSIONS):
            cfg = DecodeConfig(sampling=STREAM_SAMPLING, builder=builder, max_new_tokens=3, seed=seed,
                               stop_on_eos=False, missing_top=0, verifier="speculative" if sampled else "tev")
            s = DecodeSession(pair, prompt, cfg,
                              cost_model=losing_cost_model(6, 3) if auto == "auto-no-draft" else None)
            records = s.run()
            rounds += len(records)
            arms.append(tuple(r.verifier for r in records))
            undrafted += sum(r.sizing is not None and not r.sizing.drafted for r in records)
            key = tuple(s.generated)
            counts[key] = counts.get(key, 0) + 1
    drafted = rounds - undrafted
    if auto == "auto-no-draft":  # test setup: an undrafted round first, then one probe that drafts (and loses)
        assert undrafted >= STREAM_SESSIONS and drafted == STREAM_SESSIONS
    elif auto != "mixed":
        # test setup: drafts often commit several tokens per round, and some sessions take more than one round
        assert undrafted == 0 and STREAM_SESSIONS < drafted < 2 * STREAM_SESSIONS
    impossible = [k for k in counts if k not in law]
    assert not impossible, f"committed streams of probability 0: {impossible[:5]}"
    cells = sorted(law)
    _, df, p_value = chi_square_p([counts.get(c, 0) for c in cells], [law[c] for c in cells])
    assert df >= 10 and p_value > 1e-3, f"chi-square p-value {p_value:.2e} over {df} degrees of freedom"
    if auto == "mixed":  # test setup: many sessions go on from a chain round to a tree round
        assert set(arms) <= {("speculative",), ("speculative", "tev"), ("speculative", "tev", "speculative")}
        assert len(arms) - arms.count(("speculative",)) > STREAM_SESSIONS / 4
