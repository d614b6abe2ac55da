"""The notebook API (docs/python-api.md): load a pair, decode round by round, look at the trees, write a report.

Thin on purpose: each function is one call into the engine or the render layer with the CLI's defaults.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from .engine.core.sampling import SamplingConfig
from .engine.decode.session import DecodeConfig, DecodeSession, encode_prompt, has_chat_template
from .engine.decode.start import decode_start
from .engine.draft.builders import BuilderConfig
from .engine.draft.drafters import drafter_kind_of
from .engine.load.models import ModelPair, ModelSource
from .engine.load.pairs import AUTO_LIMIT, FIXED_BUDGET, DecodeDefaults, pair_of_target
from .engine.records import io as tio
from .engine.records.records import RoundRecord
from .render.tree_figure import tree_figure


def load(pair: str | None = None, target: str | None = None, draft: str | None = None, device: str = "auto",
         dtype: str = "auto", threads: int | None = None, **options) -> ModelPair:
    """A checked target/draft pair: a named pair ("stdlib", the default, or "smollm2"), or your own models.

    `threads`: torch's CPU threads, by the policy of `tevviz decode --threads` and the app: this number, else
    $OMP_NUM_THREADS when set, else the count whose target passes ran fastest on this machine, timed once and kept
    (engine/decode/thread_choice.py). `options` are ModelSource's other fields (revision, device_map,
    attn_implementation, trust_remote_code).
    """
    from .engine.decode.thread_choice import settle
    from .engine.load.threads import use_threads

    use_threads(threads)
    loaded = ModelSource(target=target, draft=draft, pair=pair, device=device, dtype=dtype, **options).load()
    settle(loaded, threads)
    return loaded


def session(pair: ModelPair, prompt: str, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
            budget: int | str | None = None, depth: int | None = None, builder: str | None = None,
            verifier: str | None = None, stop_below: float | None = None, max_new_tokens: int = 64, seed: int = 0,
            chat: bool | None = None, optimal: bool = False, ignore_eos: bool = False,
            **builder_options) -> DecodeSession:
    """A decoding session on `prompt`; `step()` runs one round and returns its RoundRecord.

    `builder`, `verifier`, `budget` (a number, or "auto": each round sized for tokens/s up to `budget_limit`),
    `depth` and `stop_below` (a sampled chain ends after a token the draft gave less than this) left out start where
    `tevviz decode` does: a named pair's measured best at `temperature`, else
    budget="auto" on the drafter's own builder (DDTree as deep as its block for a block drafter); `chat` defaults to
    whether the tokenizer has a chat template; `optimal=True` computes each round's optimal tree (see
    `DecodeSession.optimal` to compute it for one round only); `ignore_eos=True` decodes past the end token to
    `max_new_tokens` (a benchmark's equal lengths).
    """
    start = start_settings(pair, temperature, builder, verifier, budget, depth, builder_options, stop_below)
    chat = has_chat_template(pair.tokenizer) if chat is None else chat
    auto = start.budget == "auto"
    limit = builder_options.pop("budget_limit", AUTO_LIMIT)
    tree = BuilderConfig(name=start.builder, budget=limit if auto else start.budget, depth=start.depth, auto=auto,
                         stop_below=start.stop_below, **builder_options)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p), builder=tree,
                       verifier=start.verifier, max_new_tokens=max_new_tokens, seed=seed, chat=chat, optimal=optimal,
                       stop_on_eos=not ignore_eos)
    return DecodeSession(pair, encode_prompt(pair.tokenizer, prompt, chat=chat), cfg)


def start_settings(pair: ModelPair, temperature: float, builder=None, verifier=None, budget=None, depth=None,
                   options: dict | None = None, stop_below: float | None = None) -> DecodeDefaults:
    """The settings `session` decodes with (engine/decode/start.py's decode_start for the loaded pair); `options` may
    hold the older spelling auto=True with `budget` as the limit (moved to options["budget_limit"])."""
    options = {} if options is None else options
    auto = options.pop("auto", None)
    if auto and budget not in (None, "auto"):
        options.setdefault("budget_limit", budget)
        budget = "auto"
    elif auto is not None:
        budget = "auto" if auto else (FIXED_BUDGET if budget in (None, "auto") else budget)
    kind = drafter_kind_of(pair.draft)
    return decode_start(pair_of_target(pair.target_name), temperature, kind, kind.model_depth(pair.draft),
                        builder=builder, verifier=verifier, budget=budget, depth=depth, stop_below=stop_below)


def figure(record: RoundRecord, metric: str = "P", ghosts: bool = True) -> go.Figure:
    """The round's draft tree coloured by `metric`, with its ghost branches when its optimal tree is known."""
    gap = record.coverage_gap() if ghosts else None
    drawn = [g.__dict__ for g in gap.ghosts] if gap is not None else ()
    return tree_figure(record.to_dict(), metric, ghosts=drawn)


def rounds_of(source) -> tio.ImportedSession:
    """A DecodeSession, a list of RoundRecords or a JSON file path as the ImportedSession the report reads."""
    if isinstance(source, DecodeSession):
        prompt = source.pair.tokenizer.decode(source.prompt_ids)
        return tio.parse(tio.export_session(source, prompt))
    if isinstance(source, (str, Path)):
        return tio.load(source)
    return tio.ImportedSession(list(source), "session")


def report(source, path: str | Path | None = None, title: str | None = None, compare=None) -> str:
    """The self-contained HTML session report of a session, rounds or a session file; written to `path` if given.

    With `compare` (a second session or file), the page compares the two round by round, as `tevviz report A
    --compare B`."""
    if compare is not None:
        from .render.compare_report import compare_report_html

        text = compare_report_html(_comparison(source, compare), title)
    else:
        from .render.report import report_html

        text = report_html(rounds_of(source), title)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def compare(a, b, names: tuple[str, str] = ("A", "B")):
    """Two runs (sessions, session files or lists of rounds) compared round by round: a RunComparison.

    `.divergence.sentence` says where the texts part, `.table` holds acceptance by depth (conditional and marginal),
    tau and mean E[L] of both with standard errors, `.round(k)` round k of both (nodes matched by token path)."""
    return _comparison(a, b, names)


def _comparison(a, b, names: tuple[str, str] = ("A", "B")):
    from .engine.analysis.run_compare import Run, compare_runs

    read = lambda x: x if isinstance(x, tio.ImportedSession) else rounds_of(x)
    return compare_runs(*(Run.of(read(x), name) for x, name in zip((a, b), names)))


def compare_trees(comparison, index: int, metric: str | None = None, union: bool = False):
    """Round `index` of a comparison's two runs in one shared layout: two Figures at identical node positions (each
    coloured by `metric`, by side without one), or with `union=True` one Figure marked both / A only / B only."""
    from .render.compare_figure import shared_layout, side_figure_dicts, union_figure_dict

    comparison.round(index)  # a clear error where either run lacks the round
    ra, rb = (next(r for r in run.rounds if r.index == index) for run in (comparison.a, comparison.b))
    names, tree = (comparison.a.name, comparison.b.name), shared_layout(ra, rb)
    if union:
        return go.Figure(union_figure_dict(ra, rb, names, f"round {index}", tree), _validate=False)
    figs = side_figure_dicts(ra, rb, names, metric, (f"{names[0]}, round {index}", f"{names[1]}, round {index}"), tree)
    return tuple(go.Figure(f, _validate=False) for f in figs)


def _register_notebook_display() -> None:
    """In IPython, a RoundRecord displays as its tree figure (the engine itself stays free of plotly)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return
    ip.display_formatter.mimebundle_formatter.for_type(
        RoundRecord, lambda r, include=None, exclude=None: figure(r)._repr_mimebundle_(include, exclude))


_register_notebook_display()
