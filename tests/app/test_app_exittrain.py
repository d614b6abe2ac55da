"""The ExitTrain panel through gradio_client, launched in-process on 127.0.0.1 over a tiny random pair."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from conftest import tiny_pair
from test_app import OUT, client, exported_session, free_port, named, rounds_in

from tevviz.app import build_demo, launch_options
from tevviz.app.exittrain_tab import REVERT_OUTPUTS, SHOW_MOVED_OUTPUTS, USE_OUTPUTS
from tevviz.app.views import NO_TRAINING
from tevviz.engine import RoundRecord
from tevviz.engine.train.exit_mass import exit_mass_changes

# Outputs of /train_step by name (the gr.State is not part of the API); /train_revert adds the checkbox, "use".
TRAIN = {name: i for i, name in enumerate(REVERT_OUTPUTS)}
TRAIN_ARGS = {"steps": 3, "lr": 1e-2, "batch": 4}

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama")


@pytest.fixture(scope="module")
def app_url(pair):
    demo = build_demo(pair, default_prompt="t1 t2 t3")
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **launch_options())
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_params(model, reference: dict[str, torch.Tensor]) -> bool:
    now = model.state_dict()
    return now.keys() == reference.keys() and all(torch.equal(now[k], v) for k, v in reference.items())


def plot(value) -> dict:
    return json.loads(value["plot"])


def decoded(session) -> list[tuple]:
    """What a decode produced: each round's tree, draft log-probabilities and committed tokens."""
    return [(r.tokens, r.parents, r.draft_logprobs, r.committed) for r in session.rounds]


def test_train_step_use_and_revert(app_url, pair):
    reference = params(pair.draft)
    c = client(app_url)
    for _ in range(3):
        c.predict(api_name="/step")
    original = exported_session(c)

    out = c.predict(**TRAIN_ARGS, api_name="/train_step")
    assert out[TRAIN["error"]] == ""
    loss = {t["name"]: t for t in plot(out[TRAIN["loss"]])["data"]}
    assert set(loss) == {"L", "L_tok", "L_exit (right axis)"}
    assert loss["L"]["x"] == [1, 2, 3] and all(math.isfinite(y) for t in loss.values() for y in t["y"])
    table = out[TRAIN["table"]]
    assert "3 steps so far on 3 contexts" in table
    assert "| original | trained (3 steps) | change (paired) |" in table
    assert "paired by context" in table and "(6 and 6 rounds in all)" in table
    for number in ("mean C_p", "mean E[L]", "tau"):
        assert re.search(rf"\| {re.escape(number)} \| [\d.]+ ± [\d.]+ \| [\d.]+ ± [\d.]+ \| [+-][\d.]+ ± [\d.]+ "
                         r"\| -?[\d.]+% \| 3 \|", table), table
    # Figure JSON for the pair's click-and-width views (app/pair_view.py), one shared layout.
    trees = [json.loads(out[TRAIN[key]]) for key in ("tree_before", "tree_after")]
    assert trees[0]["layout"]["meta"] == trees[1]["layout"]["meta"] and trees[0]["layout"]["meta"]["clicks"]
    assert out[TRAIN["pair_md"]].startswith("Click a node")
    scales = []
    for fig in trees:
        both = next(t for t in fig["data"] if t.get("name") == "in both")
        assert "w(v)" in both["marker"]["colorbar"]["title"]["text"]
        scales.append((both["marker"]["cmin"], both["marker"]["cmax"]))
    assert scales[0] == scales[1]  # one colour scale for both trees
    # One shared layout: a node (by its union id) sits at the same point in both trees.
    # (Each side's bonus token is its own: the other tree leaves its place empty.)
    at = [{v: (x, y) for t in fig["data"] if t.get("mode", "").startswith("markers") and t.get("name") != "bonus"
           for v, x, y in zip(t.get("customdata") or [], t["x"], t["y"]) if v is not None} for fig in trees]
    assert at[0] and at[0] == at[1]
    assert plot(out[TRAIN["moved"]])["data"][0]["type"] == "bar"
    assert "Δw" in out[TRAIN["moved_md"]] and "round 2" in plot(out[TRAIN["moved"]])["layout"]["title"]["text"]
    assert same_params(pair.draft, reference)  # only the session's copy was trained

    # The moved view follows the round slider.
    c.predict(index=0, api_name="/view")
    moved = named(c.predict(api_name="/train_moved"), SHOW_MOVED_OUTPUTS)
    assert moved["error"] == "" and moved["moved_md"].startswith("Round 0's context")

    # Use the trained draft: the next Step starts a new session that decodes with it.
    err, note, _ = named(c.predict(use_trained=True, api_name="/train_use"), USE_OUTPUTS).values()
    assert err == "" and "decode with the trained draft (3 steps)" in note
    out = c.predict(api_name="/step")
    assert rounds_in(out) == 1 and "draft changed" in out[OUT["stats"]]
    trained = exported_session(c)
    assert trained.meta["draft"].endswith("ExitTrain (3 steps)")
    assert trained.rounds[0].draft_logprobs != original.rounds[0].draft_logprobs

    # Revert: the copy is gone and decoding is exactly the original's again.
    out = c.predict(api_name="/train_revert")
    assert out[TRAIN["error"]] == "" and out[TRAIN["use"]] is False and "Reverted" in out[TRAIN["note"]]
    assert out[TRAIN["table"]] == NO_TRAINING
    c.predict(api_name="/reset")
    for _ in range(3):
        c.predict(api_name="/step")
    again = exported_session(c)
    assert decoded(again) == decoded(original) and again.meta["draft"] == original.meta["draft"]
    assert same_params(pair.draft, reference)


def test_two_clients_are_isolated(app_url, pair):
    reference = params(pair.draft)
    a, b = client(app_url), client(app_url)
    prompt_a, prompt_b = "t4 t5 t6 t7", "t60 t61"
    for _ in range(3):
        b.predict(prompt=prompt_b, api_name="/step")
    before_b = exported_session(b)

    for _ in range(2):
        a.predict(prompt=prompt_a, api_name="/step")
    assert a.predict(prompt=prompt_a, **TRAIN_ARGS, api_name="/train_step")[TRAIN["error"]] == ""
    assert named(a.predict(use_trained=True, api_name="/train_use"), USE_OUTPUTS)["error"] == ""

    # B has no trained draft, and decodes exactly as before A trained.
    err, _, use = named(b.predict(use_trained=True, api_name="/train_use"), USE_OUTPUTS).values()
    assert "no trained draft" in err and use is False
    b.predict(api_name="/reset")
    for _ in range(3):
        b.predict(prompt=prompt_b, api_name="/step")
    after_b = exported_session(b)
    assert decoded(after_b) == decoded(before_b) and after_b.meta["draft"] == before_b.meta["draft"]

    # A decodes with its own trained copy.
    a.predict(prompt=prompt_a, api_name="/step")
    assert exported_session(a).meta["draft"].endswith("ExitTrain (3 steps)")
    assert same_params(pair.draft, reference)


def test_errors_leave_the_panel_unchanged(app_url):
    c = client(app_url)
    out = c.predict(**TRAIN_ARGS, api_name="/train_step")
    assert "no rounds to train on" in out[TRAIN["error"]]
    assert isinstance(out[TRAIN["table"]], dict)  # not updated
    assert "no trained draft" in named(c.predict(api_name="/train_moved"), SHOW_MOVED_OUTPUTS)["error"]
    err, _, use = named(c.predict(use_trained=True, api_name="/train_use"), USE_OUTPUTS).values()
    assert "no trained draft" in err and use is False

    c.predict(api_name="/step")
    for bad, message in (({"lr": -1}, "learning rate"), ({"lr": 2}, "learning rate"),
                         ({"steps": 0}, "steps N"), ({"batch": 0}, "batch"),
                         ({"lambda_exit": -1}, "lambda_exit")):
        out = c.predict(**{**TRAIN_ARGS, **bad}, api_name="/train_step")
        assert message in out[TRAIN["error"]], (bad, out[TRAIN["error"]])
        assert isinstance(out[TRAIN["loss"]], dict)

    out = c.predict(**TRAIN_ARGS, api_name="/train_step")  # the session is as it was: one round, no steps yet
    assert out[TRAIN["error"]] == "" and "3 steps so far on 1 contexts" in out[TRAIN["table"]]


def scored(tokens: list[int], parents: list[int], w: list[float]) -> RoundRecord:
    n = len(tokens)
    return RoundRecord(index=0, verifier="ExitTrain", tokens=tokens, texts=[f"t{t}" for t in tokens], parents=parents,
                       depths=[0] * n, draft_logprobs=[0.0] * n, scores=[0.0] * n, p_edge=[1.0] * n, P=[1.0] * n,
                       rho=[1.0] * n, w=w, missing=[[] for _ in range(n)], exit_node=0, bonus_token=-1, bonus_text="",
                       accepted=[0], committed=[], C_p=0.0)


def test_exit_mass_changes_match_nodes_by_token_path():
    # Before: root -> 5 -> 7, root -> 6. After: root -> 5 -> 8 (7 gone), root -> 6, in another node order.
    before = scored([1, 5, 6, 7], [-1, 0, 0, 1], [0.1, 0.2, 0.3, 0.4])
    after = scored([1, 6, 5, 8], [-1, 0, 0, 2], [0.1, 0.25, 0.15, 0.5])
    rows = {tuple(r["texts"]): r for r in exit_mass_changes(before, after)}
    assert set(rows) == {(), ("t5",), ("t6",), ("t5", "t7"), ("t5", "t8")}
    assert rows[("t5", "t8")]["delta"] == pytest.approx(0.5) and rows[("t5", "t8")]["node_before"] is None
    assert rows[("t5", "t7")]["delta"] == pytest.approx(-0.4) and rows[("t5", "t7")]["node_after"] is None
    assert rows[("t6",)]["delta"] == pytest.approx(-0.05) and rows[()]["delta"] == 0.0
    deltas = [abs(r["delta"]) for r in exit_mass_changes(before, after)]
    assert deltas == sorted(deltas, reverse=True)
    assert sum(r["delta"] for r in rows.values()) == pytest.approx(sum(after.w) - sum(before.w))


def metrics(name: str, cps: list[float], taus: list[float]):
    from tevviz.engine.train.evaluation import DrafterMetrics

    return DrafterMetrics(len(cps), sum(cps) / len(cps), sum(taus) / len(taus), 2 * len(cps), name, cps, taus)


def test_paired_change_by_hand():
    from tevviz.engine.train.evaluation import paired_change

    before = metrics("original", [0.5, 1.0, 1.5], [1.0, 2.0, 2.0])
    after = metrics("t", [0.7, 1.1, 1.9], [1.5, 2.0, 3.5])
    d = paired_change(before, after, "C_p")  # changes 0.2, 0.1, 0.4: mean 0.2333, sd 0.1528
    assert (d.n, d.a, d.b) == (3, pytest.approx(1.0), pytest.approx(1.2333333))
    assert d.mean == pytest.approx(0.7 / 3) and d.se == pytest.approx(0.15275252 / math.sqrt(3))
    assert paired_change(before, after, "tau").mean == pytest.approx(2.0 / 3)
    # Unpaired, the same numbers would carry the spread between contexts: the paired SE is the smaller here.
    assert d.se < math.hypot(before.C_p_se, after.C_p_se)
    with pytest.raises(ValueError, match="same contexts"):
        paired_change(before, metrics("t", [1.0], [1.0]), "C_p")


def test_train_markdown_shows_paired_standard_errors():
    from tevviz.app.training_actions import TrainReport
    from tevviz.app.training_views import train_markdown

    before = metrics("original", [0.5, 1.0, 1.5], [1.0, 2.0, 2.0])
    after = metrics("t", [0.7, 1.1, 1.9], [1.5, 2.0, 3.5])
    log = [{"objective": "exit", "loss": 1.0, "l_tok": 0.5, "l_exit": 0.5, "step": 1}]
    text = train_markdown(TrainReport(log, [before, after], 3, 1.0, False, "", None))
    assert "| mean C_p | 1.0000 ± 0.2887 | 1.2333 ± 0.3528 | +0.2333 ± 0.0882 | 23.3% | 3 |" in text
    # E[L] = 1 + C_p: the same change over another base
    assert "| mean E[L] | 2.0000 ± 0.2887 | 2.2333 ± 0.3528 | +0.2333 ± 0.0882 | 11.7% | 3 |" in text
    assert "| tau | 1.6667 ± 0.3333 | 2.3333 ± 0.6009 | +0.6667 ± 0.4410 | 40.0% | 3 |" in text
