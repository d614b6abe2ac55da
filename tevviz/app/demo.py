"""The tevviz web app: `build_demo(...)` returns the Gradio Blocks, `launch(...)` serves it.

`build_demo` wires one function per tab; each tab builds its widgets and turns their values into one
`Controller` call and its result into widget updates through the pure views. Nothing is loaded at
import: the models load on the first action that needs them.
"""

from __future__ import annotations

import logging
from itertools import zip_longest
from pathlib import Path

import gradio as gr
import torch
from gradio.tunneling import CURRENT_TUNNELS

from ..engine import ModelPair, ModelSource, TevvizError
from ..engine.decode.thread_choice import settle
from ..engine.load.pairs import DEFAULT_PAIR, DecodeDefaults, named_pair
from ..engine.records.io import MAX_BYTES
from ..engine.verify.verifiers import VERIFIERS
from ..prompts import load_prompts, with_demo_prompts
from .compare_tab import compare_tab
from .controller import Controller
from .decode_tab import decode_tab
from .doctor_panel import doctor_panel
from .exittrain_tab import exittrain_tab
from .figure_view import serve_plotly_js
from .model_thread import MODEL_THREAD, TORCH_DEFAULT_THREADS, app_threads
from .run_store import RunStore
from .runs_panel import wire_runs
from .scan_tab import DECODE_TAB, scan_tab
from .source import PairSource
from .state import MAX_HISTORY, AppState, SessionStore

# One the embedded target continues with code (tests/recipes/test_prompt_quality.py).
DEFAULT_PROMPT = "def read_lines(path):"
logger = logging.getLogger("tevviz")
REFERENCE_VERIFIERS = ("predraw-loop",)  # reference code for the tests, not offered in the UI
CSS = """
#tree-plot { overflow-x: auto; }
/* A tree wider than its view (a fan of labelled exit children) scrolls: a scrollbar always drawn says so, where an
   overlay one showed nothing and the right of the tree, its colour bar with it, looked cut off. */
.tv-figure { scrollbar-width: thin; scrollbar-color: #9a9a9a #eeeeee; }
.tv-figure::-webkit-scrollbar { height: 10px; }
.tv-figure::-webkit-scrollbar-thumb { background: #9a9a9a; border-radius: 5px; }
.tv-figure::-webkit-scrollbar-track { background: #eeeeee; }
#node-details { max-height: 70vh; overflow-y: auto; overflow-x: auto; }
#node-details table { font-size: 0.9em; }
#node-details table th, #node-details table td { padding: 4px 6px; }
/* A narrow window: the view first, the settings after it (their accordions folded by the tree's script). */
@media (max-width: 900px) {
  #decode-row { flex-direction: column-reverse; }
  #view-col, #settings-col { min-width: 0 !important; width: 100%; }
  /* Step stays within reach of the tree: the settings column, its home, is below the view here. */
  #step-row { position: fixed; bottom: 0; left: 0; right: 0; z-index: 50; padding: 6px 12px;
              background: var(--background-fill-primary, white); box-shadow: 0 -2px 6px rgba(0, 0, 0, 0.15); }
  body { padding-bottom: 64px; }
  /* The run picker takes the row, its buttons the next: beside four buttons it was 245 px, its name under its arrow. */
  #runs-row { flex-wrap: wrap; }
  #runs-row > :has(#run-pick) { flex: 1 1 100% !important; min-width: 100% !important; }
  /* Side by side's two summaries one under the other: two 340 px columns wrapped every table and line. */
  #side-summary { flex-direction: column; }
}
#error-box p, .error-box p { color: #b00020; font-weight: 600; }
/* The address bar's keeper draws nothing: it took a 20 px row and two gaps under the run row. Its script runs all
   the same. */
#url-sync { display: none !important; }
/* A run's name longer than its box ends in an ellipsis short of the arrow, not under it ("(shown)" lost its last
   letter at 800-900 px). */
#run-pick input { text-overflow: ellipsis; }
/* Fold by mass alone in its column was stretched to the search row's 115 px, its small text lost in a tall box. */
#fold-btn { flex: 0 0 auto; margin: auto 0; }
/* Result tables fit their column or scroll inside it, never cut off at its edge (a B − A column read "+0.…"). Where
   scrollbars are overlays (drawn only while scrolling), a shade at an edge says that more lies beyond it: the two
   covers scroll with the content and hide the shades once an edge is reached. */
.stats-table { overflow-x: auto;
  background: linear-gradient(to right, var(--block-background-fill, white) 40%, transparent) left / 32px 100%
                no-repeat local,
              linear-gradient(to left, var(--block-background-fill, white) 40%, transparent) right / 32px 100%
                no-repeat local,
              linear-gradient(to right, rgba(0, 0, 0, 0.2), transparent) left / 12px 100% no-repeat scroll,
              linear-gradient(to left, rgba(0, 0, 0, 0.2), transparent) right / 12px 100% no-repeat scroll; }
.stats-table table { font-size: 0.9em; }
.stats-table table th, .stats-table table td { padding: 4px 6px; }
/* Tables of results keep their words whole: a header such as hidden_states is one word. */
.prose table th, .prose table td { word-break: normal; overflow-wrap: normal; }
"""


def launch_options() -> dict:
    """Theme and CSS for `Blocks.launch` (Gradio 6 takes them there, not in Blocks())."""
    return {"theme": gr.themes.Soft(), "css": CSS, "max_file_size": MAX_BYTES}


def ui_verifiers() -> list[str]:
    """The verifiers a user picks from: every registered one but the reference implementations."""
    return [v for v in VERIFIERS if v not in REFERENCE_VERIFIERS]


def example_prompts(path=None) -> list[dict]:
    """The example prompts (the shipped file by default, after its demo prompts); none when the file is absent,
    bad lines left out."""
    try:
        return with_demo_prompts(path, load_prompts(path, skip_bad=True))
    except TevvizError as e:
        logger.info("no example prompts: %s", e)
        return []


HELD_OUT_EXAMPLES = 8  # prompts of each further held-out set of a named pair among the examples


def with_held_out_examples(rows: list[dict], named, n: int = HELD_OUT_EXAMPLES) -> list[dict]:
    """`rows` with `n` single-turn prompts of each further held-out set of the named pair (a category at a time)
    after their held-out ones; multi-turn rows are templated already, and the chat checkbox would wrap them again."""
    extra = []
    for split, _ in named.held_out if named is not None else ():
        try:
            pool = [r for r in load_prompts(named.prompts_path(split), split, skip_bad=True) if r.get("chat", True)]
        except TevvizError as e:
            logger.info("no %s examples: %s", split, e)
            continue
        by_category: dict[str, list[dict]] = {}
        for r in pool:
            by_category.setdefault(r.get("category", ""), []).append(r)
        extra += [r for turn in zip_longest(*by_category.values()) for r in turn if r is not None][:n]
    at = next((k for k, r in enumerate(rows) if r.get("split") == "train"), len(rows))
    return rows[:at] + extra + rows[at:]


def pair_hint(models: PairSource) -> str:
    """On the embedded pair: how to open the real pretrained pair, which is ready when it has been fetched."""
    if models.pair is not None or models.model.target is not None or models.model.pair not in (None, DEFAULT_PAIR):
        return ""
    smol = named_pair("smollm2")
    if (smol.target_path() / "config.json").is_file():
        return ("SmolLM2-135M-Instruct is fetched: restart with `tevviz --pair smollm2` for a real pretrained pair "
                "and its chat prompts.")
    return ("For a real pretrained pair: `tevviz pair fetch smollm2` (a 93 MB download, once), then "
            "`tevviz --pair smollm2`.")


def start_note(start: DecodeDefaults, fastest: DecodeDefaults) -> str:
    """Where the Decode tab opens, beside the faster setting `tevviz decode` starts on, when they differ."""
    if start == fastest:
        return ""
    return (f"\n\nThe Decode tab's settings start on a tree worth looking at ({start.describe()}: press Step); the "
            f"fastest setting measured for this pair, where `tevviz decode` starts, is {fastest.describe()}.")


def pair_source(source: ModelSource | ModelPair | None, model_dirs: tuple[str, ...] = ()) -> PairSource:
    """The app's models: a loaded `ModelPair` as it is, a `ModelSource` loaded on first use, or (None) the embedded
    pair, loaded where its weights load."""
    if isinstance(source, ModelPair):
        return PairSource(pair=source, model_dirs=tuple(model_dirs))
    return PairSource(source or ModelSource(device=None), model_dirs=tuple(model_dirs))


def build_demo(source: ModelSource | ModelPair | None = None, *, default_prompt: str | None = None,
               store: SessionStore | None = None, history: int = MAX_HISTORY,
               model_dirs: tuple[str, ...] = (), run_dir: str | Path | None = None) -> gr.Blocks:
    """The app's Blocks over `source`: a `ModelSource` (loaded on the first action that needs it), a loaded
    `ModelPair`, or None for the embedded pair.

    `history` caps the rounds each browser session keeps; `model_dirs` are further folders the UI may
    load draft models from; `run_dir` keeps the browsers' runs (default: the cache's `runs/`).
    """
    models = pair_source(source, model_dirs)
    ctl = Controller(models, store, history, RunStore(run_dir) if run_dir is not None else None)
    prompts = with_held_out_examples(example_prompts(models.prompts_path()), models.model.named)
    first_prompt = default_prompt or (prompts[0]["prompt"] if prompts else DEFAULT_PROMPT)
    verifiers = ui_verifiers()
    serve_plotly_js()

    # delete_cache: Gradio's copies of exported files (a tree HTML embeds plotly.js, ~5 MB) go after an hour.
    with gr.Blocks(title="tevviz", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        # Gradio deletes a state an hour after its tab closes, or once it has not changed for `time_to_live`
        # seconds; either way the callback frees the session's DecodeSession and ExitTrain trainer.
        # Made on load (a callable), so a browser's first events share one session id: the tree's width reported
        # while a first Step runs still reaches that Step's drawing (decode_tab.shown).
        state = gr.State(lambda: AppState(), time_to_live=ctl.store.ttl_s,
                         delete_callback=lambda st: st is not None and ctl.store.drop(st.sid))
        hint = pair_hint(models)
        start = models.builder_default()
        gr.Markdown(f"## tevviz — draft-tree debugger for tree speculative decoding\nModels: {models.description}."
                    + (f" {hint}" if hint else "") + start_note(start, models.fastest()), elem_id="header")
        with gr.Tabs() as tabs:
            with gr.Tab("Decode", id=DECODE_TAB):
                decode = decode_tab(ctl, state, prompts, first_prompt, verifiers, models.chat_default(), start)
            with gr.Tab("Verifier comparison"):
                compare_tab(ctl, state, decode.settings, verifiers, models.drafters())
            with gr.Tab("ExitTrain"):
                exittrain_tab(ctl, state, decode.settings)
            with gr.Tab("Scan"):
                scan_tab(ctl, state, decode, tabs)
            with gr.Tab("Doctor"):
                doctor_panel(ctl, state, models.drafters())
        wire_runs(ctl, demo, decode)
    demo.queue(default_concurrency_limit=1)
    return demo


def browser_cap(server_name: str, cores: int = TORCH_DEFAULT_THREADS) -> int | None:
    """The most threads the models may take: bound to this machine alone, the browser runs on it too and a core
    stays free for it (on the embedded pair two threads beside a browser made a Step 1.5-1.9x slower,
    docs/app-latency.md); bound wider, no cap."""
    return max(1, cores - 1) if server_name in ("127.0.0.1", "localhost", "::1") else None


def launch(source: ModelSource | ModelPair | None = None, *, server_name: str = "127.0.0.1",
           server_port: int | None = None, share: bool = False, model_dirs: tuple[str, ...] = (),
           preload: bool = False, threads: int | None = None) -> None:
    """Serve the app on `source` (as `build_demo` takes it; blocking); binds this machine only and makes no share
    link unless asked.

    `preload` loads the models before serving, with their progress in the terminal, so the first Step
    does not wait for them, and chooses the thread count they decode on (`threads`, else the fastest here,
    engine/decode/thread_choice.py; without `preload`, the policy's `model_thread.app_threads`)."""
    n = app_threads(threads, TORCH_DEFAULT_THREADS)
    if n is not None:
        torch.set_num_threads(n)
    models = pair_source(source, model_dirs)
    if preload:
        print(f"loading {models.description} ...", flush=True)
        # On this (the model) thread: torch's thread count is the calling thread's own.
        choice = settle(models.get(), threads, browser_cap(server_name),
                        cap_why=f"a core left for the browser on this machine (--threads {TORCH_DEFAULT_THREADS} to "
                                "take it)")
        print(f"decoding on {choice.describe()}", flush=True)
    demo = build_demo(source, model_dirs=model_dirs)
    # quiet: Gradio's own lines tell a CLI user to pass `share=True` to launch(); ours name the flags instead.
    demo.launch(server_name=server_name, server_port=server_port, share=share, prevent_thread_lock=True,
                debug=False, quiet=True, **launch_options())
    print(f"tevviz is at {demo.local_url} (Ctrl-C to stop)" + (f"; public link {demo.share_url}" if share else ""),
          flush=True)
    hint = pair_hint(models)
    if hint:
        print(hint.replace("`", ""), flush=True)
    # The main thread, which loaded the models, runs them for every handler (model_thread.py says why). With
    # $GRADIO_DEBUG set, Gradio's launch blocks here itself until Ctrl-C and closes the server; serving then
    # ends at once, since the server's thread is gone.
    try:
        MODEL_THREAD.serve(until=lambda: not demo.is_running or not demo.server.thread.is_alive())
    except KeyboardInterrupt:
        print("Keyboard interruption in main thread... closing server.")
    finally:
        demo.close(verbose=False)
        for tunnel in CURRENT_TUNNELS:  # a share link's tunnel, as Gradio's own blocking loop does
            tunnel.kill()
