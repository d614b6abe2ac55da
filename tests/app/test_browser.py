"""The web app in a real browser: step, watch the tree change, recolour it, download the session JSON."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import screenshot, served, tiny_pair

from tevviz.app import build_demo
from tevviz.engine.records import io as tio

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[1] / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")


@pytest.fixture(scope="module")
def app_url():
    with served(build_demo(tiny_pair("llama"), default_prompt="t1 t2 t3")) as url:
        yield url


def test_step_recolour_and_download(app_url, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
            page.set_default_timeout(30_000)
            page.goto(app_url)
            expect = sync_api.expect
            # A Step renders in well under a second alone; under the suite's parallel workers it can take several.
            expect.set_options(timeout=30_000)
            title = page.locator("#tree-plot .gtitle")
            step = page.get_by_role("button", name="Step", exact=True)
            for k in range(3):
                step.click()
                expect(title).to_have_text(re.compile(rf"^round {k}:"))
            nodes_before = page.locator("#tree-plot .scatterlayer .point").count()
            assert nodes_before > 1

            page.locator("#metric-pick input").click()
            page.get_by_role("option", name="w", exact=True).click()
            expect(page.locator("#tree-plot .cbtitle")).to_contain_text("w(v)")

            page.get_by_role("button", name="Step token").click()
            expect(page.locator("#tree-plot")).to_contain_text("")  # re-rendered with the highlight ring
            page.get_by_role("button", name="Export", exact=True).click()
            session_button = page.get_by_role("button", name="Session JSON")
            expect(session_button).to_be_enabled()
            with page.expect_download() as download:
                session_button.click()
            path = tmp_path / "session.json"
            download.value.save_as(path)
            session = tio.loads(path.read_text(encoding="utf-8"))
            assert session.kind == "session" and len(session.rounds) == 3 and session.prompt == "t1 t2 t3"

            # A chart updated while its accordion is closed has its full width once shown.
            accordion = page.get_by_role("button", name="Session statistics")
            accordion.click()
            expect(page.locator("#session-plot")).to_be_hidden()
            step.click()
            expect(title).to_have_text(re.compile(r"^round 3:"))
            accordion.click()
            page.wait_for_function("""() => {
                const chart = document.querySelector('#session-plot .tv-figure');
                const svg = chart && chart.querySelector('.main-svg');
                return svg && chart.clientWidth > 800 &&
                    Math.abs(svg.getBoundingClientRect().width - chart.clientWidth) < 2;
            }""")
            screenshot(page, ARTIFACTS / "app.png", full_page=True)
        finally:
            browser.close()


def test_session_statistics_axis_titles_do_not_overlap(app_url):
    """No y-axis title of the tiled statistics runs into another title or tick label (the right axis of "where the
    mass went" once ran into the title of the coverage figure beside it)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(app_url)
            sync_api.expect.set_options(timeout=30_000)
            page.get_by_label("temperature (0 = greedy)").fill("1")
            page.get_by_role("button", name="Optimal tree").wait_for()
            for _ in range(3):
                page.get_by_role("button", name="Step", exact=True).click()
                page.wait_for_timeout(300)
            page.wait_for_function("document.querySelectorAll('#session-plot .infolayer [class*=\"title\"] text')"
                                   ".length >= 5")
            clashes = page.evaluate("""() => {
                const plot = document.querySelector('#session-plot');
                const box = (el) => el.getBoundingClientRect();
                const titles = [...plot.querySelectorAll('.infolayer g[class^="g-y"][class$="title"] text')];
                const ticks = [...plot.querySelectorAll('.yaxislayer-above text, .overaxes-above text')];
                const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1
                                      && b.top < a.bottom - 1;
                const out = [];
                titles.forEach((t, i) => {
                    for (const other of [...titles.slice(i + 1), ...ticks]) {
                        if (other.textContent && hit(box(t), box(other))) out.push([t.textContent, other.textContent]);
                    }
                });
                return out;
            }""")
            assert clashes == [], clashes
        finally:
            browser.close()


def test_a_scan_folder_opens_and_its_worst_round_shows_in_the_tree_view(tmp_path):
    """The Scan tab in a real browser: open a folder written by `tevviz scan`, then open its worst round in the
    Decode tab's tree view."""
    import json
    import os
    import subprocess
    import sys

    from conftest import perturbed, tiny_model, word_tokenizer

    from tevviz.engine.load.models import load_pair

    sync_api = pytest.importorskip("playwright.sync_api")
    target = tiny_model("llama", 0)
    for name, model in (("target", target), ("draft", perturbed(target, 1))):
        model.save_pretrained(tmp_path / name)
        word_tokenizer().save_pretrained(tmp_path / name)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "category": "ab"[i % 2], "prompt": f"t{i} t{i + 3} t9"})
                               + "\n" for i in range(4)))
    folder = tmp_path / "scan"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    subprocess.run([sys.executable, "-m", "tevviz", "scan", str(prompts), "-o", str(folder), "--target",
                    str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--max-new-tokens", "8",
                    "--no-chat"], env=env, check=True, capture_output=True)
    demo = build_demo(load_pair(str(tmp_path / "target"), str(tmp_path / "draft")), default_prompt="t1 t2",
                      model_dirs=(str(tmp_path),))  # the Scan tab opens scans under the folders it may read
    with served(demo) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            sync_api.expect.set_options(timeout=30_000)
            page.goto(url)
            page.get_by_role("tab", name="Scan").click()
            page.get_by_label("scan folder").fill(str(folder))
            page.get_by_role("button", name="Open", exact=True).click()
            sync_api.expect(page.get_by_role("button", name="Open in the Decode tab")).to_be_visible()
            sync_api.expect(page.locator("body")).to_contain_text("4 prompts")
            page.get_by_role("button", name="Open in the Decode tab").click()
            title = page.locator("#tree-plot .gtitle")
            sync_api.expect(title).to_have_text(re.compile(r"^round \d+:"))
            ARTIFACTS.mkdir(exist_ok=True)
            screenshot(page, ARTIFACTS / "scan_round.png")
        finally:
            browser.close()


def test_tree_title_and_legend_do_not_overlap(tmp_path):
    """The tree figure with ghost branches on, at the app's width and a narrow one: the title's box and the legend's
    do not meet, and the title reads as written (C_p, C_p*)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_render import GHOST_TITLE, SIX_GHOSTS, SMALL

    from tevviz.render import tree_figure

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 800})
            for width in (900, 480):
                path = tmp_path / f"tree_{width}.html"
                fig = tree_figure(SMALL, "P", title=GHOST_TITLE, ghosts=SIX_GHOSTS).update_layout(width=width)
                fig.write_html(path, include_plotlyjs=True)
                page.goto(path.as_uri())
                page.wait_for_selector(".gtitle")
                boxes = page.evaluate("""() => ['.gtitle', '.legend'].map(s => {
                    const r = document.querySelector(s).getBoundingClientRect();
                    return [r.left, r.top, r.right, r.bottom];
                })""")
                (tl, tt, tr, tb), (ll, lt, lr, lb) = boxes
                assert tb <= lt or lb <= tt or tr <= ll or lr <= tl, (width, boxes)
                text = page.locator(".gtitle").text_content()
                assert "E[L] = 1 + C_p = 2.500" in text and "optimal 1 + C_p* = 3.000" in text, text
        finally:
            browser.close()
