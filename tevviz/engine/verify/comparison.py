"""Verifier comparison on one fixed tree: each verifier's empirical exit law against the exact w.

A chi-square goodness-of-fit test and the total-variation distance say whether a verifier draws
from the canonical exit law (docs/math.md, *Verifiers*); the app's comparison tab shows the result.
TEV, predraw and residual are drawn many times at once (`BATCHED`): each batched form runs its verifier's own
rule over a column of independent draws, and the tests hold it to the one-call-per-draw verifier's law.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core.exit_law import exit_law
from ..core.sampling import SamplingConfig, float64_sampling, greedy_rows, inverse_cdf, processed_probs
from ..core.scoring import check_ids, tree_logits
from ..core.tree import DraftTree, ancestor_mask, children, from_parents
from ..errors import TevvizError
from ..load.models import ModelPair
from ..records.records import RoundRecord
from .verifiers import Verifier, get_verifier, tev

COMPARED_VERIFIERS = ("tev", "predraw", "residual")
MAX_DRAWS = 100_000
CHI2_MIN_EXPECTED = 5.0  # cells expected fewer times than this are pooled for the chi-square test
CHUNK_S = 0.2  # seconds of drawing between progress reports and checks of `stop`


def chi_square_p(observed: list[int], expected_probs: list[float]) -> tuple[float, int, float]:
    """Pearson's chi-square goodness of fit: (statistic, degrees of freedom, p-value).

    Cells expected fewer than CHI2_MIN_EXPECTED times are pooled into one cell; p is the upper
    regularised incomplete gamma Q(df/2, stat/2).
    """
    n = sum(observed)
    if n == 0:
        return 0.0, 0, 1.0
    if any(o > 0 and p <= 0 for o, p in zip(observed, expected_probs)):
        return math.inf, 0, 0.0  # draws where the law has no mass
    cells, pool_obs, pool_exp = [], 0, 0.0
    for o, p in zip(observed, expected_probs):
        e = n * p
        if e >= CHI2_MIN_EXPECTED:
            cells.append((o, e))
        else:
            pool_obs, pool_exp = pool_obs + o, pool_exp + e
    if pool_exp > 0:
        if pool_exp < CHI2_MIN_EXPECTED and cells:
            # Too little mass to stand alone: merge the pool into the smallest regular cell.
            i = min(range(len(cells)), key=lambda j: cells[j][1])
            cells[i] = (cells[i][0] + pool_obs, cells[i][1] + pool_exp)
        else:
            cells.append((pool_obs, pool_exp))
    stat = sum((o - e) ** 2 / e for o, e in cells if e > 0)
    df = len(cells) - 1
    if df <= 0:
        return stat, 0, 1.0
    p = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    return stat, df, float(p)


@dataclass(frozen=True)
class VerifierLaw:
    """One verifier's draws on a fixed tree."""

    name: str
    freqs: list[float]  # empirical exit frequency per node
    tv: float  # total-variation distance to the exact w
    chi2: float
    df: int
    p: float
    us_per_draw: float
    mean_length: float  # mean block length L = d(exit) + 1


@dataclass(frozen=True)
class Comparison:
    """The exact exit law of one round's tree and the verifiers' empirical laws."""

    round_index: int
    w: list[float]
    expected_length: float  # E[L] = 1 + C_p of every compared (exact path) verifier on this fixed tree
    draws: int  # draws made per verifier (fewer than `requested` when stopped)
    laws: list[VerifierLaw]
    node_labels: list[str]
    note: str
    requested: int = 0  # draws asked for
    stopped: bool = False  # ended early by `stop`; the statistics are those of `draws` draws


# -- many draws at once ---------------------------------------------------------------------------------------

# (tree, logits, sampling, ancestor mask) -> draw(m, generator) -> (m,) exit nodes. The preparation does each
# verifier's (N, V) work once; a draw costs O(m N) plus, for predraw, m searches per node.
Draw = Callable[[int, torch.Generator], torch.Tensor]
Prepare = Callable[[DraftTree, torch.Tensor, SamplingConfig, torch.Tensor], Draw]
BATCHED: dict[str, Prepare] = {}


def batched(name: str) -> Callable[[Prepare], Prepare]:
    def put(fn: Prepare) -> Prepare:
        BATCHED[name] = fn
        return fn

    return put


def _uniforms(shape: tuple[int, ...], gen: torch.Generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=gen, device=device, dtype=torch.float64)


@batched("tev")
def _tev_many(tree, logits, cfg, anc):
    """TEV draws its exit from the exit law w it computes: m exits from that same w, by float64 inverse CDF."""
    w = tev(tree, logits, cfg, torch.Generator(device=logits.device), anc).exit_law.w  # (N,)
    return lambda m, gen: inverse_cdf(w, _uniforms((m,), gen, w.device)).reshape(m)


def follow_many(tree: DraftTree, draws: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """Predraw's walk for each row of draws (m, N): the deepest node whose every edge matched its parent's draw."""
    match = tree.tokens.unsqueeze(0) == draws[:, tree.parents.clamp(min=0)]  # (m, N)
    match[:, 0] = True
    missed = (~match).to(torch.float32) @ anc.T.to(torch.float32)  # (m, N): unmatched nodes on each node's path
    return torch.where(missed == 0, tree.depths.unsqueeze(0), -1).argmax(dim=-1)


@batched("predraw")
def _predraw_many(tree, logits, cfg, anc):
    """Predraw-and-follow: D_v ~ p_v at every node for each of m draws (its sampler, m columns), then the walk."""
    if cfg.greedy:
        exit_node = follow_many(tree, greedy_rows(logits).unsqueeze(0), anc)[0]
        return lambda m, gen: exit_node.expand(m)
    probs = processed_probs(logits, cfg)  # (N, V)

    def draw(m: int, gen: torch.Generator) -> torch.Tensor:
        tokens = inverse_cdf(probs, _uniforms((tree.size, m), gen, probs.device)).reshape(tree.size, m)  # (N, m)
        return follow_many(tree, tokens.T, anc)

    return draw


@batched("residual")
def _residual_many(tree, logits, cfg, anc):
    """Sequential residual verification: at node v the j-th child in draft order is accepted with probability
    p_v(x_j) / (1 - sum of the earlier children's p_v), the residual's mass after their rejection; the walk moves
    every draw to its first accepted child at once, or stops it."""
    kids = children(tree)
    width = max(map(len, kids))
    device = logits.device
    kid = torch.zeros(tree.size, max(width, 1), dtype=torch.long, device=device)  # (N, K): child ids, 0 padding
    for v, ks in enumerate(kids):
        kid[v, : len(ks)] = torch.tensor(ks, dtype=torch.long, device=device)
    counts = torch.tensor(list(map(len, kids)), device=device)
    real = torch.arange(kid.shape[1], device=device).unsqueeze(0) < counts.unsqueeze(1)  # (N, K): not padding
    probs = processed_probs(logits, cfg).double()  # (N, V)
    p_kid = torch.where(real, probs.gather(1, tree.tokens[kid]), 0.0)  # (N, K): p_v of each child's token
    mass = probs.sum(-1, keepdim=True) - (p_kid.cumsum(-1) - p_kid)  # what the residual holds before child j
    accept = torch.where(real & (mass > 0), p_kid / mass.clamp(min=1e-300), 0.0)  # (N, K)

    def draw(m: int, gen: torch.Generator) -> torch.Tensor:
        node = torch.zeros(m, dtype=torch.long, device=device)
        moving = torch.ones(m, dtype=torch.bool, device=device)
        for _ in range(int(tree.depths.max())):
            hit = _uniforms((m, kid.shape[1]), gen, device) < accept[node]  # (m, K)
            moving &= hit.any(-1)
            if not moving.any():
                break
            node = torch.where(moving, kid[node].gather(1, hit.long().argmax(-1, keepdim=True))[:, 0], node)
        return node

    return draw


def _per_draw(verify: Verifier, tree, logits, cfg, anc):
    """The reference: one verifier call per draw."""

    def draw(m: int, gen: torch.Generator) -> torch.Tensor:
        return torch.stack([verify(tree, logits, cfg, gen, anc).exit_node for _ in range(m)])

    return draw


def _law(name: str, counts: list[int], seconds: float, w: list[float], depths: list[int]) -> VerifierLaw:
    n = sum(counts)
    freqs = [c / n for c in counts] if n else [0.0] * len(counts)
    stat, df, p = chi_square_p(counts, w)
    return VerifierLaw(name, freqs, 0.5 * sum(abs(f - x) for f, x in zip(freqs, w)), stat, df, p,
                       seconds / n * 1e6 if n else 0.0, sum(f * (d + 1) for f, d in zip(freqs, depths)))


def compare_verifiers(pair: ModelPair, prefix: list[int], record: RoundRecord, sampling: SamplingConfig,
                      draws: int, seed: int, names=COMPARED_VERIFIERS, progress=None, stop=None,
                      batched: bool = True) -> Comparison:
    """Re-score `record`'s tree under `prefix` and draw each verifier `draws` times with a seeded generator.

    The verifiers are drawn in turn, a chunk each, reporting `progress((done, draws), desc=...)` after every
    round of chunks; when `stop()` turns true the comparison ends there, with the statistics of the draws so far.
    `batched=False` (and a verifier without a `BATCHED` form) calls the verifier once per draw.
    """
    if not 1 <= draws <= MAX_DRAWS:
        raise TevvizError(f"draws M must lie in [1, {MAX_DRAWS}], got {draws}")
    verifiers = {name: get_verifier(name) for name in names}  # an unknown name refused before any work
    device = pair.device
    tree = from_parents(record.tokens, record.parents, record.draft_logprobs, device=device)
    check_ids(pair, prefix + record.tokens)
    anc = ancestor_mask(tree)
    # Apple's mps has no float64: the batched inverse CDF would not be the verifiers' sampler there.
    batched = batched and float64_sampling(device)
    with torch.no_grad():
        logits = tree_logits(pair.target, prefix, tree, anc)  # (N, V)
        ex = exit_law(tree, processed_probs(logits, sampling))
        w = ex.w.tolist()
        drawers, gens, counts, seconds = {}, {}, {}, dict.fromkeys(names, 0.0)
        for name in names:
            t0 = time.perf_counter()
            many = BATCHED.get(name) if batched else None
            drawers[name] = (many(tree, logits, sampling, anc) if many
                             else _per_draw(verifiers[name], tree, logits, sampling, anc))
            gens[name] = torch.Generator(device=device).manual_seed(seed)
            counts[name] = torch.zeros(record.size, dtype=torch.long, device=device)
            seconds[name] += time.perf_counter() - t0
        done, chunk, stopped = 0, 1, False
        while done < draws:
            m = min(chunk, draws - done)
            t_chunk = time.perf_counter()
            for name in names:
                t0 = time.perf_counter()
                counts[name] += torch.bincount(drawers[name](m, gens[name]), minlength=record.size)
                seconds[name] += time.perf_counter() - t0
            done += m
            # Chunks grow towards CHUNK_S of drawing: few reports for fast draws, a slow verifier still stoppable.
            chunk = max(1, min(4 * chunk, int(m * CHUNK_S / max(time.perf_counter() - t_chunk, 1e-6))))
            if progress is not None:
                progress((done, draws), desc=f"drawing {', '.join(names)}: {done} of {draws}")
            if done < draws and stop is not None and stop():
                stopped = True
                break
    depths = record.depths
    laws = [_law(name, counts[name].tolist(), seconds[name], w, depths) for name in names]
    labels = [f"{v} {record.texts[v]!r}"[:24] for v in range(record.size)]
    notes = ["temperature 0: the exit law is a point mass, so every verifier agrees exactly" if sampling.greedy else "",
             f"stopped after {done} of {draws} draws: the statistics are those of the draws so far" if stopped else ""]
    return Comparison(record.index, w, 1 + float(ex.C_p), done, laws, labels, "; ".join(x for x in notes if x),
                      requested=draws, stopped=stopped)
