"""Two session files compared: `tevviz compare`, `tevviz report A --compare B` (in a browser too) and tevviz.compare."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import tiny_pair

import tevviz
from tevviz.cli import main
from tevviz.engine.analysis.run_compare import A_ONLY, B_ONLY, BOTH
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.draft.builders import BuilderConfig
from tevviz.engine.records import io as tio

CHROMIUM = Path("/usr/bin/chromium")


def decoded(verifier: str) -> DecodeSession:
    # K = 4 and T = 1: several rounds of several nodes, and two verifiers whose texts part.
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(budget=16, children=4),
                       verifier=verifier, max_new_tokens=24, seed=0)
    s = DecodeSession(tiny_pair("llama", seed=4), [1, 2, 3], cfg)
    s.run()
    return s


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("compare")
    out = {}
    for name, verifier in (("a", "tev"), ("b", "predraw")):
        out[name] = folder / f"{name}.json"
        out[name].write_text(json.dumps(tio.export_session(decoded(verifier), "t1 t2 t3")), encoding="utf-8")
    other = json.loads(out["a"].read_text(encoding="utf-8"))
    other["prompt"], other["prompt_token_ids"] = "t4", [4]
    out["other_prompt"] = folder / "other_prompt.json"
    out["other_prompt"].write_text(json.dumps(other), encoding="utf-8")
    out["broken"] = folder / "broken.json"
    out["broken"].write_text("{not json", encoding="utf-8")
    return out


def compared(capsys, *argv) -> dict:
    assert main(["compare", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_run_compared_with_itself_shows_no_difference(files, capsys):
    out = compared(capsys, files["a"], files["a"])
    assert out["divergence"]["position"] is None and out["settings"] == []
    assert "the same 24 generated tokens" in out["divergence"]["sentence"]
    for r in out["rounds"]:
        assert r["same_context"] is True and r["counts"][A_ONLY] == r["counts"][B_ONLY] == 0
        assert r["C_p"]["diff"] == 0 and r["block_length"]["diff"] == 0
    assert out["table"]["tau"]["diff"] == 0
    assert all(row[kind]["diff"] == 0 for row in out["table"]["rows"] for kind in ("conditional", "marginal"))


def test_two_verifiers_compared(files, capsys):
    out = compared(capsys, files["a"], files["b"], "--round", 1)
    assert {"setting": "verifier", "a": "tev", "b": "predraw"} in out["settings"]
    n_a = len(tio.load(files["a"]).rounds)
    n_b = len(tio.load(files["b"]).rounds)
    assert out["round_indices"] == list(range(min(n_a, n_b)))
    assert out["table"]["tau"]["a"]["n"] == n_a and out["table"]["tau"]["b"]["n"] == n_b
    d = out["divergence"]
    assert d["position"] is not None and "compare different contexts" in d["sentence"]
    assert out["round"]["index"] == 1 and out["round"]["same_context"] == out["rounds"][1]["same_context"]
    assert sum(out["round"]["counts"].values()) == len(out["round"]["nodes"])
    # The first round starts from the same context in both runs.
    assert out["rounds"][0]["same_context"] is True

    assert main(["compare", str(files["a"]), str(files["b"]), "--round", "1"]) == 0
    text = capsys.readouterr().out
    assert "settings that differ: verifier tev -> predraw" in text and "conditional A" in text
    assert re.search(r"round 1 \((the same context|different contexts)\): \d+ nodes in both trees", text)


def test_different_prompts_are_allowed_and_said(files, capsys):
    out = compared(capsys, files["a"], files["other_prompt"])
    assert "different prompts" in out["divergence"]["sentence"]
    assert all(r["same_context"] is False for r in out["rounds"])


@pytest.mark.parametrize(("which", "message"), [
    ("missing", "missing.json: no such file"),
    ("broken", "broken.json: not valid JSON"),
    ("round", "A has no round 99"),
])
def test_bad_input_is_one_line_naming_the_file(files, capsys, which, message):
    argv = {"missing": [files["a"], files["a"].parent / "missing.json"], "broken": [files["broken"], files["a"]],
            "round": [files["a"], files["b"], "--round", 99]}[which]
    assert main(["compare", *map(str, argv)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and message in err[0], err


def page_data(text: str) -> dict:
    (packed,) = re.findall(r'<script type="application/gzip;base64" id="report-data">([^<]+)</script>', text)
    return json.loads(gzip.decompress(base64.b64decode(packed)).decode("utf-8"))


@pytest.fixture(scope="module")
def page(files) -> Path:
    out = files["a"].parent / "page.html"
    assert main(["report", str(files["a"]), "--compare", str(files["b"]), "-o", str(out)]) == 0
    return out


def test_report_compare_writes_one_page(files, page, capsys):
    text = page.read_text(encoding="utf-8")
    data = page_data(text)
    n = min(len(tio.load(files["a"]).rounds), len(tio.load(files["b"]).rounds))
    assert len(data["rounds"]) == n and data["names"] == ["A", "B"]
    assert 'id="tree-a"' in text and 'id="tree-b"' in text and "compare different contexts" in text
    assert len(re.findall(r'<tr id="round-\d+">', text)) == n  # run_compare.rounds_table, a row id a round
    assert "ms per token from the recorded stage times" in text
    # Both figures of a round place every node they share at the same point.
    first = data["rounds"][1]["figures"]
    points = [{v: (x, y) for t in f["data"] for v, x, y in zip(t.get("customdata") or [], t["x"], t["y"])
               if v is not None} for f in first]
    assert points[0] and all(points[1][v] == p for v, p in points[0].items() if v in points[1])
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.IGNORECASE)  # offline: nothing fetched

    assert main(["report", str(files["a"]), "--compare", str(files["a"].parent)]) == 2
    assert "not a scan folder" in capsys.readouterr().err


def test_report_compare_links_hover_and_selection_in_the_browser(page):
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1300, "height": 1000})
            errors: list[str] = []
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:")) else r.abort())
            tab.goto(page.as_uri())
            tab.wait_for_function('() => performance.getEntriesByName("tevviz:trees-drawn").length > 0',
                                  timeout=60_000)
            tab.locator("#rounds #round-1").click()
            sync_api.expect(tab.locator("#caption")).to_have_text(re.compile(r"^round 1 "))
            sync_api.expect(tab.locator("#round-1")).to_have_class("shown")
            # The mouse over a node both trees hold, in A's tree: B's tree shows its hover too.
            at = tab.evaluate("""() => {
                const gd = document.getElementById("tree-a"), L = gd._fullLayout, r = gd.getBoundingClientRect();
                const t = gd.data.find((t) => t.name === "in both"), i = t.customdata.length - 1;
                return {x: r.left + L.margin.l + L.xaxis.d2p(t.x[i]), y: r.top + L.margin.t + L.yaxis.d2p(t.y[i]),
                        v: t.customdata[i]}; }""")
            tab.mouse.move(at["x"], at["y"])
            sync_api.expect(tab.locator("#tree-b .hoverlayer .hovertext")).to_have_count(1)
            tab.mouse.click(at["x"], at["y"])
            sync_api.expect(tab.locator("#details")).to_contain_text("A #")
            selected = tab.evaluate("""() => ["tree-a", "tree-b"].map((id) => {
                const t = document.getElementById(id).data.find((t) => t.name === "selected");
                return t ? [t.x[0], t.y[0]] : null; })""")
            assert selected[0] is not None and selected[0] == selected[1]
            assert tab.evaluate("() => window.tevvizCompare.state.selected") == at["v"]
            tab.select_option("#metric", "w")
            sync_api.expect(tab.locator("#tree-a .cbtitle")).to_contain_text("w(v)")
            assert not errors, errors
        finally:
            browser.close()


def test_notebook_api_compares_sessions_and_files(files):
    a = decoded("tev")
    cmp = tevviz.compare(a, files["a"])
    assert cmp.divergence.position is None and cmp.round(0).identical
    assert cmp.round(0).count(BOTH) == len(cmp.round(0).nodes)
    fa, fb = tevviz.compare_trees(tevviz.compare(files["a"], files["b"]), 1, metric="P")
    assert fa.layout.xaxis.range == fb.layout.xaxis.range
    union = tevviz.compare_trees(cmp, 0, union=True)
    assert {t.name for t in union.data} >= {"both", "A's accepted path"}
    html = tevviz.report(files["a"], compare=files["b"])
    assert 'id="tree-b"' in html
