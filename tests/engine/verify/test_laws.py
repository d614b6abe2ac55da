"""Each verifier's (exit node, bonus token) law on fixed trees against the exact law (docs/math.md, *The exit law*).

The exact law is computed here from the formulas, independently of `exit_law`:
P(root) = 1, P(v) = P(pa(v)) p_pa(v)(x_v); rho(v) = 1 - sum_{u in Ch(v)} p_v(x_u); w(v) = P(v) rho(v);
Pr(exit = v, bonus = a) = w(v) p_v_res(a), p_v_res(a) = p_v(a) [a not in A(v)] / rho(v).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter

import pytest
import torch
from conftest import perturbed, random_prompts, tiny_model, word_tokenizer

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig, TevvizError
from tevviz.engine.core import exit_law as law
from tevviz.engine.core.exit_law import RHO_FLOOR
from tevviz.engine.core.sampling import (
    edge_probs,
    float64_sampling,
    greedy_rows,
    inverse_cdf,
    processed_probs,
    sample_categorical,
)
from tevviz.engine.core.scoring import tree_logits
from tevviz.engine.core.tree import ancestor_mask, from_parents
from tevviz.engine.load.models import ModelPair
from tevviz.engine.verify.verifiers import VERIFIERS, Decision

pytestmark = pytest.mark.usefixtures("one_thread")

DRAWS = 24_000
TV_MAX = 0.02
P_MIN = 1e-3
SETTINGS = {"t1": SamplingConfig(temperature=1.0), "t0.7-top3": SamplingConfig(temperature=0.7, top_k=3)}

# A fixed tree of 8 nodes over a 6-token vocabulary (siblings distinct, parents before children).
TOKENS = [0, 3, 5, 1, 2, 4, 4, 5]
PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4]
V = 6


def make_logits() -> torch.Tensor:
    """Rows with most mass on the children's tokens (2.2, 1.4, 0.6) and on one other token (1.0), low tails."""
    n = len(TOKENS)
    g = torch.Generator().manual_seed(11)
    logits = -3.0 + 0.3 * torch.randn(n, V, generator=g)
    for v in range(n):
        kids = [u for u in range(1, n) if PARENTS[u] == v]
        for u, value in zip(kids, (2.2, 1.4, 0.6)):
            logits[v, TOKENS[u]] = value
        a = (3 * v + 1) % V
        logits[v, a] = max(float(logits[v, a]), 1.0)
    return logits


LOGITS = make_logits()


# ------------------------------------------------------------------------------------------- the law, by hand


def hand_probs(row: list[float], cfg: SamplingConfig) -> list[float]:
    """The processed distribution in float64 Python: temperature, top-k, top-p; one-hot argmax at T = 0.

    Ties follow transformers' warpers: top-k keeps every token tied with the k-th logit
    (TopKLogitsWarper drops only logits below it); top-p (TopPLogitsWarper) walks the tokens in the
    ascending order that `torch.sort` gives the float32 logits, ties included, drops each token
    while the ascending cumulative mass is <= 1 - top_p, and always keeps the last (largest) one.
    """
    if cfg.temperature == 0:
        best = max(range(len(row)), key=lambda i: (row[i], -i))
        return [float(i == best) for i in range(len(row))]
    x32 = torch.tensor(row, dtype=torch.float32) / cfg.temperature
    x = x32.tolist()
    keep = set(range(len(x)))
    if cfg.top_k and cfg.top_k < len(x):
        kth = sorted(x, reverse=True)[cfg.top_k - 1]
        keep = {i for i in keep if x[i] >= kth}
    if cfg.top_p < 1:
        masked = x32.masked_fill(torch.tensor([i not in keep for i in range(len(x))]), float("-inf"))
        ascending = [i for i in torch.sort(masked).indices.tolist() if i in keep]  # transformers' order of ties
        z = sum(math.exp(x[i]) for i in keep)
        cum = 0.0
        for i in ascending[:-1]:
            cum += math.exp(x[i]) / z
            if cum <= 1 - cfg.top_p:
                keep.discard(i)
    z = sum(math.exp(x[i]) for i in keep)
    return [math.exp(x[i]) / z if i in keep else 0.0 for i in range(len(x))]


def hand_flow(tokens, parents, logits, cfg):
    """(p, P, rho, w, A) by the formulas of docs/math.md, *The exit law*, node by node in plain Python."""
    n = len(tokens)
    p = [hand_probs(row, cfg) for row in logits.tolist()]
    P = [1.0] * n
    for v in range(1, n):
        P[v] = P[parents[v]] * p[parents[v]][tokens[v]]
    A = [{tokens[u] for u in range(1, n) if parents[u] == v} for v in range(n)]
    rho = [max(0.0, 1.0 - sum(p[v][a] for a in A[v])) for v in range(n)]
    w = [P[v] * rho[v] for v in range(n)]
    return p, P, rho, w, A


def exact_law(tokens, parents, logits, cfg) -> dict[tuple[int, int], float]:
    """Pr(exit = v, bonus = a) = w(v) p_v_res(a) over the cells where it is positive."""
    p, _, rho, w, A = hand_flow(tokens, parents, logits, cfg)
    law = {}
    for v in range(len(tokens)):
        if rho[v] <= 1e-12:
            continue
        for a in range(len(p[v])):
            q = w[v] * p[v][a] * (a not in A[v]) / rho[v]
            if q > 0:
                law[(v, a)] = q
    return law


# ---------------------------------------------------------------------------------------------- the statistics


def chi2_sf(x: float, dof: int) -> float:
    """Survival function of the chi-square law: the regularised upper incomplete gamma Q(dof / 2, x / 2)."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(x / 2, dtype=torch.float64)))


def draw(verifier, tree, logits, cfg, n: int, seed: int) -> Counter:
    gen = torch.Generator().manual_seed(seed)
    anc = ancestor_mask(tree)
    out = Counter()
    for _ in range(n):
        d = verifier(tree, logits, cfg, gen, anc)
        out[(int(d.exit_node), int(d.bonus_token))] += 1
    return out


def law_check(counts: Counter, law: dict) -> tuple[float, float, list]:
    """(total variation, chi-square p-value, impossible cells seen); cells expected below 5 are pooled."""
    n = sum(counts.values())
    impossible = sorted(c for c in counts if c not in law)
    cells = set(law) | set(counts)
    tv = 0.5 * sum(abs(counts.get(c, 0) / n - law.get(c, 0.0)) for c in cells)
    stat, bins, pool_obs, pool_exp = 0.0, 0, 0, 0.0
    for c, q in law.items():
        e = n * q
        if e >= 5:
            stat += (counts.get(c, 0) - e) ** 2 / e
            bins += 1
        else:
            pool_obs, pool_exp = pool_obs + counts.get(c, 0), pool_exp + e
    if pool_exp > 0:
        stat += (pool_obs - pool_exp) ** 2 / pool_exp
        bins += 1
    return tv, chi2_sf(stat, max(bins - 1, 1)), impossible


def assert_law(counts: Counter, law: dict, what: str, tv_max: float = TV_MAX) -> None:
    tv, p_value, impossible = law_check(counts, law)
    assert not impossible, f"{what}: drew outcomes of probability 0: {impossible[:5]}"
    assert tv <= tv_max, f"{what}: total variation {tv:.4f} from the exact law"
    assert p_value > P_MIN, f"{what}: chi-square p-value {p_value:.2e}"


def law_rejected(counts: Counter, law: dict) -> bool:
    tv, p_value, impossible = law_check(counts, law)
    return bool(impossible) or tv > TV_MAX or p_value <= P_MIN


# --------------------------------------------------------------------------------------------- deliberately wrong


def _children_tokens(tree, node: int) -> list[int]:
    return [int(t) for t, p in zip(tree.tokens.tolist(), tree.parents.tolist()) if p == node]


_flows: dict = {}


def flow_of(tree, logits, cfg):
    """hand_flow of a tree, once per (tree, logits, setting): the wrong verifiers below are drawn 24,000 times."""
    key = (id(tree), id(logits), cfg)
    if key not in _flows:
        _flows[key] = (tree, logits, hand_flow(tree.tokens.tolist(), tree.parents.tolist(), logits, cfg))
    return _flows[key][2]


def exit_from_P(tree, logits, cfg, gen, anc=None) -> Decision:
    """Wrong: the exit drawn from P normalised (prefix mass, not exit mass); the bonus is right."""
    probs = processed_probs(logits, cfg)
    _, P, _, _, _ = flow_of(tree, logits, cfg)
    node = sample_categorical(torch.tensor(P), gen)
    row = probs[int(node)].clone()
    row[_children_tokens(tree, int(node))] = 0.0
    return Decision(node, sample_categorical(row if row.sum() > 0 else probs[int(node)], gen))


def bonus_without_removal(tree, logits, cfg, gen, anc=None) -> Decision:
    """Wrong: the exit is right (w), the bonus drawn from p_v without removing the children's tokens."""
    _, _, _, w, _ = flow_of(tree, logits, cfg)
    node = sample_categorical(torch.tensor(w), gen)
    return Decision(node, sample_categorical(processed_probs(logits, cfg)[int(node)], gen))


# ------------------------------------------------------------------------------------------------------- tests


def test_hand_law_is_a_distribution():
    for cfg in SETTINGS.values():
        law = exact_law(TOKENS, PARENTS, LOGITS, cfg)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", list(VERIFIERS))
def test_verifier_law_matches_exact(name, setting):
    cfg = SETTINGS[setting]
    tree = from_parents(TOKENS, PARENTS)
    law = exact_law(TOKENS, PARENTS, LOGITS, cfg)
    counts = draw(VERIFIERS[name], tree, LOGITS, cfg, DRAWS, seed=1234)
    assert_law(counts, law, f"{name} at {setting}")


@pytest.mark.parametrize("wrong", [exit_from_P, bonus_without_removal])
def test_wrong_verifier_fails_the_check(wrong):
    """The same check with the same number of draws rejects a verifier with the wrong exit or bonus law."""
    cfg = SETTINGS["t1"]
    tree = from_parents(TOKENS, PARENTS)
    law = exact_law(TOKENS, PARENTS, LOGITS, cfg)
    assert law_rejected(draw(wrong, tree, LOGITS, cfg, DRAWS, seed=1234), law)


def test_verifiers_accept_a_missing_ancestor_mask():
    """Called without `anc`, each verifier computes it and makes the same decisions for the same seed."""
    tree = from_parents(TOKENS, PARENTS)
    cfg = SETTINGS["t1"]
    for name, fn in VERIFIERS.items():
        g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        for _ in range(50):
            a, b = fn(tree, LOGITS, cfg, g1, None), fn(tree, LOGITS, cfg, g2, ancestor_mask(tree))
            assert (int(a.exit_node), int(a.bonus_token)) == (int(b.exit_node), int(b.bonus_token)), name


# ------------------------------------------------------------------------------------------- ties at the boundaries

# A tree over 12 tokens whose rows tie exactly (equal logits) at the top-k and top-p boundaries, a child's
# token against a non-child's: which of them a tie rule keeps moves P, w and the bonus law.
TIE_TOKENS = [0, 5, 2, 7, 3, 10, 4, 6]
TIE_PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4]
TIE_V = 12
# Row v: token -> weight (logit = log weight); every other token gets a small distinct tail weight.
TIE_ROWS = [
    {5: 4, 2: 2, 9: 2, 7: 1},  # root: child 2 ties non-child 9 (top-2 boundary and the top-p 0.6 boundary)
    {3: 2.2, 10: 1, 1: 1},  # child 10 ties non-child 1 at the top-p boundary; both kept by top-2
    {4: 2, 8: 2, 11: 1},  # child 4 ties non-child 8 at the top
    {0: 2.2, 1: 1, 2: 1},  # leaf
    {11: 2.2, 6: 1, 9: 1},  # child 6 ties non-child 9 at the top-p boundary
    {4: 2, 5: 2, 6: 2},  # leaf: a three-way tie
    {1: 2, 3: 1, 9: 0.5},  # leaf
    {0: 1, 7: 1, 8: 1, 2: 0.5},  # leaf
]


def tie_logits() -> torch.Tensor:
    logits = torch.empty(len(TIE_ROWS), TIE_V)
    for v, row in enumerate(TIE_ROWS):
        for a in range(TIE_V):
            logits[v, a] = math.log(row.get(a, 0.02 + 0.001 * a))
    return logits


TIE_LOGITS = tie_logits()
TIE_SETTINGS = {"ties-top2": SamplingConfig(1.0, top_k=2), "ties-topp0.6": SamplingConfig(1.0, top_p=0.6),
                "ties-top2-topp0.6": SamplingConfig(1.0, top_k=2, top_p=0.6)}


def hf_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """What `generate(do_sample=True)` samples from: transformers' own warpers, in its order."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    x = logits.clone()
    if cfg.temperature != 1:
        x = TemperatureLogitsWarper(cfg.temperature)(None, x)
    if cfg.top_k:
        x = TopKLogitsWarper(cfg.top_k)(None, x)
    if cfg.top_p < 1:
        x = TopPLogitsWarper(cfg.top_p)(None, x)
    return torch.softmax(x, dim=-1)


@pytest.mark.parametrize("setting", list(TIE_SETTINGS))
def test_tie_oracle_and_engine_keep_what_transformers_keeps(setting):
    """The hand oracle and the engine keep, at tied boundaries, exactly the tokens transformers keeps."""
    cfg = TIE_SETTINGS[setting]
    want = hf_probs(TIE_LOGITS, cfg)
    got = processed_probs(TIE_LOGITS, cfg)
    assert torch.equal(got > 0, want > 0)
    assert torch.allclose(got, want, atol=1e-6)
    for v in range(len(TIE_ROWS)):
        hand = torch.tensor(hand_probs(TIE_LOGITS[v].tolist(), cfg), dtype=torch.float64)
        assert torch.equal(hand > 0, want[v] > 0), f"row {v}"
        assert torch.allclose(hand, want[v].double(), atol=1e-6), f"row {v}"
    # The rows do tie at the boundary: top-2 keeps three tokens at the root, top-p keeps one of the tied pair.
    if setting == "ties-top2":
        assert int((got[0] > 0).sum()) == 3
    if setting == "ties-topp0.6":
        assert int((got[0, [2, 9]] > 0).sum()) == 1 and int((got[4, [6, 9]] > 0).sum()) == 1


# Top-p and the tied rows, each (tree, logits, settings); fewer draws than above, as every verifier draws from
# the same processed rows (checked exactly against transformers above): a wrong tie rule draws cells of
# probability 0 or moves a child's whole edge mass, which a few thousand draws show.
LAW_CASES = {
    "t0.9-topp0.8": (TOKENS, PARENTS, LOGITS, SamplingConfig(temperature=0.9, top_p=0.8)),
    "ties-top2": (TIE_TOKENS, TIE_PARENTS, TIE_LOGITS, TIE_SETTINGS["ties-top2"]),
    "ties-topp0.6": (TIE_TOKENS, TIE_PARENTS, TIE_LOGITS, TIE_SETTINGS["ties-topp0.6"]),
    "ties-top2-topp0.6": (TIE_TOKENS, TIE_PARENTS, TIE_LOGITS, TIE_SETTINGS["ties-top2-topp0.6"]),
}
FEW_DRAWS = 2500
FEW_TV_MAX = 0.06  # about twice the sampling noise of the total variation at 2,500 draws over ~25 cells


@pytest.mark.parametrize("case", list(LAW_CASES))
def test_tev_exit_law_equals_the_hand_law(case):
    """No sampling: the w and P that TEV draws from equal the hand flow, on every top-p and tie case."""
    tokens, parents, logits, cfg = LAW_CASES[case]
    _, P, rho, w, _ = hand_flow(tokens, parents, logits, cfg)
    d = VERIFIERS["tev"](from_parents(tokens, parents), logits, cfg, torch.Generator().manual_seed(0))
    assert d.exit_law.P.tolist() == pytest.approx(P, abs=1e-6)
    assert d.exit_law.w.tolist() == pytest.approx(w, abs=1e-6)
    assert d.exit_law.rho.tolist() == pytest.approx(rho, abs=1e-6)


@pytest.mark.parametrize("case", list(LAW_CASES)[:3])
@pytest.mark.parametrize("name", list(VERIFIERS))
def test_verifier_law_with_top_p_and_ties(name, case):
    tokens, parents, logits, cfg = LAW_CASES[case]
    law = exact_law(tokens, parents, logits, cfg)
    with torch.inference_mode():
        counts = draw(VERIFIERS[name], from_parents(tokens, parents), logits, cfg, FEW_DRAWS, seed=99)
    assert_law(counts, law, f"{name} at {case}", FEW_TV_MAX)


# ---------------------------------------------------------------------------------------------------- edge cases


def test_temperature_zero_exit_is_deepest_certain_node():
    """At T = 0, P is 0/1; every verifier exits at the deepest node with P = 1 and adds the argmax there."""
    cfg = SamplingConfig(temperature=0.0)
    logits = LOGITS.clone()
    # Greedy path root -> 1 -> 4 -> 7: make those children the argmax of their parents, and node 7's argmax token 2.
    for v, tok in ((0, 3), (1, 2), (4, 5), (7, 2)):
        logits[v, tok] = 5.0
    _, P, _, _, _ = hand_flow(TOKENS, PARENTS, logits, cfg)
    assert P == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    tree = from_parents(TOKENS, PARENTS)
    for name, fn in VERIFIERS.items():
        gen = torch.Generator().manual_seed(0)
        for _ in range(20):
            d = fn(tree, logits, cfg, gen)
            assert (int(d.exit_node), int(d.bonus_token)) == (7, 2), name
    # The exit is not at a leaf when the argmax there is not a child: the bonus is that argmax.
    logits[4, 5], logits[4, 1] = 0.0, 6.0
    for name, fn in VERIFIERS.items():
        d = fn(tree, logits, cfg, torch.Generator().manual_seed(0))
        assert (int(d.exit_node), int(d.bonus_token)) == (4, 1), name


def test_temperature_zero_ties_follow_the_lowest_index():
    """A tie at the root between a child's token (1) and a lower non-child token (0): greedy picks 0, exits at root."""
    tree = from_parents([9, 1, 2], [-1, 0, 0])
    logits = torch.zeros(3, 4)
    logits[0, 0] = logits[0, 1] = 3.0
    for name, fn in VERIFIERS.items():
        d = fn(tree, logits, SamplingConfig(temperature=0.0), torch.Generator().manual_seed(0))
        assert (int(d.exit_node), int(d.bonus_token)) == (0, 0), name


# A root whose two children carry its whole top-2 support (rho = 0), both leaves except one with a child.
COVER_TOKENS = [0, 1, 2, 3]
COVER_PARENTS = [-1, 0, 0, 2]


def cover_logits() -> torch.Tensor:
    logits = torch.tensor([
        [0.1, 2.0, 1.5, -1.0, 0.3],  # root: top-2 = tokens 1, 2 = its children's tokens
        [0.5, 1.0, -0.5, 0.2, 1.2],  # node 1, a leaf: bonus from p_1 itself (all 5 tokens)
        [0.0, 0.3, 0.6, 1.4, -1.0],  # node 2: one child (token 3)
        [1.0, 0.0, 0.7, -0.3, 0.4],  # node 3, a leaf
    ])
    return logits


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_children_covering_the_support_never_exit_and_leaf_bonus_is_p_v(name):
    cfg = SamplingConfig(temperature=1.0, top_k=2)  # top-2 per row: the root's children cover its support
    tree = from_parents(COVER_TOKENS, COVER_PARENTS)
    logits = cover_logits()
    _, P, rho, w, _ = hand_flow(COVER_TOKENS, COVER_PARENTS, logits, cfg)
    assert rho[0] == pytest.approx(0.0, abs=1e-12) and w[0] == pytest.approx(0.0, abs=1e-12)
    law = exact_law(COVER_TOKENS, COVER_PARENTS, logits, cfg)
    counts = draw(VERIFIERS[name], tree, logits, cfg, 6000, seed=7)
    assert not any(v == 0 for v, _ in counts), "the root has rho = 0 and must never be the exit"
    # At leaf 1 the bonus follows p_1 (top-2 of its row: tokens 4 and 1), not a residual.
    p1 = hand_probs(logits[1].tolist(), cfg)
    at_leaf = {a: c for (v, a), c in counts.items() if v == 1}
    assert set(at_leaf) <= {a for a in range(5) if p1[a] > 0}
    total = sum(at_leaf.values())
    assert total / 6000 == pytest.approx(P[1], abs=0.025)
    for a, q in enumerate(p1):
        assert at_leaf.get(a, 0) / total == pytest.approx(q, abs=0.04), f"bonus {a} at the leaf"
    assert_law(counts, law, f"{name} on the covering tree")


ROOT_ALONE = {**SETTINGS, "t0.9-topp0.8": SamplingConfig(temperature=0.9, top_p=0.8)}


@pytest.mark.parametrize("setting", list(ROOT_ALONE))
def test_root_alone_is_plain_decoding(setting):
    """A tree of the root alone (a round without a draft; TEV takes a path of its own): exit at the root, the bonus
    ~ p_root, and the exit law w = P = rho = 1 with C_p = 0."""
    cfg = ROOT_ALONE[setting]
    tree = from_parents([3], [-1])
    logits = LOGITS[:1]
    p_root = processed_probs(logits, cfg)[0].double().tolist()
    counts = draw(VERIFIERS["tev"], tree, logits, cfg, 6000, seed=7)
    assert_law(counts, {(0, a): q for a, q in enumerate(p_root) if q > 0}, f"TEV on the root alone at {setting}", 0.04)
    ex = VERIFIERS["tev"](tree, logits, cfg, torch.Generator().manual_seed(0)).exit_law
    assert [ex.p_edge.tolist(), ex.P.tolist(), ex.rho.tolist(), ex.w.tolist(), float(ex.C_p)] == [[1.0]] * 4 + [0.0]


def test_rho_floor_from_float_rounding():
    """Children whose edge probabilities sum to 1 up to float32 rounding give rho = 0 and w = 0 exactly."""
    tree = from_parents([0, 1, 2, 3], [-1, 0, 0, 0])
    logits = torch.tensor([[-50.0, 0.4, 0.1, -0.3], [0.0] * 4, [0.0] * 4, [0.0] * 4])
    cfg = SamplingConfig(temperature=1.0)
    ex = VERIFIERS["tev"](tree, logits, cfg, torch.Generator().manual_seed(3)).exit_law
    # Test setup: in float32 the children's edges miss 1 by a rounding error (~1e-7), not by the true e^-50.
    unfloored = 1.0 - float(ex.p_edge[1:].sum())
    assert 0 < abs(unfloored) < RHO_FLOOR
    assert ex.rho[0].item() == 0.0 and ex.w[0].item() == 0.0
    assert ex.w.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_true_residual_mass_of_1e_4_survives():
    """A root whose non-child token has probability 1e-4 keeps rho = w = 1e-4, and TEV draws it at that rate."""
    tree = from_parents([0, 1, 2, 3], [-1, 0, 0, 0])
    root = torch.tensor([1e-4, 0.5, 0.3, 0.2 - 1e-4]).log()
    logits = torch.stack([root] + [torch.zeros(4)] * 3)
    ex = VERIFIERS["tev"](tree, logits, SamplingConfig(1.0), torch.Generator().manual_seed(0)).exit_law
    assert ex.rho[0].item() == pytest.approx(1e-4, rel=1e-2)
    assert ex.w[0].item() == pytest.approx(1e-4, rel=1e-2)
    n = 400_000  # expect 40 root exits
    exits = sample_categorical(ex.w.expand(n, -1), torch.Generator().manual_seed(1))
    assert 20 <= int((exits == 0).sum()) <= 60


def test_float64_inverse_cdf_never_draws_a_zero_weight_and_draws_the_law():
    """The float64 sampler at the extremes of its uniform lands on positive weights (zero weights at both ends
    and between), and in bulk draws the law, a weight of 5e-5 of the total at its rate."""
    weights = torch.tensor([0.0, 0.5, 1e-3, 0.25, 0.0, 0.2, 5e-5, 0.0489, 0.0, 0.0]) * 3.0
    lo, hi = torch.tensor([[0.0]], dtype=torch.float64), torch.tensor([[1.0 - 2.0**-53]], dtype=torch.float64)
    for u in (lo, hi):
        assert weights[int(inverse_cdf(weights, u))] > 0
    n = 400_000
    draws = sample_categorical(weights.expand(n, -1), torch.Generator().manual_seed(6), float32=False)
    counts = Counter(draws.tolist())
    law = {i: float(q) for i, q in enumerate((weights / weights.sum()).tolist()) if q > 0}
    assert set(counts) <= set(law)
    assert_law(counts, law, "float64 sampler")
    assert counts[6] == pytest.approx(n * law[6], abs=4 * math.sqrt(n * law[6]))  # 20 expected


def test_float32_sampler_law():
    """The float32 sampler (chosen on mps, which has no float64) draws the exact law: chi-square, zero weights
    never, a weight of 5e-5 of the total at its rate; on a 5k-token Zipf row, the head tokens and the tail."""
    assert not float64_sampling("mps") and float64_sampling("cpu")
    weights = torch.tensor([0.0, 0.5, 1e-3, 0.25, 0.0, 0.2, 5e-5, 0.0489], dtype=torch.float32) * 3.0
    n = 400_000
    draws = sample_categorical(weights.expand(n, -1), torch.Generator().manual_seed(4), float32=True)
    counts = Counter(draws.tolist())
    law = {i: float(q) for i, q in enumerate((weights / weights.sum()).tolist()) if q > 0}
    assert_law(counts, law, "float32 sampler")
    assert counts[6] == pytest.approx(n * law[6], abs=4 * math.sqrt(n * law[6]))  # 20 expected
    # A long row: ranks 1..5000 with weight 1/rank; ten head tokens and eight tail bins.
    v = 5000
    zipf = 1.0 / torch.arange(1, v + 1, dtype=torch.float32)
    draws = sample_categorical(zipf.expand(3000, -1), torch.Generator().manual_seed(5), float32=True)
    edges = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50, 100, 300, 1000, 2000, 3500, v]
    p = (zipf / zipf.sum()).double()
    law = {i: float(p[a:b].sum()) for i, (a, b) in enumerate(itertools.pairwise(edges))}
    bins = torch.bucketize(draws, torch.tensor(edges[1:-1]), right=True)
    assert_law(Counter(bins.tolist()), law, "float32 sampler on a Zipf row", tv_max=0.05)


def test_edge_probs_equal_the_processed_law_by_hand():
    """The edges TEV and the exit law read, p_pa(v)(x_v), equal the float64 processed law built by hand (temperature,
    top-k, top-p; the argmax at T = 0)."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(12, 30, generator=g) * 2
    rows = torch.randint(0, 12, (40,), generator=g)
    toks = torch.randint(0, 30, (40,), generator=g)
    for cfg in (SamplingConfig(1.0), SamplingConfig(0.6, top_k=7), SamplingConfig(0.9, top_p=0.7),
                SamplingConfig(1.1, top_k=10, top_p=0.8), SamplingConfig(0.0)):
        laws = [hand_probs(row, cfg) for row in logits.tolist()]
        want = torch.tensor([laws[r][t] for r, t in zip(rows.tolist(), toks.tolist())], dtype=torch.float64)
        assert torch.allclose(edge_probs(logits, rows, toks, cfg).double(), want, atol=1e-6), cfg


def test_the_finite_check_holds_for_many_float16_rows_and_still_catches_inf():
    """Finite float16 logits whose row maxima add up past float16's range are not taken for NaN or inf (a plain sum
    of them overflows), and one +inf or NaN among them still fails with the clear message."""
    logits = torch.full((4096, 8), 30.0, dtype=torch.float16)
    assert greedy_rows(logits).tolist() == [0] * 4096
    for bad in (math.inf, math.nan):
        poisoned = logits.clone()
        poisoned[17, 3] = bad
        with pytest.raises(TevvizError, match="NaN or inf logits"):
            greedy_rows(poisoned)


# ---------------------------------------------------------------------------------------------------- saturation


@pytest.fixture(scope="module")
def sampling_pair():
    """A target sharp enough at T = 1 (head scaled by 30) that trees hold real mass: mean L is about 2."""
    target = tiny_model("llama", seed=1, scale=30.0)
    return ModelPair(target, perturbed(target, seed=2, noise=0.3), word_tokenizer(), "sharp-llama", "sharp-llama-draft")


def independent_coverage(
    target, prefix: list[int], tokens: list[int], parents: list[int], cfg: SamplingConfig
) -> float:
    """C_p of a round's tree from the target's full processed rows, scored afresh (no session cache, no TEV)."""
    tree = from_parents(tokens, parents)
    with torch.no_grad():
        p = processed_probs(tree_logits(target, prefix[:-1], tree), cfg).double().tolist()
    P = [1.0] * len(tokens)
    for v in range(1, len(tokens)):
        P[v] = P[parents[v]] * p[parents[v]][tokens[v]]
    return sum(P[1:])


@pytest.mark.parametrize("name", ["tev", "predraw", "residual"])
def test_mean_block_length_reaches_the_ceiling(sampling_pair, name):
    """Theorem 1: for an exact verifier E[L | tree] = 1 + C_p(T); over >= 300 rounds at T = 1 the mean gap is
    within 3 standard errors of zero (paired per round, so the spread of trees does not enter).

    C_p is computed here from the target's full processed distributions of each round's tree, not taken
    from the record (which for TEV is the very w that it sampled from)."""
    sampling = SamplingConfig(temperature=1.0)
    gaps, lengths, recorded, independent = [], [], [], []
    prompts = random_prompts(40, seed=800)
    for i, prompt in enumerate(prompts):
        cfg = DecodeConfig(sampling=sampling, builder=BuilderConfig(budget=16, depth=5),
                           verifier=name, max_new_tokens=48, seed=i, stop_on_eos=False, missing_top=0)
        s = DecodeSession(sampling_pair, prompt, cfg)
        while not s.done:
            prefix = s.tokens
            rec = s.step()
            c_p = independent_coverage(sampling_pair.target, prefix, rec.tokens, rec.parents, sampling)
            gaps.append(rec.block_length - (1 + c_p))
            lengths.append(rec.block_length)
            recorded.append(rec.C_p)
            independent.append(c_p)
        if len(gaps) >= 320:
            break
    assert len(gaps) >= 300
    se = statistics.stdev(gaps) / math.sqrt(len(gaps))
    mean_gap = statistics.fmean(gaps)
    assert abs(mean_gap) <= 3 * se, f"{name}: mean L - (1 + C_p) = {mean_gap:.3f}, standard error {se:.3f}"
    assert statistics.fmean(lengths) > 1.5, "test setup: drafts should be accepted often enough to matter"
    worst = max(abs(a - b) for a, b in zip(recorded, independent))
    assert worst <= 1e-4, f"{name}: the recorded C_p differs from the independent one by up to {worst:.3g}"


def test_residual_by_scatter_equals_residual_by_counts_with_tokens_repeated_across_parents():
    """TEV's bonus row zeroes the exit node's children by a scatter; other parents' children carry the same tokens."""
    from tevviz.engine.core.tree import from_parents

    tree = from_parents([0, 5, 7, 5, 7, 9, 5], [-1, 0, 0, 1, 1, 2, 2])  # tokens 5 and 7 under three parents
    g = torch.Generator().manual_seed(0)
    for node in range(tree.size):
        row = torch.rand(12, generator=g)
        for _ in range(20):  # scatter order must not matter
            assert torch.equal(law.residual_of_row(tree, row, torch.tensor(node)),
                               law.residual(tree, row, torch.tensor(node)))
