"""Find and filter in the Decode tab, in a real browser, as a person uses it on the embedded pair: a token typed, its
count, Next to a match (the details follow), another round from the list of rounds, a threshold, fold by mass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_browser_tree
from conftest import screenshot, served
from test_browser import CHROMIUM
from test_browser_runs import load, query, step
from test_browser_tree import pick_metric
from test_browser_views import new_page

from tevviz.app import build_demo

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
browser = test_browser_tree.browser

SHOTS = Path("/tmp/team/shots/search")
TITLE, COUNT, DETAILS = "#tree-plot .gtitle", "#search-count", "#node-details"
# The drawn tree's traces: name, node ids and marker opacities (plotly's own data on the page).
TRACES = """() => document.querySelector('#tree-plot .js-plotly-plot').data.map(t => ({name: t.name,
  ids: t.customdata || [], opacity: (t.marker || {}).opacity, text: t.text || [], hover: t.hovertext || []}))"""
FOLDED = "folded (+N: click to unfold)"


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with served(build_demo(None, run_dir=tmp_path_factory.mktemp("runs"))) as url:
        yield url


def traces(page) -> dict:
    return {t["name"]: t for t in page.evaluate(TRACES)}


def lit(page) -> set[int]:
    """The nodes drawn at full strength while a search dims the rest (all of them when none does)."""
    nodes = traces(page)["nodes"]
    opacity = nodes["opacity"]
    if not isinstance(opacity, list):
        return set(nodes["ids"])
    return {v for v, o in zip(nodes["ids"], opacity) if o == 1}


def shot(page, name: str) -> None:
    """A screenshot with the search row at the top and the tree under it, for a person to look at."""
    page.evaluate("document.querySelector('#search-row').scrollIntoView()")
    screenshot(page, SHOTS / name)


def light_folds(page) -> list[tuple[int, float]]:
    """Each "+N" of the tree: how many children it holds and their target flow together, as its hover says; each
    child folded by mass 0.05 carries less than that."""
    hover = traces(page)[FOLDED]["hover"]
    folds = [(int(m.group(1)), float(m.group(2)))
             for m in (re.search(r"(\d+) lighter children.*target flow P ([0-9.e-]+)", h) for h in hover)]
    assert all(mass < 0.05 * n for n, mass in folds), folds
    return folds


def a_word(page) -> str:
    """A word the shown tree labels (the ⎵ of a leading space dropped): a token that occurs."""
    words = [re.sub("^\u23b5", "", t) for t in traces(page)["labels"]["text"]]
    return next(w for w in words if re.fullmatch(r"[A-Za-z]{3,}", w))


@pytest.mark.parametrize("width", [1440, 900])
def test_find_step_jump_threshold_and_fold_by_mass(browser, app_url, width):
    page = new_page(browser, width)
    load(page, app_url)
    for k in range(4):
        step(page, k)
    word = a_word(page)
    page.locator("#find-box textarea, #find-box input").first.fill(word)
    count = page.locator(COUNT)
    expect(count).to_contain_text(re.compile(rf"\d+ nodes? match(es)? {word} in round 3"))
    n = int(re.search(r"(\d+) node", count.text_content()).group(1))
    page.wait_for_function("() => document.querySelector('#tree-plot .js-plotly-plot').data.some(t => t.name === "
                           "'nodes' && Array.isArray(t.marker.opacity))")
    found = lit(page)
    assert 0 < len(found) <= n < len(traces(page)["nodes"]["ids"])  # the rest are dimmed (folded ones not drawn)
    assert query(page)["find"] == word
    shot(page, f"found_{width}.png")

    # Next selects the first match: the details panel shows it, the node picker names it.
    page.locator("#find-next").click()
    expect(page.locator(DETAILS)).to_contain_text(re.compile(rf"node (\d+) .*{word}", re.DOTALL))
    first = int(re.search(r"node (\d+)", page.locator(DETAILS).text_content()).group(1))
    assert query(page)["node"] == str(first)
    if n > 1:
        page.locator("#find-next").click()
        expect(page.locator(DETAILS)).not_to_contain_text(f"node {first} ")
        page.locator("#find-prev").click()
        expect(page.locator(DETAILS)).to_contain_text(f"node {first} ")
    shot(page, f"stepped_{width}.png")
    # The selected node's table fits its column: nothing of it is cut or scrolled away.
    assert page.evaluate("() => { const d = document.querySelector('#node-details'); "
                         "return d.scrollWidth <= d.clientWidth + 1; }")

    # The keys still walk: ↓ starts the walk through the round's block from the selection.
    page.locator("#header").click()
    page.keyboard.press("ArrowDown")
    expect(page.locator(DETAILS)).to_contain_text("Walk, round 3: step 1")

    # The rounds that drafted the word: one click shows another, its first match selected.
    rounds = page.locator("#search-rounds label")
    expect(rounds.first).to_be_visible()
    labels = [t.strip() for t in rounds.all_text_contents()]
    assert any(t.startswith("round 3:") for t in labels), labels
    other = next((t for t in labels if not t.startswith("round 3:")), None)
    if other is not None:
        k = re.match(r"round (\d+):", other).group(1)
        rounds.filter(has_text=other).click()
        expect(page.locator(TITLE)).to_have_text(re.compile(rf"^round {k}:"))
        expect(count).to_contain_text(f"in round {k}")
        expect(page.locator(DETAILS)).to_contain_text(re.compile(rf"node \d+ .*{word}", re.DOTALL))
        shot(page, f"jumped_{width}.png")

    # A threshold on the colour shown (target flow P): only the matches at or above it stay lit.
    page.locator("#find-box textarea, #find-box input").first.fill("")
    expect(count).to_have_text("")
    page.locator("#threshold-box textarea, #threshold-box input").first.fill("0.1")
    expect(count).to_contain_text(re.compile(r"\d+ nodes? with target flow P\(v\) ≥ 0.1"))
    page.wait_for_timeout(500)
    above = lit(page)
    assert above and len(above) < len(traces(page)["nodes"]["ids"])
    shot(page, f"threshold_{width}.png")
    pick_metric(page, "w")  # the threshold is on the colour shown: the count follows it
    expect(count).to_contain_text(re.compile(r"\d+ nodes? with exit probability w\(v\) ≥ 0.1"))
    pick_metric(page, "P")

    # Fold by mass: the nodes under P 0.05 fold whatever the room, in this round and the others, through a reload;
    # a "+N" still opens; 0 unfolds all; blank gives the folds back to the room.
    page.locator("#threshold-box textarea, #threshold-box input").first.fill("")
    mass = page.locator("#fold-mass input")
    mass.fill("0.05")
    page.locator("#fold-btn").click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('below') === '0.05'")
    assert light_folds(page), "a best-first tree of 32 drafts some nodes under P 0.05"
    shot(page, f"folded_by_mass_{width}.png")
    page.locator("#header").click()
    page.keyboard.press("Home")
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 0:"))
    page.wait_for_function("() => new URL(location.href).searchParams.get('round') === '0'")
    assert query(page)["below"] == "0.05"
    light_folds(page)  # checked, not required: round 0 may draft nothing that light
    page.reload()
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 0:"))
    expect(mass).to_have_value("0.05")
    assert query(page)["below"] == "0.05"
    page.locator("#header").click()
    page.keyboard.press("End")
    expect(page.locator(TITLE)).to_have_text(re.compile(r"^round 3:"))
    page.wait_for_function(f"() => ({TRACES})().some(t => t.name === '{FOLDED}' && t.ids.length)")
    fold = page.evaluate(test_browser_tree.POINTS, FOLDED)[0]
    page.mouse.click(fold["x"], fold["y"])
    parent = fold["id"].split(":")[1]
    page.wait_for_function(f"() => new URL(location.href).searchParams.get('folds') === '{parent}'")
    assert f"less:{parent}" in [i for t in traces(page).values() for i in t["ids"]]
    mass.fill("0")
    page.locator("#fold-btn").click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('below') === '0'")
    assert not any(name.startswith("folded") and t["ids"] for name, t in traces(page).items())
    assert not query(page).get("folds")
    shot(page, f"unfolded_{width}.png")
    mass.fill("")
    page.locator("#fold-btn").click()
    page.wait_for_function("() => !new URL(location.href).searchParams.get('below')")

    # The query is in the URL: a reload finds the word again in the round it shows.
    page.locator("#find-box textarea, #find-box input").first.fill(word)
    page.wait_for_function("w => new URL(location.href).searchParams.get('find') === w", arg=word)
    shown = page.locator(TITLE).text_content().split(":")[0]
    page.reload()
    expect(page.locator("#find-box textarea, #find-box input").first).to_have_value(word)
    expect(page.locator(TITLE)).to_have_text(re.compile(f"^{shown}:"))
    expect(count).to_contain_text(re.compile(rf"match(es)? {word} in {shown}"))
    page.wait_for_function("() => document.querySelector('#tree-plot .js-plotly-plot').data.some(t => t.name === "
                           "'nodes' && Array.isArray(t.marker.opacity))")
    page.context.close()
