"""The `sampled` builder's chain (docs/math.md, *Sampled chains*): H tokens, each drawn from the draft's processed
law below the previous one, with the laws drawn from, for the speculative verifier."""

from __future__ import annotations

import torch

from ..core.sampling import SamplingConfig, check_finite, greedy_rows, one_hot, processed_probs, sample_categorical
from ..core.tree import DraftTree
from ..cost.auto_budget import Plan
from ..errors import TevvizError
from .draft_result import DraftResult, LevelStep


def sampled_chain(step: LevelStep, root: torch.Tensor, logits: torch.Tensor, base: int, H: int, plan: Plan | None,
                   sampling: SamplingConfig, gen: torch.Generator, width: int | None, root_row: int,
                   stop_below: float = 0.0) -> DraftResult:
    """A chain of H tokens, each drawn from the draft's processed law below the previous one.

    The laws drawn from travel with the tree (`draft_probs`): the speculative verifier accepts node v with
    probability min(1, p(x_v) / q(x_v)) and needs q. A plan fixes the depth before the first draw: keeping or
    dropping a token by its own q would draw the kept ones from another law than q. `stop_below` only ends the
    chain after a token, on the draft's law that token came from: every drawn token is kept and drawn from q, and
    whether the chain goes on depends on the tokens before it, so each position is still verified against its q.
    """
    device = step.device
    if plan is not None:  # it gives the depth; the chain's reach stays the draft's own (its table is for trees)
        if plan.forced_budget is None:
            raise TevvizError("a sampled chain's depth must be fixed before it is drawn (the plan's forced budget)")
        H = min(H, plan.forced_budget)
    tokens, laws = [root], [torch.zeros_like(logits[..., :width], dtype=torch.float32)]
    # Each level's position, visibility (a chain node sees the whole cache and every earlier chain slot: a causal
    # row) and source row (the one that drew it), made once: a level's own small tensors cost as much as its draw.
    positions = torch.arange(base, base + H, device=device)
    visible = torch.ones(1, base + H, dtype=torch.bool, device=device)
    sources = torch.tensor([root_row, 0], dtype=torch.long, device=device)
    levels = 1
    for d in range(1, H + 1):
        row = logits[..., :width]
        if sampling.greedy:  # q is one-hot on the argmax: take the argmax once, not again from q
            x = greedy_rows(row, "the draft model")
            q = one_hot(x, row)
        else:  # ids the target lacks are never drawn; a NaN or inf row is caught below, from the token it drew
            q = processed_probs(row, sampling, check=False)  # (1, V)
            x = sample_categorical(q, gen)  # (1,), still on the device
        tokens.append(x)
        laws.append(q)
        # The raw softmax, not q: at T = 0 q is one-hot and says nothing of how sure the draft is.
        if d == H or (stop_below and top_probability(row) < stop_below):
            break
        logits = step(x, positions[d - 1: d], visible[:, : base + d], sources[:1] if d == 1 else sources[1:])
        levels += 1
    n = len(tokens)
    drawn, q = torch.cat(tokens), torch.cat(laws)
    # Each token's log q read once for the whole chain, not a level at a time; the root's is 0 (its row is empty).
    lq = torch.log(q.gather(1, drawn.unsqueeze(1))[:, 0])
    lq[0] = 0.0
    # A row with a NaN or +inf logit softmaxes to NaN everywhere, so the token drawn from it has a NaN q.
    check_finite(lq, "the draft model")
    slot = torch.arange(-1, n - 1, device=device)  # node d went through the draft's d-th chain forward, at slot d - 1
    slot[levels:] = -1  # ... if there was one: the last token drawn is never forwarded
    depth = torch.arange(n, device=device)
    score = torch.cumsum(lq, 0)  # the draft's log path probability, also shown as the round's prediction (reach)
    tree = DraftTree(drawn, depth - 1, depth, lq, score, q, check_siblings=False)  # a chain: no siblings
    return DraftResult(tree, slot, base, levels, torch.zeros(n, dtype=torch.long, device=device), score)


def top_probability(logits: torch.Tensor) -> float:
    """The draft's largest softmax probability in a (1, V) row (one softmax kernel: cheaper than a log-normaliser)."""
    return float(torch.softmax(logits.float().flatten(), dim=0).amax())
