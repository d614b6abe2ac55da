"""Sub-commands for ExitTrain (`train`, `eval`) and benchmarks (`bench`)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from .engine.errors import TevvizError

EXTRA_HANDLERS: dict = {}


def add_extra_commands(sub) -> None:
    """Add the train, eval and bench parsers to the CLI's sub-parsers."""
    from .cli import _add_models
    from .engine.training import OBJECTIVES, TOKEN_LABELS, TrainConfig

    t = sub.add_parser("train", help="ExitTrain the drafter on its own trees; writes an HF folder")
    t.add_argument("--prompts", default=None, help="prompt JSONL (default: the shipped assets/prompts.jsonl)")
    t.add_argument("--split", default="train")
    t.add_argument("--objective", default="exit", choices=OBJECTIVES)
    t.add_argument("--steps", type=int, default=200)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=TrainConfig.lr)
    t.add_argument("--lambda-exit", type=float, default=TrainConfig.lambda_exit)
    t.add_argument("--budget", type=int, default=32)
    t.add_argument("--depth", type=int, default=6)
    t.add_argument("--collect-temperatures", default="0,1",
                   help="target continuations are collected at these temperatures, in turn over the prompts")
    t.add_argument("--token-labels", default=TrainConfig.token_labels, choices=TOKEN_LABELS,
                   help="L_tok against the target's distribution (soft) or its sampled continuation token (hard)")
    t.add_argument("--collect-tokens", type=int, default=96)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", required=True, help="folder for the trained drafter")
    _add_models(t)
    e = sub.add_parser("eval", help="held-out tau, mean 1 + C_p and acceptance by depth at T = 0 and T = 1")
    e.add_argument("--prompts", default=None)
    e.add_argument("--split", default="eval")
    e.add_argument("--budget", type=int, default=64)
    e.add_argument("--depth", type=int, default=8)
    e.add_argument("--max-new-tokens", type=int, default=64)
    e.add_argument("--temperatures", default="0,1")
    e.add_argument("--json", action="store_true")
    _add_models(e)
    b = sub.add_parser("bench", help="run a benchmark script from benchmarks/ (verifier_stage, end_to_end, ...)")
    b.add_argument("name", help="script name in benchmarks/, without .py")
    b.add_argument("args", nargs="*", help="arguments passed to the script (after --)")
    EXTRA_HANDLERS.update({"train": cmd_train, "eval": cmd_eval, "bench": cmd_bench})


def _pair_with_default_target(args):
    from .cli import pair_from_args
    from .engine.models import embedded_pair_paths

    if args.draft is not None and args.target is None:
        args.target = str(embedded_pair_paths()[0])
    return pair_from_args(args)


def _numbers(text: str, flag: str) -> list[float]:
    """A comma-separated list of numbers from a flag, or a one-line error naming the flag."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise TevvizError(f"{flag} must be numbers separated by commas, got {text!r}") from None


def cmd_train(args) -> int:
    from transformers.utils import logging as hf_logging

    from .engine.builders import BuilderConfig
    from .engine.training import ExitTrainer, TrainConfig, collect_mixed_streams, contexts_from_streams
    from .prompts import load_prompts

    cfg = TrainConfig(objective=args.objective, lambda_exit=args.lambda_exit, lr=args.lr, steps=args.steps,
                      batch=args.batch, builder=BuilderConfig(budget=args.budget, depth=args.depth),
                      token_labels=args.token_labels, seed=args.seed)
    temps = _numbers(args.collect_temperatures, "--collect-temperatures")
    if any(not 0 <= t <= 10 for t in temps):
        raise TevvizError("--collect-temperatures must be in [0, 10]")
    rows = load_prompts(args.prompts, args.split)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise TevvizError(f"--out {args.out!r} exists and is not empty")
    pair = _pair_with_default_target(args)
    prompts = [pair.tokenizer(r["prompt"])["input_ids"] for r in rows]
    print(f"collecting target continuations of {len(prompts)} prompts ...", file=sys.stderr)
    streams = collect_mixed_streams(pair, prompts, temps, args.collect_tokens, args.seed)
    trainer = ExitTrainer(pair, contexts_from_streams(streams), cfg)
    from tqdm.auto import tqdm

    bar = tqdm(range(cfg.steps), desc=f"ExitTrain ({cfg.objective})", file=sys.stderr)
    for _ in bar:
        s = trainer.step()
        bar.set_postfix(loss=f"{s.loss:.3f}", l_tok=f"{s.l_tok:.3f}", l_exit=f"{s.l_exit:.3f}", C_p=f"{s.C_p:.3f}")
    hf_logging.disable_progress_bar()
    trainer.trained_draft().save_pretrained(out)
    pair.tokenizer.save_pretrained(out)
    log = {"config": {k: str(v) for k, v in cfg.__dict__.items()},
           "data": {"prompts": args.prompts or "assets/prompts.jsonl", "split": args.split,
                    "collect_temperatures": temps, "collect_tokens": args.collect_tokens},
           "log": [s.__dict__ for s in trainer.log]}
    (out / "exittrain_log.json").write_text(json.dumps(log, indent=1))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    from .engine.builders import BuilderConfig
    from .engine.evaluation import evaluate
    from .prompts import load_prompts

    temps = _numbers(args.temperatures, "--temperatures")
    builder = BuilderConfig(budget=args.budget, depth=args.depth)
    pair = _pair_with_default_target(args)
    prompts = [pair.tokenizer(r["prompt"])["input_ids"] for r in load_prompts(args.prompts, args.split)]
    results = [evaluate(pair, prompts, t, builder, args.max_new_tokens) for t in temps]
    if args.json:
        print(json.dumps([r.to_dict() for r in results]))
        return 0
    print(f"draft {pair.draft_name}  target {pair.target_name}  B={args.budget} H={args.depth}  {len(prompts)} prompts")
    print(f"{'T':>4} {'tau':>12} {'1+C_p':>12}  acceptance by depth")
    for r in results:
        acc = " ".join(f"{a:.2f}" for a in r.acceptance_by_depth)
        print(f"{r.temperature:>4g} {r.tau:>6.3f}±{r.tau_se:<5.3f} {r.ceiling:>6.3f}±{r.ceiling_se:<5.3f}  {acc}")
    return 0


def cmd_bench(args) -> int:
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    script = root / f"{args.name}.py"
    if not script.is_file():
        have = ", ".join(sorted(p.stem for p in root.glob("*.py"))) if root.is_dir() else "none (not a source checkout)"
        raise TevvizError(f"no benchmark {args.name!r}; available: {have}")
    sys.argv = [str(script), *args.args]
    runpy.run_path(str(script), run_name="__main__")
    return 0
