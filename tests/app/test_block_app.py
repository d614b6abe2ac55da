"""The app on a block drafter, through gradio_client: it starts on DDTree's builder, steps exactly, and shows the
drafter's rows of a round."""

from __future__ import annotations

import json

import pytest
import torch
from _dflash import BS, dflash_config, dflash_weights
from conftest import served, tiny_model, word_tokenizer

from tevviz.app import build_demo
from tevviz.app.decode_tab import BROWSE_OUTPUTS, NODE_OUTPUTS, ROUND_OUTPUTS
from tevviz.engine.draft.block_model import BlockDraftModel, parse_config
from tevviz.engine.load.models import ModelPair

gradio_client = pytest.importorskip("gradio_client")
OUT = {name: i for i, name in enumerate(ROUND_OUTPUTS)}


@pytest.fixture(scope="module")
def app_url():
    torch.set_num_threads(1)
    target = tiny_model("llama", 1, layers=3)
    cfg = dflash_config()
    model = BlockDraftModel(parse_config(cfg, "test", target))
    model.load_state_dict(dflash_weights(cfg, 0), strict=False)
    pair = ModelPair(target, model.eval(), word_tokenizer(), "tiny-llama", "tiny-block")
    with served(build_demo(pair, default_prompt="t1 t2 t3")) as url:
        yield url


def test_a_block_drafter_starts_on_ddtree_and_shows_its_rows(app_url):
    c = gradio_client.Client(app_url, verbose=False)
    out = c.predict(api_name="/step")  # the Decode tab's own defaults: ddtree, H = bs - 1
    assert out[OUT["error"]] == ""
    title = json.loads(out[OUT["tree"]])["layout"]["title"]["text"]
    assert title.startswith("round 0:")
    rows = json.loads(out[OUT["rows_plot"]])  # the rows follow every Step: no button to press
    assert rows["layout"]["title"]["text"].startswith("round 0:")
    heat = rows["data"][0]
    assert heat["type"] == "heatmap" and len(heat["z"]) == BS - 1  # one row per drafted depth
    assert all(0 <= z <= 1 for row in heat["z"] for z in row if z is not None)
    out = c.predict(api_name="/step")
    assert json.loads(out[OUT["rows_plot"]])["layout"]["title"]["text"].startswith("round 1:")
    back = c.predict("P", 0, api_name="/view")  # the slider: tree and rows show round 0 together
    browse = dict(zip(BROWSE_OUTPUTS, back))
    assert json.loads(browse["rows_plot"])["layout"]["title"]["text"].startswith("round 0:")
    assert json.loads(browse["tree"])["layout"]["title"]["text"].startswith("round 0:")
    # The rows and the tree point at each other: a node selected boxes its token in its depth's row.
    tree = json.loads(browse["tree"])
    node = next(v for t in tree["data"] if t["name"] == "nodes" for v in t["customdata"] if v)
    picked = dict(zip(NODE_OUTPUTS, c.predict("P", node, api_name="/node")))
    assert any(t.get("name") == "selected" for t in json.loads(picked["rows_plot"])["data"])
    out = c.predict(builder="best-first", api_name="/step")  # the wrong builder for this drafter: said, not raised
    assert "build its trees with the ddtree builder" in out[OUT["error"]]


def test_the_exittrain_tab_trains_a_copy_of_a_block_drafter_on_its_ddtree_trees(app_url):
    """Train step on a block session: DDTree trees, the before/after table, the trained copy decodes; the pair's
    own drafter is untouched."""
    from test_app import client
    from test_app_exittrain import TRAIN, plot

    c = client(app_url)
    for _ in range(3):
        assert c.predict(api_name="/step")[OUT["error"]] == ""
    out = c.predict(steps=2, lr=1e-3, batch=2, api_name="/train_step")
    assert out[TRAIN["error"]] == ""
    loss = {t["name"]: t for t in plot(out[TRAIN["loss"]])["data"]}
    assert loss["L"]["x"] == [1, 2]
    assert "| original | trained (2 steps) |" in out[TRAIN["table"]]
    out = c.predict(use_trained=True, api_name="/train_use")
    out = c.predict(api_name="/step")
    assert out[OUT["error"]] == "" and "draft changed" in out[OUT["stats"]]
