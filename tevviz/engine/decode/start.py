"""Where a decode starts: the user's flags, and for the rest the named pair's measured best setting at the temperature
(load/pairs.py holds those) or --budget auto on the drafter's own builder. The command line, the app's Decode tab and
the notebook API resolve a decode's start here, once, before a session runs."""

from __future__ import annotations

from ..draft.builder_kinds import builder_kind
from ..draft.drafters import accepts, default_tree
from ..load.pairs import FIXED_BUDGET, OTHER_PAIR_DEFAULTS, DecodeDefaults, NamedPair, decode_defaults


def decode_start(named: NamedPair | None, temperature: float, kind, own_depth: int | None = None, *,
                 builder: str | None = None, verifier: str | None = None, budget: int | str | None = None,
                 depth: int | None = None, stop_below: float | None = None) -> DecodeDefaults:
    """The settings a decode runs with: the user's (`builder` ... `depth`, None where not given) and for the rest the
    named pair's measured best at `temperature`, or, for another pair or where those do not apply, --budget auto on
    the drafter's own builder (B = FIXED_BUDGET where that builder does not size itself) under TEV.

    The measured best is one setting: it applies when the drafter (of `kind`, a DrafterKind; `own_depth` its natural
    depth) takes its builder and the user names no other builder or verifier, nor a fixed B where it sizes itself.
    Its stop (a sampled chain's) stays unless the user gives one or asks for --budget auto (that sizes chains); a
    stop the user gives on a self-sized setting fixes its budget."""
    best = decode_defaults(named, temperature) if named is not None else None
    if best is not None and _applies(best, kind, builder, verifier, budget):
        base = best
    else:
        name, natural = default_tree(kind, own_depth, builder)
        spec = builder_kind(name)  # the user's name (or the drafter's own), before a config exists
        base = DecodeDefaults(builder=name, verifier=OTHER_PAIR_DEFAULTS.verifier,
                              budget=OTHER_PAIR_DEFAULTS.budget if spec.auto else spec.budget or FIXED_BUDGET,
                              depth=natural or OTHER_PAIR_DEFAULTS.depth)
    if budget is None:  # a stop the user gives sizes the chain itself, in place of the cost model
        budget = FIXED_BUDGET if stop_below and base.budget == "auto" else base.budget
    if stop_below is None:
        stop_below = base.stop_below if budget != "auto" else 0.0
    return DecodeDefaults(builder=builder or base.builder, verifier=verifier or base.verifier, budget=budget,
                          depth=base.depth if depth is None else depth, stop_below=stop_below)


def tree_start(kind, own_depth: int | None = None) -> DecodeDefaults:
    """Where a tree debugger opens: the drafter's own tree builder under TEV at a fixed B = FIXED_BUDGET (the app's
    Decode tab). A pair's fastest setting can be a short chain, a poor thing to look at; `decode` keeps it."""
    name, natural = default_tree(kind, own_depth)
    return DecodeDefaults(builder=name, verifier=OTHER_PAIR_DEFAULTS.verifier,
                          budget=builder_kind(name).budget or FIXED_BUDGET, depth=natural or OTHER_PAIR_DEFAULTS.depth)


def _applies(best: DecodeDefaults, kind, builder, verifier, budget) -> bool:
    """Whether a pair's measured best setting applies to this drafter and these user flags."""
    # A fixed B where the setting sizes itself, by the cost model or by its chain's stop, is another setting.
    fixed_size = budget is not None and budget != "auto" and (best.budget == "auto" or best.stop_below > 0)
    return (accepts(best.builder, kind) and builder in (None, best.builder) and verifier in (None, best.verifier)
            and not fixed_size)
