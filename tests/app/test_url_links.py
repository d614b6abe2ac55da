"""A link's query (tevviz/app/url_view.py): an unknown metric, a non-ASCII digit and a number past int()'s digit
limit are refused by `read_query` (None, not an exception), and such a link never breaks the page's load: the
browser's id is still taken, so its runs are still saved on the server."""

from __future__ import annotations

import pytest
from conftest import tiny_pair

from tevviz.app.controller import Controller
from tevviz.app.source import PairSource
from tevviz.app.state import AppState, decode_settings
from tevviz.app.updates import view_url
from tevviz.app.url_view import read_query

USER = "0" * 32
PROMPT = "t1 t2 t3"
BAD = {"metric": "bogus", "round": "%C2%B2", "node": "%C2%B2"}  # '²': str.isdigit says yes, int() says no


@pytest.mark.parametrize("key, value", [*BAD.items(), ("round", "9" * 5000), ("node", "7" * 5000), ("round", "-1"),
                                        ("round", "1e3"), ("node", "\u0663"), ("below", "1.5"), ("below", "-0.1"),
                                        ("below", "nan"), ("below", "x")])
def test_read_query_refuses_what_is_not_a_view(key, value):
    q = read_query(f"?run={USER}.{'a' * 32}&{key}={value}")
    assert q[key] is None and q["run"] == "a" * 32 and q["user"] == USER


def test_read_query_keeps_a_good_view():
    q = read_query(f"?run={USER}.{'b' * 32}&round=12&node=3&metric=P")
    assert (q["round"], q["node"], q["metric"]) == (12, 3, "P")
    assert read_query("?node=bonus")["node"] == "bonus" and read_query("")["run"] is None
    assert read_query("?below=0.05")["below"] == 0.05 and read_query("?below=0")["below"] == 0.0


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from tevviz.app import build_demo

    pair = tiny_pair("llama")
    runs = tmp_path_factory.mktemp("runs")
    demo = build_demo(pair, default_prompt=PROMPT, run_dir=runs)
    restore = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "restore")
    return pair, runs, restore


def cfg():
    return decode_settings(PROMPT, 0, 0, 1.0, 0, "best-first", 8, 3, 2, 4, "4,2", "tev", 8)[1]


@pytest.mark.parametrize("query", ["?round=%C2%B2", "?metric=bogus&node=%C2%B2", f"?round={'9' * 5000}"])
def test_a_bad_link_still_takes_the_browser_id_and_keeps_its_run(app, query):
    pair, runs, restore = app
    st = Controller(PairSource(pair=pair)).step(AppState(), PROMPT, cfg())  # a Step before the load finished
    out = restore(st, "P", USER, query)
    kept = next(v for v in out.values() if isinstance(v, AppState))
    assert kept.user == USER and (runs / USER / f"{st.run_id}.json").exists()


def test_a_link_to_a_kept_run_with_a_bad_round_opens_the_run(app):
    pair, _, restore = app
    st = Controller(PairSource(pair=pair)).step(AppState(user=USER), PROMPT, cfg())
    restore(st, "P", USER, "")  # kept on the server
    out = restore(AppState(), "P", USER, f"?run={USER}.{st.run_id}&round=%C2%B2&node={'5' * 5000}&metric=bogus")
    opened = next(v for v in out.values() if isinstance(v, AppState))
    assert opened.run_id == st.run_id and opened.generated == st.generated


def test_a_link_keeps_the_fold_by_mass_in_the_state_and_its_box(app):
    pair, _, restore = app
    st = Controller(PairSource(pair=pair)).step(AppState(user=USER), PROMPT, cfg())
    restore(st, "P", USER, "")
    out = restore(AppState(), "P", USER, f"?run={USER}.{st.run_id}&round=0&below=0.2")
    opened = next(v for v in out.values() if isinstance(v, AppState))
    assert opened.fold_below == 0.2 and 0.2 in out.values()  # the box shows what the tree folds by
    assert '"below": "0.2"' in view_url(opened, "P")
    out = restore(AppState(), "P", USER, f"?run={USER}.{st.run_id}&round=0")
    assert next(v for v in out.values() if isinstance(v, AppState)).fold_below is None


@pytest.mark.parametrize("width", [812, 1333])
def test_a_link_opens_with_its_tree_laid_out_for_the_width_the_page_reported(app, width):
    import json

    pair, _, restore = app
    st = Controller(PairSource(pair=pair)).step(AppState(user=USER), PROMPT, cfg())
    restore(st, "P", USER, "")
    out = restore(AppState(), "P", USER, f"?run={USER}.{st.run_id}&round=0", width)
    trees = [json.loads(v) for v in out.values() if isinstance(v, str) and '"meta"' in v and "round 0:" in v]
    assert trees and trees[0]["layout"]["meta"]["width"] == width  # not the default, redrawn a moment later
    out = restore(AppState(), "P", USER, f"?run={USER}.{st.run_id}&round=0", "not a width")
    assert [json.loads(v) for v in out.values() if isinstance(v, str) and "round 0:" in v]  # ignored, still opens
