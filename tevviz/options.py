"""What the command line's model and decoding flags mean to the engine: a ModelSource and a DecodeConfig.

Shared by the commands (tevviz.commands) and `tevviz scan` (tevviz.scan); the flags themselves are in tevviz.cli.
"""

from __future__ import annotations

from .engine.errors import TevvizError


def source_from_args(args):
    """The ModelSource named by the model flags (a --draft alone goes beside the named pair's target)."""
    from .engine.models import ModelSource

    return ModelSource(target=args.target, draft=args.draft, pair=args.pair, dtype=args.dtype, device=args.device,
                       device_map=args.device_map, attn_implementation=args.attn,
                       trust_remote_code=args.trust_remote_code, revision=args.revision,
                       compile_draft=getattr(args, "compile_draft", False))


def drafter_tree(args, depth: int) -> tuple[str, int]:
    """The builder the chosen drafter's trees take (DDTree for a block drafter, best-first otherwise) and `depth`,
    capped at the block's depths for a block drafter. Read from the draft folder's config, before anything loads."""
    from .engine.models import drafter_defaults

    kind, own_depth = drafter_defaults(source_from_args(args).resolved()[1])
    return kind, min(depth, own_depth) if kind == "ddtree" and own_depth else depth


def decode_config_from_args(args):
    """A DecodeConfig from the sampling and tree flags (raises TevvizError on bad values)."""
    from .engine import BuilderConfig, DecodeConfig, SamplingConfig
    from .engine.builder_kinds import builder_kind
    from .engine.drafters import mismatch
    from .engine.models import drafter_defaults

    try:
        branching = tuple(int(x) for x in args.branching.split(","))
    except ValueError:
        raise TevvizError(f"--branching must be comma-separated integers, got {args.branching!r}") from None
    auto = args.budget == "auto"
    kind, depth = args.builder, args.depth
    # By default the drafter's own builder: DDTree as deep as its block for a block drafter.
    draft = source_from_args(args).resolved()[1]
    own_kind, own_depth = drafter_defaults(draft)
    kind = kind or own_kind
    if depth is None:
        depth = own_depth if kind == "ddtree" and own_depth else BuilderConfig.depth
    wanted, have = builder_kind(kind).drafter, builder_kind(own_kind).drafter
    if wanted != have:  # said before anything loads
        raise TevvizError(mismatch(kind, wanted, draft, have, own_kind))
    return DecodeConfig(
        sampling=SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p),
        builder=BuilderConfig(kind=kind, budget=args.budget_limit if auto else args.budget, depth=depth,
                              children=args.children, width=args.width, branching=branching, auto=auto,
                              draft_temperature=args.draft_temperature),
        verifier=args.verifier, max_new_tokens=args.max_new_tokens, seed=args.seed,
        optimal=getattr(args, "optimal", False),
    )
