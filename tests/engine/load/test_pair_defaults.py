"""Each named pair starts from the settings measured fastest for it (engine/load/pairs.py), any other pair from
--budget auto with its floor; the settings are ones a session accepts, and the result file that measured them exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tevviz.engine import BuilderConfig, DecodeConfig, SamplingConfig
from tevviz.engine.load import pairs as pairs_module
from tevviz.engine.load.pairs import NAMED_PAIRS, OTHER_PAIR_DEFAULTS, decode_defaults

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", list(NAMED_PAIRS))
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_a_named_pairs_defaults_make_a_valid_session_config(name, temperature):
    d = decode_defaults(NAMED_PAIRS[name], temperature)
    auto = d.budget == "auto"
    builder = BuilderConfig(name=d.builder, budget=64 if auto else d.budget, depth=d.depth, auto=auto,
                            stop_below=d.stop_below)
    DecodeConfig(sampling=SamplingConfig(temperature=temperature), builder=builder, verifier=d.verifier)
    assert d.describe()


def test_greedy_and_sampling_take_their_own_settings_and_other_pairs_take_auto():
    stdlib = NAMED_PAIRS["stdlib"]
    assert decode_defaults(stdlib, 0.0) == stdlib.greedy
    assert decode_defaults(stdlib, 0.5) == decode_defaults(stdlib, 1.0) == stdlib.sampled
    assert decode_defaults(None, 0.0) == decode_defaults(None, 1.0) == OTHER_PAIR_DEFAULTS
    assert OTHER_PAIR_DEFAULTS.budget == "auto"


def test_the_result_files_named_beside_the_defaults_exist():
    text = Path(pairs_module.__file__).read_text(encoding="utf-8")
    named = re.findall(r"benchmarks/results/[\w.-]+\.json", text)
    assert named, "the defaults name the result file that measured them"
    for path in named:
        assert (ROOT / path).is_file(), path


def test_an_eagle3_head_starts_on_eagles_own_tree_sizes():
    from tevviz.engine.decode.start import decode_start
    from tevviz.engine.draft.drafters import drafter_kind
    from tevviz.engine.draft.eagle_tree import DEFAULTS

    head = drafter_kind("eagle3")
    start = decode_start(None, 0.0, head, head.folder_depth(None))
    assert (start.builder, start.budget, start.depth) == ("eagle", DEFAULTS["budget"], DEFAULTS["depth"])
    assert decode_start(None, 0.0, head, 8, budget=16).budget == 16  # the user's B wins


def test_a_fixed_sampled_chain_is_described_by_its_depth_alone():
    chain = NAMED_PAIRS["smollm2"].greedy
    assert chain.builder == "sampled" and chain.budget != "auto"
    assert chain.describe() == f"a sampled chain of H = {chain.depth} + {chain.verifier}"  # its B bounds nothing
    assert NAMED_PAIRS["stdlib"].sampled.describe() == "sampled + speculative, --budget auto, H = 4"  # auto sizes it
