"""The Scan tab through gradio_client over a tiny random pair: start a scan, stop one, open a folder, and open a round
in the Decode tab's tree view, where it re-scores to the same flow and gets its optimal tree."""

from __future__ import annotations

import json
import re
import time

import gradio as gr
import pytest
from conftest import served, tiny_pair

from tevviz.app.controller import Controller
from tevviz.app.decode_tab import ROUND_OUTPUTS, SETTINGS, decode_tab
from tevviz.app.scan_tab import DECODE_TAB, SCAN_OUTPUTS, START_OUTPUTS, scan_tab
from tevviz.app.source import PairSource
from tevviz.engine.scan.scan_files import open_scan

gradio_client = pytest.importorskip("gradio_client")
CATEGORIES = ("short", "long")


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "tiny.jsonl"
    rows = [{"id": f"q{i}", "category": CATEGORIES[i % 2], "prompt": " ".join(f"t{(7 * i + k) % 90}"
                                                                              for k in range(2 + 3 * (i % 2)))}
            for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def url(prompt_file):
    """The Decode and Scan tabs as build_demo would wire them (the Decode tab with the id the Scan tab switches to)."""
    ctl = Controller(PairSource(pair=tiny_pair("llama")))
    with gr.Blocks() as demo:
        state = gr.State(None)
        with gr.Tabs() as tabs:
            with gr.Tab("Decode", id=DECODE_TAB):
                decode = decode_tab(ctl, state, [], "t1 t2 t3", ["tev", "predraw"])
            with gr.Tab("Scan"):
                scan_tab(ctl, state, decode, tabs, prompt_files={"tiny": prompt_file})
    demo.queue(default_concurrency_limit=1)
    with served(demo) as address:
        yield address


def named(out, names) -> dict:
    return dict(zip(names, out))


def scan_and_open(c, limit: int) -> dict:
    out = named(c.predict(name="tiny", limit=limit, max_new_tokens=12, temperature=1.0, api_name="/scan_start"),
                START_OUTPUTS)
    assert out["error"] == "" and out["status"].startswith(f"done: {limit} of {limit}"), out["status"]
    return out


def test_a_scan_started_in_the_app_shows_its_tables(url):
    c = gradio_client.Client(url, verbose=False)
    out = scan_and_open(c, 6)
    for cat in ("all", *CATEGORIES):
        assert f"| {cat} | " in out["summary"]
    assert "| 6 |" in out["summary"] and "d=1" in out["depth"]
    data = open_scan(out["folder"])
    assert len(data.index) == 6 and data.manifest["settings"]["sampling"]["temperature"] == 1.0
    worst = out["worst"]
    assert worst["headers"][:3] == ["prompt", "category", "round"] and len(worst["data"]) == len(data.summary.worst)
    shown = json.loads(out["acceptance"]["plot"])
    assert [t["name"] for t in shown["data"]] == [f"{c}: {kind}" for c in ("all", *CATEGORIES)
                                                  for kind in ("conditional", "marginal", "exact")]
    # Opening the folder again shows the same tables.
    again = named(c.predict(folder=out["folder"], api_name="/scan_open"), SCAN_OUTPUTS)
    assert again["summary"] == out["summary"] and again["worst"]["data"] == worst["data"]
    bad = named(c.predict(folder=str(data.folder.parent), api_name="/scan_open"), SCAN_OUTPUTS)
    assert "not a scan folder" in bad["error"]


def test_a_clicked_round_opens_in_the_tree_view(url):
    c = gradio_client.Client(url, verbose=False)
    out = scan_and_open(c, 4)
    key = out["pick"]["value"]
    prompt_id, index = key.split("\t")
    decoded = c.predict(key=key, api_name="/scan_open_round")
    view = named(decoded, ROUND_OUTPUTS)
    settings = named(decoded[len(ROUND_OUTPUTS):len(ROUND_OUTPUTS) + len(SETTINGS)], SETTINGS)
    picker = decoded[len(ROUND_OUTPUTS) + len(SETTINGS)]
    assert view["error"] == "" and picker is None  # the example-prompt picker no longer names another prompt
    assert "opened as a run of its own" in view["stats"]
    tree = json.loads(view["tree"])
    assert tree["layout"]["title"]["text"].startswith(f"round {index}:")
    assert "Imported scan" in view["stats"] and prompt_id in view["stats"]
    assert settings["temperature"] == 1.0 and settings["max_new_tokens"] == 12
    ceiling = re.search(r"1 \+ C_p = ([0-9.]+)", tree["layout"]["title"]["text"]).group(1)
    # Re-scoring with the scan's settings gives the same flow; the optimal tree is computed from the known context.
    rescored = named(c.predict(temperature=1.0, max_new_tokens=12, api_name="/rescore"), ROUND_OUTPUTS)
    assert rescored["error"] == ""
    assert re.search(r"1 \+ C_p = ([0-9.]+)", json.loads(rescored["tree"])["layout"]["title"]["text"]).group(1) \
        == ceiling
    optimal = c.predict(temperature=1.0, max_new_tokens=12, api_name="/optimal")
    assert optimal[0] == "" and "C_p*" in optimal[ROUND_OUTPUTS.index("stats")]
    missing = c.predict(key="nope 0", api_name="/scan_open_round")
    assert any("no finished prompt 'nope'" in str(x) for x in missing)
    typed = named(c.predict(key=f"{prompt_id} 0", api_name="/scan_open_round"), ROUND_OUTPUTS)
    assert json.loads(typed["tree"])["layout"]["title"]["text"].startswith("round 0:")


def test_stop_keeps_the_finished_prompts(url):
    c = gradio_client.Client(url, verbose=False)
    job = c.submit(name="tiny", limit=0, max_new_tokens=48, api_name="/scan_start")
    end = time.monotonic() + 60
    while len(job.outputs()) < 3 and time.monotonic() < end:  # a prompt or two done
        time.sleep(0.05)
    assert "stopping" in c.predict(api_name="/scan_stop")
    out = named(job.result(timeout=60), START_OUTPUTS)
    done, total = map(int, re.match(r"stopped: (\d+) of (\d+)", out["status"]).groups())
    assert 0 < done < total == 40
    assert len(open_scan(out["folder"]).index) == done
    assert "no scan is running" not in c.predict(api_name="/scan_stop")  # the event stays until the next scan


def test_the_scan_tab_opens_only_allowed_folders_and_never_echoes_a_manifest(url, tmp_path):
    """A folder outside the app's own scans and its --model-dir folders is refused before anything is read, whether
    or not it holds a manifest (it opened any folder on the server and its errors quoted the manifest)."""
    from tevviz.engine.scan.scan_files import write_manifest

    secret = tmp_path / "elsewhere"
    secret.mkdir()
    write_manifest(secret, {"schema": "SECRET-VALUE-1234", "settings": {"token": "SECRET-VALUE-1234"}})
    c = gradio_client.Client(url, verbose=False)
    for folder in (secret, tmp_path / "missing", "/etc", "~"):
        out = named(c.predict(folder=str(folder), api_name="/scan_open"), SCAN_OUTPUTS)
        assert "opens scan folders only under" in out["error"] and "--model-dir" in out["error"], out["error"]
        assert "SECRET" not in json.dumps(out)
    # Under a --model-dir folder it opens; its manifest's contents are still not quoted in the error.
    allowed = PairSource(pair=tiny_pair("llama"), model_dirs=(str(tmp_path),))
    allowed.check_scan_path(str(secret))
    with pytest.raises(Exception, match="not a tevviz scan manifest") as e:
        open_scan(secret)
    assert "SECRET" not in str(e.value)
    with pytest.raises(Exception, match="opens scan folders only under"):
        allowed.check_scan_path(str(tmp_path.parent))


def test_the_scan_tab_opens_the_scans_of_its_start_folder_and_of_the_cache(tmp_path, monkeypatch):
    """A folder `tevviz scan -o DIR` wrote where the app was then started, or under the cache's scans/, opens without
    --model-dir; the refusal of any other says how to open it."""
    from tevviz.app import source

    monkeypatch.setattr(source, "STARTED_IN", (tmp_path / "work").resolve())
    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path / "cache"))
    models = PairSource(pair=tiny_pair("llama"))
    models.check_scan_path(str(tmp_path / "work" / "scan-1"))
    models.check_scan_path(str(tmp_path / "cache" / "scans" / "scan-2"))
    with pytest.raises(Exception, match="start the app in the folder that holds it, or with --model-dir"):
        models.check_scan_path(str(tmp_path / "elsewhere"))
