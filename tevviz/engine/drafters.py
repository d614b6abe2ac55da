"""The drafting seam: a drafter owns its state (caches, pending tokens, the target features it has read), drafts a
round's tree and commits what the verifier accepted together with what the target pass returned.

Drafter kinds register here by name with the test that recognises their model; `MODULES` lists the modules that
hold drafter kinds, so a new kind is one module (and its name here).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from .auto_budget import Plan
from .builders import BuilderConfig, DraftResult, build_tree, root_only
from .errors import TevvizError
from .kv import keep_entries, new_cache
from .sampling import SamplingConfig

MODULES = ("drafters", "block_drafting")  # engine modules that register drafter kinds when imported


@dataclass(frozen=True)
class DraftRequest:
    """What one round asks of the drafter."""

    builder: BuilderConfig  # this round's builder (a mixed builder's arm)
    max_depth: int  # the round's depth cap: tokens left and the models' positions
    plan: Plan | None  # --budget auto: the cost model's plan for this round
    sampling: SamplingConfig  # the decoding's settings (a sampled chain draws with them)
    width: int  # the target's output width: ids beyond it are never drafted


class Drafter(Protocol):
    """One session's drafting state."""

    kind: str
    target_layers: tuple[int, ...]  # target decoder layers whose outputs every target pass hands to commit()

    def prefill(self, prompt_ids: list[int], features: torch.Tensor | None) -> None:
        """The prompt is committed; `features` (n - 1, F) are the target's features of all but its last token."""

    def draft(self, request: DraftRequest) -> DraftResult:
        """The round's tree below the root (the last committed token)."""

    def commit(self, drafted: DraftResult, accepted: list[int], bonus: int, features: torch.Tensor | None) -> None:
        """Keep the accepted path (node ids, root first) and the bonus token; `features` (N, F) are the target
        pass's features of the tree's nodes (None when `target_layers` is empty)."""

    def mark(self) -> object:
        """A token to roll back to, taken before a round."""

    def rollback(self, mark: object) -> None:
        """Put the state back where `mark` was taken (a failed round changes nothing)."""


@dataclass(frozen=True)
class DrafterKind:
    """A drafter kind: whether a loaded draft model is one, and the session state that drafts with it."""

    name: str
    matches: Callable[[torch.nn.Module], bool]
    make: Callable[..., Drafter]  # (pair, seed) -> Drafter
    default_builder: str


_KINDS: dict[str, DrafterKind] = {}
_loaded = False


def register(kind: DrafterKind) -> DrafterKind:
    _KINDS[kind.name] = kind
    return kind


def drafter_kinds() -> dict[str, DrafterKind]:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in MODULES:
            importlib.import_module(f"{__package__}.{name}")
    return _KINDS


def drafter_kind_of(model: torch.nn.Module) -> DrafterKind:
    """The kind of a loaded draft model (the last registered kind that recognises it; autoregressive otherwise)."""
    kinds = list(drafter_kinds().values())
    return next((k for k in reversed(kinds) if k.matches(model)), _KINDS["autoregressive"])


class AutoregressiveDrafter:
    """An ordinary causal LM drafted level by level: its KV cache, and the committed tokens it has not read yet."""

    kind = "autoregressive"
    target_layers: tuple[int, ...] = ()

    def __init__(self, pair, seed: int):
        self.model = pair.drafting
        self.cache = new_cache(pair.draft)
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
        return build_tree(self.model, self.cache, self.pending, request.builder, request.max_depth, plan,
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


register(DrafterKind("autoregressive", lambda model: True, AutoregressiveDrafter, "best-first"))


def layer_outputs(hidden_states, layer_ids, device=None) -> torch.Tensor:
    """The outputs of the target's decoder layers `layer_ids` (hidden_states[l + 1]) joined on the last axis, on
    `device` when given: the features a drafter that reads the target takes."""
    return torch.cat([hidden_states[i + 1].to(device) for i in layer_ids], dim=-1)


def mismatch(builder: str, wanted: str, draft_name: str, kind: str, default_builder: str) -> str:
    """The message for a builder that drafts with another kind of drafter than the one given."""
    article = lambda w: "an" if w[0] in "aeiou" else "a"
    return (f"the {builder} builder drafts with {article(wanted)} {wanted} drafter, but {draft_name!r} is "
            f"{article(kind)} {kind} drafter; build its trees with the {default_builder} builder")


def make_drafter(pair, builder: BuilderConfig, seed: int) -> Drafter:
    """The session state of `pair`'s drafter, refusing a builder that drafts with another kind of drafter."""
    from .builder_kinds import builder_kind

    kind = drafter_kind_of(pair.draft)
    wanted = builder_kind(builder.kind).drafter
    if wanted != kind.name:
        raise TevvizError(mismatch(builder.kind, wanted, pair.draft_name, kind.name, kind.default_builder))
    return kind.make(pair, seed)
