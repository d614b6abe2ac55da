"""The views around the tree in a real browser, as a person uses them: a scan's round opened in the Decode tab,
folds, imports and continued runs, the comparison of two runs. One app server for the file."""

from __future__ import annotations

import re

import pytest
import test_browser_tree
from conftest import screenshot, served
from test_browser import ARTIFACTS, CHROMIUM
from test_browser_runs import load
from test_browser_tree import POINTS

from tevviz.app import build_demo

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
browser = test_browser_tree.browser  # the one headless Chromium fixture of the browser tests

TITLE = "#tree-plot .gtitle"
NODES = "#tree-plot .scatterlayer .point"


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    # The embedded pair: the shipped held-out prompts fit it, so the Scan tab can scan with it.
    with served(build_demo(None, run_dir=runs)) as url:
        yield url


def new_page(browser, width: int = 1440):
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    expect.set_options(timeout=60_000)
    return page


def _artifact(name: str):
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def test_a_scans_round_opens_in_the_decode_tab_and_stays_drawn(browser, app_url):
    """Item: a worst round opened from the Scan tab draws in the Decode tab and is still drawn seconds later (it was
    drawn for a moment, then put back to the blank tree)."""
    page = new_page(browser)
    load(page, app_url)
    page.get_by_role("tab", name="Scan").click()
    page.get_by_label("prompts (0 = all)").fill("1")
    page.get_by_role("button", name="Start scan").click()
    expect(page.get_by_text(re.compile("^done:"))).to_be_visible(timeout=240_000)
    page.get_by_text("where the mass went").first.scroll_into_view_if_needed()
    # The scan's gr.Plots come into view (gradio loads its own plotly.js with them); a legend sits below its axis title.
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .legend').length >= 4")
    overlaps = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.querySelector(
        '.legend') && p.querySelector('.xtitle')).map(p => [p.querySelector('.xtitle').getBoundingClientRect().bottom,
        p.querySelector('.legend').getBoundingClientRect().top]).filter(([title, legend]) => legend < title)""")
    assert overlaps == [], overlaps
    page.locator("[role=grid] [role=gridcell]").nth(9).click()  # the second row's first cell
    title = page.locator(TITLE)
    expect(title).to_have_text(re.compile(r"^round \d+:"))
    page.wait_for_timeout(3000)
    expect(title).to_have_text(re.compile(r"^round \d+:"))
    assert page.locator(NODES).count() > 0
    shown = title.text_content()
    page.get_by_role("tab", name="Scan").click()
    page.get_by_role("button", name="Open in the Decode tab").click()
    expect(page.get_by_role("tab", name="Decode")).to_have_attribute("aria-selected", "true")
    page.wait_for_timeout(3000)
    expect(title).to_have_text(re.compile(r"^round \d+:"))
    # The Decode tab opens at its tree, not at the Scan tab's scroll depth among the settings.
    top = page.evaluate("document.querySelector('#tree-plot').getBoundingClientRect().top")
    assert 0 <= top < 300, top
    assert title.text_content() != shown or page.locator(NODES).count() > 0
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, _artifact("scan_round_stays.png"))
    page.context.close()


# Every clicked point's id in the tree (nodes, "+N" folds as "more:N", opened folds as "less:N").
IDS = "() => document.querySelector('#tree-plot .tv-figure').data.flatMap(t => t.customdata || []).map(String)"


def big_tree(page, budget: int = 256, builder: str = "best-first") -> None:
    page.get_by_label(builder, exact=True).check()
    auto = page.get_by_label(re.compile(r"auto: size each tree"))
    if auto.is_checked():
        auto.uncheck()
    page.get_by_label("B budget").fill(str(budget))
    page.get_by_label("H depth").fill("8")


def steady(page, name: str) -> list[dict]:
    """The points of trace `name` once the tree stops moving: a reloaded view reports its width and the tree is drawn
    again for it a moment later, and a click aimed at the first drawing can land between the two."""
    points, before = page.evaluate(POINTS, name), None
    while points != before:
        page.wait_for_timeout(400)
        before, points = points, page.evaluate(POINTS, name)
    return points


def test_a_fold_opens_keeps_its_parent_closes_again_and_the_url_keeps_it(browser, app_url):
    """Item: a click on "+N" shows that parent's children and keeps the parent drawn; the "−" after them folds them
    again; the URL keeps the open folds through a reload and in a fresh browser."""
    page = new_page(browser, 900)
    load(page, app_url)
    big_tree(page)
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 0: 257 nodes"))
    folds = page.evaluate(POINTS, "folded (+N: click to unfold)")
    assert folds, "a tree of 256 nodes in 900 px folds some children"
    fold = folds[-1]
    parent = fold["id"].split(":")[1]
    page.mouse.click(fold["x"], fold["y"])
    expect(page).to_have_url(re.compile(rf"folds={parent}(&|$)"))
    ids = page.evaluate(IDS)
    assert parent in ids and f"less:{parent}" in ids and f"more:{parent}" not in ids, ids
    screenshot(page, _artifact("fold_opened_900.png"))

    other = new_page(browser, 1440)
    other.goto(page.url)
    expect(other.locator(TITLE)).to_have_text(re.compile(r"^round 0: 257 nodes"))
    other.wait_for_function(f"() => ({IDS})().includes('less:{parent}')")
    other.context.close()

    page.reload()
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 0: 257 nodes"))
    page.wait_for_function(f"() => ({IDS})().includes('less:{parent}')")
    less = steady(page, "opened (\u2212: click to fold again)")
    page.mouse.click(less[0]["x"], less[0]["y"])
    expect(page).not_to_have_url(re.compile(r"folds="))
    assert f"less:{parent}" not in page.evaluate(IDS)
    page.context.close()


def test_an_import_fills_every_setting_and_step_continues_it_with_them(browser, app_url, tmp_path):
    """Item: a session file imported fills every settings box from the file; Step then continues it with them, and
    the continued run keeps its own max new tokens."""
    page = new_page(browser)
    load(page, app_url)
    page.get_by_label("max new tokens").fill("40")
    for k in range(2):
        page.get_by_role("button", name="Step", exact=True).click()
        expect(page.locator(TITLE)).to_have_text(re.compile(rf"^round {k}:"))
    page.get_by_role("button", name="Export", exact=True).click()
    session_button = page.get_by_role("button", name="Session JSON")
    expect(session_button).to_be_enabled()
    with page.expect_download() as download:
        session_button.click()
    path = tmp_path / "session.json"
    download.value.save_as(path)
    page.context.close()

    page = new_page(browser, 900)
    load(page, app_url)
    page.get_by_label("temperature (0 = greedy)").fill("0.5")
    page.get_by_label("max new tokens").fill("7")
    page.locator("#session-import input[type=file]").set_input_files(str(path))
    expect(page.locator("body")).to_contain_text("imported 2 round(s)")
    expect(page.get_by_label("temperature (0 = greedy)")).to_have_value("0")
    expect(page.get_by_label("max new tokens")).to_have_value("40")
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 2:"))
    expect(page.locator("body")).to_contain_text("continued run")
    page.reload()
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 2:"))
    expect(page.get_by_label("max new tokens")).to_have_value("40")  # the run's own, not the 38 it had left
    page.get_by_label("temperature (0 = greedy)").fill("1")
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator("body")).to_contain_text(re.compile(r"temperature 0(\.0)? \u2192 1(\.0)?"))
    screenshot(page, _artifact("import_settings_900.png"))
    page.context.close()


def _near(page, button: str, box: str) -> float:
    """Vertical px between a button and a box (an error said beside the button is within a few rows of it)."""
    b = page.get_by_role("button", name=button, exact=True).bounding_box()
    e = page.locator(box).bounding_box()
    return abs((e["y"] + e["height"] / 2) - (b["y"] + b["height"] / 2))


def test_two_runs_compare_by_pin_named_as_they_are_with_errors_beside_the_button(browser, app_url):
    """Item: Compare sits by Pin, its errors and the Verifier comparison tab's show beside the button pressed, the
    runs are named by what they are, and the text and the round line say one consistent thing."""
    page = new_page(browser, 900)
    load(page, app_url)
    page.get_by_role("button", name="Compare with A", exact=True).click()
    expect(page.locator("#runs-error")).to_contain_text("pin a run as A first")
    assert _near(page, "Compare with A", "#runs-error") < 150
    expect(page.locator("#error-box")).to_have_text("")

    for k in range(2):
        page.get_by_role("button", name="Step", exact=True).click()
        expect(page.locator(TITLE)).to_have_text(re.compile(rf"^round {k}:"))
    page.get_by_role("button", name="Pin as A").click()
    expect(page.locator("#compare-text")).to_contain_text("pinned")
    big_tree(page, 16)
    for k in range(2):
        page.get_by_role("button", name="Step", exact=True).click()
        expect(page.locator(TITLE)).to_have_text(re.compile(rf"^round {k}:"))
    page.evaluate("window.scrollTo(0, 0)")
    page.get_by_role("button", name="Compare with A", exact=True).click()
    text = page.locator("#compare-text")
    expect(text).to_contain_text("Settings that differ")
    # The comparison opens far below the button: the page goes to it.
    page.wait_for_function("() => { const r = document.querySelector('#compare-text').getBoundingClientRect(); "
                           "return r.top >= 0 && r.top < window.innerHeight; }")
    expect(text).to_contain_text(re.compile(r"\*?B\*?: \S.*best-first B 16"))
    body = text.inner_text()
    assert "A: A" not in body and "B: B" not in body
    assert not ("every round compares the same context" in body and "different contexts" in body), body
    expect(page.locator("#compare-plot .gtitle")).to_contain_text("round 1")
    text.scroll_into_view_if_needed()
    screenshot(page, _artifact("runs_compared_900.png"))

    page.get_by_role("tab", name="Verifier comparison").click()
    page.get_by_label("draws M").fill("0")
    page.get_by_role("button", name="Compare verifiers").click()
    expect(page.locator("#compare-error")).to_contain_text("Error")
    assert _near(page, "Compare verifiers", "#compare-error") < 150
    page.context.close()


@pytest.fixture(scope="module")
def block_url(tmp_path_factory):
    """The embedded pair with its block drafter: the Decode tab's drafter is chosen when the app starts."""
    from tevviz.engine import ModelSource
    from tevviz.engine.load.pairs import named_pair

    draft = named_pair("stdlib").drafter_paths()["tevviz-stdlib-block-draft"]
    runs = tmp_path_factory.mktemp("block-runs")
    with served(build_demo(ModelSource(pair="stdlib", draft=str(draft)), run_dir=runs)) as url:
        yield url


# The page coordinates of a drafter's-rows cell: depth d, rank r.
CELL = """([d, r]) => {
  const gd = document.querySelector('#rows-plot .tv-figure');
  gd.scrollIntoView({block: 'center'});
  const svg = gd.querySelector('.main-svg').getBoundingClientRect(), m = gd._fullLayout._size;
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  return {x: svg.left + m.l + xa.l2p(r), y: svg.top + m.t + ya.l2p(d)};
}"""


@pytest.mark.parametrize("width", [1440, 900])
def test_the_block_drafters_rows_have_their_height_and_a_cell_rings_its_nodes(browser, block_url, width):
    """Item: the drafter's rows at B = 256 are drawn a row's height per depth, not 30 px, and a click on a cell
    rings that token's nodes in the tree; the header names the block drafter."""
    page = new_page(browser, width)
    load(page, block_url)
    expect(page.locator("#header")).to_contain_text("tevviz-stdlib-block-draft")
    big_tree(page, 256, "ddtree")
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 0: 257 nodes"))
    page.get_by_role("button", name=re.compile("drafter's rows")).click()
    rows = page.locator("#rows-plot .main-svg").first
    expect(rows).to_be_visible()
    page.wait_for_timeout(500)
    depths = page.evaluate("() => document.querySelector('#rows-plot .tv-figure').data[0].y.length")
    assert rows.bounding_box()["height"] >= 130 + 40 * depths - 2
    cell = page.evaluate(CELL, [1, 2])  # depth 1, the third likeliest: a tree of 256 has it
    page.mouse.click(cell["x"], cell["y"])
    page.wait_for_function("() => document.querySelector('#tree-plot .tv-figure').data.some(t => t.name === 'marked'"
                           " && t.x.length > 0)")
    page.locator("#rows-plot").screenshot(path=str(_artifact(f"block_rows_{width}.png")), animations="disabled")
    page.context.close()


@pytest.mark.parametrize("width", [800, 1440])
def test_step_has_a_key_and_stays_within_reach_of_the_tree(browser, app_url, width):
    """Item (the smaller ones): "s" presses Step wherever the focus is but in a text field; at a narrow width, where
    the settings column is below the tree, Step stays on the screen beside the tree."""
    page = new_page(browser, width)
    load(page, app_url)
    page.locator("#header").click()
    page.keyboard.press("s")
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 0:"))
    page.keyboard.press("s")
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 1:"))
    page.evaluate("window.scrollTo(0, 0)")
    step = page.get_by_role("button", name="Step", exact=True).bounding_box()
    tree = page.locator("#tree-plot").bounding_box()
    assert step["y"] + step["height"] <= 900 and tree["y"] < 900, (step, tree)
    screenshot(page, _artifact(f"step_in_reach_{width}.png"))
    page.context.close()


def test_a_reload_and_a_link_keep_the_pinned_run_and_the_walk(browser, app_url):
    """Item: a reload and a link in a fresh browser keep the pinned run (Compare with A works after them) and the
    walk's position in the round."""
    page = new_page(browser)
    load(page, app_url)
    for k in range(2):
        page.get_by_role("button", name="Step", exact=True).click()
        expect(page.locator(TITLE)).to_have_text(re.compile(rf"^round {k}:"))
    page.get_by_role("button", name="Pin as A").click()
    expect(page).to_have_url(re.compile(r"pin="))
    page.locator("#header").click()
    page.keyboard.press("j")
    expect(page.locator("#node-details")).to_contain_text("Walk, round 1: step 1")
    expect(page).to_have_url(re.compile(r"walk=0"))
    for view in (page, new_page(browser, 900)):
        if view is page:
            view.reload()
        else:
            view.goto(page.url)
        expect(view.locator("#node-details")).to_contain_text("Walk, round 1: step 1")
        expect(view).to_have_url(re.compile(r"pin="))
        view.get_by_role("button", name="Compare with A", exact=True).click()
        expect(view.locator("#compare-text")).to_contain_text("same run")
        expect(view.locator("#runs-error")).to_have_text("")
    screenshot(view, _artifact("reload_keeps_pin_and_walk_900.png"))
    view.context.close()
    page.context.close()
