"""Where a decode starts (engine/decode/start.py): `tevviz decode`, the notebook API and the app's Decode tab take the
loaded named pair's measured best setting at the temperature given (engine/load/pairs.py), any other pair --budget auto
on the drafter's own builder; a flag the user gives always wins."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import gradio as gr
import pytest
from conftest import tiny_pair

import tevviz
from tevviz.app import build_demo
from tevviz.app.source import PairSource
from tevviz.cli import build_parser
from tevviz.engine import ModelSource
from tevviz.engine.analysis.speed import PassCosts, ideal_round_ms, ideal_speed, level_rows
from tevviz.engine.decode.start import decode_start
from tevviz.engine.draft.drafters import drafter_kind
from tevviz.engine.load.pairs import (
    AUTO_LIMIT,
    FIXED_BUDGET,
    NAMED_PAIRS,
    DecodeDefaults,
    decode_defaults,
)
from tevviz.options import decode_config_from_args

STDLIB = NAMED_PAIRS["stdlib"]
BLOCK = str(STDLIB.drafter_paths()["tevviz-stdlib-block-draft"])
# Two settings no pair records, one per temperature, so that a test sees which one was taken.
GREEDY = DecodeDefaults(builder="best-first", verifier="predraw", budget=8, depth=4)
SAMPLED = DecodeDefaults(builder="best-first", verifier="residual", budget=12, depth=3)


def cli_config(*argv: str):
    return decode_config_from_args(build_parser().parse_args(["decode", "--prompt", "x", *argv]))


def settings(cfg) -> DecodeDefaults:
    """The builder, verifier, budget ("auto" when auto-sized), depth and stop of a DecodeConfig."""
    b = cfg.builder
    return DecodeDefaults(builder=b.name, verifier=cfg.verifier, budget="auto" if b.auto else b.budget, depth=b.depth,
                          stop_below=b.stop_below)


@pytest.fixture
def recorded(monkeypatch):
    """The stdlib pair with GREEDY recorded at T = 0 and SAMPLED at T > 0."""
    monkeypatch.setitem(NAMED_PAIRS, "stdlib", replace(STDLIB, greedy=GREEDY, sampled=SAMPLED))


@pytest.fixture(scope="module")
def other_target(tmp_path_factory):
    """A target folder that is no named pair's (the stdlib target's config: nothing here loads weights)."""
    folder = tmp_path_factory.mktemp("other-target")
    shutil.copy(STDLIB.target_path() / "config.json", folder / "config.json")
    return str(folder)


@pytest.fixture(scope="module")
def stdlib_pair():
    return tevviz.load(device="cpu", threads=1)


# --- tevviz decode ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_decode_starts_at_the_stdlib_pairs_recorded_best(temperature):
    cfg = cli_config("--temperature", str(temperature))
    assert settings(cfg) == decode_defaults(STDLIB, temperature)
    if decode_defaults(STDLIB, temperature).budget == "auto":
        assert cfg.builder.budget == AUTO_LIMIT  # the limit of the self-sized rounds


def test_each_temperature_takes_its_own_recorded_setting(recorded):
    assert settings(cli_config()) == GREEDY
    assert settings(cli_config("--temperature", "1")) == settings(cli_config("--temperature", "0.5")) == SAMPLED
    assert settings(cli_config("--pair", "stdlib", "--target", str(STDLIB.target_path()))) == GREEDY


def test_explicit_flags_win_one_by_one(recorded):
    assert settings(cli_config("--depth", "2")) == replace(GREEDY, depth=2)
    assert settings(cli_config("--budget", "5")) == replace(GREEDY, budget=5)
    assert settings(cli_config("--budget", "auto")) == replace(GREEDY, budget="auto")
    assert settings(cli_config("--temperature", "1", "--budget-limit", "9", "--budget", "auto")) == replace(
        SAMPLED, budget="auto")
    assert cli_config("--temperature", "1", "--budget-limit", "9", "--budget", "auto").builder.budget == 9


def test_another_builder_or_verifier_leaves_the_rest_at_the_general_defaults(recorded):
    """The recorded setting is one setting: naming another builder or verifier gives that builder at --budget auto
    (B = FIXED_BUDGET where it does not size itself), TEV, H = 6."""
    assert settings(cli_config("--builder", "chain")) == DecodeDefaults("chain", "tev", FIXED_BUDGET, 6)
    assert settings(cli_config("--verifier", "tev")) == DecodeDefaults("best-first", "tev", "auto", 6)
    assert settings(cli_config("--builder", "best-first", "--depth", "3")) == DecodeDefaults(
        "best-first", "predraw", 8, 3)  # the recorded builder named: the rest of its setting stays


def test_a_fixed_budget_where_the_setting_sizes_itself_is_a_tree_of_that_size(monkeypatch):
    sized = DecodeDefaults(builder="sampled", verifier="speculative", budget="auto", depth=4)
    monkeypatch.setitem(NAMED_PAIRS, "stdlib", replace(STDLIB, greedy=sized, sampled=sized))
    assert settings(cli_config()) == sized
    assert settings(cli_config("--budget", "16")) == DecodeDefaults("best-first", "tev", 16, 6)


def test_another_pair_starts_at_budget_auto(other_target):
    cfg = cli_config("--target", other_target, "--draft", str(STDLIB.paths()[1]), "--temperature", "1")
    assert settings(cfg) == DecodeDefaults("best-first", "tev", "auto", 6) == decode_start(
        None, 1.0, drafter_kind("autoregressive"))
    assert settings(cli_config("--target", other_target, "--draft", str(STDLIB.paths()[1]), "--budget", "8")) == (
        DecodeDefaults("best-first", "tev", 8, 6))


def test_a_block_drafter_keeps_ddtree_at_its_depth_unless_the_record_is_for_it(recorded, monkeypatch):
    depth = json.loads((STDLIB.drafter_paths()["tevviz-stdlib-block-draft"] / "config.json").read_text())
    own = depth.get("block_size", (depth.get("dflash_config") or {}).get("block_size")) - 1
    assert settings(cli_config("--draft", BLOCK)) == DecodeDefaults("ddtree", "tev", "auto", own)
    assert settings(cli_config("--draft", BLOCK, "--depth", "3", "--budget", "24")) == DecodeDefaults(
        "ddtree", "tev", 24, 3)
    for_block = DecodeDefaults(builder="ddtree", verifier="predraw", budget=20, depth=5)
    monkeypatch.setitem(NAMED_PAIRS, "stdlib", replace(STDLIB, greedy=for_block))
    assert settings(cli_config("--draft", BLOCK)) == for_block


def test_a_scan_keeps_fixed_trees(recorded):
    args = build_parser().parse_args(["scan", "p.jsonl", "-o", "out"])
    assert settings(decode_config_from_args(args)) == DecodeDefaults("best-first", "tev", FIXED_BUDGET, 6)


# --- the notebook API ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_notebook_session_starts_at_the_stdlib_pairs_recorded_best(stdlib_pair, temperature):
    s = tevviz.session(stdlib_pair, "def f(x):", temperature=temperature, max_new_tokens=4)
    assert settings(s.cfg) == decode_defaults(STDLIB, temperature)
    s.run()
    assert len(s.generated) == 4


def test_a_notebook_sessions_arguments_win(stdlib_pair, recorded):
    s = tevviz.session(stdlib_pair, "def f(x):", temperature=1.0, budget=3, max_new_tokens=2)
    assert settings(s.cfg) == replace(SAMPLED, budget=3)
    s = tevviz.session(stdlib_pair, "def f(x):", builder="best-first", verifier="tev", budget=32, depth=6)
    assert settings(s.cfg) == DecodeDefaults("best-first", "tev", 32, 6)
    # The older spelling: budget N with auto=True is auto-sizing up to N.
    s = tevviz.session(stdlib_pair, "def f(x):", budget=16, auto=True)
    assert settings(s.cfg) == replace(GREEDY, budget="auto") and s.cfg.builder.budget == 16


def test_a_notebook_session_on_another_pair_starts_at_budget_auto():
    s = tevviz.session(tiny_pair("llama"), "t1 t2 t3", temperature=1.0)
    assert settings(s.cfg) == DecodeDefaults("best-first", "tev", "auto", 6) and s.cfg.builder.budget == AUTO_LIMIT


# --- the app ---------------------------------------------------------------------------------------------------------


def decode_widgets(demo: gr.Blocks) -> dict:
    """The Decode tab's tree and verifier widgets' starting values, by label."""
    labels = {"builder": "builder", "B budget": "budget", "H depth": "depth", "verifier": "verifier",
              "sampled chain: stop below p (0 = off)": "stop_below"}
    out = {}
    for block in demo.blocks.values():
        label = str(getattr(block, "label", "") or "")
        if label in labels and labels[label] not in out:
            out[labels[label]] = block.value
        elif label.startswith("auto: size each tree"):
            out["auto"] = block.value
    return out


def widget_settings(w: dict) -> DecodeDefaults:
    budget = "auto" if w["auto"] else w["budget"]
    return DecodeDefaults(w["builder"], w["verifier"], budget, w["depth"], w["stop_below"])


def test_the_apps_decode_tab_opens_on_a_tree_and_names_the_pairs_fastest_setting():
    """The app opens where a tree debugger should, on the drafter's own tree at a fixed B, whatever the pair's
    fastest (a stopped chain here); the header says what `tevviz decode` starts on."""
    demo = build_demo(ModelSource(device=None), default_prompt="def f(x):")
    w = decode_widgets(demo)
    assert widget_settings(w) == DecodeDefaults("best-first", "tev", FIXED_BUDGET, 6) and not w["auto"]
    source = PairSource(ModelSource(device=None))
    assert source.fastest(0.0) == decode_defaults(STDLIB, 0.0) != source.builder_default()
    assert source.fastest(1.0) == decode_defaults(STDLIB, 1.0)
    header = next(b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "header")
    assert decode_defaults(STDLIB, 0.0).describe() in header and "start on a tree worth looking at" in header


def test_the_apps_fastest_follows_the_record_and_every_drafter_opens_on_its_own_tree(recorded):
    assert PairSource(ModelSource(device=None)).fastest(0.0) == GREEDY
    assert PairSource(ModelSource(device=None)).fastest(1.0) == SAMPLED
    w = decode_widgets(build_demo(tiny_pair("llama"), default_prompt="t1 t2 t3"))
    assert widget_settings(w) == DecodeDefaults("best-first", "tev", FIXED_BUDGET, 6)
    block = PairSource(ModelSource(draft=BLOCK, device=None))
    assert (block.fastest().builder, block.fastest().budget) == ("ddtree", "auto")
    start = block.builder_default()
    assert (start.builder, start.verifier) == ("ddtree", "tev") and start.budget != "auto"


# --- a recorded stopped chain (BuilderConfig.stop_below) --------------------------------------------------------------

STOPPED = DecodeDefaults(builder="sampled", verifier="speculative", budget=FIXED_BUDGET, depth=8, stop_below=0.4)


@pytest.fixture
def stopped(monkeypatch):
    """The stdlib pair with a stopped chain recorded at T = 0 (SAMPLED at T > 0)."""
    monkeypatch.setitem(NAMED_PAIRS, "stdlib", replace(STDLIB, greedy=STOPPED, sampled=SAMPLED))


def test_a_recorded_stop_reaches_the_cli_the_notebook_and_the_app(stopped, stdlib_pair):
    assert settings(cli_config()) == STOPPED and cli_config().builder.stop_below == 0.4
    assert settings(cli_config("--temperature", "1")) == SAMPLED  # the other temperature's record has none
    s = tevviz.session(stdlib_pair, "def f(x):", max_new_tokens=6)
    assert settings(s.cfg) == STOPPED
    s.run()
    assert len(s.generated) == 6 and all(max(r.depths) <= 8 for r in s.rounds)
    assert PairSource(ModelSource(device=None)).fastest() == STOPPED  # the app's header names it
    assert "stopped below p = 0.4" in STOPPED.describe() and "H <= 8" in STOPPED.describe()


def test_the_users_stop_wins_and_a_self_sized_chain_or_another_builder_drops_the_recorded_one(stopped, stdlib_pair):
    assert settings(cli_config("--stop-below", "0.25")) == replace(STOPPED, stop_below=0.25)
    assert settings(cli_config("--stop-below", "0")) == replace(STOPPED, stop_below=0.0)  # the chain, never stopped
    assert settings(cli_config("--depth", "5")) == replace(STOPPED, depth=5)  # H stays the stop's limit
    assert settings(cli_config("--budget", "auto")) == replace(STOPPED, budget="auto", stop_below=0.0)
    assert settings(cli_config("--builder", "best-first")) == DecodeDefaults("best-first", "tev", "auto", 6)
    # A fixed B, which a chain has no use for, asks for a tree of that size: the general defaults, as elsewhere.
    assert settings(cli_config("--budget", "16")) == DecodeDefaults("best-first", "tev", 16, 6)
    s = tevviz.session(stdlib_pair, "def f(x):", stop_below=0.1, depth=3)
    assert s.cfg.builder.stop_below == 0.1 and s.cfg.builder.depth == 3


def test_a_stop_given_on_a_self_sized_chain_sizes_it_in_place_of_the_cost_model():
    """On the stdlib pair's own default at T = 1 (a sampled chain, --budget auto) --stop-below alone is enough."""
    sampling = decode_defaults(STDLIB, 1.0)
    assert sampling.budget == "auto" and sampling.builder == "sampled"
    got = settings(cli_config("--temperature", "1", "--stop-below", "0.3"))
    assert got == replace(sampling, budget=FIXED_BUDGET, stop_below=0.3)


def test_a_run_saved_before_chains_had_a_stop_reopens_without_one():
    """Reopening a run sets the Decode tab's boxes to its settings: one saved without `stop_below` had no stop."""
    from tevviz.app.runs_panel import settings_values

    old = {"builder": {"name": "sampled", "budget": 32, "depth": 4, "auto": False}}
    assert settings_values(old)["stop_below"] == 0.0
    assert settings_values({"builder": {**old["builder"], "stop_below": 0.4}})["stop_below"] == 0.4
    assert "stop_below" not in settings_values({})  # a file without settings leaves the box as it is


@pytest.mark.parametrize("argv, said", [
    (("--builder", "best-first", "--stop-below", "0.4"), "sampled chains of a fixed depth"),
    (("--stop-below", "0.4", "--budget", "auto"), "sampled chains of a fixed depth"),
    (("--stop-below", "1"), r"probability in \[0, 1\)"),
    (("--stop-below", "-0.2"), r"probability in \[0, 1\)"),
])
def test_a_stop_where_it_cannot_apply_is_a_clear_error(stopped, argv, said):
    with pytest.raises(tevviz.TevvizError, match=said):
        cli_config(*argv)


# --- the limit a decode's speed is held against (engine/analysis/speed.py) --------------------------------------------


def test_pass_costs_interpolate_the_measured_points_and_extend_their_ends():
    costs = PassCosts({1: 10.0, 3: 14.0, 9: 20.0}, {1: 2.0})
    assert [costs.target(n) for n in (1, 2, 3, 6, 9, 15)] == pytest.approx([10, 12, 14, 17, 20, 26])
    assert costs.draft(1) == 2.0 and costs.draft(4) == pytest.approx(8.0)  # one point: in proportion to the rows


def test_the_ideal_prices_each_level_of_the_kept_tree_and_one_target_pass():
    """Hand-priced rounds of real sessions: a chain takes one row a level; a best-first tree, at each level, its kept
    nodes one level up that have kept children; and the ideal's share is its time over the measured time."""
    pair = tiny_pair("llama")
    costs = PassCosts({1: 5.0, 33: 37.0}, {1: 1.0, 9: 9.0})  # target 4 + n ms, draft 1 ms a row
    chain = tevviz.session(pair, "t1 t2 t3", builder="chain", verifier="tev", budget=8, depth=3, max_new_tokens=8)
    tree = tevviz.session(pair, "t1 t2 t3", builder="best-first", verifier="tev", budget=12, depth=4,
                          max_new_tokens=8)
    for s in (chain, tree):
        s.run()
    for r in chain.rounds:
        levels = max(r.depths)
        assert level_rows(r) == [1] * levels and ideal_round_ms(r, costs) == pytest.approx(levels + 4 + r.size)
    for r in tree.rounds:
        by_depth = [sum(1 for v in set(r.parents[1:]) if r.depths[v] == d) for d in range(max(r.depths))]
        assert level_rows(r) == by_depth and sum(by_depth) == len(set(r.parents[1:]))
        assert ideal_round_ms(r, costs) == pytest.approx(sum(by_depth) + 4 + r.size)
    ideal = ideal_speed(tree.rounds, costs, seconds=2.0, prefill_tokens=3)
    ms = sum(ideal_round_ms(r, costs) for r in tree.rounds) + 7.0
    assert ideal.ideal_ms == pytest.approx(ms) and ideal.tokens == len(tree.generated)
    assert ideal.share == pytest.approx(ms / 2000) and ideal.tokens_per_s == pytest.approx(len(tree.generated) / 2)
