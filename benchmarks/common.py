"""Shared pieces of the benchmark scripts: argument flags, the model pair, prompts, timers, output."""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tevviz.engine.decode.session import encode_prompt
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.load.models import ModelSource
from tevviz.engine.load.pairs import NAMED_PAIRS, named_pair
from tevviz.prompts import load_prompts

RESULTS = ROOT / "benchmarks" / "results"


def parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--pair", default=None, choices=list(NAMED_PAIRS), help="a named pair (default: stdlib)")
    ap.add_argument("--target", default=None, help="default: the named pair's target")
    ap.add_argument("--draft", default=None, help="default: the named pair's drafter")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--prompts", default=None, help="default: the pair's prompt file (assets/prompts.jsonl for stdlib)")
    ap.add_argument("--split", default="eval")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    ap.add_argument("--out", default=None, help="JSON output path (default benchmarks/results/<benchmark>_<date>.json)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    return ap


def tree_flags(ap: argparse.ArgumentParser, budget: int, depth: int, max_new_tokens: int = 64) -> None:
    """--budget, --depth, --children and --max-new-tokens with this script's defaults."""
    ap.add_argument("--budget", type=int, default=budget)
    ap.add_argument("--depth", type=int, default=depth)
    ap.add_argument("--children", type=int, default=BuilderConfig.children,
                    help="K: children per expanded node of the best-first trees")
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)


def best_first(budget: int, depth: int, children: int = BuilderConfig.children) -> BuilderConfig:
    """The benchmarks' best-first tree: K children per expanded node, frontier width max(8, B / 4)."""
    return BuilderConfig(budget=budget, depth=depth, children=children, width=max(8, budget // 4))


def pair_tree(pair, budget: int, depth: int) -> BuilderConfig:
    """The tree a pair's drafter builds: its kind's own builder, at most as deep as its natural depth (DDTree's as
    deep as its block for a block drafter); the benchmarks' best-first tree where that builder is best-first."""
    from tevviz.engine.draft.drafters import drafter_kind_of

    kind = drafter_kind_of(pair.draft)
    own = kind.model_depth(pair.draft)
    depth = min(depth, own) if own else depth
    if kind.default_builder == BuilderConfig.name:
        return best_first(budget, depth)
    return BuilderConfig(name=kind.default_builder, budget=budget, depth=depth)


def setup(args):
    """The pair and the tokenised prompts named by the common flags."""
    if args.threads:
        torch.set_num_threads(args.threads)
    source = ModelSource(target=args.target, draft=args.draft, pair=args.pair, dtype=args.dtype, device=args.device)
    pair = source.load()
    path = args.prompts or (named_pair(args.pair).prompts_path() if args.pair else None)
    rows = load_prompts(path, args.split)[: args.limit]
    # Chat rows (a chat pair's prompt file) go through the tokenizer's chat template.
    return pair, [encode_prompt(pair.tokenizer, r["prompt"], chat=bool(r.get("chat"))) for r in rows]


def held_out_windows(tokenizer, n: int, tokens: int, seed: int) -> list[list[int]]:
    """n random windows of `tokens` tokens from the embedded pair's held-out stdlib files (ExitTrain's eval
    contexts)."""
    import random

    from tevviz.recipes.demo_pair import encode_corpus, stdlib_files

    held = encode_corpus(tokenizer, stdlib_files()[1]).tolist()
    rng = random.Random(seed)
    return [held[i : i + tokens] for i in (rng.randrange(len(held) - tokens) for _ in range(n))]


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int, warmup: int = 2, setup_fn=None) -> float:
    """Median seconds of fn() over `repeats` runs; setup_fn() runs before each, outside the timer."""
    times = []
    for i in range(warmup + repeats):
        arg = setup_fn() if setup_fn else None
        sync(device)
        t0 = time.perf_counter()
        fn(arg) if setup_fn else fn()
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tree_decode(pair, ids: list[int], temperature: float, builder, verifier: str, max_new_tokens: int, seed: int,
                cost_model=None):
    """One timed tree decode of `ids` as the benchmarks run it (no EOS stop, no missing tokens): (session, seconds).

    `cost_model` (an AutoBudget) carries --budget auto's measurements from one prompt to the next."""
    from tevviz.engine.core.sampling import SamplingConfig
    from tevviz.engine.decode.session import DecodeConfig, DecodeSession

    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), builder=builder, verifier=verifier,
                       max_new_tokens=max_new_tokens, seed=seed, stop_on_eos=False, missing_top=0)
    sync(pair.device)
    t0 = time.perf_counter()
    s = DecodeSession(pair, ids, cfg, cost_model=cost_model)
    s.run()
    sync(pair.device)
    return s, time.perf_counter() - t0


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain aligned text table."""
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def machine() -> dict:
    import platform

    info = {"python": platform.python_version(), "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
            "platform": platform.platform()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def plotly_go():
    """plotly's graph_objects, or None where plotly is not installed (a bare GPU box): the JSON is still written."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return None
    return go


def write(name: str, args, payload: dict, figure=None) -> Path:
    """Write the JSON result (and a plotly figure as standalone HTML beside it).

    By default the result is named by its question and the day it ran, `benchmarks/results/<name>_<YYYY-MM-DD>.json`;
    `--out` names it yourself. Only the JSON is tracked (.gitignore leaves out the HTML).
    """
    out = Path(args.out) if args.out else RESULTS / f"{name}_{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": name, "machine": machine(), "args": vars(args), **payload}, indent=1))
    if figure is not None:
        figure.write_html(out.with_suffix(".html"), include_plotlyjs=True)
    print(f"wrote {out}")
    return out
