"""Two versions of tevviz's engine in one process, prompt by prompt, on the same pair: ms a round, tokens/s and the
share of the ideal (pass costs measured once, before).

Run separately, two versions' rounds on this shared machine drift by more than a round's own work (a verifier read
0.29 ms one minute and 0.42 ms the next); interleaved in one process, on the same loaded models, they do not. The
`--before` checkout is imported as a second package (`tevviz_before`), so the engine's imports must stay relative:

    git worktree add /tmp/before <rev>
    cd benchmarks && python3 versions_ab.py --before /tmp/before --temperature 1 --threads 1

The first round of each prompt (the prefill) is left out of both. Each prompt runs both versions, in turns.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import baselines
import torch
from common import parser, setup, table, write

from tevviz.engine.analysis.speed import ideal_round_ms
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.draft.builders import BuilderConfig


def before_package(checkout: str):
    """The engine of the checkout at `checkout`, imported as `tevviz_before`: its session, sampling and builders."""
    source = Path(checkout) / "tevviz"
    if not (source / "engine").is_dir():
        raise SystemExit(f"{checkout} has no tevviz/engine: give a checkout of this repository")
    home = Path(tempfile.mkdtemp(prefix="tevviz_before_"))
    shutil.copytree(source, home / "tevviz_before", ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(home))
    return tuple(importlib.import_module(f"tevviz_before.engine.{m}")
                 for m in ("decode.session", "core.sampling", "draft.builders"))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--before", required=True, help="a checkout of the version to compare with (git worktree add)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--chain", type=int, default=0, help="a sampled chain of this fixed depth (identical rounds in "
                    "both versions at a fixed seed); 0: the pair's default settings at this temperature")
    ap.add_argument("--repeats", type=int, default=3, help="passes over the prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    pair, prompts = setup(args)
    session_b, sampling_b, builders_b = before_package(args.before)
    t = args.temperature
    if args.chain:
        tree, verifier = BuilderConfig(name="sampled", depth=args.chain), "speculative"
    else:
        tree, verifier = baselines.default_tree(pair, t)
    # A version before the builder's field was `name` called it `kind`.
    named = "name" if "name" in builders_b.BuilderConfig.__dataclass_fields__ else "kind"
    tree_b = builders_b.BuilderConfig(**{named: tree.name}, budget=tree.budget, depth=tree.depth, auto=tree.auto,
                                      stop_below=tree.stop_below)
    common = {"verifier": verifier, "max_new_tokens": args.max_new_tokens, "stop_on_eos": False, "missing_top": 0}
    versions = {
        "before": (session_b.DecodeSession,
                   session_b.DecodeConfig(sampling=sampling_b.SamplingConfig(temperature=t), builder=tree_b, **common)),
        "now": (DecodeSession, DecodeConfig(sampling=SamplingConfig(temperature=t), builder=tree, **common)),
    }
    costs = baselines.measured_pass_costs(pair, prompts, args.max_new_tokens, 5)
    totals = {k: {"rounds": 0, "tokens": 0, "seconds": 0.0, "ideal_ms": 0.0} for k in versions}
    for make, cfg in versions.values():  # warm-up, not timed
        make(pair, prompts[0], cfg).run()
    for rep in range(args.repeats):
        for i, ids in enumerate(prompts):
            names = list(versions) if (i + rep) % 2 == 0 else list(versions)[::-1]
            for name in names:
                make, cfg = versions[name]
                s = make(pair, ids, cfg)
                s.step()  # the prefill round
                t0 = time.perf_counter()
                s.run()
                seconds = time.perf_counter() - t0
                rounds = s.rounds[1:]
                out = totals[name]
                out["rounds"] += len(rounds)
                out["tokens"] += sum(r.tokens_committed for r in rounds)
                out["seconds"] += seconds
                out["ideal_ms"] += sum(ideal_round_ms(r, costs) for r in rounds)
    rows = [{"version": k, "rounds": v["rounds"], "tau": v["tokens"] / v["rounds"],
             "ms_a_round": 1e3 * v["seconds"] / v["rounds"], "tokens_per_s": v["tokens"] / v["seconds"],
             "share_of_ideal": v["ideal_ms"] / (1e3 * v["seconds"])} for k, v in totals.items()]
    stop = f" stop<{tree.stop_below:g}" if tree.stop_below else ""
    print(f"{tree.name} {'auto ' if tree.auto else ''}H<={tree.depth}{stop} + {verifier}, T = {t:g}, "
          f"{len(prompts)} prompts x {args.max_new_tokens} tokens x {args.repeats}, "
          f"{torch.get_num_threads()} thread(s)")
    print(table(rows, ["version", "rounds", "tau", "ms_a_round", "tokens_per_s", "share_of_ideal"]))
    name = args.pair or ("custom" if args.target else "stdlib")
    write(f"versions_ab_{name}", args, {"rows": rows, "builder": repr(tree), "verifier": verifier})


if __name__ == "__main__":
    main()
