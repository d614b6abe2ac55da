"""What the command line's model and decoding flags mean to the engine: a ModelSource and a DecodeConfig.

Shared by the commands (tevviz.commands, `tevviz scan` among them); the flags themselves are in tevviz.flags and
tevviz.cli.
"""

from __future__ import annotations

from pathlib import Path

from .engine.errors import TevvizError


def source_from_args(args):
    """The ModelSource named by the model flags (a --draft alone goes beside the named pair's target)."""
    from .engine.load.models import ModelSource

    return ModelSource(target=args.target, draft=args.draft, pair=args.pair, dtype=args.dtype, device=args.device,
                       device_map=args.device_map, attn_implementation=args.attn,
                       trust_remote_code=args.trust_remote_code, revision=args.revision,
                       compile_draft=getattr(args, "compile_draft", False),
                       layer_ids=getattr(args, "layer_ids", None))


def drafter_tree(args, depth: int, source=None) -> tuple[str, int]:
    """The builder the chosen drafter's trees take (its kind's own: DDTree for a block drafter, best-first for a
    causal LM) and `depth`, capped at the drafter's natural depth. Read from the draft folder, before anything loads
    (`source`: the command's ModelSource, built from the flags where not given)."""
    from .engine.draft.drafters import folder_defaults

    source = source if source is not None else source_from_args(args)
    kind, own_depth = folder_defaults(source.resolved()[1])
    return kind, min(depth, own_depth) if own_depth else depth


def start_from_args(args, target: str, draft: str, kind):
    """The builder, verifier, budget and depth a decode runs with: the flags given, the rest the loaded pair's
    measured best at --temperature (engine/decode/start.py), or --budget auto on the drafter's own builder for another
    pair. A scan starts at the drafter's own builder at a fixed B: its records must not depend on the machine's
    timings. `target` and `draft` are the source's resolved folders, `kind` the draft's DrafterKind."""
    from .engine.decode.start import decode_start
    from .engine.load.pairs import FIXED_BUDGET, pair_of_target

    own_depth = kind.folder_depth(Path(draft).expanduser())
    scan = getattr(args, "command", None) == "scan"
    budget = FIXED_BUDGET if scan and args.budget is None else args.budget
    return decode_start(None if scan else pair_of_target(target), args.temperature, kind, own_depth,
                        builder=args.builder, verifier=args.verifier, budget=budget, depth=args.depth,
                        stop_below=getattr(args, "stop_below", None))


def decode_config_from_args(args, source=None):
    """A DecodeConfig from the sampling and tree flags (raises TevvizError on bad values). `source` is the
    ModelSource the command loads (built from the flags where not given): its folders are resolved once here."""
    from .engine import BuilderConfig, DecodeConfig, SamplingConfig
    from .engine.draft.drafters import check_builder, folder_kind

    try:
        branching = tuple(int(x) for x in args.branching.split(","))
    except ValueError:
        raise TevvizError(f"--branching must be comma-separated integers, got {args.branching!r}") from None
    target, draft = (source if source is not None else source_from_args(args)).resolved()
    kind = folder_kind(draft)
    start = start_from_args(args, target, draft, kind)
    auto = start.budget == "auto"
    check_builder(start.builder, kind, draft)  # said before anything loads
    return DecodeConfig(
        sampling=SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p),
        builder=BuilderConfig(name=start.builder, budget=args.budget_limit if auto else start.budget,
                              depth=start.depth, children=args.children, width=args.width, branching=branching,
                              auto=auto, draft_temperature=args.draft_temperature, stop_below=start.stop_below),
        verifier=start.verifier, max_new_tokens=args.max_new_tokens, seed=args.seed,
        optimal=getattr(args, "optimal", False), stop_on_eos=not getattr(args, "ignore_eos", False),
    )
