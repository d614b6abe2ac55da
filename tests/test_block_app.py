"""The app on a block drafter, through gradio_client: it starts on DDTree's builder, steps exactly, and shows the
drafter's rows of a round."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import served, tiny_model, word_tokenizer
from test_block_drafter import BS, dflash_config, dflash_weights

from tevviz.app import build_demo
from tevviz.app.decode_tab import ROUND_OUTPUTS
from tevviz.engine.block_model import BlockDraftModel, parse_config
from tevviz.engine.models import ModelPair

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
    with served(build_demo(pair=pair, default_prompt="t1 t2 t3")) as url:
        yield url


def test_a_block_drafter_starts_on_ddtree_and_shows_its_rows(app_url):
    c = gradio_client.Client(app_url, verbose=False)
    out = c.predict(api_name="/step")  # the Decode tab's own defaults: ddtree, H = bs - 1
    assert out[OUT["error"]] == ""
    title = json.loads(out[OUT["tree"]])["layout"]["title"]["text"]
    assert title.startswith("round 0:")
    rows = json.loads(c.predict(api_name="/rows"))
    heat = rows["data"][0]
    assert heat["type"] == "heatmap" and len(heat["z"]) == BS - 1  # one row per drafted depth
    assert all(0 <= z <= 1 for row in heat["z"] for z in row if z is not None)
    out = c.predict(builder="best-first", api_name="/step")  # the wrong builder for this drafter: said, not raised
    assert "build its trees with the ddtree builder" in out[OUT["error"]]
