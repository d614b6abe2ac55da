"""Block drafters in DFlash's layout and DDTree's builder: loading, exactness, kept features, laws, bad input.

Faults each test was checked against once (planted by hand, then removed):
- the drafter keeping every tree node's features instead of the accepted path's: the kept-features test fails
  (greedy output does not: it is the target's whatever the drafter reads, which is why that test exists);
- the target cache keeping the whole tree after a round: greedy output differs from `generate`;
- the DDTree heap pushing a node's next sibling without its rank bump, or never pushing siblings: the
  brute-force comparison fails;
- a bonus token drawn without removing the exit node's children (the broken acceptance below): the law checks
  reject it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import pytest
import torch
from conftest import VOCAB, greedy_generate, random_prompts, tiny_model, word_tokenizer
from safetensors.torch import save_file
from test_laws import P_MIN, assert_law, bonus_without_removal, draw, exact_law, law_check, law_rejected
from test_streams import exact_two_token_law

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.draft.block_model import BlockDraftModel, default_layer_ids, parse_config
from tevviz.engine.draft.ddtree import ddtree_heap, ddtree_tree
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import ModelPair, load_pair
from tevviz.engine.verify.verifiers import VERIFIERS

pytestmark = pytest.mark.usefixtures("one_thread")

BS = 6  # block size of the test drafters: the root and 5 drafted depths
HIDDEN = 32


def dflash_config(layer_ids=(0, 2), hidden=HIDDEN, vocab=VOCAB, mask=VOCAB - 2, arch="DFlashDraftModel",
                  layers=1) -> dict:
    """A config.json as DFlash writes it: a Qwen3 decoder config plus the block fields."""
    return {"architectures": [arch], "model_type": "qwen3", "hidden_size": hidden, "intermediate_size": 64,
            "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512, "vocab_size": vocab,
            "attention_bias": False, "tie_word_embeddings": True, "block_size": BS, "num_target_layers": 3,
            "dflash_config": {"mask_token_id": mask, "target_layer_ids": list(layer_ids)}}


def dflash_weights(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random weights under DFlash's names: no embedding, no head."""
    g = torch.Generator().manual_seed(seed)
    h, heads, kv, hd, inter = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                  "head_dim", "intermediate_size"))
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.3
    n_ids = len(cfg["dflash_config"]["target_layer_ids"])
    w = {"fc.weight": rnd(h, n_ids * h), "hidden_norm.weight": torch.ones(h), "norm.weight": torch.ones(h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        w |= {p + "input_layernorm.weight": torch.ones(h), p + "post_attention_layernorm.weight": torch.ones(h),
              p + "self_attn.q_proj.weight": rnd(heads * hd, h), p + "self_attn.k_proj.weight": rnd(kv * hd, h),
              p + "self_attn.v_proj.weight": rnd(kv * hd, h), p + "self_attn.o_proj.weight": rnd(h, heads * hd),
              p + "self_attn.q_norm.weight": torch.ones(hd), p + "self_attn.k_norm.weight": torch.ones(hd),
              p + "mlp.gate_proj.weight": rnd(inter, h), p + "mlp.up_proj.weight": rnd(inter, h),
              p + "mlp.down_proj.weight": rnd(h, inter)}
    return w


def write_drafter(folder, cfg: dict, seed: int = 0, weights: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(dflash_weights(cfg, seed) if weights is None else weights, str(folder / "model.safetensors"))
    return folder


def qwen3_target(seed: int, layers: int = 3):
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    cfg = Qwen3Config(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=512, vocab_size=VOCAB,
                      eos_token_id=VOCAB - 1, bos_token_id=VOCAB - 1, pad_token_id=VOCAB - 1,
                      tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(6.0)  # sharp rows: drafts get accepted
    return model.eval()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def saved_pair(request, tmp_path_factory):
    """A target of each family and a block drafter written in DFlash's layout, both as folders."""
    root = tmp_path_factory.mktemp(request.param)
    target = tiny_model("llama", 1, layers=3) if request.param == "llama" else qwen3_target(1)
    target.save_pretrained(root / "target")
    word_tokenizer().save_pretrained(root / "target")
    write_drafter(root / "draft", dflash_config())
    return str(root / "target"), str(root / "draft")


@pytest.fixture(scope="module")
def block_pair(saved_pair):
    return load_pair(*saved_pair)


def greedy_cfg(verifier: str, n: int = 40, budget: int = 24) -> DecodeConfig:
    return DecodeConfig(sampling=SamplingConfig(temperature=0.0), verifier=verifier, max_new_tokens=n,
                        builder=BuilderConfig(kind="ddtree", budget=budget, depth=BS - 1), stop_on_eos=False)


# -------------------------------------------------------------------------------------------- loading


def test_a_dflash_folder_loads_as_a_block_drafter(block_pair):
    d = block_pair.draft
    assert isinstance(d, BlockDraftModel) and block_pair.draft_kind == "block"
    assert d.block.block_size == BS and d.block.target_layer_ids == (0, 2) and d.block.mask_token_id == VOCAB - 2
    assert not hasattr(d, "embed_tokens") and not hasattr(d, "lm_head")  # the target's are used


def test_default_layer_ids_follow_dflash():
    assert default_layer_ids(1, 36) == [18]
    assert default_layer_ids(5, 36) == [1, 9, 17, 25, 33]


# ----------------------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("verifier", ["tev", "predraw", "residual"])
def test_greedy_block_decoding_equals_generate(block_pair, verifier):
    """T = 0 with a DDTree of a random block drafter: the target's own greedy output, rounds with nothing
    accepted and rounds with accepted nodes both present."""
    accepted = []
    for prompt in random_prompts(3, seed=70, lo=1, hi=10):
        s = DecodeSession(block_pair, prompt, greedy_cfg(verifier))
        s.run()
        assert s.generated == greedy_generate(block_pair.target, prompt, 40), f"{verifier} on {prompt}"
        accepted += [len(r.accepted) - 1 for r in s.rounds]
    assert 0 in accepted and max(accepted) >= 1, f"test setup: accepted lengths {Counter(accepted)}"


def recomputed_features(target, tokens: list[int], layer_ids) -> torch.Tensor:
    with torch.no_grad():
        hs = target(input_ids=torch.tensor([tokens]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1][0] for i in layer_ids], dim=-1)


def kept_context(drafter, target, tokens: list[int], layer_ids):
    """What the drafter holds of the committed text against the same text recomputed from scratch: its cached keys
    and values beside those of a fresh cache fed the recomputed features, and its pending features beside theirs."""
    from tevviz.engine.draft.block_drafting import block_rows
    from tevviz.engine.draft.block_model import ContextKV

    fresh = recomputed_features(target, tokens[:-1], layer_ids)
    n = drafter.cache.length
    redo = ContextKV(len(drafter.model.layers))
    with torch.no_grad():
        block_rows(drafter.model, target, tokens[-1], len(tokens) - 1, 1, redo, fresh[:n])
    pending = drafter.pending if drafter.pending is not None else fresh[:0]
    return n, pending, fresh, redo


def test_kept_features_equal_features_recomputed_on_the_committed_text(block_pair):
    """After every round the drafter's context (keys and values read so far, features pending) is exactly that of
    the committed positions before the root, recomputed from scratch."""
    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=30))
    ids = block_pair.draft.block.target_layer_ids
    while not s.done:
        s.step()
        n, pending, fresh, redo = kept_context(s.drafter, block_pair.target, s.tokens, ids)
        assert n + pending.shape[0] == len(s.tokens) - 1  # every committed position before the root, none beyond
        assert torch.allclose(pending, fresh[n:], atol=1e-4)
        for i in range(len(redo.k)):
            assert torch.allclose(s.drafter.cache.k[i], redo.k[i], atol=1e-4)
            assert torch.allclose(s.drafter.cache.v[i], redo.v[i], atol=1e-4)


def test_a_failed_round_changes_nothing_in_the_block_drafter(block_pair, monkeypatch):
    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=30))
    s.step()
    keys = [k.clone() for k in s.drafter.cache.k]
    before = (s.drafter.cache.length, s.drafter.pending.clone(), s.drafter.root, s.drafter.start, list(s.tokens))

    def broken(*a, **k):
        raise RuntimeError("verifier failed")

    from dataclasses import replace

    monkeypatch.setattr(s.sizing, "fixed", replace(s.sizing.fixed, verify=broken))
    with pytest.raises(RuntimeError):
        s.step()
    after = (s.drafter.cache.length, s.drafter.pending, s.drafter.root, s.drafter.start, list(s.tokens))
    assert before[0] == after[0] and torch.equal(before[1], after[1]) and before[2:] == after[2:]
    assert all(torch.equal(a, b) for a, b in zip(keys, s.drafter.cache.k))


# ------------------------------------------------------------------------------------------ the builder


def brute_force_top(lp: list[list[float]], budget: int) -> list[tuple[int, ...]]:
    """Every prefix (as a ranks tuple) sorted by (-sum of log-probs, ranks), the first `budget`."""
    depth, k = len(lp), len(lp[0])
    prefixes = [r for d in range(1, depth + 1) for r in itertools.product(range(k), repeat=d)]
    prefixes.sort(key=lambda r: (-sum(lp[i][x] for i, x in enumerate(r)), r))
    return prefixes[:budget]


@pytest.mark.parametrize("seed", range(12))
def test_ddtree_heap_equals_an_independent_top_b_with_ties(seed):
    """Log-probs on a 0.5 grid (sums exact in floats), so ties are real and fall to the smaller ranks tuple."""
    g = torch.Generator().manual_seed(seed)
    depth, k = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
    lp = [sorted((-0.5 * torch.randint(0, 5, (k,), generator=g)).tolist(), reverse=True) for _ in range(depth)]
    budget = int(torch.randint(1, 30, (1,), generator=g))
    pops = ddtree_heap(lp, budget)
    ranks = {0: ()}
    got = []
    for i, (parent, d, r) in enumerate(pops, start=1):
        ranks[i] = ranks[parent] + (r,)
        assert len(ranks[i]) == d
        got.append(ranks[i])
    assert got == brute_force_top(lp, budget)


def test_ddtree_tree_from_logits_is_the_top_b_under_the_marginals():
    g = torch.Generator().manual_seed(3)
    logprobs = torch.log_softmax(torch.randn(4, 7, generator=g) * 2, dim=-1)
    tree, ranks, _ = ddtree_tree(42, logprobs, 20)
    assert tree.size == 21 and tree.tokens[0] == 42
    top = torch.topk(logprobs, 7, dim=-1)
    for v in range(1, tree.size):
        d, r, p = int(tree.depths[v]), int(ranks[v]), int(tree.parents[v])
        assert p < v and int(tree.depths[p]) == d - 1
        assert int(tree.tokens[v]) == int(top.indices[d - 1, r])
        assert float(tree.draft_logprobs[v]) == pytest.approx(float(logprobs[d - 1, tree.tokens[v]]))
        assert float(tree.scores[v]) == pytest.approx(float(tree.scores[p] + tree.draft_logprobs[v]), abs=1e-5)
    # the kept prefixes are the 20 best by path score: none left out scores above the worst kept
    worst = float(tree.scores[1:].min())
    paths = {tuple(int(ranks[u]) for u in _path(tree, v)) for v in range(1, tree.size)}
    lp = top.values.tolist()
    for r in itertools.product(range(7), repeat=2):
        if r not in paths:
            assert lp[0][r[0]] + lp[1][r[1]] <= worst + 1e-6


def _path(tree, v):
    out = []
    while v > 0:
        out.append(v)
        v = int(tree.parents[v])
    return out[::-1]


# -------------------------------------------------------------------------------------------------- laws

LAW_SETTINGS = {"t1": SamplingConfig(temperature=1.0), "t0.8-top-p": SamplingConfig(temperature=0.8, top_p=0.9)}


@pytest.mark.parametrize("setting", list(LAW_SETTINGS))
@pytest.mark.parametrize("name", ["tev", "predraw", "residual"])
def test_verifier_law_on_a_ddtree_tree(name, setting):
    """(exit, bonus) over 24,000 draws on a DDTree tree against the exact law w(v) p_v_res(a)."""
    g = torch.Generator().manual_seed(5)
    tree, _, _ = ddtree_tree(0, torch.log_softmax(torch.randn(3, 6, generator=g) * 1.5, dim=-1), 9)
    logits = -2.0 + 1.5 * torch.randn(tree.size, 6, generator=g)
    cfg = LAW_SETTINGS[setting]
    law = exact_law(tree.tokens.tolist(), tree.parents.tolist(), logits, cfg)
    assert_law(draw(VERIFIERS[name], tree, logits, cfg, 24_000, seed=1), law, f"{name} on a DDTree tree")
    if name == "tev":  # the check has power: a bonus drawn without removing the children is rejected
        assert law_rejected(draw(bonus_without_removal, tree, logits, cfg, 24_000, seed=1), law)


def block_stream_counts(pair, prompt, cfg: SamplingConfig, verifier: str, n: int) -> Counter:
    counts = Counter()
    for seed in range(n):
        dc = DecodeConfig(sampling=cfg, verifier=verifier, max_new_tokens=2, seed=seed, stop_on_eos=False,
                          missing_top=0, builder=BuilderConfig(kind="ddtree", budget=6, depth=BS - 1))
        s = DecodeSession(pair, prompt, dc)
        s.run()
        counts[tuple(s.generated)] += 1
    return counts


@pytest.fixture(scope="module")
def small_vocab_pair():
    """An 8-token target (a two-token law of 64 cells, well estimated by a thousand sessions) and a block drafter
    whose DDTree of 6 nodes covers much of it, so that a wrong acceptance shows."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(4)
    target = LlamaForCausalLM(LlamaConfig(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=3,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=8,
                                          max_position_embeddings=64, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(3.0)
    cfg = dflash_config(vocab=8, mask=6)
    model = BlockDraftModel(parse_config(cfg, "test", target))
    model.load_state_dict(dflash_weights(cfg, 3), strict=False)
    return ModelPair(target, model.eval(), word_tokenizer(8), "t", "block")


@pytest.mark.parametrize("verifier", ["tev", "predraw", "residual"])
def test_block_decoding_follows_the_target_law(small_vocab_pair, verifier, monkeypatch):
    """The first two tokens of 1,200 sessions at T = 1 with a block drafter follow p(a) p(b | a); for TEV, the
    same sessions with a bonus drawn without removing the exit node's children are rejected."""
    prompt, sampling, n = [3, 1, 5], SamplingConfig(temperature=1.0), 1200
    law = exact_two_token_law(small_vocab_pair.target, prompt, sampling)
    # The TV of n exact draws from the law is about 0.5 sqrt(2 / (pi n)) sum_c sqrt(p_c) (each cell's count off by
    # its binomial spread); the bound is twice that, and the chi-square test does the rest.
    noise = 0.5 * math.sqrt(2 / (math.pi * n)) * sum(math.sqrt(p) for p in law.values())
    counts = block_stream_counts(small_vocab_pair, prompt, sampling, verifier, n)
    assert_law(counts, law, f"{verifier}: two tokens", tv_max=2 * noise)
    if verifier == "tev":
        monkeypatch.setitem(VERIFIERS, "tev", bonus_without_removal)
        p_value = law_check(block_stream_counts(small_vocab_pair, prompt, sampling, "tev", n), law)[1]
        assert p_value <= P_MIN, f"a broken acceptance passed the chi-square test (p = {p_value:.2e})"


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("cfg, said", [
    (dflash_config(layer_ids=(0, 7)), "target_layer_ids [7] lie beyond the target's 3 layers"),
    (dflash_config(hidden=48), "hidden_size 48 does not match the target's 32"),
    (dflash_config(vocab=VOCAB + 4), f"vocab_size {VOCAB + 4} does not match"),
    (dflash_config(mask=VOCAB + 10), "mask_token_id"),
    (dflash_config(arch="DFlash2DraftModel"), "architecture DFlash2DraftModel is not a block drafter"),
])
def test_bad_block_drafter_configs_are_refused_naming_the_field(saved_pair, tmp_path, cfg, said, monkeypatch):
    target, _ = saved_pair
    draft = write_drafter(tmp_path / "bad", cfg, weights={"fc.weight": torch.zeros(1)})
    loaded = []
    from tevviz.engine.load import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded.append(a) or pytest.fail("a model was loaded"))
    with pytest.raises(TevvizError, match=said.replace("[", r"\[").replace("]", r"\]")):
        load_pair(target, str(draft))
    assert not loaded


@pytest.mark.parametrize("field, value, said", [
    ("dflash_config", [1, 2], "dflash_config must be an object"),
    ("num_key_value_heads", 0, "num_key_value_heads must be a positive integer, got 0"),
    ("num_key_value_heads", 3, "num_key_value_heads (3) must divide num_attention_heads (4)"),
    ("head_dim", 0, "head_dim must be a positive integer"),
    ("rms_norm_eps", "x", "rms_norm_eps must be a positive number"),
    ("hidden_act", "nope", "hidden_act 'nope' is not an activation"),
    ("attention_bias", "yes", "attention_bias"),
    ("rope_scaling", {"rope_type": "bogus"}, "bogus"),
])
def test_tevviz_decode_names_a_bad_block_drafter_field_in_one_line(saved_pair, tmp_path, capsys, field, value, said):
    """Through `tevviz decode`: a bad field of a DFlash config.json is refused in one line that names it (they came
    out as AttributeError, ZeroDivisionError, transformers' validation errors, or a drafter that loaded and failed at
    its first draft)."""
    from tevviz.cli import main

    target, _ = saved_pair
    cfg = dflash_config() | {field: value}
    draft = write_drafter(tmp_path / "bad", cfg, weights=dflash_weights(dflash_config(), 0))
    code = main(["decode", "--target", target, "--draft", str(draft), "--prompt", "a b", "--max-new-tokens", "4",
                 "--device", "cpu", "--builder", "ddtree"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert said in err and str(draft) in err, err


def test_tevviz_decode_budget_auto_prices_the_ddtree_it_keeps(saved_pair, monkeypatch, capsys):
    """`tevviz decode --budget auto` with a block drafter keeps DDTree's first k nodes (its tree of budget k); the
    rate that chose k is that tree's, 1 + sum of its nodes' reach over the round's cost, not the rate of the k nodes
    of largest reach (which priced a tree it did not keep, 0.3-5% high in most rounds)."""
    from tevviz.cli import main
    from tevviz.engine.cost import auto_budget
    from tevviz.engine.draft import block_drafting
    from tevviz.engine.records.round_time import round_cost

    pending, pairs = [], []  # pricings since the last draft; (the round's pricing, the tree it drafted)
    real_best, real_draft = auto_budget.Plan.best, block_drafting.BlockDrafter.draft

    def best(plan, values, depth, *args, **kwargs):
        out = real_best(plan, values, depth, *args, **kwargs)
        if plan.forced_budget is None:
            pending.append((plan, values.clone(), out))
        return out

    def draft(self, request):
        out = real_draft(self, request)
        plan = request.plan
        # A round priced and drafted in full: not the floor's plain step, nor a last round with no room left.
        if pending and plan is not None and not plan.skip_draft and out.tree.size - 1 == min(pending[-1][2][0],
                                                                                            out.reach.numel() - 1):
            pairs.append((pending[-1], out))
        pending.clear()
        return out

    monkeypatch.setattr(auto_budget.Plan, "best", best)
    monkeypatch.setattr(block_drafting.BlockDrafter, "draft", draft)
    # Every round after the warm-up sized: on tiny random models the floor (test_auto_budget) would send most of them
    # to plain steps, and how many it leaves depends on measured times.
    monkeypatch.setattr(auto_budget.AutoBudget, "back_off", lambda *args: None)
    target, drafter = saved_pair
    assert main(["decode", "--target", target, "--draft", drafter, "--prompt", "a b c d", "--max-new-tokens", "60",
                 "--budget", "auto", "--temperature", "0", "--device", "cpu", "--threads", "1"]) == 0
    capsys.readouterr()
    assert len(pairs) >= 5, "test setup: sized rounds after the warm-up"
    reordered = 0
    for (plan, values, (k, rate)), d in pairs:
        reordered += not torch.equal(values.sort(descending=True).values, values)
        assert d.tree.size - 1 == k
        assert rate == pytest.approx(float(1 + d.reach[1:].exp().sum()) / float(round_cost(plan, k, 1)), rel=1e-5)
    assert reordered, "test setup: a round whose pop order is not the order of reach"


def test_missing_weights_are_named(saved_pair, tmp_path):
    target, _ = saved_pair
    cfg = dflash_config()
    weights = dflash_weights(cfg, 0)
    del weights["layers.0.self_attn.k_norm.weight"]
    draft = write_drafter(tmp_path / "partial", cfg, weights=weights)
    with pytest.raises(TevvizError, match="missing weights: layers.0.self_attn.k_norm.weight"):
        load_pair(target, str(draft))


def test_builders_and_drafters_must_match(block_pair):
    with pytest.raises(TevvizError, match="build its trees with the ddtree builder"):
        DecodeSession(block_pair, [1, 2, 3], DecodeConfig(builder=BuilderConfig(kind="best-first")))
    ar = ModelPair(block_pair.target, tiny_model("llama", 2), word_tokenizer(), "t", "ar")
    with pytest.raises(TevvizError, match="drafts with a block drafter"):
        DecodeSession(ar, [1, 2, 3], greedy_cfg("tev"))
    with pytest.raises(TevvizError, match="the ddtree builder takes the tev, predraw, residual verifiers, not "
                                          "speculative: speculative sampling needs each token drawn"):
        greedy_cfg("speculative")


# ---------------------------------------------------------------------------------------------- records


def test_a_block_round_exports_its_rows_and_imports_them_back(block_pair):
    """The JSON carries each depth's top tokens; they rebuild the tree, and a tampered row is named on import."""
    from tevviz.engine.records.io import parse_round
    from tevviz.engine.records.records import RoundRecord

    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=12, budget=10))
    s.run()
    assert len(s.rounds[0].draft_rows) == BS - 1  # the first round drafts the whole block's depths
    for r in s.rounds:
        d = json.loads(json.dumps(r.to_dict()))
        if r.size == 1:  # the last token alone: nothing drafted, no rows
            assert "draft_rows" not in d["graph"]
            continue
        rows = d["graph"]["draft_rows"]
        assert 1 <= len(rows) <= BS - 1  # fewer near the token limit
        assert all(len(row) == 10 for row in rows)  # K = min(B, V) per depth
        assert parse_round(d).to_dict() == RoundRecord.from_dict(d).to_dict() == r.to_dict()
    bad = json.loads(json.dumps(s.rounds[0].to_dict()))
    row = bad["graph"]["draft_rows"][0]
    row[0], row[1] = row[1], row[0]  # two ranks swapped: no longer sorted
    with pytest.raises(TevvizError, match=r"round.graph.draft_rows\[0\]\[1\].logprob: rows must be sorted"):
        parse_round(bad)
    bad = json.loads(json.dumps(s.rounds[0].to_dict()))
    bad["graph"]["draft_rows"][0][0]["token_id"] = (bad["graph"]["draft_rows"][0][0]["token_id"] + 1) % VOCAB
    with pytest.raises(TevvizError, match="do not rebuild this round's tree"):
        parse_round(bad)


def test_the_drafter_side_of_a_block_round_is_drawn(block_pair):
    """The heat map's cells are q_d of each depth's top tokens; each committed token is marked at its rank."""
    from tevviz.render.block_rows import block_rows_figure, committed_by_depth
    from tevviz.render.graph import node_metric, round_graph

    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=30, budget=16))
    s.run()
    r = max(s.rounds, key=lambda x: len(x.accepted))  # a round with an accepted node
    fig = block_rows_figure(r, ranks=5)
    heat = fig.data[0]
    assert [row[0] for row in heat.z] == pytest.approx([math.exp(row[0]["logprob"]) for row in r.draft_rows])
    committed = committed_by_depth(r)
    assert [c.token for c in committed] == [r.tokens[v] for v in r.accepted[1:]] + [r.bonus_token]
    for c in committed:
        if c.accepted:  # an accepted node is the drafter's own: its rank is where the tree took it from
            node = r.accepted[c.depth]
            assert r.draft_rows[c.depth - 1][c.rank]["token_id"] == r.tokens[node]
            assert c.target_p == r.p_edge[node]
    shown = [c for c in committed if c.rank is not None and c.rank < 5]
    marks = fig.data[1] if len(fig.data) > 1 else None
    assert (marks is None and not shown) or list(marks.x) == [c.rank for c in shown]
    G = round_graph(r.to_dict())  # the tree coloured by q(v) = exp(path score)
    assert node_metric(G.nodes[1], "q") == pytest.approx(math.exp(r.scores[1]))


def test_training_and_auto_sizing_refuse_builders_that_do_not_support_them(block_pair):
    from tevviz.engine.train.exittrain import Context, ExitTrainer, TrainConfig

    with pytest.raises(TevvizError, match="ExitTrain cannot train on sampled trees: its chains are drawn at random"):
        TrainConfig(builder=BuilderConfig(kind="sampled", budget=8, depth=4))
    with pytest.raises(TevvizError, match="ExitTrain cannot train on mixed trees: its rounds are"):
        TrainConfig(builder=BuilderConfig(kind="mixed", budget=8, depth=4, auto=True))
    with pytest.raises(TevvizError, match="is a block drafter"):
        ExitTrainer(block_pair, [Context([1, 2, 3], [4, 5])], TrainConfig())
    with pytest.raises(TevvizError, match="an automatic budget sizes best-first, sampled, mixed, ddtree rounds only, "
                                          "not static trees"):
        BuilderConfig(kind="static", auto=True)


def test_auto_budget_sizes_ddtree_rounds_and_stays_exact(block_pair):
    """--budget auto on a block drafter: each round keeps the first k pops (DDTree's tree of budget k), the
    output is the target's greedy output, and the sizing is recorded."""
    prompt = [7, 3, 9]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=40, stop_on_eos=False,
                       builder=BuilderConfig(kind="ddtree", budget=32, depth=BS - 1, auto=True))
    s = DecodeSession(block_pair, prompt, cfg)
    s.run()
    assert s.generated == greedy_generate(block_pair.target, prompt, 40)
    assert all(r.sizing is not None and r.sizing.B == r.size - 1 <= 32 for r in s.rounds)
    for r in s.rounds:
        if r.size > 1:  # the kept nodes are the first pops of the full-budget heap over the same rows
            from tevviz.engine.records.draft_rows import rebuild

            assert rebuild(r.draft_rows, r.size - 1) == (r.tokens[1:], r.parents[1:])


def test_optimal_tree_comparison_and_report_work_on_block_rounds(block_pair, tmp_path):
    """A DDTree round is a fixed tree: its optimal tree bounds it, the verifier comparison draws on it, and the
    session's report and export hold its rows."""
    from tevviz.engine.records import io as tio
    from tevviz.engine.verify.comparison import compare_verifiers
    from tevviz.render.report import write_report

    prompt = [5, 9, 11, 2]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=10, stop_on_eos=False,
                       builder=BuilderConfig(kind="ddtree", budget=12, depth=BS - 1), optimal=True)
    s = DecodeSession(block_pair, prompt, cfg)
    first = s.step()
    gap = first.coverage_gap()
    assert first.optimal_bounds and gap.gap is not None and gap.C_p_star >= first.C_p - 1e-6
    comparison = compare_verifiers(block_pair, prompt, first, SamplingConfig(temperature=1.0), 400, seed=0)
    assert comparison.draws == 400 and {law.name for law in comparison.laws} >= {"tev", "predraw", "residual"}
    s.run()
    path = tmp_path / "block.json"
    path.write_text(json.dumps(tio.export_session(s, "t5 t9 t11 t2")))
    imported = tio.load(path)
    assert imported.rounds[0].draft_rows == first.draft_rows
    assert write_report(imported, tmp_path / "block.html") > 0


def test_the_notebook_api_takes_a_block_drafter_with_its_own_builder(saved_pair):
    import tevviz

    target, draft = saved_pair
    pair = tevviz.load(target=target, draft=draft, device="cpu")
    s = tevviz.session(pair, "t5 t9 t11", max_new_tokens=8)
    assert s.cfg.builder.kind == "ddtree" and s.cfg.builder.depth == BS - 1
    r = s.step()
    assert r.draft_rows is not None and tevviz.figure(r).data
