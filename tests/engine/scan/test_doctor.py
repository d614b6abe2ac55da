"""The doctor for drafters (engine/scan/doctor.py, `tevviz doctor`): a block drafter trained here reading one layer of a
tiny target, then written with its layer id shifted by one, is caught, and the reading it was trained with is named;
the correctly labelled one passes; the JSON's shape; a causal LM has nothing to doctor; bad input is refused.

Faults each test was checked against once (planted by hand, then removed):
- apply_reading doing nothing (every reading decodes the own one): the relabelled drafter passes, and its test fails;
- the margin rule's test reversed (own minus best): the relabelled drafter passes;
- chain_trials reading the tree's lowest-q child as its top one: the hand-made rounds' outcomes differ;
- the own reading not put back after a failed or interrupted decode: the restore test sees the shifted ids;
- the EAGLE-3 kind's norm_before_fc reading dropped from its readings: the ignored-norm head's test fails.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from _dflash import dflash_config
from conftest import VOCAB, perturbed, random_prompts, tiny_model, word_tokenizer
from test_eagle3_loading import head_config, head_tensors, write_head

from tevviz.cli import main
from tevviz.engine.analysis.doctor_report import FLOOR, DepthRate, ReadingResult
from tevviz.engine.draft.block_model import BlockDraftModel, parse_config, save_block_drafter
from tevviz.engine.draft.drafters import drafter_kind_of
from tevviz.engine.draft.eagle3_io import save_head
from tevviz.engine.draft.eagle3_model import HeadKV
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import ModelPair, load_pair
from tevviz.engine.scan.doctor import (
    chain_trials,
    chain_yield,
    clear_margin,
    depth_rates,
    difference_se,
    run_doctor,
    spread,
)
from tevviz.engine.train.block_training import block_batch, block_logits, block_loss

pytestmark = pytest.mark.usefixtures("one_thread")

LAYERS = 4  # the target's decoder layers: hidden_states 0..4
TRAINED = 1  # the decoder layer the drafter is trained to read: hidden_states[2]
STEPS = 300
PROMPTS = 16  # decoded by the doctor: with 8 the relabelled drafter's margin was 0.31 against a threshold of 0.24


def layered_target():
    """A tiny target whose layers each write much into the residual stream (their output projections scaled), so
    that neighbouring layers' states differ as a trained model's do; a random tiny model's layers add little."""
    target = tiny_model("llama", 1, layers=LAYERS)
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.mul_(4.0)
            layer.mlp.down_proj.weight.mul_(4.0)
    return target


def trained_drafter(target, starts: torch.Tensor) -> BlockDraftModel:
    """A one-layer block drafter trained briefly on the target's greedy continuations of `starts`, reading the output
    of decoder layer TRAINED (depths 1 and 2 trained, which the doctor measures)."""
    cfg = dflash_config(layer_ids=(TRAINED,))
    cfg["num_target_layers"] = LAYERS
    torch.manual_seed(0)
    model = BlockDraftModel(parse_config(cfg, "test", target))
    with torch.no_grad():
        seqs = target.generate(starts, attention_mask=torch.ones_like(starts), max_new_tokens=28, do_sample=False,
                               pad_token_id=0, eos_token_id=None)
        feats = target(seqs, output_hidden_states=True).hidden_states[TRAINED + 1]
    g = torch.Generator().manual_seed(5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(STEPS):
        anchors = torch.randint(2, seqs.shape[1] - 6, (seqs.shape[0], 4), generator=g)
        batch = block_batch(seqs, feats, anchors, model.block.block_size, model.block.mask_token_id)
        loss = block_loss(block_logits(model, target, batch, depth=2), batch.labels, None)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval().requires_grad_(False)


def relabel(folder, layer_ids) -> None:
    """Rewrite a drafter folder's config with other layer ids (the weights untouched)."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg["dflash_config"]["target_layer_ids"] = list(layer_ids)
    path.write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The target, the drafter as trained, the same drafter labelled one layer later, a causal-LM drafter, and a
    prompt file of (some of) the starts the drafter was trained on: the reading is under test, not generalisation."""
    root = tmp_path_factory.mktemp("doctor")
    target = layered_target()
    g = torch.Generator().manual_seed(3)
    starts = torch.randint(0, VOCAB - 1, (64, 4), generator=g)
    model = trained_drafter(target, starts)
    target.save_pretrained(root / "target")
    word_tokenizer().save_pretrained(root / "target")
    save_block_drafter(model, root / "trained")
    save_block_drafter(model, root / "relabelled")
    relabel(root / "relabelled", [TRAINED + 1])
    causal = perturbed(target, 2)
    causal.save_pretrained(root / "causal")
    word_tokenizer().save_pretrained(root / "causal")
    rows = [{"id": f"s{i}", "prompt": " ".join(f"t{t}" for t in s)} for i, s in enumerate(starts[:PROMPTS].tolist())]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def doctor_json(folders, draft: str, capsys, *extra: str) -> tuple[int, dict]:
    """`tevviz doctor --json` on the drafter `draft` (a folder under `folders`, or a path) and its exit status."""
    capsys.readouterr()
    code = main(["doctor", "--target", str(folders / "target"), "--draft", str(folders / draft), "--prompts",
                 str(folders / "prompts.jsonl"), "--limit", str(PROMPTS), "--max-new-tokens", "40", "--device", "cpu",
                 "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------------------------ the planted fault


def test_the_doctor_names_the_trained_reading_of_a_relabelled_drafter_and_exits_1(folders, capsys):
    code, out = doctor_json(folders, "relabelled", capsys)
    by_name = {r["name"]: r for r in out["readings"]}
    assert code == 1 and out["ok"] is False
    assert by_name["as given"]["own"] and by_name["as given"]["layer_ids"] == [TRAINED + 2]
    assert out["best"] == "ids - 1" and by_name["ids - 1"]["layer_ids"] == [TRAINED + 1]  # the trained layer's output
    assert out["margin"] > out["threshold"] >= 0.05
    d1 = {name: r["acceptance"][0]["rate"] for name, r in by_name.items()}
    assert d1["ids - 1"] == max(d1.values())


def test_the_drafter_labelled_as_trained_passes(folders, capsys):
    code, out = doctor_json(folders, "trained", capsys)
    assert code == 0 and out["ok"] is True and out["best"] == "as given"
    own = next(r for r in out["readings"] if r["own"])
    assert own["layer_ids"] == [TRAINED + 1]
    others = [r["tokens_per_round"]["rate"] for r in out["readings"] if not r["own"]]
    assert len(others) == 2 and out["margin"] == pytest.approx(max(others) - own["tokens_per_round"]["rate"])
    assert -out["margin"] > out["threshold"]  # the trained reading is ahead by a clear margin too


def test_the_json_has_each_reading_its_acceptance_by_depth_with_se_and_the_best(folders, capsys):
    _, out = doctor_json(folders, "relabelled", capsys, "--limit", "3")
    assert {"readings", "best", "margin", "ok", "threshold", "verdict", "measure"} <= set(out)
    assert out["prompts"] == 3 and sum(r["own"] for r in out["readings"]) == 1
    assert [r["name"] for r in out["readings"]] == ["as given", "ids - 1", "ids + 1"]
    for r in out["readings"]:
        assert set(r) >= {"name", "layer_ids", "options", "own", "acceptance", "rounds"} and r["options"] == {}
        assert [a["depth"] for a in r["acceptance"]] == [1, 2]
        for a in r["acceptance"]:
            assert a["trials"] == sum(n for _, n in a["by_prompt"]) and len(a["by_prompt"]) == 3
            assert a["rate"] == pytest.approx(a["accepted"] / a["trials"]) and a["se"] >= 0
        y, (d1, d2) = r["tokens_per_round"], r["acceptance"]
        assert y["rounds"] == d1["trials"] and y["accepted"] == d1["accepted"] + d2["accepted"]
        assert y["rate"] == pytest.approx(y["accepted"] / y["rounds"]) and y["se"] > 0
    assert out["best"] in {r["name"] for r in out["readings"]}


def test_the_text_output_is_a_table_of_readings_then_the_best_and_the_verdict(folders, capsys):
    capsys.readouterr()
    code = main(["doctor", "--target", str(folders / "target"), "--draft", str(folders / "relabelled"), "--prompts",
                 str(folders / "prompts.jsonl"), "--limit", str(PROMPTS), "--max-new-tokens", "40", "--device", "cpu"])
    text = capsys.readouterr().out
    assert code == 1
    rows = [ln for ln in text.splitlines() if ln.startswith(("as given*", "ids - 1", "ids + 1"))]
    assert len(rows) == 3 and all(ln.count("±") == 3 for ln in rows)  # depths 1, 2 and tokens per round, with SEs
    assert "best: ids - 1" in text and "verdict: NOT OK" in text


# ----------------------------------------------------------------------------------------- engine pieces


def test_the_drafter_is_put_back_on_its_own_reading_even_when_a_decode_fails(folders):
    pair = load_pair(str(folders / "target"), str(folders / "relabelled"), device="cpu")
    own = pair.draft.block
    with pytest.raises(TevvizError, match="prompt 2"):
        run_doctor(pair, [[1, 2, 3], list(range(90)) * 7], 8)  # the second prompt is longer than the context
    assert pair.draft.block is own

    def stop(done, total, name):  # Ctrl-C while a shifted reading decodes
        if name != "as given":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_doctor(pair, [[1, 2, 3], [4, 5]], 8, progress=stop)
    assert pair.draft.block is own
    kind = drafter_kind_of(pair.draft)
    readings = kind.readings(pair.draft, LAYERS)
    kind.apply_reading(pair.draft, readings[1])
    assert pair.draft.block.target_layer_ids == (TRAINED,) and kind.make(pair, 0).target_layers == (TRAINED,)
    kind.apply_reading(pair.draft, readings[0])
    assert pair.draft.block is own


def test_block_readings_shift_every_id_and_skip_those_beyond_the_target():
    target = tiny_model("llama", 1, layers=LAYERS)
    drafter = lambda ids: BlockDraftModel(parse_config(dflash_config(layer_ids=ids), "test", target))
    model = drafter((0, 3))  # hidden_states 1 and 4: one lower reads the embedding output; one higher is beyond
    readings = drafter_kind_of(model).readings(model, LAYERS)
    assert [(r.name, r.layer_ids, r.own) for r in readings] == [("as given", (1, 4), True), ("ids - 1", (0, 3), False)]
    model = drafter((1, 2))
    assert [r.layer_ids for r in drafter_kind_of(model).readings(model, LAYERS)] == [(2, 3), (1, 2), (3, 4)]


def test_a_round_s_top_1_chain_is_read_off_its_tree():
    # root 0; depth 1: nodes 1 (q .2) and 2 (q .7); under 2: nodes 3 (q .1) and 4 (q .6)
    tree = {"parents": [-1, 0, 0, 2, 2], "draft_logprobs": [0.0, *map(math.log, (0.2, 0.7, 0.1, 0.6))]}
    r = lambda accepted: SimpleNamespace(accepted=accepted, **tree)
    assert chain_trials(r([0, 2, 4])) == [True, True]
    assert chain_trials(r([0, 2, 3])) == [True, False]
    assert chain_trials(r([0, 2])) == [True, False]  # the target's token after node 2 is in no child
    assert chain_trials(r([0, 1])) == [False]  # the top-1 chain missed at depth 1: depth 2 is not tried
    assert chain_trials(SimpleNamespace(accepted=[0], parents=[-1], draft_logprobs=[0.0])) == []  # a plain step


def test_rates_pool_rounds_and_their_se_is_over_prompts_never_below_the_binomial():
    t, f = [True, True], [False]
    rates = depth_rates([[t, t, f, f], [f, f, f, f]])
    d1, d2 = rates
    assert (d1.accepted, d1.trials, d2.accepted, d2.trials) == (2, 8, 2, 2)
    assert d1.rate == 0.25 and d1.by_prompt == ((2, 4), (0, 4))
    # over prompts: u_i = (y_i - p n_i) / n = +-1/8, so c / (c - 1) sum u^2 = 2 x 2 / 64; binomial: 2 x 6 / (64 x 7)
    assert d1.se == pytest.approx(0.25) and d1.binomial_se == pytest.approx(math.sqrt(12 / 448))
    assert d2.rate == 1.0 and d2.se == 0.0
    assert depth_rates([[f]])[1] == DepthRate(2, 0, 0, None, None, None, ((0, 0),))


def _reading(name: str, own: bool, by_prompt, deeper=None) -> ReadingResult:
    """Per prompt (k, n): k of n rounds accept depth 1; `deeper` (per prompt, how many of those k accept depth 2;
    default none) makes the rest fail at depth 2."""
    deeper = deeper or [0] * len(by_prompt)
    rounds = [[[True, True]] * j + [[True, False]] * (k - j) + [[False]] * (n - k)
              for (k, n), j in zip(by_prompt, deeper)]
    depths = depth_rates(rounds)
    return ReadingResult(name, (1,), (), own, "", depths, sum(n for _, n in by_prompt), chain_yield(depths))


def test_tokens_per_round_count_both_depths_with_their_se_over_prompts_and_rounds():
    r = _reading("own", True, [(3, 4), (1, 4)], deeper=[2, 0])
    y = r.per_round
    assert (y.accepted, y.trials, y.by_prompt) == (6, 8, ((5, 4), (1, 4))) and y.rate == 0.75
    # rounds accepting 2, 2, 1, 0, 1, 0, 0, 0 tokens: mean 0.75, sum of squares 10
    assert y.binomial_se == pytest.approx(math.sqrt((10 / 8 - 0.75**2) / 7))
    # over prompts: u_i = (y_i - 0.75 n_i) / 8 = +-2/8, so c / (c - 1) sum u^2 = 2 x 2 x 4 / 64
    assert y.se == pytest.approx(0.5)
    assert _reading("none", True, [(0, 0)]).per_round.rate is None


def test_a_loss_at_both_depths_is_caught_where_depth_1_alone_stays_under_the_floor():
    """The shipped SmolLM2 head with its ids shifted by one: +0.04 at depth 1 and +0.07 at depth 2 (docs/doctor.md)."""
    own = _reading("own", True, [(18, 40)] * 24, deeper=[8] * 24)  # 0.45 at depth 1, 0.44 at depth 2
    trained = _reading("trained", False, [(20, 40)] * 24, deeper=[10] * 24)  # 0.50 and 0.50
    d1, d1_own = trained.rate(1), own.rate(1)
    assert d1.rate - d1_own.rate <= max(2 * difference_se(d1, d1_own), FLOOR)  # depth 1 alone: not clear
    margin, threshold, clear = clear_margin(trained, own)
    assert margin == pytest.approx(0.1) and clear and FLOOR < threshold < 0.08  # 0.65 -> 0.75 tokens per round


def test_the_margin_is_clear_only_beyond_two_se_of_the_paired_difference_and_the_floor():
    own = _reading("own", True, [(10, 20)] * 6)
    assert clear_margin(own, own)[2] is False
    a_little = _reading("other", False, [(11, 20)] * 6)  # +0.05 on every prompt: SE of the difference ~0.04
    margin, threshold, clear = clear_margin(a_little, own)
    assert margin == pytest.approx(0.05) and not clear and threshold >= 0.05
    much = _reading("other", False, [(16, 20)] * 6)
    margin, threshold, clear = clear_margin(much, own)
    assert margin == pytest.approx(0.3) and clear and threshold < 0.3
    noisy = _reading("other", False, [(20, 20), (0, 20)] * 3 + [(20, 20)])  # 0.3 higher overall, one prompt more
    assert clear_margin(noisy, _reading("own", True, [(10, 20)] * 7))[2] is False  # prompts disagree: not clear


def test_prompts_are_spread_over_the_set():
    assert spread(list(range(10)), 4) == [0, 2, 5, 7] and spread([1, 2], 8) == [1, 2]
    with pytest.raises(TevvizError, match="prompt limit"):
        spread([1], 0)


# ---------------------------------------------------------------------------------------------- EAGLE-3 heads

EAGLE_IDS = (1, 2, 3)  # the hidden_states the head is trained on
EAGLE = ("--limit", "8", "--max-new-tokens", "24")  # the head's readings differ by far more than the block drafter's


def trained_head(pair, starts: torch.Tensor):
    """The pair's EAGLE-3 head (input_norm before fc) trained briefly at depth 1 on the target's greedy continuations
    of `starts`: the pair (state at t, token t + 1) predicts token t + 2, every sequence in one causal pass."""
    head, target = pair.draft, pair.target
    with torch.no_grad():
        seqs = target.generate(starts, attention_mask=torch.ones_like(starts), max_new_tokens=28, do_sample=False,
                               pad_token_id=0, eos_token_id=None)
        hs = target(seqs, output_hidden_states=True).hidden_states
    s, n = seqs.shape[0], seqs.shape[1] - 2
    feats = torch.cat([hs[i] for i in EAGLE_IDS], -1)[:, :n].reshape(s * n, -1)
    tokens, labels = seqs[:, 1:-1].reshape(-1), seqs[:, 2:].reshape(-1)
    pos, row = torch.arange(n).repeat(s), torch.arange(s).repeat_interleave(n)
    visible = (row[:, None] == row[None, :]) & (pos[:, None] >= pos[None, :])
    head.requires_grad_(True)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    for _ in range(150):
        h = head.layer(head.fuse(feats), tokens, pos, visible, HeadKV())
        loss = torch.nn.functional.cross_entropy(head.target_logits(h).float(), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.requires_grad_(False)


@pytest.fixture(scope="module")
def heads(folders):
    """The head as trained (vLLM's dialect: ids are hidden_states indices), the same with its ids one layer later, and
    the same with its norm_before_fc flag dropped (SGLang PR 32334's fault: input_norm ignored)."""
    random = write_head(folders / "eagle-random", head_config("vllm", ids=EAGLE_IDS, vd=VOCAB, norm_before_fc=True),
                        head_tensors(vd=VOCAB, input_norm=True))
    pair = load_pair(str(folders / "target"), str(random), device="cpu")
    g = torch.Generator().manual_seed(3)
    head = trained_head(pair, torch.randint(0, VOCAB - 1, (64, 4), generator=g)[:32])  # the block drafter's starts
    for name, change in (("eagle-trained", {}), ("eagle-late", {"eagle_aux_hidden_state_layer_ids": [2, 3, 4]}),
                         ("eagle-no-norm", {"norm_before_fc": False})):
        save_head(head, folders / name, "vllm")
        cfg = json.loads((folders / name / "config.json").read_text())
        (folders / name / "config.json").write_text(json.dumps(cfg | change))
    return folders


def test_an_eagle3_head_read_one_layer_late_is_caught(heads, capsys):
    code, out = doctor_json(heads, "eagle-late", capsys, *EAGLE)
    best = next(r for r in out["readings"] if r["name"] == out["best"])
    assert code == 1 and out["best"] == "ids - 1" and best["layer_ids"] == list(EAGLE_IDS)
    assert best["options"] == {"norm_before_fc": True} and out["margin"] > out["threshold"]


def test_an_eagle3_head_whose_norm_before_fc_is_ignored_is_caught(heads, capsys):
    code, out = doctor_json(heads, "eagle-no-norm", capsys, *EAGLE)
    own = next(r for r in out["readings"] if r["own"])
    assert code == 1 and own["options"] == {"norm_before_fc": False} and out["best"] == "norm_before_fc on"
    assert out["margin"] > out["threshold"]


def test_the_eagle3_head_as_trained_passes(heads, capsys):
    code, out = doctor_json(heads, "eagle-trained", capsys, *EAGLE)
    names = [r["name"] for r in out["readings"]]
    assert code == 0 and out["best"] == "as given" and -out["margin"] > out["threshold"]
    assert names == ["as given", "ids - 1", "ids + 1", "EAGLE default", "norm_before_fc off"]


# ------------------------------------------------------------------------------------ nothing to doctor, bad input


def test_a_causal_lm_drafter_has_nothing_to_doctor(folders, capsys):
    code, out = doctor_json(folders, "causal", capsys)
    assert code == 0 and out["readings"] == [] and out["ok"] is True and out["best"] is None
    assert "nothing to doctor" in out["verdict"]
    pair = ModelPair(tiny_model("llama", 1), perturbed(tiny_model("llama", 1), 2), word_tokenizer(), "t", "d")
    assert run_doctor(pair, random_prompts(1, 0), 8).readings == ()


@pytest.mark.parametrize("argv, said", [
    (["--draft", "{root}/no-such-drafter"], "no-such-drafter"),
    (["--draft", "{root}/trained", "--prompts", "{root}/missing.jsonl"], "missing.jsonl"),
    (["--draft", "{root}/trained", "--limit", "0"], "prompt limit"),
    (["--draft", "{root}/trained", "--max-new-tokens", "1"], "max new tokens"),
])
def test_bad_input_is_a_clear_error(folders, capsys, argv, said):
    capsys.readouterr()
    argv = [a.format(root=folders) for a in argv]
    prompts = [] if "--prompts" in argv else ["--prompts", str(folders / "prompts.jsonl")]
    code = main(["doctor", "--target", str(folders / "target"), *prompts, "--device", "cpu", *argv])
    err = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert code == 2 and len(err) == 1 and err[0].startswith("tevviz doctor: error:") and said in err[0]
