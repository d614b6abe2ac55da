"""Contract tests over the drafter-kind and builder registries: every registered drafter kind, with every builder it
accepts and every verifier exact on that builder, decodes greedy exactly as the target's `generate`; it refuses the
other builders in words; it round-trips through save and load; its defaults, fresh-state tree and trainer agree with
what decoding does; and no module outside a kind's own files tests a kind by name."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch
from _dflash import dflash_config, write_drafter
from conftest import greedy_generate, perturbed, tiny_model, word_tokenizer
from test_eagle3_loading import head_config, head_tensors, write_head

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.core.kv import new_cache
from tevviz.engine.draft.builder_kinds import builder_kind, builder_names
from tevviz.engine.draft.builders import ModelStep, draft_levels
from tevviz.engine.draft.drafters import (
    MODULES,
    accepts,
    builders_for,
    drafter_kind,
    drafter_kinds,
    folder_defaults,
    folder_kind,
    make_trainer,
    pair_defaults,
    save_drafter,
    tree_for,
)
from tevviz.engine.errors import TevvizError
from tevviz.engine.load.models import load_pair
from tevviz.engine.train.exittrain import Context, TrainConfig
from tevviz.engine.verify.verifiers import VERIFIERS

PROMPT = [5, 9, 2, 7]
N = 24


def write_autoregressive(target, folder: Path) -> None:
    perturbed(target, 1).save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)


def write_block(target, folder: Path) -> None:
    write_drafter(folder, dflash_config())


def write_eagle3(target, folder: Path) -> None:
    write_head(folder, head_config("vllm", ids=(1, 2, 3)), head_tensors())


# How the tests make a tiny drafter of each kind beside a 3-layer target: a new kind adds its maker here.
MAKERS = {"autoregressive": write_autoregressive, "block": write_block, "eagle3": write_eagle3}
KINDS = tuple(drafter_kinds())


def builder_config(builder: str, depth: int = 4) -> BuilderConfig:
    return BuilderConfig(name=builder, budget=8, depth=depth, auto=builder_kind(builder).auto_only)


def exact_verifiers(builder: str) -> tuple[str, ...]:
    return builder_kind(builder).verifiers or tuple(VERIFIERS)


@pytest.fixture(scope="module")
def target_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("drafter_kinds") / "target"
    tiny_model("llama", 1, layers=3).save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pairs(target_folder):
    """kind -> (draft folder, loaded pair), made once per module."""
    out = {}
    for kind in KINDS:
        folder = target_folder.parent / kind
        MAKERS[kind](tiny_model("llama", 1, layers=3), folder)
        out[kind] = folder, load_pair(str(target_folder), str(folder), device="cpu")
    return out


def test_every_registered_kind_has_a_tiny_maker_and_a_builder():
    assert set(MAKERS) == set(KINDS), "a new drafter kind needs its tiny maker in MAKERS"
    for name in KINDS:
        kind = drafter_kind(name)
        assert builders_for(kind), f"{name}: no builder drafts with it"
        assert accepts(kind.default_builder, kind), f"{name}: its default builder does not take it"
    with pytest.raises(TevvizError, match="unknown drafter kind 'nope'; choose one of"):
        drafter_kind("nope")


def test_folders_and_models_are_recognised_as_their_kind(pairs):
    for name, (folder, pair) in pairs.items():
        assert folder_kind(folder).name == name
        assert pair.draft_kind == name


COMBOS = [(k, b, v) for k in KINDS for b in builders_for(drafter_kind(k)) for v in exact_verifiers(b)]


@pytest.mark.parametrize("kind,builder,verifier", COMBOS)
def test_greedy_decoding_is_the_targets_generate(pairs, kind, builder, verifier):
    pair = pairs[kind][1]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=builder_config(builder), verifier=verifier,
                       max_new_tokens=N, stop_on_eos=False)
    s = DecodeSession(pair, PROMPT, cfg)
    s.run()
    assert s.generated == greedy_generate(pair.target, PROMPT, N)


REFUSED = [(k, b) for k in KINDS for b in builder_names() if not accepts(b, drafter_kind(k))]


@pytest.mark.parametrize("kind,builder", REFUSED)
def test_other_builders_are_refused_in_words(pairs, kind, builder):
    pair = pairs[kind][1]
    own = drafter_kind(kind).default_builder
    with pytest.raises(TevvizError, match=rf"the {builder} builder drafts with .* is an? {kind} drafter; build its "
                                          rf"trees with the {own} builder"):
        DecodeSession(pair, PROMPT, DecodeConfig(builder=builder_config(builder), max_new_tokens=4))


@pytest.mark.parametrize("kind", KINDS)
def test_save_and_load_round_trip(pairs, target_folder, tmp_path, kind):
    pair = pairs[kind][1]
    save_drafter(pair.draft, pair.tokenizer, tmp_path / "saved")
    again = load_pair(str(target_folder), str(tmp_path / "saved"), device="cpu")
    assert again.draft_kind == kind and folder_kind(tmp_path / "saved").name == kind
    mine, theirs = pair.draft.state_dict(), again.draft.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    builder = builder_config(drafter_kind(kind).default_builder)
    a, b = tree_for(pair, PROMPT, builder), tree_for(again, PROMPT, builder)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_fresh_tree_and_trainer_agree_with_decoding(pairs, kind):
    folder, pair = pairs[kind]
    k = drafter_kind(kind)
    assert folder_defaults(folder) == pair_defaults(pair) and pair_defaults(pair)[0] == k.default_builder
    builder = builder_config(k.default_builder, depth=2)  # shallow: a tree that ignored the depth would differ
    s = DecodeSession(pair, PROMPT, DecodeConfig(sampling=SamplingConfig(temperature=0.0), builder=builder,
                                                 max_new_tokens=N, stop_on_eos=False))
    first = s.step()
    fresh = tree_for(pair, PROMPT, builder)
    assert fresh.tokens.tolist() == list(first.tokens) and fresh.parents.tolist() == list(first.parents)
    cfg = TrainConfig(builder=builder, steps=1, batch=1)
    if k.trainer is None:
        with pytest.raises(TevvizError, match=f"ExitTrain does not train {kind} drafters"):
            make_trainer(pair, [Context(PROMPT, [1, 2, 3, 4, 5, 6])], cfg)
    else:
        assert type(make_trainer(pair, [Context(PROMPT, [1, 2, 3, 4, 5, 6])], cfg)) is k.trainer


def test_a_level_step_names_the_row_that_drafted_each_token(pairs):
    """A drafter that feeds its own state back (EAGLE-3) reads, for each new token, the row that drafted it."""
    pair = pairs["autoregressive"][1]
    calls = []

    class Recording(ModelStep):
        def __call__(self, tokens, positions, visible, sources=None):
            rows = super().__call__(tokens, positions, visible, sources)
            calls.append((tokens, sources, rows))
            return rows

    for builder in ("best-first", "chain"):
        calls.clear()
        cfg = BuilderConfig(name=builder, budget=12, depth=4, children=3, width=4)
        tree = draft_levels(Recording(pair.draft, new_cache(pair.draft)), PROMPT, cfg).tree
        assert calls[0][1] is None and len(calls) >= 3
        # The prefill comes first: its last row is the root's.
        for (_, _, before), (tokens, sources, _) in itertools.pairwise(calls):
            top = torch.topk(before, 3 if builder == "best-first" else 1, dim=-1).indices  # each row's children
            assert all(int(t) in top[int(r)].tolist() for t, r in zip(tokens, sources)), builder
        assert tree.size > 1


KIND_FILE = re.compile(r"[=!]=\s*[\"'](?P<a>[\w-]+)[\"']|[\"'](?P<b>[\w-]+)[\"']\s*[=!]=")


def test_no_module_compares_a_kind_name_outside_its_own_files():
    """A drafter kind is asked, never named: a test of its name belongs to the registry or the kind's own files."""
    root = Path(__file__).resolve().parents[3] / "tevviz"
    own = {f"{m}.py" for m in MODULES} | {"drafters.py"}
    found = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        for m in KIND_FILE.finditer(text):
            name = m["a"] or m["b"]
            if name in KINDS and path.name not in own and not path.name.startswith(f"{name}_"):
                found.append(f"{path.relative_to(root)}: {m[0]}")
    assert not found, found


def test_the_kinds_keep_their_registry_order_whatever_imported_them_first():
    import subprocess
    import sys

    code = ("import tevviz.engine.kinds.block_kind\n"  # a kind's module imported before the registry loads
            "from tevviz.engine.draft.drafters import MODULES, drafter_kinds, _FROM\n"
            "print(','.join(_FROM[k].rsplit('.', 1)[1] for k in drafter_kinds()) == ','.join(MODULES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_the_apps_builder_hint_names_every_builder_with_the_kinds_it_drafts_with():
    from tevviz.engine.draft.builder_kinds import builder_names
    from tevviz.engine.draft.drafters import builder_fits, drafter_kinds

    hint = builder_fits()
    assert all(b in hint for b in builder_names()) and all(f"{k} drafters" in hint or f"{k} and" in hint
                                                           for k in drafter_kinds())
    assert "ddtree: block drafters" in hint
