"""Command line: `tevviz [app|decode|inspect|train|eval|bench|train-demo-pair] ...`, all over the same engine."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .engine.errors import TevvizError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line, without the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_models(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models (default: the embedded stdlib pair)")
    g.add_argument("--target", help="target model: hub id or local HF folder")
    g.add_argument("--draft", help="draft model: hub id or local HF folder")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps ... (default: where the model loads)")
    g.add_argument("--device-map", default=None, help='e.g. "auto" to spread the target over GPUs (accelerate)')
    g.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention implementation")
    g.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model folder or hub")


def _add_decoding(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("draft tree")
    g.add_argument("--verifier", default="tev", choices=["tev", "predraw", "predraw-loop", "residual"])
    g.add_argument("--builder", default="best-first", choices=["best-first", "static", "chain"])
    g.add_argument("--budget", type=int, default=32, help="B: nodes kept (best-first)")
    g.add_argument("--depth", type=int, default=6, help="H: maximum depth (best-first, chain)")
    g.add_argument("--children", type=int, default=4, help="K: children per expanded node (best-first)")
    g.add_argument("--width", type=int, default=8, help="W: frontier width per depth (best-first)")
    g.add_argument("--branching", default="4,2,2,1,1", help="children per node at each depth (static)")


def pair_from_args(args):
    """Load the model pair named by the common model flags."""
    from .engine.models import load_pair

    return load_pair(args.target, args.draft, dtype=args.dtype, device=args.device, device_map=args.device_map,
                     attn_implementation=args.attn, trust_remote_code=args.trust_remote_code)


def decode_config_from_args(args):
    """A DecodeConfig from the sampling and tree flags (raises TevvizError on bad values)."""
    from .engine import BuilderConfig, DecodeConfig, SamplingConfig

    try:
        branching = tuple(int(x) for x in args.branching.split(","))
    except ValueError:
        raise TevvizError(f"--branching must be comma-separated integers, got {args.branching!r}") from None
    return DecodeConfig(
        sampling=SamplingConfig(args.temperature, args.top_k, args.top_p),
        builder=BuilderConfig(args.builder, args.budget, args.depth, args.children, args.width, branching),
        verifier=args.verifier, max_new_tokens=args.max_new_tokens, seed=args.seed,
    )


def cmd_decode(args) -> int:
    from .engine import DecodeSession, autoregressive, encode_prompt, summarize
    from .engine.io import export_session

    cfg = decode_config_from_args(args)
    pair = pair_from_args(args)
    prompt_ids = encode_prompt(pair.tokenizer, args.prompt, chat=args.chat)
    session = DecodeSession(pair, prompt_ids, cfg)
    t0 = time.perf_counter()
    session.run()
    seconds = time.perf_counter() - t0
    s = summarize(session.rounds)
    text = pair.tokenizer.decode(session.generated)
    out = {
        "text": text,
        "token_ids": session.generated,
        "rounds": s["rounds"],
        "tau": s["tau"],
        "mean_ceiling": s["mean_ceiling"],
        "tokens_per_s": len(session.generated) / seconds if seconds > 0 else 0.0,
        "stage_ms": s["stage_ms"],
    }
    if session.notice:
        out["notice"] = session.notice
    if args.baseline:
        base = autoregressive(pair, prompt_ids, cfg)
        out["baseline_tokens_per_s"] = base.tokens_per_s
        out["speedup"] = out["tokens_per_s"] / base.tokens_per_s if base.tokens_per_s else None
    if args.export:
        with open(args.export, "w", encoding="utf-8") as f:
            json.dump(export_session(session, args.prompt), f)
    if args.json:
        print(json.dumps(out))
        return 0
    print(args.prompt + text)
    print("-" * 60, file=sys.stderr)
    print(f"rounds {s['rounds']}  tau {s['tau']:.2f}  mean 1+C_p {s['mean_ceiling']:.2f}  "
          f"{out['tokens_per_s']:.1f} tok/s" + (f"  speed-up {out['speedup']:.2f}x" if args.baseline else ""),
          file=sys.stderr)
    print("stage ms: " + "  ".join(f"{k} {v:.1f}" for k, v in s["stage_ms"].items()), file=sys.stderr)
    if session.notice:
        print("note: " + session.notice, file=sys.stderr)
    return 0


def cmd_inspect(args) -> int:
    from .engine.io import load
    from .engine.records import summarize

    imported = load(args.file)
    s = summarize(imported.rounds)
    print(f"{args.file}: {imported.kind}, {s['rounds']} rounds, tau {s['tau']:.3f}, "
          + (f"mean 1+C_p {s['mean_ceiling']:.3f}" if s["mean_ceiling"] is not None else "no target scores"))
    print(f"{'round':>5} {'nodes':>6} {'depth':>5} {'exit':>5} {'L':>3} {'1+C_p':>7}")
    for r in imported.rounds:
        ceil = f"{1 + r.C_p:7.3f}" if r.C_p is not None else "      -"
        print(f"{r.index:>5} {r.size:>6} {max(r.depths):>5} {r.exit_node:>5} {r.block_length:>3} {ceil}")
    return 0


def cmd_app(args) -> int:
    from .app import launch

    launch(target=args.target, draft=args.draft, dtype=args.dtype, device=args.device, device_map=args.device_map,
           attn_implementation=args.attn, trust_remote_code=args.trust_remote_code,
           server_name=args.server_name, server_port=args.server_port, share=args.share,
           model_dirs=tuple(args.model_dir))
    return 0


def _add_app(p: argparse.ArgumentParser) -> None:
    _add_models(p)
    p.add_argument("--server-name", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--server-port", type=int, default=None)
    p.add_argument("--share", action="store_true", help="make a public Gradio share link (off by default)")
    p.add_argument("--model-dir", action="append", default=[],
                   help="a folder whose models the UI may load as drafts (repeatable; the shipped models and the "
                        "folders of --target/--draft are always allowed)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="tevviz", description="Visual debugger for draft trees in speculative decoding (TEV, ExitTrain).")
    sub = ap.add_subparsers(dest="command", parser_class=_Parser)
    _add_app(sub.add_parser("app", help="open the debugger in the browser (default)"))
    d = sub.add_parser("decode", help="tree-decode a prompt and print the text and statistics")
    d.add_argument("--prompt", required=True)
    d.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    d.add_argument("--export", metavar="FILE", help="write the session JSON (tevviz.session/1)")
    d.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    d.add_argument("--baseline", action="store_true", help="also time plain autoregressive decoding for the speed-up")
    _add_models(d)
    _add_decoding(d)
    i = sub.add_parser("inspect", help="validate and summarise a session/round JSON or a DDTree trace")
    i.add_argument("file")
    sub.add_parser("train-demo-pair", help="train the embedded stdlib pair (about an hour on a CPU)", add_help=False)
    from .commands import add_extra_commands

    add_extra_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "train-demo-pair":
        from .demo_pair import main as train_demo

        return train_demo(argv[1:])
    ap = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["app", *argv]
    args = ap.parse_args(argv)
    handlers = {"app": cmd_app, "decode": cmd_decode, "inspect": cmd_inspect}
    from .commands import EXTRA_HANDLERS

    handlers.update(EXTRA_HANDLERS)
    try:
        return handlers[args.command](args)
    except TevvizError as e:
        print(f"tevviz {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
