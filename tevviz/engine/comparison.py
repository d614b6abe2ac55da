"""Verifier comparison on one fixed tree: each verifier's empirical exit law against the exact w.

A chi-square goodness-of-fit test and the total-variation distance say whether a verifier draws
from the canonical exit law (docs/math.md, *Verifiers*); the app's comparison tab shows the result.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from .errors import TevvizError
from .exit_law import exit_law
from .models import ModelPair
from .records import RoundRecord
from .sampling import SamplingConfig, processed_probs
from .scoring import check_ids, tree_logits
from .tree import ancestor_mask, from_parents
from .verifiers import VERIFIERS

COMPARED_VERIFIERS = ("tev", "predraw", "residual")
MAX_DRAWS = 100_000
CHI2_MIN_EXPECTED = 5.0  # cells expected fewer times than this are pooled for the chi-square test



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
    ceiling: float  # 1 + C_p
    draws: int
    laws: list[VerifierLaw]
    node_labels: list[str]
    note: str


def compare_verifiers(pair: ModelPair, prefix: list[int], record: RoundRecord, sampling: SamplingConfig,
                      draws: int, seed: int, names=COMPARED_VERIFIERS, progress=None) -> Comparison:
    """Re-score `record`'s tree under `prefix` and draw each verifier `draws` times with a seeded generator."""
    if not 1 <= draws <= MAX_DRAWS:
        raise TevvizError(f"draws M must lie in [1, {MAX_DRAWS}], got {draws}")
    device = pair.device
    tree = from_parents(record.tokens, record.parents, record.draft_logprobs, device=device)
    check_ids(pair, prefix + record.tokens)
    anc = ancestor_mask(tree)
    with torch.no_grad():
        logits = tree_logits(pair.target, prefix, tree, anc)  # (N, V)
        ex = exit_law(tree, processed_probs(logits, sampling))
    w = ex.w.tolist()
    depths = record.depths
    laws = []
    for i, name in enumerate(names):
        if progress is not None:
            progress((i, len(names)), desc=f"drawing {name}")
        verify = VERIFIERS[name]
        gen = torch.Generator(device=device).manual_seed(seed)
        counts = [0] * record.size
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(draws):
                counts[int(verify(tree, logits, sampling, gen, anc).exit_node)] += 1
        us = (time.perf_counter() - t0) / draws * 1e6
        freqs = [c / draws for c in counts]
        stat, df, p = chi_square_p(counts, w)
        laws.append(VerifierLaw(
            name, freqs, 0.5 * sum(abs(f - x) for f, x in zip(freqs, w)), stat, df, p, us,
            sum(f * (d + 1) for f, d in zip(freqs, depths)),
        ))
    labels = [f"{v} {record.texts[v]!r}"[:24] for v in range(record.size)]
    note = "temperature 0: the exit law is a point mass, so every verifier agrees exactly" if sampling.greedy else ""
    return Comparison(record.index, w, 1 + float(ex.C_p), draws, laws, labels, note)
