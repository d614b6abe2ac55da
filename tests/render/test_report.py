"""tevviz report: one self-contained HTML page of a session, checked as text and in a real browser without network."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import screenshot, tiny_pair
from plotly.offline import get_plotlyjs

from tevviz.cli import main
from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.analysis.session_tables import rounds_table, summary_table
from tevviz.engine.analysis.summary import summarize
from tevviz.engine.records import io as tio
from tevviz.render.graph import METRICS
from tevviz.render.report import report_html
from tevviz.render.table import html as table_html
from tevviz.render.tree_figure import tree_figure_dict

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[1] / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PROMPT = 't1 <b>t2</b> & "t3" <script>alert(1)</script>'
MAX_BYTES = 3_000_000  # the whole report of 100 rounds at B = 64, plotly.js (4.8 MB unpacked) included
BLOB = r'<script type="application/gzip;base64" id="{}">([A-Za-z0-9+/=]*)</script>'


def message(err: str) -> str:
    """The one line of stderr."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def exported(cfg: DecodeConfig) -> dict:
    """A session of the tiny pair on the prompt [1, 2, 3], as its JSON export."""
    session = DecodeSession(tiny_pair("llama", seed=4), [1, 2, 3], cfg)
    session.run()
    return tio.export_session(session, PROMPT)


def blob(text: str, name: str) -> str:
    """The text of the page's gzip + base64 block `name`, unpacked."""
    (packed,) = re.findall(BLOB.format(name), text)
    return gzip.decompress(base64.b64decode(packed, validate=True)).decode("utf-8")


def without_blobs(text: str) -> str:
    return re.sub(BLOB.format("[^\"]+"), "", text)


def embedded_data(text: str) -> dict:
    return json.loads(blob(text, "report-data"))


def summary_cells(text: str) -> dict[str, str]:
    """The summary table's one row, by heading."""
    table = re.search(r'<table class="\w+" id="summary">(.*?)</table>', text)[1]
    return dict(zip(re.findall(r"<th>([^<]*)</th>", table), re.findall(r"<td>([^<]*)</td>", table), strict=True))


def node_traces(figure: dict) -> dict[str, dict]:
    return {t["name"]: t for t in figure["data"] if t["name"] in ("nodes", "no value")}


@pytest.fixture(scope="module")
def session_file(tmp_path_factory):
    # K = 4: with the default K = 8 this tiny pair accepts all 20 tokens in one round; the report needs several.
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.3), builder=BuilderConfig(children=4), optimal=True,
                       max_new_tokens=20)
    path = tmp_path_factory.mktemp("report") / "session.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(exported(cfg), f)
    rounds = tio.load(path).rounds
    assert len(rounds) >= 3 and all(r.optimal is not None for r in rounds)
    return path


@pytest.fixture(scope="module")
def report_file(session_file):
    assert main(["report", str(session_file)]) == 0
    return session_file.with_suffix(".html")


# --- the file -------------------------------------------------------------------------------------------------------


def test_plotly_js_embedded_once_and_nothing_fetched(report_file):
    text = report_file.read_text(encoding="utf-8")
    assert blob(text, "plotly-js") == get_plotlyjs()  # exactly one plotly-js block, and it is the installed build
    rest = without_blobs(text)
    assert len(re.findall(r"<script\b", rest)) == 1  # the page's own script; the two blocks were the only others
    assert "plotly.js v" not in rest  # no second copy of any build
    assert "plotly.js v" not in blob(text, "report-data")
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.IGNORECASE)
    assert not re.search(r"<link[^>]*\bhref\s*=", rest, re.IGNORECASE)
    for part in (rest, blob(text, "report-data")):
        assert "cdn" not in part.lower() and "http://" not in part and "https://" not in part


def test_tables_are_plain_html_and_the_loading_note_is_there(report_file):
    text = without_blobs(report_file.read_text(encoding="utf-8"))
    for table in ("settings", "summary", "rounds"):
        assert re.search(rf'<table class="\w+" id="{table}">', text)
    assert '<p class="note" id="status">loading the figures…</p>' in text
    assert "<noscript>" in text


def test_summary_settings_and_text(report_file, session_file):
    text = report_file.read_text(encoding="utf-8")
    imported = tio.load(session_file)
    s = summarize(imported.rounds)
    cells = summary_cells(text)
    assert int(cells["rounds"]) == s.rounds and int(cells["tokens"]) == s.tokens
    seconds = sum(s.stage_ms.values()) / 1e3
    expected = {"tau": s.tau, "mean E[L]": s.mean_expected_length, "mean 1 + C_p*": 1 + s.mean_optimal,
                "mean drafter gap": s.mean_gap, "tokens/s": s.tokens / seconds}  # by heading
    for key, value in expected.items():
        assert float(cells[key]) == pytest.approx(value, abs=0.051 if key == "tokens/s" else 5e-4), key
    assert "from the recorded stage times" in text
    assert table_html(summary_table(imported.rounds), titled=False) in text  # the engine's table, as written

    assert f'<pre id="prompt">{html.escape(PROMPT)}</pre>' in text
    assert PROMPT not in text and "<script>alert" not in text
    assert f'<pre id="text">{html.escape(imported.text)}</pre>' in text
    settings = re.search(r'<table class="kv" id="settings">(.*?)</table>', text)[1]
    assert "<th>target</th><td>tiny-llama</td>" in settings and "temperature 0.3" in settings


def test_round_table_rows(report_file, session_file):
    text = report_file.read_text(encoding="utf-8")
    rounds = tio.load(session_file).rounds
    rows = re.findall(r"<tr>((?:<td>[^<]*</td>)+)</tr>", re.search(r'id="rounds">(.*?)</table>', text)[1])
    assert len(rows) == len(rounds)
    for row, r in zip(rows, rounds):
        cells = re.findall(r"<td>([^<]*)</td>", row)
        gap = r.coverage_gap()
        # round, exit node, then round_numbers.COLUMNS: nodes, depth, L, E[L], 1 + C_p*, drafter gap, stage ms
        assert [int(c) for c in cells[:5]] == [r.index, r.exit_node, r.size, max(r.depths), r.block_length]
        assert float(cells[5]) == pytest.approx(1 + r.C_p, abs=5e-4)
        assert float(cells[6]) == pytest.approx(1 + gap.C_p_star, abs=5e-4)
        assert float(cells[7]) == pytest.approx(gap.gap, abs=5e-4)
        assert float(cells[8]) == pytest.approx(sum(r.stage_ms.values()), abs=0.051)
    assert table_html(rounds_table(rounds), titled=False) in text


def test_stored_trees_are_tree_figure_dict_positions_and_colours(report_file, session_file):
    """Each round is stored once; its node positions, hover text and every metric's colours are tree_figure_dict's."""
    data = embedded_data(report_file.read_text(encoding="utf-8"))
    rounds = tio.load(session_file).rounds
    assert len(data["trees"]) == len(rounds)
    for tree, r in zip(data["trees"], rounds):
        ghosts = [dataclasses.asdict(g) for g in r.coverage_gap().ghosts]
        for metric in METRICS:
            traces = node_traces(tree_figure_dict(r.to_dict(), metric, ghosts=ghosts, rank_by="P"))
            for trace in traces.values():
                ids = trace["customdata"]
                assert [tree["nodes"]["x"][v] for v in ids] == trace["x"]
                assert [tree["nodes"]["y"][v] for v in ids] == trace["y"]
                assert [tree["nodes"]["hovertext"][v] for v in ids] == trace["hovertext"]
            colours = dict(zip(traces["nodes"]["customdata"], traces["nodes"]["marker"]["color"]))
            assert {v: c for v, c in enumerate(tree["values"][metric]) if c is not None} == colours


def test_trees_draw_their_ghost_branches(report_file, session_file):
    """Rounds with an optimal tree show its ghost branches, as the app does with ghosts on."""
    data = embedded_data(report_file.read_text(encoding="utf-8"))
    rounds = tio.load(session_file).rounds
    with_ghosts = [i for i, r in enumerate(rounds) if r.coverage_gap().ghosts]
    assert with_ghosts, "the session needs a round whose optimal tree has nodes the draft tree lacks"
    for i, (tree, r) in enumerate(zip(data["trees"], rounds)):
        names = {t["name"] for t in tree["fixed"]}
        assert any(n.startswith("ghost branches") for n in names) == (i in with_ghosts), (i, names)
        if i in with_ghosts:
            ghost_nodes = next(t for t in tree["fixed"] if t["name"].startswith("ghost branches"))
            ghosts = sorted(r.coverage_gap().ghosts, key=lambda g: -g.P)
            drawn = set(ghost_nodes["customdata"])
            assert drawn <= {f"ghost:{g.node}" for g in ghosts}
            # The likeliest ghosts are always drawn; the rest may sit behind a "+N" fold.
            assert {f"ghost:{g.node}" for g in ghosts[:3]} <= drawn


def test_default_title_names_the_model_folders_not_their_paths(session_file, tmp_path):
    from tevviz.render.report import _default_title

    data = json.loads(session_file.read_text(encoding="utf-8"))
    data["meta"] |= {"target": "/home/me/models/tevviz-stdlib-target", "draft": "/home/me/models/my-draft/"}
    title = _default_title(tio.parse(data))
    assert title == "tevviz report: my-draft drafting for tevviz-stdlib-target"
    assert "/home" in report_html(tio.parse(data)).split('id="settings"')[1]  # the settings keep the whole path


def test_an_interrupted_write_leaves_the_old_report(session_file, tmp_path, monkeypatch):
    from tevviz.render import report

    out = tmp_path / "r.html"
    out.write_text("old report")

    def interrupted(src, dst):
        raise KeyboardInterrupt  # a Ctrl-C just before the finished file would have replaced the old one

    monkeypatch.setattr("tevviz.files.os.replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.write_report(tio.load(session_file), out)
    assert out.read_text() == "old report" and [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_rounds_the_optimal_tree_does_not_bound_say_so():
    """Speculative sampling on sampled chains: the optimal tree is the best fixed tree there, with no drafter gap."""
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(name="sampled", depth=3),
                       verifier="speculative", optimal=True, max_new_tokens=12)
    imported = tio.parse(json.loads(json.dumps(exported(cfg))))
    assert imported.rounds and all(r.coverage_gap().gap is None for r in imported.rounds if r.size > 1)
    captions = [tree["caption"] for tree in embedded_data(report_html(imported))["trees"]]
    assert any("best fixed tree: 1 + C_p* = " in c and "not a ceiling here" in c for c in captions), captions


# --- other inputs and errors ----------------------------------------------------------------------------------------


def test_round_and_ddtree_trace_give_the_sections_they_have(session_file, tmp_path):
    record = tio.load(session_file).rounds[1]
    round_path = tmp_path / "round.json"
    round_path.write_text(json.dumps(tio.round_dict(record)), encoding="utf-8")
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps({"node_token_ids": [5, 6, 7, 8], "parents": [-1, 0, 0, 1],
                                      "node_depths": [0, 1, 1, 2], "accepted_indices": [0, 1, 3]}), encoding="utf-8")
    for path, figures in ((round_path, {"block-length", "acceptance", "exit-mass", "coverage"}),
                          (trace_path, {"block-length", "acceptance"})):
        out = tmp_path / f"{path.stem}-report.html"
        assert main(["report", str(path), "-o", str(out)]) == 0
        text = out.read_text(encoding="utf-8")
        data = embedded_data(text)
        assert set(data["figures"]) == figures and len(data["trees"]) == 1
        assert 'id="settings"' not in text and 'id="prompt"' not in text and 'id="tree"' in text
        assert int(summary_cells(text)["rounds"]) == 1
    assert data["trees"][0]["values"]["P"] == [None] * 4  # the trace has no target scores: all nodes grey


def test_zero_rounds(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(tio.session_dict({}, "p", [1], [], "", [])), encoding="utf-8")
    assert main(["report", str(path)]) == 0
    text = (tmp_path / "empty.html").read_text(encoding="utf-8")
    assert summary_cells(text)["rounds"] == "0" and 'id="tree"' not in text


@pytest.mark.parametrize(("content", "error"), [
    ("{not json", "not valid JSON"),
    ('{"schema": "tevviz.session/2", "rounds": [{"graph": {}}]}', "rounds[0].nodes: expected a list, got NoneType"),
])
def test_malformed_input_is_one_line_and_exit_2(tmp_path, capsys, content, error):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    capsys.readouterr()
    assert main(["report", str(path)]) == 2
    captured = capsys.readouterr()
    assert message(captured.err).startswith(f"tevviz report: error: {path}: {error}")  # the file by its name
    assert not (tmp_path / "bad.html").exists()


def test_output_folder_missing_or_the_input_itself(session_file, tmp_path, capsys):
    capsys.readouterr()
    assert main(["report", str(session_file), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "no folder" in message(capsys.readouterr().err)
    assert main(["report", str(session_file), "-o", str(session_file)]) == 2
    assert "would overwrite the input file" in message(capsys.readouterr().err)


def test_report_command_loads_no_torch(session_file, tmp_path):
    out = tmp_path / "r.html"
    code = ("import sys; from tevviz.cli import main; rc = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, "report", str(session_file), "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert blob(out.read_text(encoding="utf-8"), "plotly-js") == get_plotlyjs()


# --- size -----------------------------------------------------------------------------------------------------------


def test_100_rounds_at_budget_64_stay_small():
    """Trees stored once per round, plotly.js and the data gzipped: 100 rounds of 65 nodes take under 3 MB in all."""
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(budget=64, depth=8),
                       max_new_tokens=80)
    imported = tio.parse(json.loads(json.dumps(exported(cfg))))
    # The last rounds may be cut short by the token limit (a shallower tree); the full ones are repeated.
    full = [r for r in imported.rounds if r.size == 65]
    # Rounds repeated under new indices: the size depends on the trees' shape, not on their being distinct. gzip
    # cannot profit from the repeats either: its window (32 kB) holds under two of the ~21 kB trees, and a round
    # comes back only after all the others (100 distinct rounds compress to within 0.3 % of this).
    assert len(full) >= 3
    imported.rounds = [dataclasses.replace(full[i % len(full)], index=i) for i in range(100)]
    size = len(report_html(imported).encode("utf-8"))
    assert size < MAX_BYTES


# --- in the browser -------------------------------------------------------------------------------------------------

PLOTTED = """() => document.getElementById("tree").data
    .filter((t) => t.name === "nodes" || t.name === "no value")
    .map((t) => ({name: t.name, x: t.x, y: t.y, color: t.marker.color, hovertext: t.hovertext}))"""


def plotted_nodes(figure: dict) -> list[dict]:
    return [{"name": t["name"], "x": t["x"], "y": t["y"], "color": t["marker"]["color"], "hovertext": t["hovertext"]}
            for t in node_traces(figure).values()]


OPEN_MS = 10_000  # navigation start to the first tree drawn: 2.3-2.6 s on a busy 2-core machine, 0.15 s of it
# unpacking and 1.6 s compiling plotly.js (as long as when it was inlined as text)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def offline_page(browser, errors: list[str], blocked: list[str]):
    """A page that records errors and blocked requests; only file: and data: URLs load."""
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.set_default_timeout(30_000)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    def offline(route):
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    return page


def test_report_in_the_browser_offline(browser, report_file, session_file):
    from playwright.sync_api import expect

    rounds = tio.load(session_file).rounds
    ghosts = lambda k: [dataclasses.asdict(g) for g in rounds[k].coverage_gap().ghosts]  # drawn as the app draws them
    expected = lambda k, metric: json.loads(json.dumps(tree_figure_dict(rounds[k].to_dict(), metric,
                                                                        ghosts=ghosts(k), rank_by="P")))
    k = next(k for k in range(1, len(rounds)) if plotted_nodes(expected(k, "P")) != plotted_nodes(expected(0, "P")))
    ARTIFACTS.mkdir(exist_ok=True)
    errors, blocked = [], []
    page = offline_page(browser, errors, blocked)
    page.goto(report_file.as_uri())
    expect(page.locator(".js-plotly-plot")).to_have_count(5)  # four statistics figures and the tree
    caption = page.locator("#caption")
    expect(caption).to_have_text(re.compile(rf"^round {rounds[0].index}, "))
    opened = page.wait_for_function(
        '() => performance.getEntriesByName("tevviz:tree-drawn").map((m) => m.startTime)[0]').json_value()
    assert 0 < opened < OPEN_MS
    expect(page.locator("#status")).to_have_count(0)  # the loading note is gone once unpacked
    assert page.evaluate(PLOTTED) == plotted_nodes(expected(0, "P"))

    # The page's figure for any round and metric is tree_figure_dict's, every field of every trace.
    for j in (0, k, len(rounds) - 1):
        for metric in METRICS:
            figure = page.evaluate("([j, m]) => window.tevvizReport.treeFigure(j, m)", [j, metric])
            assert figure == expected(j, metric), (j, metric)

    slider = page.locator("#round")
    for _ in range(k):
        slider.press("ArrowRight")
    expect(caption).to_have_text(re.compile(rf"^round {rounds[k].index}, "))
    assert page.evaluate(PLOTTED) == plotted_nodes(expected(k, "P"))

    page.select_option("#metric", "w")
    expect(page.locator("#tree .cbtitle")).to_contain_text("w(v)")
    assert slider.input_value() == str(k)
    assert page.evaluate(PLOTTED) == plotted_nodes(expected(k, "w"))

    slider.press("ArrowLeft")
    expect(caption).to_have_text(re.compile(rf"^round {rounds[k - 1].index}, "))
    assert page.locator("#metric").input_value() == "w"
    assert page.evaluate(PLOTTED) == plotted_nodes(expected(k - 1, "w"))
    screenshot(page, ARTIFACTS / "report.png", full_page=True)
    page.close()
    assert not errors, errors
    assert not blocked, blocked


def test_browser_without_decompression_stream_says_so(browser, report_file):
    """A browser too old to unpack the blobs shows why in the page, and the tables are still there."""
    from playwright.sync_api import expect

    errors, blocked = [], []
    page = offline_page(browser, errors, blocked)
    page.add_init_script("delete window.DecompressionStream")
    page.goto(report_file.as_uri())
    status = page.locator("#status.error")
    expect(status).to_contain_text("lacks DecompressionStream")
    expect(page.locator("#rounds tr")).to_have_count(len(tio.load(report_file.with_suffix(".json")).rounds) + 1)
    assert page.locator(".js-plotly-plot").count() == 0
    page.close()
    assert not errors, errors
    assert not blocked, blocked
