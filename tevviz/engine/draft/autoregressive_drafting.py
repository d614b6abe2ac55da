"""The autoregressive drafter's session state: an ordinary causal LM drafted level by level through its own KV cache
(`builders.ModelStep`, or the written-out step of fast_draft.py where the family takes it)."""

from __future__ import annotations

import torch

from ..core.kv import keep_entries, new_cache
from .builders import DraftResult, ModelStep, draft_levels
from .draft_result import root_only
from .drafters import DraftRequest
from .fast_draft import fast_step


class AutoregressiveDrafter:
    """An ordinary causal LM drafted level by level: its KV cache, and the committed tokens it has not read yet."""

    kind = "autoregressive"
    target_layers: tuple[int, ...] = ()

    def __init__(self, pair, seed: int):
        # The written-out forward where the draft's family takes it (fast_draft.py); a compiled twin keeps its own.
        fast = fast_step(pair.draft) if pair.draft_call is None else None
        self.step = fast or ModelStep(pair.drafting, new_cache(pair.draft))
        self.cache = self.step.cache
        self.pending: list[int] = []  # committed tokens not yet in the draft cache; the last is the root
        self.device = pair.target.device
        # A sampled chain's draws: their own stream on the draft's device (a sharded pair may put it elsewhere).
        self.gen = torch.Generator(device=pair.draft.device).manual_seed(seed)

    def prefill(self, prompt_ids: list[int], features: torch.Tensor | None) -> None:
        self.pending = list(prompt_ids)

    def draft(self, request: DraftRequest) -> DraftResult:
        plan = request.plan
        if plan is not None and plan.skip_draft:
            return root_only(self.pending[-1], self.cache.get_seq_length(), self.device)
        return draft_levels(self.step, self.pending, request.builder, request.max_depth, plan,
                            request.sampling, self.gen, request.width)

    def commit(self, drafted: DraftResult, accepted: list[int], bonus: int, features: torch.Tensor | None) -> None:
        slots = drafted.slots[accepted[1:]].tolist()
        forwarded = [s for s in slots if s >= 0]  # a forwarded node's ancestors were forwarded too: a prefix
        keep_entries(self.cache, drafted.base, forwarded, self.cache.get_seq_length())
        rest = accepted[1 + len(forwarded):]  # accepted nodes the draft never forwarded: read next round
        tokens = drafted.tree.tokens[rest].tolist() if rest else []
        carried = self.pending if drafted.levels == 0 else []  # an undrafted round left the draft cache behind
        self.pending = carried + tokens + [bonus]

    def mark(self) -> object:
        return self.cache.get_seq_length(), self.pending

    def rollback(self, mark: object) -> None:
        length, self.pending = mark
        extra = self.cache.get_seq_length() - length
        if extra > 0:
            self.cache.crop(-extra)
