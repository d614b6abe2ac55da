"""What a pair's forwards cost on this machine: the target pass by the tokens it takes and a draft level by the rows
it takes, each on top of a cached context, the draft through the same step decoding drafts with (speed.PassCosts;
speed.ideal_speed prices a run's rounds with them)."""

from __future__ import annotations

import torch

from ..analysis.speed import PassCosts
from ..core.kv import additive_mask, causal_visibility, new_cache
from ..core.timing import median_ms
from ..draft.builders import ModelStep
from ..draft.drafters import drafter_kind_of
from ..draft.fast_draft import fast_step
from .target_pass import TargetPass

TARGET_SIZES = (1, 2, 3, 5, 9, 17, 33, 65)  # tokens per target pass (a tree of B nodes takes B + 1)
DRAFT_ROWS = (1, 2, 4, 8, 16, 32)  # rows per draft level


def target_pass_ms(target, context: torch.Tensor, block: torch.Tensor, sizes, repeats: int) -> dict[int, float]:
    """Ms of one target forward of the first n tokens of `block` (1, N) on a cache holding `context` (1, L)."""
    cache, past, forward = new_cache(target), context.shape[1], TargetPass(target)
    with torch.inference_mode():
        target(input_ids=context, cache=cache, use_cache=True)

        def run(n: int) -> None:
            mask = additive_mask(causal_visibility(n, past, context.device), target.dtype)
            pos = torch.arange(past, past + n, device=context.device)[None]
            forward(block[:, :n], mask, pos, cache)  # as a round runs it
            cache.crop(-n)

        return median_ms(run, sizes, repeats, context.device)


def draft_level_ms(pair, context: torch.Tensor, block: torch.Tensor, rows, repeats: int) -> dict[int, float] | None:
    """Ms of one draft level of n rows on a cached context, through the step decoding drafts with (its written-out
    forward where it takes one); None for a drafter that does not draft level by level on its own cache."""
    if not drafter_kind_of(pair.draft).causal_lm:
        return None
    step = (fast_step(pair.draft) if pair.draft_call is None else None) or ModelStep(pair.drafting,
                                                                                    new_cache(pair.draft))
    past = context.shape[1]
    with torch.inference_mode():
        step(context[0], torch.arange(past, device=context.device), causal_visibility(past, 0, context.device), None)

        def run(n: int) -> None:
            # A level's rows each see the context and themselves, as a frontier's do.
            visible = torch.cat([torch.ones(n, past, dtype=torch.bool, device=context.device),
                                 torch.eye(n, dtype=torch.bool, device=context.device)], dim=1)
            step(block[0, :n], torch.full((n,), past, device=context.device), visible, None)
            step.cache.crop(-n)

        return median_ms(run, rows, repeats, context.device)


def measure_pass_costs(pair, token_ids: list[int], context: int = 200, repeats: int = 5,
                       sizes=TARGET_SIZES, rows=DRAFT_ROWS) -> PassCosts | None:
    """The pair's pass costs on a context of `context` tokens of `token_ids` (repeated as needed); None where the
    drafter's levels are not priced this way (block drafters, EAGLE-3 heads)."""
    ids = list(token_ids) or [0]
    need = context + max(max(sizes), max(rows))
    while len(ids) < need:
        ids = ids + ids
    device = pair.device
    ctx = torch.tensor([ids[:context]], device=device)
    block = torch.tensor([ids[context:need]], device=device)
    draft = draft_level_ms(pair, ctx, block, rows, repeats)
    if draft is None:
        return None
    return PassCosts(target_pass_ms(pair.target, ctx, block, sizes, repeats), draft)
