"""The web app through gradio_client, launched in-process on 127.0.0.1 over a tiny random pair."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import tiny_pair

from tevviz.app import build_demo, launch_options
from tevviz.app.compare_tab import COMPARE_OUTPUTS, SIDE_OUTPUTS
from tevviz.app.controller import Controller
from tevviz.app.decode_tab import (
    BASELINE_OUTPUTS,
    BROWSE_OUTPUTS,
    EXPORT_OUTPUTS,
    NODE_OUTPUTS,
    ROUND_OUTPUTS,
    SETTINGS,
)
from tevviz.app.demo import example_prompts
from tevviz.app.navigation import show_round
from tevviz.app.source import PairSource
from tevviz.app.state import AppState, decode_settings, train_settings
from tevviz.app.views import stats_markdown, text_spans
from tevviz.engine import ModelSource, TevvizError
from tevviz.engine.load.pairs import FIXED_BUDGET
from tevviz.engine.records import io as tio
from tevviz.engine.train.contexts import training_contexts
from tevviz.engine.verify.comparison import chi_square_p

PROMPT = "t1 t2 t3"
# Outputs of the decoding endpoints by name (the gr.State is not part of the API).
OUT = {name: i for i, name in enumerate(ROUND_OUTPUTS)}

gradio_client = pytest.importorskip("gradio_client")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """The one extra folder the test app may load draft models from."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def app_url(pair, models_dir):
    demo = build_demo(pair, default_prompt=PROMPT, model_dirs=(str(models_dir),))
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **launch_options())
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def named(out, names: tuple[str, ...]) -> dict:
    """An endpoint's outputs by the app's names for them."""
    return dict(zip(names, out, strict=True))


def client(url: str):
    return gradio_client.Client(url, verbose=False, download_files=True)


def rounds_in(out) -> int:
    """The `rounds` cell of the live-stats table (0 before the first round)."""
    row = [line for line in out[OUT["stats"]].splitlines() if line.startswith("| ") and "rounds" not in line]
    return int(row[0].split("|")[1]) if row else 0


def figure(out, key: str = "tree") -> dict:
    """A figure of a Step's outputs: the tree, or one of the session figures tiled in the session plot."""
    from tevviz.app.views import SESSION_ROWS
    from tevviz.render.panel import panel_traces

    if any(key in row for row in SESSION_ROWS):
        return {"data": panel_traces(figure(out, "session_plot"), key)}
    value = out[OUT[key]] if isinstance(out, tuple) else out
    return json.loads(value if isinstance(value, str) else value["plot"])


def exported_session(c) -> tio.ImportedSession:
    session_path = named(c.predict(api_name="/export"), EXPORT_OUTPUTS)["session_dl"]
    with open(session_path, encoding="utf-8") as f:
        return tio.loads(f.read())


def test_step_run_and_browse(app_url):
    c = client(app_url)
    out = c.predict(api_name="/step")
    assert out[OUT["error"]] == "" and rounds_in(out) == 1
    names = [t.get("name") for t in figure(out)["data"]]
    assert "nodes" in names and "accepted path" in names
    assert figure(out)["layout"]["title"]["text"].startswith("round 0:")

    out = c.predict(api_name="/step")
    assert rounds_in(out) == 2
    out = c.predict(rounds=2, api_name="/run")
    assert rounds_in(out) == 4
    assert figure(out, "stage")["data"] and figure(out, "depth_plot")["data"]
    spans = out[OUT["text"]]
    assert spans[0]["token"] == PROMPT and any(s["class_or_confidence"] == "bonus" for s in spans)

    # Step token walks the shown round's block and rings that node.
    out = c.predict(api_name="/step_token")
    assert any(t.get("name") == "highlight" for t in figure(out)["data"])
    assert any(s["class_or_confidence"] == "current token" for s in out[OUT["text"]])

    # Back to round 1, colour by w, pick a node.
    tree = named(c.predict(index=1, api_name="/view"), BROWSE_OUTPUTS)["tree"]
    assert figure(tree)["layout"]["title"]["text"].startswith("round 1:")
    tree, url = c.predict(metric_name="w", api_name="/metric")
    assert json.loads(url)["metric"] == "w"  # the view in the URL follows
    colourbar = next(t for t in figure(tree)["data"] if t.get("name") == "nodes")["marker"]["colorbar"]
    assert "w(v)" in colourbar["title"]["text"]
    tree, details, node, _, _ = named(c.predict(node_id=1, api_name="/node"), NODE_OUTPUTS).values()
    assert "**node 1**" in details and "P(v)" in details and node == 1
    assert any(t.get("name") == "highlight" for t in figure(tree)["data"])


def test_a_press_with_nothing_to_do_changes_nothing_and_raises_nothing(app_url):
    """Next with no match (a search cleared, or of a token no node has), a key, a click and a fold with no tree: each
    leaves the page as it was. (An empty update for many outputs was a server error, shown as red badges.)"""
    c = client(app_url)
    for api, args in (("/find_next", {}), ("/find_previous", {}), ("/key", {}), ("/fold_by_mass", {})):
        c.predict(**args, api_name=api)  # no tree yet
    c.predict(api_name="/step")
    for query in ("", "no token is this"):
        c.predict(query=query, api_name="/find")
        c.predict(api_name="/find_next")
    out = c.predict(api_name="/step")
    assert out[OUT["error"]] == "" and figure(out)["layout"]["title"]["text"].startswith("round 1:")


def test_bad_input_leaves_state_unchanged(app_url):
    c = client(app_url)
    c.predict(api_name="/step")
    out = c.predict(prompt="   ", api_name="/step")
    assert "prompt is empty" in out[OUT["error"]]
    out = c.predict(budget=0, api_name="/step")
    assert "budget" in out[OUT["error"]]
    out = c.predict(temperature=-1, api_name="/run")
    assert "temperature" in out[OUT["error"]]
    assert len(exported_session(c).rounds) == 1
    out = c.predict(api_name="/step")  # the same settings continue the same session
    assert rounds_in(out) == 2 and out[OUT["error"]] == ""


def test_export_and_import(app_url, tmp_path):
    c = client(app_url)
    for _ in range(3):
        c.predict(api_name="/step")
    err, round_path, session_path, html_path = named(c.predict(api_name="/export"), EXPORT_OUTPUTS).values()
    assert err == ""
    with open(session_path, encoding="utf-8") as f:
        text = f.read()
    session = tio.loads(text)
    assert session.kind == "session" and len(session.rounds) == 3 and session.prompt == PROMPT
    # The tab's start (the drafter's own tree at a fixed B under TEV, source.py tree_start), kept in the export.
    assert session.meta["verifier"] == "tev" and session.meta["builder"]["budget"] == FIXED_BUDGET
    assert session.meta["builder"]["auto"] is False
    with open(round_path, encoding="utf-8") as f:
        assert tio.loads(f.read()).rounds[0].index == 2
    with open(html_path, encoding="utf-8") as f:
        html = f.read()
    assert "Plotly.newPlot" in html and '<script src="http' not in html  # plotly.js embedded: works offline
    assert len(html) > 1_000_000

    # Import the session in another browser: same rounds, browsable, no decoding needed.
    other = client(app_url)
    path = tmp_path / "session.json"
    path.write_text(text, encoding="utf-8")
    out = other.predict(path=gradio_client.handle_file(str(path)), api_name="/import_file")
    assert out[OUT["error"]] == "" and rounds_in(out) == 3 and "Imported session" in out[OUT["stats"]]

    # A DDTree trace has no scores until Re-score fills them in from the prompt box's text.
    trace = {"node_token_ids": [5, 7, 9, 11], "parents": [-1, 0, 0, 1], "node_depths": [0, 1, 1, 2],
             "accepted_indices": [0, 1]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    out = other.predict(path=gradio_client.handle_file(str(path)), api_name="/import_file")
    assert out[OUT["error"]] == "" and rounds_in(out) == 1
    assert any(t.get("name") == "no value" for t in figure(out)["data"])
    out = other.predict(api_name="/rescore")
    assert out[OUT["error"]] == "" and "prompt box text" in out[OUT["stats"]]
    assert not any(t.get("name") == "no value" for t in figure(out)["data"])
    rescored = exported_session(other)
    assert rescored.rounds[0].P[0] == 1.0 and None not in rescored.rounds[0].w

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"node_token_ids": [1], "parents": [3], "node_depths": [0], "accepted_indices": [0]}))
    out = other.predict(path=gradio_client.handle_file(str(bad)), api_name="/import_file")
    assert "parents" in out[OUT["error"]] or "parent" in out[OUT["error"]]
    assert isinstance(out[OUT["stats"]], dict)  # not updated: the imported trace stays on screen


def test_verifier_comparison_matches_exit_law(app_url):
    c = client(app_url)
    c.predict(temperature=1.0, api_name="/step")
    err, law, table = named(c.predict(draws_m=1500, seed_m=1, temperature=1.0, api_name="/compare"),
                            COMPARE_OUTPUTS).values()
    assert err == ""
    bars = {t["name"] for t in json.loads(law["plot"])["data"]}
    assert bars == {"exact w", "tev", "predraw", "residual"}
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "verifier" not in line]
    assert [r[0].strip() for r in rows] == ["tev", "predraw", "residual"]
    for r in rows:
        tv, p = float(r[1]), float(r[3])
        assert tv < 0.1, r
        assert p > 1e-4, r


def test_two_clients_do_not_mix(app_url):
    prompts = {"a": "t4 t5 t6 t7", "b": "t60 t61"}
    results: dict[str, tio.ImportedSession] = {}

    def decode(key):
        c = client(app_url)
        for _ in range(3):
            c.predict(prompt=prompts[key], api_name="/step")
        results[key] = exported_session(c)

    threads = [threading.Thread(target=decode, args=(k,)) for k in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for key, session in results.items():
        assert session.prompt == prompts[key] and len(session.rounds) == 3
        context = list(session.prompt_token_ids)
        for r in session.rounds:  # each round's root is the last token its own session committed
            assert r.tokens[0] == context[-1]
            context += r.committed
    assert results["a"].prompt_token_ids != results["b"].prompt_token_ids


def test_baseline_and_side_by_side(app_url, pair, models_dir, tmp_path):
    c = client(app_url)
    c.predict(max_new_tokens=16, api_name="/run")
    err, stats = named(c.predict(max_new_tokens=16, api_name="/baseline"), BASELINE_OUTPUTS).values()
    assert err == "" and re.search(r"\| \d+\.\d+x \|", stats)

    draft_dir = models_dir / "draft"
    pair.draft.save_pretrained(draft_dir)
    pair.tokenizer.save_pretrained(draft_dir)
    side = named(c.predict(verifier_b="residual", budget_b=8, draft_b=str(draft_dir), max_new_tokens=16,
                           api_name="/side_by_side"), SIDE_OUTPUTS)
    err, tree_b, md_a, md_b = side["error"], side["tree_b"], side["md_a"], side["md_b"]
    assert err == ""
    assert md_a.startswith("**A: tev") and "**B: residual" in md_a and "draft" in md_a
    # Compared as runs: the settings that differ, acceptance by depth with both names, a round in one layout.
    assert "Settings that differ" in md_b and "verifier" in md_b and "conditional A" in md_b
    assert "**A**: tev, " in md_b and "**B**: " in md_b and "**A**: A:" not in md_b  # each side named once
    # The round's trees in one layout, as figure JSON for the pair's click-and-width views (app/pair_view.py).
    assert "**Round " in md_b and json.loads(tree_b)["data"] and json.loads(tree_b)["layout"]["meta"]["clicks"]
    assert side["pair_md"].startswith("Click a node")
    out = named(c.predict(draft_b=str(models_dir / "missing"), max_new_tokens=16, api_name="/side_by_side"),
                SIDE_OUTPUTS)
    assert "does not exist" in out["error"]
    # A folder outside the shipped models, the command line's folders and --model-dir is never read.
    out = named(c.predict(draft_b=str(tmp_path), max_new_tokens=16, api_name="/side_by_side"), SIDE_OUTPUTS)
    assert "loads draft models only from" in out["error"]


def test_models_load_lazily_once(pair, tmp_path):
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        model.save_pretrained(tmp_path / role)
        pair.tokenizer.save_pretrained(tmp_path / role)
    source = PairSource(ModelSource(str(tmp_path / "target"), str(tmp_path / "draft"), dtype="float32", device=None))
    ctl = Controller(source)
    build_demo(source.model)  # builds without loading
    assert source.get() is source.get()
    prompt, cfg = decode_settings(PROMPT, 0, 0, 1.0, 0, "chain", 32, 4, 4, 8, "4,2", "tev", 8)
    st = ctl.step(AppState(), prompt, cfg)
    assert st.origin == "live" and len(st.rounds) == 1 and len(ctl.store) == 1
    ctl.reset(st)
    assert len(ctl.store) == 0
    with pytest.raises(TevvizError, match="does not exist"):
        Controller(PairSource(ModelSource("/nonexistent/t", "/nonexistent/d"))).step(AppState(), prompt, cfg)


def test_session_store_expires_idle_sessions(pair):
    ctl = Controller(PairSource(pair=pair))
    prompt, cfg = decode_settings(PROMPT, 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 8)
    st = ctl.step(AppState(), prompt, cfg)
    ctl.store.ttl_s = 0.0
    time.sleep(0.01)
    assert ctl.store.get(st.sid) is None
    st2 = ctl.step(st, prompt, cfg)  # the run goes on from its last token: nothing is lost
    assert [r.index for r in st2.rounds] == [0, 1] and "continued run" in st2.notice
    again = Controller(PairSource(pair=pair))
    whole = again.step(again.step(AppState(), prompt, cfg), prompt, cfg)
    assert st2.generated == whole.generated  # greedy: the continued run is the uninterrupted one, token for token


def test_history_is_capped_with_a_notice(pair, tmp_path):
    ctl = Controller(PairSource(pair=pair), history=3)
    prompt, cfg = decode_settings(PROMPT, 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 64)
    st = AppState()
    for _ in range(6):
        st = ctl.step(st, prompt, cfg)
    assert [r.index for r in st.rounds] == [3, 4, 5] and st.dropped == 3 and st.view == 2
    assert "history capped at 3 rounds; older rounds dropped" in st.notice
    assert "| 6 |" in stats_markdown(st) and "last 3 rounds" in stats_markdown(st)
    assert "".join(text for text, _ in text_spans(show_round(st, 2))) == PROMPT + "".join(
        pair.tokenizer.convert_ids_to_tokens(st.generated))  # the dropped rounds' text is still shown
    # The kept rounds still know their context: prefix, re-scoring and ExitTrain contexts.
    stream = st.prompt_ids + st.generated
    for i, r in enumerate(st.rounds):
        prefix, note = ctl.prefix(st, i, "", pair.tokenizer)
        assert note == "" and stream[len(prefix)] == r.tokens[0]
        assert stream[len(prefix) + 1: len(prefix) + 1 + len(r.committed)] == r.committed
    assert [c.tokens[-1] for c in training_contexts(st.stream, st.rounds, 256)] == [r.tokens[0] for r in st.rounds]
    rescored = ctl.rescore(show_round(st, 0), "", cfg.sampling)
    assert rescored.rounds[0].w == pytest.approx(st.rounds[0].w, abs=1e-5)
    # An import keeps the last rounds too.
    path = tmp_path / "session.json"
    path.write_text(json.dumps(ctl.session_json(st)), encoding="utf-8")
    imported = Controller(PairSource(pair=pair), history=2).import_file(AppState(), str(path))
    assert [r.index for r in imported.rounds] == [4, 5] and "history capped at 2" in imported.notice


def test_idle_sessions_free_the_decoder_and_the_trainer(pair):
    ctl = Controller(PairSource(pair=pair))
    prompt, cfg = decode_settings(PROMPT, 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 16)
    st = ctl.step(ctl.step(AppState(), prompt, cfg), prompt, cfg)
    ctl.train(st, train_settings("exit", 1e-3, 1.0, 2, 1, cfg.builder), cfg)
    assert ctl.store.training(st.sid) is not None
    ctl.reset(st)  # Reset frees the decoder only
    assert ctl.store.get(st.sid) is None and ctl.store.training(st.sid) is not None and len(ctl.store) == 1
    st = ctl.step(st, prompt, cfg)
    ctl.store.ttl_s = 0.0
    time.sleep(0.01)
    ctl.store.sweep()
    assert len(ctl.store) == 0 and ctl.store.training(st.sid) is None


def test_chi_square_p_values():
    # chi-square with 1 degree of freedom: P(X > 3.841) = 0.05.
    stat, df, p = chi_square_p([50 + 9.8, 50 - 9.8], [0.5, 0.5])
    assert df == 1 and stat == pytest.approx(3.8416, rel=1e-3) and p == pytest.approx(0.05, abs=1e-3)
    assert chi_square_p([100, 0], [1.0, 0.0])[2] == 1.0  # a point mass: nothing to test
    assert chi_square_p([90, 10], [1.0, 0.0])[2] == 0.0  # draws where the law has no mass


def test_prompts_file_is_optional(tmp_path):
    assert example_prompts(tmp_path / "absent.jsonl") == []
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"id": "a", "title": "A", "split": "train", "prompt": "x = 1"}\nnot json\n{"id": "b"}\n')
    assert example_prompts(path) == [{"id": "a", "title": "A", "split": "train", "prompt": "x = 1"}]


def test_optimal_tree_ghosts_and_where_the_mass_went(app_url):
    """Optimal tree on the shown round: ghosts drawn, C_p* in the stats; every-round mode fills the coverage plot."""
    c = client(app_url)
    c.predict(api_name="/reset")
    out = c.predict(temperature=0.3, api_name="/step")
    assert out[OUT["error"]] == "" and "C_p*" not in out[OUT["stats"]]
    out = c.predict(temperature=0.3, api_name="/optimal")
    assert out[OUT["error"]] == "", out[OUT["error"]]
    assert out[-1] is True  # the ghosts checkbox turns on
    stats = out[OUT["stats"]]
    row = stats.splitlines()[stats.splitlines().index(next(l for l in stats.splitlines() if "C_p*" in l)) + 2]
    c_p, c_star, gap = (float(x) for x in row.split("|")[1:4])
    assert c_star >= c_p - 1e-9 and gap == pytest.approx(c_star - c_p, abs=2e-3)
    names = [t.get("name") for t in figure(out)["data"]]
    title = figure(out)["layout"]["title"]["text"]
    assert "optimal 1 + C_p*" in title
    if " 0 ghosts" not in title:
        assert "ghost branches (optimal tree)" in names
    hidden = figure(c.predict(on=False, api_name="/ghosts")[0])
    assert not any("ghost" in (t.get("name") or "") for t in hidden["data"])

    c.predict(on=True, api_name="/optimal_every")
    out = c.predict(rounds=3, temperature=0.3, api_name="/run")
    coverage = figure(out, "coverage_plot")["data"]
    star = [y for y in coverage[1]["y"] if y is not None]
    assert len(star) == len(coverage[0]["y"]) == 4  # every round has its optimal tree now
    assert all(s >= cp - 1e-9 for s, cp in zip(coverage[1]["y"], coverage[0]["y"]))
    mass = figure(out, "mass_plot")["data"]
    assert sum(mass[0]["y"]) + sum(mass[1]["y"]) == pytest.approx(1.0, abs=1e-6)
    session = exported_session(c)
    assert all(r.optimal is not None for r in session.rounds)


def test_auto_budget_sizes_each_round_within_the_limits(app_url):
    c = client(app_url)
    c.predict(api_name="/reset")
    from tevviz.engine.cost.auto_budget import WARMUP_FRACTIONS

    for i in range(len(WARMUP_FRACTIONS) + 1):
        out = c.predict(auto_budget=True, budget=12, depth=4, api_name="/step")
        assert out[OUT["error"]] == "", out[OUT["error"]]
        nodes = [t for t in figure(out)["data"] if t.get("name") in ("nodes", "no value")]
        count = sum(len(t["x"]) for t in nodes)
        assert count - 1 <= 12
        assert "Auto budget, round" in out[OUT["stats"]] and "Cost model" in out[OUT["stats"]]
    # Past the warm-up a round is sized for tokens/s, or (when trees have lately lost to a plain step) not drafted.
    stats = out[OUT["stats"]]
    assert "chosen for expected tokens/s" in stats or ("no draft: a plain target step" in stats and count == 1), stats


def test_a_stopped_chain_from_the_settings_is_drawn_saved_and_refused_with_auto(app_url):
    """The stop box: a sampled chain at a fixed depth ends where the draft is unsure, the export keeps the stop;
    with the auto box on it is a clear error and the run is as it was; another builder leaves the box alone."""
    c = client(app_url)
    c.predict(api_name="/reset")
    for _ in range(3):
        out = c.predict(builder="sampled", verifier="speculative", auto_budget=False, depth=8, stop_below=0.3,
                        api_name="/step")
        assert out[OUT["error"]] == "", out[OUT["error"]]
    session = exported_session(c)
    assert session.meta["builder"]["stop_below"] == 0.3 and len(session.rounds) == 3
    # The tiny drafter's top probabilities are 0.03 to 0.1: every chain stops after its first token, far short of H.
    assert all(max(r.depths) == 1 for r in session.rounds)
    out = c.predict(builder="sampled", verifier="speculative", auto_budget=True, depth=8, stop_below=0.3,
                    api_name="/step")
    assert "stop below ends sampled chains of a fixed depth" in out[OUT["error"]]
    assert len(exported_session(c).rounds) == 3
    out = c.predict(builder="best-first", verifier="tev", auto_budget=False, budget=8, depth=4, stop_below=0.3,
                    api_name="/step")
    assert out[OUT["error"]] == "", out[OUT["error"]]


def test_mixed_builder_says_which_arm_drafted_each_round(app_url):
    """The mixed builder in the app: its warm-up drafts a sampled chain, then a best-first tree; the statistics
    say which arm drafted the shown round, and without the auto box the app says that it needs it."""
    c = client(app_url)
    c.predict(api_name="/reset")
    out = c.predict(builder="mixed", auto_budget=False, api_name="/step")
    assert "automatic budget" in out[OUT["error"]]
    said = []
    for _ in range(2):
        out = c.predict(builder="mixed", auto_budget=True, budget=12, depth=4, temperature=1.0, api_name="/step")
        assert out[OUT["error"]] == "", out[OUT["error"]]
        said.append(out[OUT["stats"]])
    assert "Mixed: a sampled chain (speculative) this round" in said[0]
    assert "Mixed: a best-first tree this round" in said[1]


def test_figures_sent_as_json_equal_what_plotly_writes(pair):
    """The app serialises figure dicts itself (widgets.figure_json); the JSON is what go.Figure(...).to_json() gives."""
    import plotly.graph_objects as go

    from tevviz.app.views import session_figures, session_panel, tree_plot
    from tevviz.app.widgets import figure_json
    from tevviz.engine import DecodeConfig, DecodeSession, SamplingConfig

    s = DecodeSession(pair, [1, 2, 3], DecodeConfig(sampling=SamplingConfig(temperature=0.3), optimal=True,
                                                    max_new_tokens=12))
    s.run()
    st = AppState(origin="live", rounds=s.rounds, view=1, ghosts=True, prompt="p")
    figures = {"tree": tree_plot(st, "w", as_dict=True), **session_figures(st, as_dict=True),
               "session_plot": session_panel(st), "empty": tree_plot(AppState(), "P", as_dict=True)}
    for name, fig in figures.items():
        assert json.loads(figure_json(fig)) == json.loads(go.Figure(fig).to_json()), name


def test_report_button_writes_the_session_report(app_url):
    from tevviz.app.decode_tab import REPORT_OUTPUTS

    c = client(app_url)
    c.predict(api_name="/reset")
    out = named(c.predict(api_name="/report"), REPORT_OUTPUTS)
    assert "nothing to report" in out["error"]
    c.predict(api_name="/step")
    c.predict(api_name="/step")
    out = named(c.predict(api_name="/report"), REPORT_OUTPUTS)
    assert out["error"] == ""
    with open(out["report_dl"], encoding="utf-8") as f:
        page = f.read()
    assert 'id="plotly-js"' in page and 'id="report-data"' in page and PROMPT in page
    assert page.count("<tr") >= 3  # the round table has a row per round


def test_optimal_tree_of_an_imported_round_matches_the_live_one(pair, tmp_path):
    """An exported session imported again: its rounds' optimal trees come from the known context and the file's
    builder depth, equal to the live session's."""
    ctl = Controller(PairSource(pair=pair))
    prompt, cfg = decode_settings(PROMPT, 0.3, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 24)
    st = AppState()
    for _ in range(3):
        st = ctl.step(st, prompt, cfg)
    live = ctl.optimal(show_round(st, 1), "", cfg.sampling)
    path = tmp_path / "session.json"
    path.write_text(json.dumps(ctl.session_json(st)), encoding="utf-8")
    imported = Controller(PairSource(pair=pair)).import_file(AppState(), str(path))
    again = ctl.optimal(show_round(imported, 1), "", cfg.sampling)
    assert again.origin == "session" and again.ghosts
    a, b = live.rounds[1].optimal, again.rounds[1].optimal
    assert a.tokens == b.tokens and a.parents == b.parents and a.P == pytest.approx(b.P, abs=1e-6)
    assert "optimal tree of round" in again.notice
    with pytest.raises(TevvizError, match="press Step"):
        ctl.optimal(AppState(), "", cfg.sampling)


@pytest.mark.parametrize("key", ["name", "kind"])  # "kind": a file written before the builder's key was "name"
def test_import_puts_the_files_prompt_and_settings_in_their_boxes(app_url, tmp_path, key):
    c = client(app_url)
    c.predict(api_name="/step")
    data = json.loads(Path(named(c.predict(api_name="/export"), EXPORT_OUTPUTS)["session_dl"]).read_text())
    data["prompt"] = "t4 t5 t6"
    data["meta"]["sampling"]["temperature"] = 0.7
    del data["meta"]["builder"]["name"]
    data["meta"]["builder"] |= {key: "static", "depth": 3, "branching": [3, 1, 1], "auto": False}
    data["meta"]["max_new_tokens"] = 5
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = client(app_url).predict(path=gradio_client.handle_file(str(path)), api_name="/import_file")
    assert out[OUT["error"]] == "" and rounds_in(out) == 1
    boxes = dict(zip(SETTINGS, out[len(ROUND_OUTPUTS):]))
    assert boxes["prompt"] == "t4 t5 t6" and boxes["chat"] is False and boxes["temperature"] == 0.7
    assert boxes["builder"] == "static" and boxes["depth"] == 3 and boxes["branching"] == "3,1,1"
    assert boxes["auto_budget"] is False and boxes["max_new_tokens"] == 5


def test_comparison_stopped_midway_keeps_its_draws(pair, app_url):
    from tevviz.app.views import comparison_markdown

    ctl = Controller(PairSource(pair=pair))
    prompt, cfg = decode_settings(PROMPT, 1.0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 16)
    st = ctl.step(AppState(), prompt, cfg)
    assert not ctl.stop_compare(st)  # nothing running
    reports = []

    def progress(done, desc=""):
        reports.append(done)
        if len(reports) == 2:
            assert ctl.stop_compare(st)  # what the Stop button does, from another thread

    c = ctl.compare(st, prompt, cfg.sampling, 100_000, 0, progress=progress)
    assert c.stopped and 0 < c.draws < 100_000 and reports[-1] == (c.draws, 100_000)
    table = comparison_markdown(c)
    assert f"{c.draws} draws per verifier" in table and f"stopped after {c.draws} of 100000 draws" in table
    assert all(0 <= law.p <= 1 for law in c.laws)
    assert client(app_url).predict(api_name="/stop_compare") == ()  # the button's endpoint, outside the queue


def test_an_engines_statistics_overlay_the_acceptance_figure(app_url, tmp_path):
    """A real llama-server log dropped on the Decode tab draws that engine's marginal and conditional curves over the
    run's own; a file no engine writes is refused in the error box and changes nothing; Clear takes them off."""
    from tevviz.engine.engines.formats import read_file

    c = client(app_url)
    c.predict(rounds=2, api_name="/run")
    log = Path(__file__).parents[1] / "fixtures" / "llamacpp" / "stdlib-server-log.txt"
    out = c.predict(path=gradio_client.handle_file(str(log)), api_name="/engine_overlay")
    assert out[OUT["error"]] == ""
    run = read_file(log)
    traces = {t.get("name"): t for t in figure(out, "depth_plot")["data"]}
    marginal = traces[f"llama.cpp marginal ({run.steps} steps)"]
    assert marginal["y"] == pytest.approx(run.marginal) and f"llama.cpp conditional ({run.steps} steps)" in traces
    bad = tmp_path / "notes.txt"
    bad.write_text("nothing an engine writes\n")
    out = c.predict(path=gradio_client.handle_file(str(bad)), api_name="/engine_overlay")
    assert out[OUT["error"]].startswith("Error:") and "notes.txt" in out[OUT["error"]]
    out = c.predict(api_name="/engine_clear")
    assert not any("llama.cpp" in (t.get("name") or "") for t in figure(out, "depth_plot")["data"])
