"""The command line's shared flag groups: the models, the prompt, sampling and the draft tree, threads (the commands
themselves are built in `tevviz.cli`; what the flags mean to the engine is in `tevviz.options`)."""

from __future__ import annotations

import argparse
import importlib

from .engine.load.pairs import AUTO_LIMIT, DEFAULT_PAIR, FIXED_BUDGET, NAMED_PAIRS


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line, without the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, descriptions and examples kept as written."""

    def _get_help_string(self, action):
        # A help text that says its default already, or a default of None or False, needs no "(default: ...)".
        text = action.help or ""
        if action.default in (None, False, []) or "default" in text.lower():
            return text
        return super()._get_help_string(action)


class LazyChoices:
    """Choices read from an engine registry only when an argument is checked, so --help stays torch-free."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def _names(self):

        return list(getattr(importlib.import_module(self.module), self.name))

    def __contains__(self, item) -> bool:
        return item in self._names()

    def __iter__(self):
        return iter(self._names())


def add_models(p: argparse.ArgumentParser) -> None:
    """The flags that name a model pair and how to load it (read back by `options.source_from_args`)."""
    g = p.add_argument_group("models (default: the embedded stdlib pair)")
    g.add_argument("--pair", choices=list(NAMED_PAIRS), default=None,
                   help=f"a named pair: {', '.join(NAMED_PAIRS)} (default {DEFAULT_PAIR} when no --target is given); "
                        "--draft then swaps in another drafter")
    g.add_argument("--target", help="target model: hub id, local HF folder or .gguf file")
    g.add_argument("--draft", help="draft model: hub id, local HF folder or .gguf file")
    g.add_argument("--revision", default=None, help="branch, tag or commit of hub ids")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weights' dtype (auto: the checkpoint's; float32 for a .gguf)")
    g.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps ...")
    g.add_argument("--device-map", default=None, help='"auto" spreads a large target over GPUs (accelerate)')
    g.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention implementation")
    g.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model folder or hub")
    g.add_argument("--compile-draft", action="store_true",
                   help="run the draft's forwards through torch.compile: about a minute of compiling at the start, "
                        "then cheaper draft levels (the target is never compiled)")
    g.add_argument("--layer-ids", type=_layer_ids, default=None, metavar="I,J,K",
                   help="the target states a drafter that reads them (EAGLE-3, block) takes, as hidden_states "
                        "indices (0: the embedding output, i: layer i's output), in place of its config's reading")


def _layer_ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--layer-ids takes comma-separated whole numbers, got {text!r}") from None


def add_prompt(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("prompt")
    src = g.add_mutually_exclusive_group(required=required)
    src.add_argument("--prompt", help="the prompt text; - reads it from standard input")
    src.add_argument("--prompt-file", metavar="FILE", help="read the prompt from a text file")
    g.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap the prompt in the tokenizer's chat template (default: on when the tokenizer has one)")


def budget_value(text: str):
    """--budget: a whole number, or auto."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None


def tree_shape_flags(g) -> None:
    """--children and --width, with BuilderConfig's defaults (not imported here: it would load torch for --help)."""
    g.add_argument("--children", type=int, default=8, help="K: children per expanded node (best-first)")
    g.add_argument("--width", type=int, default=8, help="W: frontier width per depth (best-first)")


DEFAULTS_NOTE = ("Flags left out take the setting measured fastest for the loaded named pair at the temperature "
                 "given (its builder, verifier, budget, depth and a sampled chain's stop, recorded with the benchmark "
                 "that measured them); "
                 "any other pair, or a drafter that setting does not fit, starts at --budget auto (whose floor is "
                 f"plain decoding; B = {FIXED_BUDGET} for a builder that does not size itself) on the drafter's own "
                 "builder (best-first; ddtree for a block drafter, eagle for an EAGLE-3 head) under TEV. Flags "
                 "given always win; naming another builder or verifier, or a fixed --budget where the setting sizes "
                 "itself (by the cost model or by its chain's stop), leaves the rest at those general defaults; "
                 "--budget auto sizes a stopped chain by the cost model instead.")
SCAN_NOTE = ("Flags left out take the drafter's own builder (best-first; ddtree for a block drafter; eagle for an "
             "EAGLE-3 head) at B = "
             f"{FIXED_BUDGET}, H = 6 (a block drafter's block size - 1) under TEV: fixed trees, so that a scan's "
             "records do not depend on the machine's timings (--budget auto sizes each round by them).")


def add_decoding(p: argparse.ArgumentParser, note: str = DEFAULTS_NOTE) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=64, help="the most tokens to generate")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    g.add_argument("--seed", type=int, default=0, help="seeds the verifier's draws (and a sampled chain's)")
    g.add_argument("--ignore-eos", action="store_true",
                   help="keep decoding past the end token to --max-new-tokens (as vLLM's ignore_eos and llama.cpp's "
                        "--ignore-eos), so that a benchmark writes the same number of tokens on every side")
    g = p.add_argument_group("draft tree", note)
    g.add_argument("--verifier", default=None, metavar="NAME",
                   choices=LazyChoices("tevviz.engine.verify.verifiers", "VERIFIERS"),
                   help="a registered verifier: tev, predraw, residual, speculative (speculative sampling, for "
                        "--builder sampled; on other trees it is residual), and the reference predraw-loop "
                        "(default: as said above)")
    g.add_argument("--builder", default=None, metavar="NAME",
                   choices=LazyChoices("tevviz.engine.draft.builders", "BUILDERS"),
                   help="best-first, static, chain, sampled (a chain drawn from the draft's own law, for --verifier "
                        "speculative; docs/math.md), mixed (with --budget auto: each round a best-first tree or a "
                        "sampled chain, whichever the session measures faster; docs/auto-budget.md), or ddtree "
                        "(DDTree's heap over a block drafter's per-depth rows); default: as said above")
    g.add_argument("--budget", type=budget_value, default=None,
                   help="B: nodes kept (best-first); auto: each round's B and H chosen for expected tokens per second "
                        "from a cost model measured as the session runs, up to --budget-limit and --depth, a plain "
                        "target step when no tree pays (default: as said above)")
    g.add_argument("--budget-limit", type=int, default=AUTO_LIMIT,
                   help="with --budget auto: the most nodes a tree may keep")
    g.add_argument("--depth", type=int, default=None,
                   help="H: maximum depth (default: as said above; 6 where nothing sets it, for ddtree the block "
                        "drafter's block size - 1)")
    tree_shape_flags(g)
    g.add_argument("--branching", default="4,2,2,1,1", help="children per node at each depth (static)")
    g.add_argument("--draft-temperature", type=float, default=1.0,
                   help="path scores from the draft's logits / this (best-first): above 1 a sharp draft builds wider "
                        "trees; the tokens drafted under a node and the verification are unchanged")
    g.add_argument("--stop-below", type=float, default=None, metavar="P",
                   help="--builder sampled at a fixed depth: end each round's chain after the first token drawn where "
                        "the draft's top probability is below P (--depth its longest; 0 = no stop; exact at any "
                        "temperature; default: as said above)")


def add_threads(p) -> None:
    """--threads, one policy for every command, the app and tevviz.load (engine/load/threads.py)."""
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for the models (default: $OMP_NUM_THREADS when set, else the count whose "
                        "target passes ran fastest on this machine, timed once per machine and model and kept; "
                        "more threads only where they clearly win)")
