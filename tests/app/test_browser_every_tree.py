"""Every tree the app draws besides the Decode tree, in a real browser as a person opens it: the run comparison (Pin,
then Compare; a click on a node shows its details), the Verifier comparison tab's pair and the ExitTrain tab's
before/after pair. Each is labelled, no two labels meet, its exit rings lie whole inside the plot and the legend covers
no node, at 1440 and at 900 px; the embedded pair."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_browser_tree
from conftest import screenshot, served
from test_browser import CHROMIUM
from test_browser_runs import load
from test_browser_views import big_tree

from tevviz.app import build_demo

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
browser = test_browser_tree.browser  # the one headless Chromium fixture of the browser tests

SHOTS = Path("/tmp/team/shots/trees")
TITLE = "#tree-plot .gtitle"

# Per chart whose title matches: its labels, every pair of them whose boxes meet (a pixel of slack for antialiasing),
# whether each exit ring lies whole inside the plot area, and whether the chart is wider than its room.
TREES = """(pattern) => {
  const charts = [...document.querySelectorAll('.js-plotly-plot')].filter(gd => gd._fullLayout
    && new RegExp(pattern).test((gd.querySelector('.gtitle') || {}).textContent || ''));
  return charts.map(gd => {
    const texts = [...gd.querySelectorAll('.scatterlayer .trace text')].filter(t => t.textContent);
    const boxes = texts.map(t => { const r = t.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });
    const clashes = [];
    boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b, j) => {
      if (a[0] < b[2] - 1 && b[0] < a[2] - 1 && a[1] < b[3] - 1 && b[1] < a[3] - 1) {
        clashes.push([texts[i].textContent, texts[i + 1 + j].textContent]);
      }
    }));
    const L = gd._fullLayout, xa = L.xaxis, ya = L.yaxis;
    const rings = gd.data.filter(t => / ?exit$/.test(t.name) && t.x.length).flatMap(t => t.x.map((x, i) => {
      const r = t.marker.size / 2 + t.marker.line.width, px = xa.l2p(x), py = ya.l2p(t.y[i]);
      return {name: t.name, inside: px - r >= 0 && px + r <= xa._length && py - r >= 0 && py + r <= ya._length};
    }));
    // The lowest marker's bottom and the legend's top, in page px: the legend must not cover the last row.
    const top = gd.querySelector('.main-svg').getBoundingClientRect().top + L._size.t;
    const lowest = Math.max(...gd.data.filter(t => t.mode && t.mode.includes('markers')).flatMap(
      t => t.y.filter(y => y !== null).map(y => top + ya.l2p(y))));
    const legend = gd.querySelector('.legend');
    const covered = legend ? lowest + 6 > legend.getBoundingClientRect().top : false;
    const room = gd.closest('.tv-figure') || gd.parentElement;
    return {title: gd.querySelector('.gtitle').textContent, labels: texts.length, clashes, rings, covered,
            scrolls: room.scrollWidth > room.clientWidth + 1, room: room.clientWidth,
            planned: (gd.layout.meta || {}).width};
  });
}"""


CMP = "#compare-plot .js-plotly-plot"
# The page coordinates of a trace's last point in the comparison's tree (the root comes first: this is a deeper one).
POINT = """(name) => {
  const gd = document.querySelector('CMP');
  gd.scrollIntoView({block: 'center'});
  const t = gd.data.find(t => t.name === name), i = t.x.length - 1, L = gd._fullLayout;
  const svg = gd.querySelector('.main-svg').getBoundingClientRect();
  return {x: svg.left + L._size.l + L.xaxis.l2p(t.x[i]), y: svg.top + L._size.t + L.yaxis.l2p(t.y[i])};
}""".replace("CMP", CMP)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    with served(build_demo(None, run_dir=runs)) as url:
        yield url


def new_page(browser, width: int):
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    expect.set_options(timeout=120_000)
    return page


def step(page, k: int) -> None:
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator(TITLE)).to_have_text(re.compile(rf"^round {k}:"))


def drawn(page, pattern: str, count: int, labels: int) -> list[dict]:
    """The `count` charts titled `pattern`, once each has `labels` labels drawn (the figure laid out for its view's
    width may come a moment after the first)."""
    page.wait_for_function(f"([p, n, k]) => ({TREES})(p).filter(c => c.labels >= k).length >= n",
                           arg=[pattern, count, labels])
    page.wait_for_timeout(1000)
    return page.evaluate(TREES, pattern)


def assert_readable(charts: list[dict], count: int) -> None:
    """No two labels meet, every exit ring lies whole in its plot, and the legend covers no node."""
    assert len(charts) == count, charts
    for chart in charts:
        assert chart["clashes"] == [], chart
        assert chart["rings"] and all(r["inside"] for r in chart["rings"]), chart
        assert not chart["covered"], chart


@pytest.mark.parametrize("width", [1440, 900])
def test_the_run_comparison_tree_is_labelled_and_fits(browser, app_url, width):
    """Pin a run as A, decode another with a bigger tree, Compare with A: the union tree is labelled like the Decode
    tree, in the page's width (no scrolling), both exit rings inside."""
    page = new_page(browser, width)
    load(page, app_url)
    for k in range(2):
        step(page, k)
    page.get_by_role("button", name="Pin as A").click()
    expect(page.locator("#compare-text")).to_contain_text("pinned")
    big_tree(page, 48)
    for k in range(2):
        step(page, k)
    page.get_by_role("button", name="Compare with A", exact=True).click()
    expect(page.locator("#compare-plot .gtitle")).to_contain_text("round 1")
    charts = drawn(page, "A and B in one layout", 1, labels=10)
    page.locator("#compare-plot").scroll_into_view_if_needed()
    screenshot(page, SHOTS / f"run_comparison_{width}.png")
    assert_readable(charts, 1)
    (chart,) = charts
    assert not chart["scrolls"], {k: chart[k] for k in ("room", "planned")}
    assert {r["name"] for r in chart["rings"]} == {"A's exit", "B's exit"}

    # A click on a node both trees hold rings it and says, above the tree, what each verifier did there.
    node = page.evaluate(POINT, "both")
    page.mouse.click(node["x"], node["y"])
    box = page.locator("#compare-plot .annotation")
    expect(box).to_contain_text(re.compile(r"A #\d+: (root|accepted|exit node|rejected here|not reached)"))
    expect(box).to_contain_text(re.compile(r"B #\d+: "))
    expect(box).to_contain_text("P ")
    page.wait_for_timeout(500)
    assert page.evaluate(f"() => document.querySelector('{CMP}').data.some(t => t.name === 'selected')")
    screenshot(page, SHOTS / f"run_comparison_selected_{width}.png")
    charts = drawn(page, "A and B in one layout", 1, labels=10)
    assert_readable(charts, 1)  # the box sits above the tree: no label and no ring moved under it
    page.context.close()


@pytest.mark.parametrize("width", [1440, 900])
def test_the_verifier_comparisons_pair_is_labelled(browser, app_url, width):
    """The Verifier comparison tab's Decode both: both trees labelled, no labels meeting, the exit ring inside."""
    page = new_page(browser, width)
    load(page, app_url)
    page.get_by_label("max new tokens").fill("24")  # both decodes take the Decode tab's settings
    page.get_by_role("tab", name="Verifier comparison").click()
    page.get_by_role("button", name="Decode both").click()
    charts = drawn(page, r"^[AB], round \d+", 2, labels=5)
    page.locator(".js-plotly-plot").last.scroll_into_view_if_needed()
    screenshot(page, SHOTS / f"verifier_pair_{width}.png")
    assert_readable(charts, 2)
    assert [c["title"][0] for c in charts] == ["A", "B"]
    page.context.close()


@pytest.mark.parametrize("width", [1440, 900])
def test_the_exittrain_before_and_after_trees_are_labelled(browser, app_url, width):
    """Two rounds decoded, one Train step: the original and the trained draft's trees are labelled and readable."""
    page = new_page(browser, width)
    load(page, app_url)
    for k in range(2):
        step(page, k)
    page.get_by_role("tab", name="ExitTrain").click()
    page.get_by_label("N steps per click").fill("1")
    page.get_by_role("button", name="Train step").click()
    charts = drawn(page, r"(original|trained) draft, round", 2, labels=5)
    page.locator(".js-plotly-plot").filter(has_text="trained draft").scroll_into_view_if_needed()
    screenshot(page, SHOTS / f"exittrain_pair_{width}.png")
    assert_readable(charts, 2)
    assert [c["title"].split()[0] for c in charts] == ["original", "trained"]
    page.context.close()
