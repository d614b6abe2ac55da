"""Stop in a real browser: the Doctor's Stop ends the run after the prompt in progress, says after how many of how
many decodes, and the next action runs at once (the work stopped, not only the browser's wait). And a reload keeps
the baseline timed before."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import test_browser_tree
from conftest import screenshot, served
from test_browser import CHROMIUM

from tevviz.app import build_demo
from tevviz.engine.load.models import assets_dir

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
browser = test_browser_tree.browser  # the one headless Chromium fixture of the browser tests

BLOCK_DRAFT = "tevviz-stdlib-block-draft"  # reads the target's states: the doctor decodes every reading of it
SHOTS = Path(os.environ.get("TEVVIZ_SHOTS", Path(__file__).parents[1] / "artifacts"))


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with served(build_demo(None, run_dir=tmp_path_factory.mktemp("runs"))) as url:
        yield url


@pytest.mark.skipif(not (assets_dir() / "models" / BLOCK_DRAFT).is_dir(), reason="the shipped block drafter is absent")
@pytest.mark.parametrize("width", [1440, 900])
def test_the_doctors_stop_ends_the_run_and_frees_the_models(browser, app_url, width):
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    expect.set_options(timeout=120_000)
    page.goto(app_url)
    page.get_by_role("tab", name="Doctor").click()
    draft = page.get_by_label("draft (a shipped one, or type a path)")
    draft.click()
    page.get_by_role("option", name=BLOCK_DRAFT, exact=True).click()
    # Decodes long enough that Stop lands mid-run even on a quick machine: of 64 tokens, the whole run once ended
    # before the page was seen at "2 of" (a poll between two progress lines), and Stop then had nothing to stop.
    page.get_by_label("max new tokens per prompt").fill("256")
    page.get_by_role("button", name="Run the doctor").click()
    past_two = re.compile(r"reading .*: ([2-9]|[1-9]\d+) of \d+ decodes")
    expect(page.locator("#doctor-report").get_by_text(past_two)).to_be_visible()
    page.locator("#doctor-stop").click()
    said = page.locator("#doctor-error")
    expect(said).to_contain_text("the doctor stopped after", ignore_case=True)
    done, total = map(int, re.search(r"after (\d+) of (\d+) decodes", said.inner_text()).groups())
    assert 2 <= done < total  # stopped after the prompt in progress, not at the end
    expect(page.locator("#doctor-report")).not_to_contain_text("verdict")
    SHOTS.mkdir(parents=True, exist_ok=True)
    screenshot(page, SHOTS / f"doctor-stopped-{width}.png")
    # The models are free: the next run (the session's own drafter, which reads no states) answers at once.
    draft.click()
    page.get_by_role("option", name="this session's draft", exact=True).click()
    page.get_by_role("button", name="Run the doctor").click()
    expect(page.locator("#doctor-report")).to_contain_text("nothing to doctor")
    expect(said).to_have_text("")
    page.context.close()


def stepped(browser, app_url, max_new_tokens: int | None = None):
    """A page at 1440 px on the app, one round stepped (with `max_new_tokens` in its box where given)."""
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    expect.set_options(timeout=120_000)
    page.goto(app_url)
    if max_new_tokens is not None:
        page.get_by_label("max new tokens").fill(str(max_new_tokens))
    page.get_by_role("button", name="Step", exact=True).click()
    expect(page.locator("#tree-plot .gtitle")).to_have_text(re.compile(r"^round 0:"))
    return page


def test_a_reload_shows_the_baseline_timed_before_without_timing_it_again(browser, app_url):
    """The speed panel after a reload reads the run's kept baseline: the same rate, and no timing runs."""
    page = stepped(browser, app_url)
    page.get_by_role("button", name="Run baseline").click()
    way = page.locator(".stats-table").get_by_text(re.compile(r"^Plain decoding: .* ways timed on this prompt"))
    expect(way).to_be_visible()
    before = way.inner_text()
    expect(page).to_have_url(re.compile(r"run="))
    page.reload()
    expect(page.locator("#tree-plot .gtitle")).to_have_text(re.compile(r"^round 0:"))
    expect(way).to_have_text(before)
    way.scroll_into_view_if_needed()
    screenshot(page, SHOTS / "baseline-after-reload-1440.png")
    page.context.close()


def test_the_baselines_stop_ends_it_between_timings_and_the_next_one_runs_whole(browser, app_url):
    """Stop beside Run baseline: a toast says after how many timings it stopped, no baseline is shown, and the next
    press times every way (the model thread was freed)."""
    # A long run (the last timing decodes it whole): Stop lands while it is timed however slow the machine is. Each
    # probe takes a fraction of a second, so the progress seen first may be any of them.
    page = stepped(browser, app_url, max_new_tokens=400)
    page.get_by_role("button", name="Run baseline").click()
    expect(page.locator("#error-box").get_by_text(re.compile(r"plain decoding: \d+ of \d+ timings"))).to_be_visible()
    page.locator("#baseline-stop").click()
    told = page.get_by_test_id("toast-text").get_by_text(re.compile(r"The baseline stopped after \d+ of \d+ timings"))
    expect(told).to_be_visible()
    done, total = map(int, re.search(r"after (\d+) of (\d+) timings", told.inner_text()).groups())
    assert 1 <= done < total
    way = page.locator(".stats-table").get_by_text(re.compile(r"^Plain decoding: .* ways timed on this prompt"))
    expect(way).to_have_count(0)
    screenshot(page, SHOTS / "baseline-stopped-1440.png")
    page.get_by_role("button", name="Run baseline").click()
    expect(way).to_be_visible()
    page.context.close()


def test_a_builder_that_draws_no_sampled_chain_takes_tev_in_place_of_speculative(browser, app_url):
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    page.goto(app_url)
    page.get_by_label("sampled", exact=True).check()
    page.get_by_label("speculative", exact=True).check()
    page.get_by_label("best-first", exact=True).check()
    expect(page.get_by_label("tev", exact=True)).to_be_checked()
    page.get_by_label("residual", exact=True).check()
    page.get_by_label("static", exact=True).check()
    expect(page.get_by_label("residual", exact=True)).to_be_checked()  # a chosen tree verifier stays
    page.context.close()
