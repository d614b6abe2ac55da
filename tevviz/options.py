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
    """The builder the chosen drafter's trees take (its kind's own: DDTree for a block drafter, best-first for a
    causal LM) and `depth`, capped at the drafter's natural depth. Read from the draft folder, before anything loads."""
    from .engine.drafters import folder_defaults

    kind, own_depth = folder_defaults(source_from_args(args).resolved()[1])
    return kind, min(depth, own_depth) if own_depth else depth


def decode_config_from_args(args):
    """A DecodeConfig from the sampling and tree flags (raises TevvizError on bad values)."""
    from .engine import BuilderConfig, DecodeConfig, SamplingConfig
    from .engine.drafters import check_builder, folder_defaults, folder_kind

    try:
        branching = tuple(int(x) for x in args.branching.split(","))
    except ValueError:
        raise TevvizError(f"--branching must be comma-separated integers, got {args.branching!r}") from None
    auto = args.budget == "auto"
    # By default the drafter's own builder and depth: DDTree as deep as its block for a block drafter.
    draft = source_from_args(args).resolved()[1]
    kind, own_depth = folder_defaults(draft, args.builder)
    depth = args.depth if args.depth is not None else own_depth or BuilderConfig.depth
    check_builder(kind, folder_kind(draft), draft)  # said before anything loads
    return DecodeConfig(
        sampling=SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p),
        builder=BuilderConfig(kind=kind, budget=args.budget_limit if auto else args.budget, depth=depth,
                              children=args.children, width=args.width, branching=branching, auto=auto,
                              draft_temperature=args.draft_temperature),
        verifier=args.verifier, max_new_tokens=args.max_new_tokens, seed=args.seed,
        optimal=getattr(args, "optimal", False),
    )
