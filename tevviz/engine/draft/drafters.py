"""The drafting seam and the registry of drafter kinds (docs/drafter-kinds.md).

A drafter owns its state (caches, pending tokens, the target features it has read), drafts a round's tree and commits
what the verifier accepted together with what the target pass returned. A drafter kind owns everything else about
itself: recognising its folder, loading and saving, its default builder and depth, the builders it works with, how
ExitTrain trains it and its fresh-state tree. `MODULES` lists the modules that register kinds, so a new kind is its
own module(s) plus its name there; nothing outside those modules tests a kind by name.
"""

from __future__ import annotations

import importlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from ..core.sampling import SamplingConfig
from ..cost.auto_budget import Plan
from ..errors import TevvizError
from .builder_kinds import builder_kind, builder_names
from .builders import BuilderConfig, DraftResult

# engine modules that register drafter kinds, in precedence order
KINDS_PACKAGE = __package__.rsplit(".", 1)[0] + ".kinds"  # engine/kinds/, where the kind modules live
# The modules of KINDS_PACKAGE that register drafter kinds, in precedence order.
MODULES = ("autoregressive_kind", "block_kind", "eagle3_kind")


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
class Reading:
    """One way to read a drafter's target states (and its norms), as the doctor tries them."""

    name: str  # in the user's words: "as given", "ids - 1", "ids + 1", "EAGLE default", "norm_before_fc off"
    layer_ids: tuple[int, ...]  # target states read, as hidden_states indices (0: the embedding output)
    options: tuple[tuple[str, object], ...] = ()  # other settings this reading changes (e.g. ("norm_before_fc", False))
    own: bool = False  # the reading the checkpoint's own config gives
    why: str = ""  # where the reading comes from (the dialect, the first-id rule, an override)


class DrafterKind(ABC):
    """A drafter kind: every question about a drafter that depends on its kind is answered here. A kind is a
    subclass with its facts as class attributes and its answers as methods; its module registers one instance."""

    name: str
    summary: str  # one line: what the drafter is, for help texts and the app
    default_builder: str
    builders: tuple[str, ...] = ()  # builders it works with beyond those that name it (a LevelStep reuses best-first)
    trainer: type | None = None  # ExitTrain's trainer class (pair, contexts, cfg, draft); None: not trained
    why_not_trained: str = ""
    distills: bool = False  # tevviz train's distillation warm start applies
    recipe: str = ""  # module of tevviz.recipes whose main(argv) trains one (tevviz pair train-drafter --kind)
    # Its model is a causal LM drafted on its own KV cache (engine/decode/pass_costs.py times its levels).
    causal_lm: bool = False

    @abstractmethod
    def recognises(self, folder: Path) -> bool:
        """Whether a local folder holds one, read from its config alone, before anything loads."""

    @abstractmethod
    def matches(self, model: torch.nn.Module) -> bool:
        """Whether a loaded draft model is one."""

    @abstractmethod
    def load(self, path: str, target: torch.nn.Module, kw: dict) -> torch.nn.Module:
        """The drafter at `path`, loaded beside the loaded `target` with the load keyword arguments `kw`."""

    @abstractmethod
    def save(self, model: torch.nn.Module, tokenizer, folder: Path) -> None:
        """Write `model` to `folder` where `--draft` loads it from."""

    @abstractmethod
    def make(self, pair, seed: int) -> Drafter:
        """A session's drafting state for `pair`, its draws seeded by `seed`."""

    @abstractmethod
    def fresh_tree(self, pair, context: list[int], builder: BuilderConfig):
        """The DraftTree it builds below `context` from a fresh state (ExitTrain's trees)."""

    def folder_depth(self, folder: Path) -> int | None:
        """Its natural depth, read from its folder (None: the builder's)."""
        return None

    def model_depth(self, model: torch.nn.Module) -> int | None:
        """Its natural depth, read from a loaded model (None: the builder's)."""
        return None

    def check_folder(self, path: str, target_config: Callable[[], object]) -> None:
        """Refuse a bad folder before anything loads; `target_config()` reads the target's config when needed."""

    def own_tokenizer(self, folder: Path) -> bool:
        """Whether its folder carries a tokenizer to check against the target's."""
        return True

    def readings(self, model: torch.nn.Module, n_layers: int) -> list[Reading]:
        """The doctor: the plausible readings of a loaded drafter beside a target of `n_layers` decoder layers, its
        own first ([] when nothing is ambiguous)."""
        return []

    def apply_reading(self, model: torch.nn.Module, reading: Reading) -> None:
        """Put `reading` in place on the model (undone by applying its own reading again); nothing for a kind that
        reads no target states."""


_KINDS: dict[str, DrafterKind] = {}
_FROM: dict[str, str] = {}  # kind name -> the module that registered it
_loaded = False


def register(kind: DrafterKind) -> DrafterKind:
    _KINDS[kind.name] = kind
    _FROM[kind.name] = sys._getframe(1).f_globals.get("__name__", "")
    return kind


def drafter_kinds() -> dict[str, DrafterKind]:
    """Every registered drafter kind by name, in MODULES order whatever imported them first (the first is the
    fallback; later ones win where two recognise a folder or a model)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for name in MODULES:
            importlib.import_module(f"{KINDS_PACKAGE}.{name}")
        rank = {f"{KINDS_PACKAGE}.{name}": i for i, name in enumerate(MODULES)}
        ordered = sorted(_KINDS, key=lambda k: rank.get(_FROM[k], len(MODULES)))
        _KINDS.update({k: _KINDS.pop(k) for k in ordered})
    return _KINDS


def drafter_kind(name: str) -> DrafterKind:
    """The drafter kind `name`, or a one-line error listing them."""
    kinds = drafter_kinds()
    if name not in kinds:
        raise TevvizError(f"unknown drafter kind {name!r}; choose one of {', '.join(kinds)}")
    return kinds[name]


def drafter_kind_of(model: torch.nn.Module) -> DrafterKind:
    """The kind of a loaded draft model (the last registered kind that recognises it)."""
    kinds = list(drafter_kinds().values())
    return next((k for k in reversed(kinds) if k.matches(model)), kinds[0])


def folder_kind(path: str | Path) -> DrafterKind:
    """The kind of the drafter at `path` (a hub id or a GGUF file is the first kind's), read before anything loads."""
    kinds = list(drafter_kinds().values())
    p = Path(str(path)).expanduser()
    if not p.is_dir():
        return kinds[0]
    return next((k for k in reversed(kinds) if k.recognises(p)), kinds[0])


def accepts(builder: str, kind: DrafterKind) -> bool:
    """Whether `builder` drafts with a drafter of `kind`: the builder names the kind, or the kind names the builder."""
    return kind.name in builder_kind(builder).drafters or builder in kind.builders


def builders_for(kind: DrafterKind) -> tuple[str, ...]:
    """The builder kinds that draft with a drafter of `kind`, in registration order."""
    return tuple(b for b in builder_names() if accepts(b, kind))


def article(word: str) -> str:
    """The indefinite article before `word` (a kind's name) in a message."""
    return "an" if word[0] in "aeiou" else "a"


def builder_fits() -> str:
    """Which builders draft with which kinds of drafter, in one line (the app's builder hint)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for b in builder_names():
        groups.setdefault(tuple(k.name for k in drafter_kinds().values() if accepts(b, k)), []).append(b)
    return "; ".join(f"{', '.join(bs)}: {' and '.join(ks)} drafters" for ks, bs in groups.items())


def check_builder(builder: str, kind: DrafterKind, draft_name: str) -> None:
    """Refuse a builder that does not draft with `kind`, naming the ones that do."""
    if not accepts(builder, kind):
        raise TevvizError(mismatch(builder, draft_name, kind))


def mismatch(builder: str, draft_name: str, kind: DrafterKind) -> str:
    """The message for a builder that drafts with other kinds of drafter than the one given."""
    wanted = " or ".join(f"{article(k)} {k}" for k in sorted(builder_kind(builder).drafters))
    return (f"the {builder} builder drafts with {wanted} drafter, but {draft_name!r} is {article(kind.name)} "
            f"{kind.name} drafter; build its trees with the {kind.default_builder} builder (it takes "
            f"{', '.join(builders_for(kind))})")


def default_tree(kind: DrafterKind, depth: int | None, builder: str | None = None) -> tuple[str, int | None]:
    """The builder a drafter's trees take (`builder`, else the kind's own) and their depth: the kind's natural
    `depth` when the builder is its own, else None (the builder's default)."""
    builder = builder or kind.default_builder
    return builder, depth if builder == kind.default_builder else None


def folder_defaults(path: str | Path, builder: str | None = None) -> tuple[str, int | None]:
    """The builder the drafter at `path` takes (`builder` if given, else its own) and its depth (None: the
    builder's default), read from the folder alone."""
    kind = folder_kind(path)
    return default_tree(kind, kind.folder_depth(Path(str(path)).expanduser()), builder)


def pair_defaults(pair, builder: str | None = None) -> tuple[str, int | None]:
    """The builder a loaded pair's drafter takes (`builder` if given) and its depth (None: the builder's)."""
    kind = drafter_kind_of(pair.draft)
    return default_tree(kind, kind.model_depth(pair.draft), builder)


def make_drafter(pair, builder: BuilderConfig, seed: int) -> Drafter:
    """The session state of `pair`'s drafter, refusing a builder that drafts with another kind of drafter."""
    kind = drafter_kind_of(pair.draft)
    check_builder(builder.name, kind, pair.draft_name)
    return kind.make(pair, seed)


def make_trainer(pair, contexts, cfg, draft=None):
    """The ExitTrain trainer for the pair's kind of drafter, or an error saying why it is not trained."""
    kind = drafter_kind_of(pair.draft)
    if kind.trainer is None:
        raise TevvizError(f"ExitTrain does not train {kind.name} drafters: {kind.why_not_trained}")
    return kind.trainer(pair, contexts, cfg, draft)


def check_trainer(trainer, pair, builder: str) -> DrafterKind:
    """Refuse a trainer built for another kind of drafter than the pair's, or a builder that kind does not take."""
    kind = drafter_kind_of(pair.draft)
    if kind.trainer is not type(trainer):
        trains = " and ".join(k.name for k in drafter_kinds().values() if k.trainer is type(trainer)) or "no"
        raise TevvizError(f"{type(trainer).__name__} trains {trains} drafters; {pair.draft_name!r} is "
                          f"{article(kind.name)} {kind.name} drafter (drafters.make_trainer picks the trainer)")
    if not accepts(builder, kind):
        own = builders_for(kind)
        trained = [b for b in own if builder_kind(b).trainable]  # sampled and mixed trees are not trained on
        raise TevvizError(f"{article(kind.name)} {kind.name} drafter builds {', '.join(own)} trees; ExitTrain on "
                          f"them takes --builder {' or '.join(trained)}, not {builder}")
    return kind


def tree_for(pair, context: list[int], builder: BuilderConfig):
    """The tree the pair's drafter builds below `context` at inference, from a fresh state."""
    return drafter_kind_of(pair.draft).fresh_tree(pair, context, builder)


def save_drafter(draft: torch.nn.Module, tokenizer, folder) -> None:
    """Write a drafter where `--draft` loads it from (its kind's own layout)."""
    drafter_kind_of(draft).save(draft, tokenizer, Path(folder))


def target_depth(pair) -> int:
    """The target's decoder layers (hidden_states holds one more: the embedding output first)."""
    return pair.target.config.get_text_config().num_hidden_layers


def reading_of(pair) -> Reading | None:
    """The target states the pair's drafter reads now and why (None: it reads none, as a plain causal LM)."""
    found = drafter_kind_of(pair.draft).readings(pair.draft, target_depth(pair))
    return found[0] if found else None


def override_reading(pair, layer_ids) -> Reading:
    """Make the pair's drafter read the target's hidden_states `layer_ids` (--layer-ids), refusing ids out of range
    or a drafter that reads no target states; the reading in place after it."""
    ids = tuple(int(i) for i in layer_ids)
    now, n = reading_of(pair), target_depth(pair)
    if now is None:
        raise TevvizError(f"--layer-ids: {pair.draft_name!r} reads no target states (it is "
                          f"{article(drafter_kind_of(pair.draft).name)} {drafter_kind_of(pair.draft).name} drafter)")
    if len(ids) != len(now.layer_ids):
        raise TevvizError(f"--layer-ids: the drafter reads {len(now.layer_ids)} target states, got {len(ids)} ids")
    if not all(0 <= i <= n for i in ids):
        raise TevvizError(f"--layer-ids: hidden_states indices run from 0 (the embedding output) to {n} (the last of "
                          f"the target's {n} layers), got {list(ids)}")
    why = f"--layer-ids {','.join(map(str, ids))} (the checkpoint's own: {list(now.layer_ids)})"
    drafter_kind_of(pair.draft).apply_reading(pair.draft, Reading("--layer-ids", ids, now.options, why=why))
    return reading_of(pair)


def layer_outputs(hidden_states, layer_ids, device=None) -> torch.Tensor:
    """The outputs of the target's decoder layers `layer_ids` (hidden_states[l + 1]) joined on the last axis, on
    `device` when given: the features a drafter that reads the target takes."""
    return torch.cat([hidden_states[i + 1].to(device) for i in layer_ids], dim=-1)
