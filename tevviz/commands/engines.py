"""`tevviz engine ACTION`: serving engines beside tevviz (docs/engines.md). This module builds the group and its
`import` action; other modules add actions to the same group (ENGINE_MODULES: each has `add_parsers(actions)`, whose
parsers set `engine_handler`)."""

from __future__ import annotations

import argparse
import importlib
import json

from ..engine.engines.acceptance import EngineAcceptance
from ..flags import Formatter, Parser

# The modules of tevviz.commands that add actions to `tevviz engine`, in the order --help lists them.
ENGINE_MODULES = ("engine_run",)

DESCRIPTION = (
    "Serving engines beside tevviz. `import` reads the speculative-decoding statistics an engine wrote (vLLM, "
    "SGLang, llama.cpp, TensorRT-LLM: the format is told from the content) into tevviz's terms: verification steps, "
    "acceptance length 1 + accepted / steps, and per depth k the marginal m_k (the share of steps that accepted at "
    "least k drafted tokens) and the conditional c_k = m_k / m_(k-1), with standard errors. docs/engines.md "
    "says how to make each engine write them.")


def add_engine_parsers(sub) -> argparse.ArgumentParser:
    """The `engine` command and its actions (import here; the others from ENGINE_MODULES)."""
    p = sub.add_parser("engine", help="import a serving engine's speculative statistics; run one beside tevviz",
                       description=DESCRIPTION, formatter_class=Formatter)
    actions = p.add_subparsers(dest="engine_command", parser_class=Parser, metavar="ACTION", required=True)
    add_import(actions)
    for name in ENGINE_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise
            continue  # that action is not part of this build
        module.add_parsers(actions)
    return p


def add_import(actions) -> None:
    from ..engine.engines.formats import FORMATS

    i = actions.add_parser("import", help="read an engine's acceptance statistics (logs, /metrics, responses)",
                           description="Read FILE... (one engine: several files are summed as one run) and print "
                                       "the acceptance by depth, marginal and conditional. Exit 2, with one line "
                                       "naming the file, on a file that is not a known format.",
                           formatter_class=Formatter)
    i.add_argument("files", nargs="+", metavar="FILE")
    i.add_argument("--format", default=None, choices=FORMATS, metavar="NAME",
                   help=f"the format, instead of telling it from the content: {', '.join(FORMATS)}")
    i.add_argument("--json", action="store_true", help="print one JSON object (docs/engines.md lists its keys)")
    i.set_defaults(engine_handler=cmd_engine_import)


def cmd_engine(args) -> int:
    return args.engine_handler(args)


def cmd_engine_import(args) -> int:
    from ..engine.engines.formats import combine, read_file

    run = combine([read_file(f, args.format) for f in args.files])
    if args.json:
        print(json.dumps(run.to_dict()))
    else:
        print(acceptance_text(run))
    return 0


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def acceptance_text(run: EngineAcceptance, title: str | None = None) -> str:
    """The run as text: counts, acceptance length, the per-depth table (marginal and conditional), the engine's
    own figures named, and the notes."""
    steps = "unknown" if run.steps is None else str(run.steps)
    drafted = "" if run.drafted is None else f" of {run.drafted} drafted ({_f(run.acceptance_rate)})"
    lines = [title or f"{run.engine} ({run.format})",
             f"  verification steps {steps}, accepted draft tokens {run.accepted}{drafted}",
             f"  acceptance length {_f(run.acceptance_length, 3)}  (1 + accepted / steps)"]
    lines += [f"  {f.name} {f.value:.3f}  (the engine's own: {f.meaning})" for f in run.engine_figures]
    if run.reached:
        from ..engine.engines.tables import acceptance_table
        from ..render.table import text

        lines += [f"  {line}" for line in text(acceptance_table(run))]
    else:
        lines.append("  no per-position figures in this format: marginal and conditional unknown")
    if run.per_step_accepted is not None:
        shown = " ".join(map(str, run.per_step_accepted[:40]))
        more = f" ... ({len(run.per_step_accepted)} steps)" if len(run.per_step_accepted) > 40 else ""
        lines.append(f"  accepted per step: {shown}{more}")
    if len(run.prompts) > 1:
        lengths = ", ".join(f"{p.prompt}: {_f(p.acceptance_length, 2)}" for p in run.prompts[:20])
        more = f", ... ({len(run.prompts)} in all)" if len(run.prompts) > 20 else ""
        lines.append(f"  acceptance length per request: {lengths}{more}")
    lines += [f"  note: {n}" for n in run.notes]
    return "\n".join(lines)
