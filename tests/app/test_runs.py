"""Runs: nothing a user made is lost. A change of settings keeps the old run; an import or a reopened run continues
where the models allow (token for token the uninterrupted run at T = 0) and says why where they do not; runs live in
capped folders the links cannot leave; two runs compare, a run with itself showing no difference."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
import torch
from conftest import tiny_pair

from tevviz.app.controller import Controller
from tevviz.app.run_store import RunStore, new_id
from tevviz.app.runs import run_name, session_of
from tevviz.app.source import PairSource
from tevviz.app.state import AppState, decode_settings
from tevviz.engine import TevvizError
from tevviz.engine.records import io as tio

PROMPT = "t1 t2 t3"
USER = "0" * 32


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama")


@pytest.fixture
def ctl(pair, tmp_path):
    return Controller(PairSource(pair=pair), runs=RunStore(tmp_path / "runs"))


def settings(temperature=0, budget=8, max_new_tokens=24):
    return decode_settings(PROMPT, temperature, 0, 1.0, 0, "best-first", budget, 3, 2, 4, "4,2", "tev",
                           max_new_tokens)


def steps(ctl, st, n, cfg):
    for _ in range(n):
        st = ctl.step(st, PROMPT, cfg)
    return st


def test_a_change_of_settings_starts_a_run_and_keeps_the_old_one(ctl):
    _, cfg = settings()
    first = steps(ctl, AppState(user=USER), 2, cfg)
    _, other = settings(budget=16)
    second = ctl.step(first, PROMPT, other)
    assert second.run_id != first.run_id and len(second.rounds) == 1
    assert "started a new run" in second.notice and run_name(first) in second.notice
    ctl.runs.flush()  # the list reads the files: the writer's background work done
    kept = {r.run_id: r.name for r in ctl.runs.runs(USER)}
    assert first.run_id in kept and kept[first.run_id] == run_name(first)
    back = ctl.reopen(second, first.run_id)
    assert [r.index for r in back.rounds] == [0, 1] and back.generated == first.generated
    # Reopened, the old run continues with its own settings: the same tokens as one never interrupted.
    again = ctl.step(back, PROMPT, cfg)
    whole = steps(Controller(PairSource(pair=ctl.source.get()), runs=ctl.runs), AppState(), 3, cfg)
    assert again.generated == whole.generated and [r.index for r in again.rounds] == [0, 1, 2]


def test_an_imported_session_continues_where_it_ended(ctl, tmp_path):
    _, cfg = settings()
    run = steps(ctl, AppState(), 2, cfg)
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session_of(run)), encoding="utf-8")
    imported = ctl.import_file(AppState(user=USER), str(path))
    assert imported.origin == "session" and "Step continues it" in imported.notice
    st = ctl.step(imported, PROMPT, cfg)
    assert "continued run" in st.notice and [r.index for r in st.rounds] == [0, 1, 2]
    assert st.generated[: len(run.generated)] == run.generated
    assert st.generated == steps(ctl, run, 1, cfg).generated  # T = 0: the same as going on in the first place


def test_an_imported_run_never_mixes_settings_and_keeps_its_own_limit(ctl, tmp_path):
    _, cfg = settings(max_new_tokens=24)
    run = steps(ctl, AppState(), 2, cfg)
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session_of(run)), encoding="utf-8")
    imported = ctl.import_file(AppState(user=USER), str(path))
    # A box changed after the import: Step starts a new run and names the setting, the import stays as it was.
    _, other = settings(temperature=1, budget=6, max_new_tokens=24)
    st = ctl.step(imported, PROMPT, other)
    assert st.run_id != imported.run_id and len(st.rounds) == 1
    assert "temperature 0.0 \u2192 1.0" in st.notice and "budget 8 \u2192 6" in st.notice
    # With its own settings it continues, and records its own limit, not the tokens it had left.
    st = ctl.step(imported, PROMPT, cfg)
    assert "continued run" in st.notice and st.run_id == imported.run_id
    assert st.meta["max_new_tokens"] == 24 and len(st.generated) > len(run.generated)


def test_what_cannot_continue_says_why_and_keeps_the_import(ctl, tmp_path):
    _, cfg = settings()
    run = steps(ctl, AppState(), 2, cfg)
    round_file = tmp_path / "round.json"
    round_file.write_text(json.dumps(tio.round_dict(run.rounds[1])), encoding="utf-8")
    imported = ctl.import_file(AppState(user=USER), str(round_file))
    st = ctl.step(imported, PROMPT, cfg)
    assert "cannot go on here (a round file holds no token stream" in st.notice
    ctl.runs.flush()
    assert st.run_id != imported.run_id and imported.run_id in {r.run_id for r in ctl.runs.runs(USER)}

    other = dict(session_of(run), prompt_token_ids=[5, 6, 7])  # not how this tokenizer reads the prompt
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other), encoding="utf-8")
    st = ctl.step(ctl.import_file(AppState(user=USER), str(path)), PROMPT, cfg)
    assert "reads the prompt as other tokens" in st.notice and len(st.rounds) == 1


def test_new_run_keeps_the_run_it_leaves(ctl):
    _, cfg = settings()
    run = steps(ctl, AppState(user=USER), 2, cfg)
    empty = ctl.reset(run)
    assert not empty.rounds and "kept in the run picker" in empty.notice
    ctl.runs.flush()
    assert run.run_id in {r.run_id for r in ctl.runs.runs(USER)}


def test_the_store_caps_its_runs_and_no_link_leaves_its_folder(tmp_path):
    store = RunStore(tmp_path / "runs", max_runs=2)
    session = tio.session_dict({"run_name": "x"}, "p", [1], [2], "t", [])
    ids = [new_id() for _ in range(3)]
    for run_id in ids:
        store.save(USER, run_id, session, wait=True)
    assert {r.run_id for r in store.runs(USER)} == set(ids[1:])
    from tevviz.app.runs_panel import run_choices

    class Ctl:
        runs = store

    picker = run_choices(Ctl, AppState(user=USER))  # the run the cap removed is named where runs are picked
    assert "removed the oldest: x" in picker.info and store.dropped(USER) == []
    for bad_user, bad_run in (("../etc", ids[1]), (USER, "../../passwd"), (USER, ids[1] + "/x"), ("", ids[1])):
        with pytest.raises(TevvizError, match="names no run"):
            store.load(bad_user, bad_run)
    with pytest.raises(TevvizError, match="not on this server"):
        store.load(USER, ids[0])


def test_a_run_compared_with_itself_shows_no_difference(ctl):
    from tevviz.app.compare_views import comparison_markdown
    from tevviz.engine.analysis.run_compare import Run, compare_runs

    _, cfg = settings(temperature=1.0)
    run = steps(ctl, AppState(user=USER), 3, cfg)
    as_run = Run("A", run.prompt, run.generated, run.rounds, run.meta, run.text, run.prompt_ids)
    cmp = compare_runs(as_run, replace(as_run, name="B"))
    text = comparison_markdown(cmp, cmp.round(1))
    assert "no difference" in text and "A only" in text
    assert all(r.conditional.diff in (0, None) and r.marginal.diff in (0, None) for r in cmp.table.rows)


def test_run_stopped_keeps_its_rounds_and_the_next_step_goes_on(pair, tmp_path):
    """Stop (the Run event cancelled) keeps every finished round: the next Step continues the same run."""
    gradio_client = pytest.importorskip("gradio_client")
    from conftest import served

    from tevviz.app import build_demo
    from tevviz.app.updates import ROUND_OUTPUTS

    with served(build_demo(pair, default_prompt=PROMPT, run_dir=tmp_path / "runs")) as url:
        c = gradio_client.Client(url, verbose=False)
        job = c.submit(rounds=0, max_new_tokens=400, api_name="/run")
        while len(job.outputs()) < 3:
            assert not job.done(), "the run ended before it could be stopped"
            time.sleep(0.02)
        seen = dict(zip(ROUND_OUTPUTS, job.outputs()[-1]))
        job.cancel()
        shown = json.loads(seen["tree"])["layout"]["title"]["text"]
        last = int(shown.split()[1].rstrip(":"))
        out = dict(zip(ROUND_OUTPUTS, c.predict(max_new_tokens=400, api_name="/step")))
        after = int(json.loads(out["tree"])["layout"]["title"]["text"].split()[1].rstrip(":"))
        assert out["error"] == "" and after > last and "started a new run" not in out["stats"]


def test_a_step_before_the_page_load_finished_is_kept_when_the_browser_id_arrives(pair, tmp_path):
    """A Step that ran before the load's restore had no browser id: the restore keeps its run and puts it in the URL."""
    from tevviz.app import build_demo

    demo = build_demo(pair, default_prompt=PROMPT, run_dir=tmp_path / "runs")
    restore = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "restore")
    st = Controller(PairSource(pair=pair)).step(AppState(), PROMPT, settings()[1])
    assert st.rounds and not st.user
    out = restore(st, "P", USER, "")
    kept = next(v for v in out.values() if isinstance(v, AppState))
    assert kept.user == USER
    assert (tmp_path / "runs" / USER / f"{st.run_id}.json").exists()
    url = next(v for v in out.values() if isinstance(v, str) and '"run"' in v)
    assert json.loads(url)["run"] == f"{USER}.{st.run_id}"


def test_two_runs_of_one_text_cut_into_other_rounds_say_so_once(ctl):
    """Greedy decoding writes one text whatever the tree; a chain of 1 and a tree of 8 cut it into rounds at other
    places, so their round 1 drafts from other contexts. The page says that, not "every round compares the same
    context" above a round of different contexts; and it names the runs by their run names."""
    from tevviz.app.compare_views import comparison_markdown, round_start
    from tevviz.engine.analysis.run_compare import Run, compare_runs

    tree = steps(ctl, AppState(user=USER), 6, settings()[1])
    chain_cfg = decode_settings(PROMPT, 0, 0, 1.0, 0, "chain", 1, 1, 1, 1, "1", "tev", 24)[1]
    chain = steps(ctl, AppState(user=USER), 6, chain_cfg)
    runs = [Run(n, r.prompt, r.generated, r.rounds, r.meta, r.text, r.prompt_ids) for n, r in (("A", tree),
                                                                                              ("B", chain))]
    n = min(len(tree.generated), len(chain.generated))
    assert tree.generated[:n] == chain.generated[:n]  # T = 0: one text
    cmp = compare_runs(*runs)
    starts = {k: [round_start(r, k) for r in runs] for k in cmp.round_indices}
    k = next(k for k, (x, y) in starts.items() if x != y)  # a chain of 1 commits at most 2 tokens a round
    assert starts[1] == [len(tree.rounds[0].committed), len(chain.rounds[0].committed)]
    text = comparison_markdown(cmp, cmp.round(k), (run_name(tree), run_name(chain)))
    assert "every round compares the same context" not in text
    assert (f"different contexts: A's round starts after generated token {starts[k][0]}, B's after token "
            f"{starts[k][1]}" in text)
    assert f"**A**: {run_name(tree)}" in text and f"**B**: {run_name(chain)}" in text
    same = comparison_markdown(cmp, cmp.round(0))
    assert "**Round 0** (the same context: both after generated token 0)" in same


def test_run_baseline_on_a_reopened_run_times_its_own_prompt_and_settings(ctl):
    """A reopened run has no live settings until a Step: Run baseline with its own settings in the boxes is its
    baseline (it said "timed on another prompt or settings"); other boxes' settings are not."""
    from tevviz.app.views import stats_markdown

    _, cfg = settings(max_new_tokens=12)
    first = steps(ctl, AppState(user=USER), 2, cfg)
    second = steps(ctl, first, 1, settings(temperature=1.0, max_new_tokens=12)[1])
    ctl.runs.flush()
    back = ctl.reopen(second, first.run_id)
    assert back.cfg is None
    timed = ctl.baseline(back, PROMPT, cfg)
    text = stats_markdown(timed)
    assert "another prompt or settings" not in text and "Plain decoding:" in text
    other = ctl.baseline(back, PROMPT, settings(budget=6, max_new_tokens=12)[1])
    assert "another prompt or settings" in stats_markdown(other)


def test_the_baseline_timed_for_a_run_is_kept_through_a_reload_a_link_and_a_restart(ctl, pair):
    """The speed panel after a reload (a fresh browser session reopening the run), a link opened in another browser,
    or a restart of the server (a new store on the same folder) shows the baseline timed before, untimed again; it
    is no setting, so comparing the run with its twin that has none shows no difference."""
    from tevviz.app.runs import reopened
    from tevviz.app.views import stats_markdown
    from tevviz.engine.analysis.run_compare import Run, compare_runs

    _, cfg = settings(max_new_tokens=12)
    run = steps(ctl, AppState(user=USER), 2, cfg)
    timed = ctl.baseline(run, PROMPT, cfg)
    shown = stats_markdown(timed)
    assert "Plain decoding:" in shown
    on = torch.get_num_threads()  # the rounds' count beside the baseline's way, which may be another
    assert f"The rounds decode on {on} thread{'s' if on != 1 else ''}." in shown
    restarted = Controller(PairSource(pair=pair), runs=RunStore(ctl.runs.root))
    other_user = "1" * 32
    for how, store, user in (("reload", ctl.runs, USER), ("restart", restarted.runs, USER),
                             ("link", ctl.runs, other_user)):
        kept = store.load(USER, run.run_id)
        back = reopened(AppState(user=user), kept, run.run_id, ctl.history, "", origin="run")
        assert back.baseline is not None, how
        assert {k: back.baseline[k] for k in timed.baseline} == timed.baseline, how
        again = stats_markdown(back)
        # The baseline's cell as it was, with a speed-up beside it, and the way it was timed.
        assert again.split("\n")[2].split("|")[-3] == shown.split("\n")[2].split("|")[-3], how
        assert "x |" in again.split("\n")[2] and "Plain decoding:" in again and "The rounds decode on" in again, how
    assert restarted.reopen(AppState(user=USER), run.run_id).baseline == timed.baseline
    twin = Run.of(tio.loads(json.dumps(session_of(run))), "B")
    assert compare_runs(Run.of(ctl.runs.load(USER, run.run_id), "A"), twin).settings == []
    # An export is the session alone: what the app showed stays with the app.
    assert "view" not in ctl.session_json(timed) and "view" not in session_of(run)


def test_a_reload_keeps_this_browsers_exittrain_copy_and_revert_drops_it(ctl, pair):
    """A reloaded page is a new browser session of the same browser: its ExitTrain copy is there, ready but not in use
    (as the page's box shows), and the next Train step goes on from its steps; another browser never sees it."""
    from tevviz.app.exittrain_tab import trainable
    from tevviz.app.state import train_settings

    c, _ = trainable(settings(max_new_tokens=48)[1], pair.draft)
    first = steps(ctl, AppState(user=USER), 3, c)
    ctl.train(first, train_settings("exit", 1e-2, 0.1, 2, 2, c.builder), c)
    assert ctl.train_use(first, True).startswith("Step and Run decode with the trained draft (2 steps)")
    reloaded = replace(first, sid=AppState().sid)
    other = replace(first, sid=AppState().sid, user="1" * 32)
    assert "original draft; a trained draft (2 steps) is ready" in ctl.train_status(reloaded)
    assert ctl.session_pair(reloaded.sid) is pair and ctl.session_pair(first.sid) is not pair
    assert ctl.train_status(other) == "Step and Run decode with the original draft."
    report = ctl.train(reloaded, train_settings("exit", 1e-2, 0.1, 2, 1, c.builder), c)
    assert [x["step"] for x in report.log] == [1, 2, 3]
    assert ctl.train_revert(reloaded).startswith("reverted")
    again = replace(first, sid=AppState().sid)
    assert ctl.train_status(again) == "Step and Run decode with the original draft."


def test_a_server_restart_keeps_this_browsers_exittrain_copy_and_revert_drops_it(ctl, pair, tmp_path):
    """The copy is written beside the browser's runs: a new server on the same folder finds it ready, not in use,
    with the same weights and steps, and the next Train step goes on from them; Revert removes it for good."""
    import torch

    from tevviz.app.exittrain_tab import trainable
    from tevviz.app.state import train_settings

    c, _ = trainable(settings(max_new_tokens=48)[1], pair.draft)
    st = steps(ctl, AppState(user=USER), 3, c)
    ctl.train(st, train_settings("exit", 1e-2, 0.1, 2, 2, c.builder), c)
    trained = ctl.store.training(st.sid).pair.draft.state_dict()
    restart = lambda: Controller(PairSource(pair=pair), runs=RunStore(tmp_path / "runs"))
    later = restart()
    page = replace(st, sid=AppState().sid)
    assert "original draft; a trained draft (2 steps) is ready" in later.train_status(page)
    kept = later.store.training(page.sid).pair.draft.state_dict()
    assert all(torch.equal(kept[k], v) for k, v in trained.items())
    assert not any(torch.equal(kept[k], v) for k, v in pair.draft.state_dict().items() if v.dim() == 2)
    assert later.session_pair(page.sid) is pair  # ready, not in use
    report = later.train(page, train_settings("exit", 1e-2, 0.1, 2, 1, c.builder), c)
    assert [x["step"] for x in report.log] == [1, 2, 3] and "kept through the restart" in report.notice
    # Another pair's server does not take it.
    other = Controller(PairSource(pair=tiny_pair("qwen2")), runs=RunStore(tmp_path / "runs"))
    assert other.train_status(replace(st, sid=AppState().sid)) == "Step and Run decode with the original draft."
    assert later.train_revert(page).startswith("reverted")
    assert restart().train_status(replace(st, sid=AppState().sid)) == "Step and Run decode with the original draft."


def test_a_runs_settings_fill_the_boxes_and_a_setting_its_file_predates_takes_the_default():
    """settings_values: what a run recorded fills its box; a builder setting an older file lacks (a stop before chains
    had one) takes BuilderConfig's default, after the file's `kind` reads as the builder's name."""
    from tevviz.app.runs import settings_values
    from tevviz.engine import BuilderConfig

    old = {"sampling": {"temperature": 1.0}, "builder": {"kind": "sampled", "budget": 8, "depth": 4}, "seed": 3}
    got = settings_values(old)
    assert (got["builder"], got["budget"], got["depth"], got["temperature"], got["seed"]) == ("sampled", 8, 4, 1.0, 3)
    assert got["stop_below"] == BuilderConfig.stop_below == 0.0 and got["children"] == BuilderConfig.children
    assert settings_values({"builder": {"name": "sampled", "stop_below": 0.3}})["stop_below"] == 0.3
    assert "budget" not in settings_values({"seed": 1})  # no builder recorded: its boxes stay as they are
