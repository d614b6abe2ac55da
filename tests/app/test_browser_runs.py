"""Runs in a real browser: a reload returns to the same run, round, node and colour; a copied link opens that view in
a new browser; a change of settings keeps the old run one click away; two runs pinned and compared, the comparison
shown again after a reload and from a link."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
import test_browser_tree
from conftest import screenshot, served, tiny_pair
from test_browser import ARTIFACTS, CHROMIUM
from test_browser_tree import POINTS, pick_metric

from tevviz.app import build_demo

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
browser = test_browser_tree.browser  # the one headless Chromium fixture of the tree tests


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    with served(build_demo(tiny_pair("llama"), default_prompt="t1 t2 t3", run_dir=runs)) as url:
        yield url


def new_page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    expect.set_options(timeout=60_000)
    return page


def load(page, url):
    """Open the app and let its load finish (the browser's id made and the URL's view restored) before acting: a Step
    sent before that would run with a state that has no browser id yet, and its run would have no link."""
    page.goto(url)
    page.wait_for_function("window.localStorage.getItem('tevviz-user')")
    page.get_by_role("button", name="Step", exact=True).wait_for()
    page.wait_for_timeout(1500)


def step(page, k):
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator("#tree-plot .gtitle")).to_have_text(re.compile(rf"^round {k}:"))


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_a_reload_and_a_link_return_to_the_same_view(browser, app_url):
    page = new_page(browser)
    load(page, app_url)
    title, details = page.locator("#tree-plot .gtitle"), page.locator("#node-details")
    for k in range(3):
        step(page, k)
    pick_metric(page, "w")
    expect(page.locator("#tree-plot .cbtitle")).to_contain_text("w(v)")  # recoloured before the key moves on
    page.locator("#header").click()
    page.keyboard.press("ArrowLeft")
    expect(title).to_have_text(re.compile(r"^round 1:"))
    node = next(p for p in page.evaluate(POINTS, "nodes") if p["id"] not in (0, None))
    page.mouse.click(node["x"], node["y"])
    named = re.compile(rf"\bnode {node['id']}\b.*token id")  # the node's own line, not "exit node 15"
    expect(details).to_contain_text(named)
    page.wait_for_function(f"new URL(location.href).searchParams.get('node') === '{node['id']}'")
    view = query(page)
    assert view["round"] == "1" and view["metric"] == "w" and re.fullmatch(r"[0-9a-f]{32}\.[0-9a-f]{32}", view["run"])

    page.reload()
    expect(title).to_have_text(re.compile(r"^round 1:"))
    expect(details).to_contain_text(named)
    expect(page.locator("#tree-plot .cbtitle")).to_contain_text("w(v)")
    link = page.url

    other = new_page(browser)  # another browser: no localStorage, no state, the link alone
    load(other, link)  # (once, under the full suite, a Step pressed right after the view showed began a new run)
    expect(other.locator("#tree-plot .gtitle")).to_have_text(re.compile(r"^round 1:"))
    expect(other.locator("#node-details")).to_contain_text(named)
    step(other, 3)  # and the run goes on from its last token there
    bad = new_page(browser)
    bad.goto(app_url + "?run=" + "a" * 32 + "." + "b" * 32)
    expect(bad.locator("#error-box")).to_contain_text("the link's run")
    for p in (page, other, bad):
        p.context.close()


def test_back_undoes_a_move_and_forward_redoes_it(browser, app_url):
    """Each move (a round, a node) is an entry of the browser's history: Back shows the view before it, Forward the
    one after, as a reload of that URL would; a colour changes no entry."""
    page = new_page(browser)
    load(page, app_url)
    title, details = page.locator("#tree-plot .gtitle"), page.locator("#node-details")
    for k in range(2):
        step(page, k)
    page.locator("#header").click()
    page.keyboard.press("ArrowLeft")
    expect(title).to_have_text(re.compile(r"^round 0:"))
    page.wait_for_function("new URL(location.href).searchParams.get('round') === '0'")
    node = next(p for p in page.evaluate(POINTS, "nodes") if p["id"] not in (0, None))
    page.mouse.click(node["x"], node["y"])
    page.wait_for_function(f"new URL(location.href).searchParams.get('node') === '{node['id']}'")
    pick_metric(page, "w")
    page.wait_for_function("new URL(location.href).searchParams.get('metric') === 'w'")

    page.go_back()  # the click undone (the colour rode along with it)
    page.wait_for_function("new URL(location.href).searchParams.get('round') === '0' && "
                           "!new URL(location.href).searchParams.get('node')")
    expect(title).to_have_text(re.compile(r"^round 0:"))
    expect(details).not_to_contain_text(re.compile(rf"\bnode {node['id']}\b.*token id"))
    page.go_back()  # the key undone: round 1 again
    page.wait_for_function("new URL(location.href).searchParams.get('round') === '1'")
    expect(title).to_have_text(re.compile(r"^round 1:"))
    page.go_forward()  # the key redone
    page.wait_for_function("new URL(location.href).searchParams.get('round') === '0'")
    expect(title).to_have_text(re.compile(r"^round 0:"))
    page.go_forward()  # and the click: the node selected again
    page.wait_for_function(f"new URL(location.href).searchParams.get('node') === '{node['id']}'")
    expect(title).to_have_text(re.compile(r"^round 0:"))
    expect(details).to_contain_text(re.compile(rf"\bnode {node['id']}\b.*token id"))
    page.context.close()


def test_a_change_of_settings_keeps_the_old_run_one_click_away_and_two_runs_compare(browser, app_url):
    page = new_page(browser)
    load(page, app_url)
    title = page.locator("#tree-plot .gtitle")
    for k in range(2):
        step(page, k)
    first = query(page)["run"]
    page.get_by_label("temperature (0 = greedy)").fill("1")
    step(page, 0)
    expect(page.locator("body")).to_contain_text("is kept in the run picker")
    assert query(page)["run"] != first

    # The first run is one click away, and pinned it compares with the second.
    page.locator("#run-pick input").click()
    page.get_by_role("option", name=re.compile(r"T 0 ")).first.click()
    page.get_by_role("button", name="Open", exact=True).click()
    expect(title).to_have_text(re.compile(r"^round 1:"))
    assert query(page)["run"] == first
    page.get_by_role("button", name="Pin as A").click()
    expect(page.locator("#compare-text")).to_contain_text("pinned")
    page.get_by_label(re.compile(r"^B \(A is the pinned run")).click()
    page.get_by_role("option", name=re.compile(r"T 1 ")).first.click()
    page.get_by_role("button", name="Compare with A", exact=True).click()
    expect(page.locator("#compare-text")).to_contain_text("Settings that differ")
    expect(page.locator("#compare-text")).to_contain_text("conditional A")
    expect(page.locator("#compare-plot .gtitle")).to_contain_text("round 0")
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot(page, ARTIFACTS / "runs_compared.png", full_page=True)
    said = ("Settings that differ", "conditional A", "T 0 · tev", "T 1 · tev")
    assert query(page)["cmp"].endswith(".0") and query(page)["pin"].endswith(first)

    # A reload, and the link in a fresh browser, show the same comparison without a press of Compare.
    link = page.url
    page.reload()
    expect(title).to_have_text(re.compile(r"^round 1:"))
    for text in said:
        expect(page.locator("#compare-text")).to_contain_text(text)
    expect(page.locator("#compare-plot .gtitle")).to_contain_text("round 0")
    other = new_page(browser)
    load(other, link)
    for text in said:
        expect(other.locator("#compare-text")).to_contain_text(text)
    expect(other.locator("#compare-plot .gtitle")).to_contain_text("round 0")
    screenshot(other, ARTIFACTS / "runs_compared_from_link.png", full_page=True)
    other.context.close()
    page.context.close()
