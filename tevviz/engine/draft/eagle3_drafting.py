"""An EAGLE-3 head's session state (docs/eagle3.md): its own KV cache over (target state, next token) pairs, the
committed pairs it has not read yet, and its level step for the level-by-level builders.

Pairs: the target's state at position t goes with the token at t + 1, at draft position t. Between rounds the cache
holds pairs of committed tokens read with the target's own states; the pending pairs end with (state of the token
before the root, root), whose row is the root's law. Drafting grows the cache by tree nodes that read the head's own
state instead; the commit crops them and queues the accepted tokens with the verification pass's states.
"""

from __future__ import annotations

import torch

from .builders import DraftResult, draft_levels
from .draft_result import root_only
from .drafters import DraftRequest
from .eagle3_model import Eagle3Head, HeadKV


class Eagle3Step:
    """The head's level step (`draft_result.LevelStep`): committed pairs read the target's states through fc; a drafted
    node reads the state of the row that drafted it (`sources`)."""

    def __init__(self, model: Eagle3Head, cache: HeadKV, feats: torch.Tensor):
        self.model, self.cache, self.feats = model, cache, feats  # feats (m, F): the pending pairs' target states
        self.device = model.device
        self.h: torch.Tensor | None = None  # the last call's rows' states, fed to the next level

    def length(self) -> int:
        return self.cache.length

    def __call__(self, tokens, positions, visible, sources=None) -> torch.Tensor:
        """(q, V) rows; for committed pairs only the last (the root's) row, the one `draft_levels` reads."""
        model = self.model
        h_in = model.fuse(self.feats) if sources is None else self.h[sources]
        h = model.layer(h_in, tokens, positions, visible, self.cache)
        self.h = model.feedback(h)
        return model.target_logits(h if sources is not None else h[-1:])


class Eagle3Drafter:
    """The head's cache, and the committed pairs not read yet: their tokens (the last is the root) and states."""

    kind = "eagle3"

    def __init__(self, pair, seed: int):
        self.model: Eagle3Head = pair.draft
        self.target_layers = self.model.target_layers  # the reading in place when the session starts
        self.cache = HeadKV()
        self.pending: list[int] = []  # tokens of the unread pairs
        self.feats: torch.Tensor | None = None  # (len(pending), F) their target states
        self.root = 0
        self.device = pair.target.device
        self.gen = torch.Generator(device=self.model.device).manual_seed(seed)  # a sampled chain's draws

    def prefill(self, prompt_ids: list[int], features: torch.Tensor | None) -> None:
        self.root = prompt_ids[-1]
        self.pending = list(prompt_ids[1:])  # a one-token prompt has no pair: its first round drafts nothing
        self.feats = features

    def draft(self, request: DraftRequest) -> DraftResult:
        plan = request.plan
        if not self.pending or (plan is not None and plan.skip_draft):
            return root_only(self.root, self.cache.length, self.device)
        step = Eagle3Step(self.model, self.cache, self.feats)
        return draft_levels(step, self.pending, request.builder, request.max_depth, plan, request.sampling,
                            self.gen, request.width)

    def commit(self, drafted: DraftResult, accepted: list[int], bonus: int, features: torch.Tensor | None) -> None:
        tokens = drafted.tree.tokens[accepted[1:]].tolist() + [bonus]
        states = features[accepted].to(self.model.device)  # the root's and the accepted nodes' target states
        if drafted.levels == 0:  # nothing was read this round: the pending pairs wait with the new ones
            self.pending = self.pending + tokens  # a new list: a mark holds the old one
            self.feats = states if self.feats is None else torch.cat([self.feats, states])
        else:  # the pending pairs are in the cache; the tree's nodes read the head's own states: drop them
            self.cache.crop(drafted.base)
            self.pending, self.feats = tokens, states
        self.root = bonus

    def mark(self) -> object:
        return self.cache.length, self.pending, self.feats, self.root

    def rollback(self, mark: object) -> None:
        length, self.pending, self.feats, self.root = mark
        self.cache.crop(length)


def fresh_tree(pair, context: list[int], builder):
    """The tree the head builds below `context` from a fresh state (the target's states of context[:-1] first)."""
    from ..core.sampling import SamplingConfig
    from .drafters import layer_outputs

    drafter = Eagle3Drafter(pair, 0)
    target = pair.target
    feats = None
    with torch.inference_mode():
        if len(context) > 1:
            out = target(input_ids=torch.tensor([context[:-1]], device=target.device), output_hidden_states=True)
            feats = layer_outputs(out.hidden_states, drafter.target_layers, target.device)[0]
        drafter.prefill(list(context), feats)
        width = target.get_output_embeddings().weight.shape[0]
        return drafter.draft(DraftRequest(builder, builder.max_depth, None, SamplingConfig(), width)).tree
