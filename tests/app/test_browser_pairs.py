"""The two pairs of trees (the Verifier comparison tab's A and B, the ExitTrain tab's original and trained draft) in
a real browser, as the Decode tree is used: each tree laid out for its own column at 1440 and at 900 px (no scrolling,
labels apart, exit rings inside); a click on a node in one tree rings the same node in the other and the details below
name it with what each side has there; a click on "+N" unfolds it in both. The embedded pair, big trees."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import test_browser_tree
from conftest import screenshot, served
from test_browser import CHROMIUM
from test_browser_every_tree import assert_readable, drawn, new_page, step
from test_browser_runs import load
from test_browser_views import big_tree

from tevviz.app import build_demo

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
browser = test_browser_tree.browser  # the one headless Chromium fixture of the browser tests

SHOTS = Path("/tmp/shots-pairs")
BUDGET = 96  # nodes per tree: wide enough that half a 1440 px window folds some siblings

# Every point of a view's traces named `name` (a name ending in "*": every trace whose name starts so), with its
# page coordinates, its data coordinates and its customdata; the view scrolled into sight first.
POINTS = """([id, name]) => {
  const gd = document.querySelector(`#${id} .js-plotly-plot`);
  gd.scrollIntoView({block: 'center'});
  const L = gd._fullLayout, svg = gd.querySelector('.main-svg').getBoundingClientRect();
  const wanted = t => name.endsWith('*') ? t.name.startsWith(name.slice(0, -1)) : t.name === name;
  return gd.data.filter(wanted).flatMap(t => t.x.map((x, i) => ({
    px: svg.left + L._size.l + L.xaxis.l2p(x), py: svg.top + L._size.t + L.yaxis.l2p(t.y[i]), x, y: t.y[i],
    key: t.customdata ? t.customdata[i] : null, hover: t.hovertext ? t.hovertext[i] : null})));
}"""
# The keys (customdata) of every trace of a view.
KEYS = "(id) => document.querySelector(`#${id} .js-plotly-plot`).data.flatMap(t => t.customdata || [])"
# The view's chart, its figure's planned width and its room.
ROOM = """(id) => { const gd = document.querySelector(`#${id} .js-plotly-plot`);
  return {planned: gd.layout.meta.width, room: gd.clientWidth, scrolls: gd.scrollWidth > gd.clientWidth + 1}; }"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with served(build_demo(None, run_dir=tmp_path_factory.mktemp("runs"))) as url:
        yield url


def points(page, view: str, name: str) -> list[dict]:
    return page.evaluate(POINTS, [view, name])


def settled(page, views: tuple[str, str]) -> None:
    """Both views drawn for the width they report (a figure laid out for another width asks again, once)."""
    page.wait_for_function("""(ids) => ids.every(id => { const gd = document.querySelector(`#${id} .js-plotly-plot`);
      return gd && gd.layout && Math.abs(gd.layout.meta.width - gd.clientWidth) <= 8; })""", arg=list(views))
    page.wait_for_timeout(800)


def click_and_fold(page, views: tuple[str, str], details: str, shots: str) -> None:
    """Each tree laid out for its column; a node clicked in the first ringed in both and named in the details; a
    "+N" clicked in the second opened in both, the labels still apart."""
    settled(page, views)
    page.locator(f"#{views[1]}").scroll_into_view_if_needed()
    screenshot(page, SHOTS / f"{shots}.png")
    for view in views:
        room = page.evaluate(ROOM, view)
        assert not room["scrolls"] and abs(room["planned"] - room["room"]) <= 8, room
        assert room["room"] >= 400, room  # a window too narrow for two such columns stacks them

    # A node both trees drafted, deep in the first tree: a click rings it in both, and the details say what each has.
    node = max((p for p in points(page, views[0], "in both") if p["key"] != 0), key=lambda p: -p["y"])
    page.mouse.click(node["px"], node["py"])
    for view in views:
        page.wait_for_function(f"([id, x, y]) => ({POINTS})([id, 'selected']).some(p => p.x === x && p.y === y)",
                               arg=[view, node["x"], node["y"]])
    token = html.unescape(re.match(r"<b>(.*?)</b>", node["hover"]).group(1))  # the token's repr
    text = page.locator(f"#{details}")
    expect(text).to_contain_text("in both trees")
    said = " ".join(text.inner_text().split())
    assert " ".join(token.split()) in said, (token, said)
    assert re.search(r"verdict (root|accepted|exit node|rejected here|not reached) "
                     r"(root|accepted|exit node|rejected here|not reached)", said), said
    page.locator(f"#{details}").scroll_into_view_if_needed()
    screenshot(page, SHOTS / f"{shots}_selected.png")

    # A "+N" of the second tree: a click opens it in both (a "−" after the opened children), the selection kept.
    folds = points(page, views[1], "folded*")
    assert folds, f"no +N fold in a tree of {BUDGET} nodes"
    fold = folds[0]
    parent = fold["key"].split(":")[1]
    page.mouse.click(fold["px"], fold["py"])
    for view in views:
        page.wait_for_function(f"([id, key]) => ({KEYS})(id).includes(key)", arg=[view, f"less:{parent}"])
        assert f"more:{parent}" not in page.evaluate(KEYS, view)
        assert points(page, view, "selected")
    page.wait_for_timeout(800)
    page.locator(f"#{views[1]}").scroll_into_view_if_needed()
    screenshot(page, SHOTS / f"{shots}_unfolded.png")


@pytest.mark.parametrize("width", [1440, 900])
def test_the_verifier_comparisons_pair_selects_and_unfolds_in_both_trees(browser, app_url, width):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = new_page(browser, width)
    load(page, app_url)
    big_tree(page, BUDGET)
    page.get_by_label("max new tokens").fill("24")
    page.get_by_role("tab", name="Verifier comparison").click()
    for side in "AB":
        page.get_by_label(f"{side}: budget B").fill(str(BUDGET))
    page.get_by_role("button", name="Decode both").click()
    charts = drawn(page, r"^[AB], round \d+", 2, labels=10)
    assert_readable(charts, 2)
    click_and_fold(page, ("side-pair-a", "side-pair-b"), "side-pair-details", f"verifier_pair_{width}")
    assert_readable(drawn(page, r"^[AB], round \d+", 2, labels=10), 2)
    page.context.close()


@pytest.mark.parametrize("width", [1440, 900])
def test_the_exittrain_pair_selects_and_unfolds_in_both_trees(browser, app_url, width):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = new_page(browser, width)
    load(page, app_url)
    big_tree(page, BUDGET)
    for k in range(2):
        step(page, k)
    page.get_by_role("tab", name="ExitTrain").click()
    page.get_by_label("N steps per click").fill("1")
    page.get_by_role("button", name="Train step").click()
    charts = drawn(page, r"(original|trained) draft, round", 2, labels=10)
    assert_readable(charts, 2)
    click_and_fold(page, ("moved-pair-a", "moved-pair-b"), "moved-pair-details", f"exittrain_pair_{width}")
    assert_readable(drawn(page, r"(original|trained) draft, round", 2, labels=10), 2)
    page.context.close()


def test_a_pair_follows_its_room_when_the_window_changes_shown_or_hidden(browser, app_url):
    """Item: the trees are laid out again when their room changes, with no click: a window narrowed while the pair is
    shown, and one widened while its tab is hidden (0 px wide until shown again)."""
    views = ("side-pair-a", "side-pair-b")
    page = new_page(browser, 1440)
    load(page, app_url)
    big_tree(page, BUDGET)
    page.get_by_label("max new tokens").fill("16")
    page.get_by_role("tab", name="Verifier comparison").click()
    page.get_by_role("button", name="Decode both").click()
    drawn(page, r"^[AB], round \d+", 2, labels=10)
    settled(page, views)
    wide = page.evaluate(ROOM, views[0])["planned"]

    page.set_viewport_size({"width": 1150, "height": 900})
    settled(page, views)
    narrow = page.evaluate(ROOM, views[0])["planned"]
    assert narrow < wide - 100, (wide, narrow)

    page.get_by_role("tab", name="Decode").click()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_role("tab", name="Verifier comparison").click()
    settled(page, views)
    again = page.evaluate(ROOM, views[0])["planned"]
    assert abs(again - wide) <= 8, (wide, again)
    for view in views:
        assert not page.evaluate(ROOM, view)["scrolls"]
    page.context.close()
