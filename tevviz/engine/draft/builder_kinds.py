"""The registry of draft-tree builder kinds: what each needs (drafter kinds) and supports (verifiers, sizing, training).

A builder module registers its kinds when it is imported; `MODULES` lists the modules that hold builders, so a new
builder is one module (and its name here). Nothing here imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import TevvizError

MODULES = ("builders", "ddtree", "eagle_tree")  # engine modules that register builder kinds when imported
FIXED_TREE_VERIFIERS = ("tev", "predraw", "residual")  # exact on any deterministic tree


def frontier_level(cfg, d: int) -> tuple[int, int]:
    """A frontier builder's level d: K children per expanded node, W nodes wide."""
    return cfg.children, cfg.width


def budget_keep(cfg) -> int:
    """The B best nodes are kept."""
    return cfg.budget


def depth_limit(cfg) -> int:
    """H: the depth limit the config gives."""
    return cfg.depth


@dataclass(frozen=True)
class BuilderKind:
    """One builder: the drafter kinds it drafts with and what it supports, each said in a user's words."""

    name: str
    # The drafter kinds it was written for; a drafter kind may name more builders it works with (DrafterKind.builders),
    # and drafters.accepts() is the one test of a pairing.
    drafters: frozenset[str]
    summary: str  # one line for help texts
    verifiers: tuple[str, ...] | None = FIXED_TREE_VERIFIERS  # exact on its trees; None: every registered verifier
    why_not_verifier: str = ""  # why the others are refused
    auto: bool = False  # --budget auto can size its rounds
    trainable: bool = True  # ExitTrain can train a drafter on its trees
    why_not_trained: str = ""
    auto_only: bool = False  # it sizes every round itself (mixed)
    budget: int | None = None  # its own B where the user gives none and it is not auto-sized (None: tevviz's)
    chain: bool = False  # it draws a sampled chain, which --budget auto sizes by the chain's own cost (chain_cost.py)
    # The BuilderConfig settings it reads beyond budget and depth (checked only where read): "children" and "width"
    # (a frontier), "branching" (a fixed shape), "stop_below" (a chain's stop).
    settings: frozenset[str] = frozenset()
    # Its trees' shape, from a BuilderConfig: (children per expanded node, frontier width) at depth d >= 1, the
    # non-root nodes kept, and the deepest level drafted.
    level: Callable[..., tuple[int, int]] = frontier_level
    keep: Callable[..., int] = budget_keep
    max_depth: Callable[..., int] = depth_limit

    def reads(self, setting: str) -> bool:
        """Whether this builder reads the BuilderConfig setting `setting` (beyond budget and depth)."""
        return setting in self.settings

    def check_verifier(self, verifier: str) -> None:
        """Refuse a verifier that is not exact on this builder's trees."""
        if self.verifiers is not None and verifier not in self.verifiers:
            raise TevvizError(f"the {self.name} builder takes the {', '.join(self.verifiers)} verifiers, not "
                              f"{verifier}: {self.why_not_verifier}")

    def check_trainable(self) -> None:
        """Refuse ExitTrain on this builder's trees, in the user's words."""
        if not self.trainable:
            raise TevvizError(f"ExitTrain cannot train on {self.name} trees: {self.why_not_trained}")


_KINDS: dict[str, BuilderKind] = {}
_loaded = False


def register(kind: BuilderKind) -> BuilderKind:
    _KINDS[kind.name] = kind
    return kind


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in MODULES:
            importlib.import_module(f"{__package__}.{name}")


def builder_names() -> tuple[str, ...]:
    """Every registered builder kind, in registration order."""
    _load()
    return tuple(_KINDS)


def builder_kind(name: str) -> BuilderKind:
    """The builder kind `name`, or a one-line error listing them."""
    _load()
    if name not in _KINDS:
        raise TevvizError(f"unknown builder {name!r}; choose one of {', '.join(_KINDS)}")
    return _KINDS[name]

