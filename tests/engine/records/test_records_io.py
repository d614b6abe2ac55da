"""The JSON importer (tevviz/engine/records/io.py): a session exported by `tevviz decode` validates and imports,
DDTree traces import, and malformed or fuzzed input raises only a TevvizError that names the field."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tevviz.cli import main
from tevviz.engine import TevvizError
from tevviz.engine.records.io import loads, parse

# an exported session -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(pair_dirs, tmp_path_factory):
    target, draft, _ = pair_dirs
    path = tmp_path_factory.mktemp("export") / "s.json"
    rc = main(["decode", "--target", str(target), "--draft", str(draft), "--prompt", "t1 t2 t3", "--max-new-tokens",
               "24", "--temperature", "1", "--export", str(path), "--json"])
    assert rc == 0
    return path


def test_export_validates_and_inspects(exported, capsys):
    data = json.loads(exported.read_text())
    assert data["schema"] == "tevviz.session/2"
    assert data["meta"]["verifier"] == "tev" and data["meta"]["sampling"]["temperature"] == 1.0
    imported = loads(exported.read_text())
    assert len(imported.rounds) == len(data["rounds"]) > 0
    assert sum(len(r.committed) for r in imported.rounds) == len(data["token_ids"])
    for r in data["rounds"]:
        assert abs(sum(n["w"] for n in r["nodes"]) - 1) < 1e-4
        assert r["graph"]["accepted"][0] == 0
    assert main(["inspect", str(exported)]) == 0
    assert f"{len(data['rounds'])} rounds" in capsys.readouterr().out


def test_a_file_from_before_the_builders_name_reads_its_kind_as_the_name(exported):
    data = json.loads(exported.read_text())
    assert data["meta"]["builder"]["name"] == "best-first" and "kind" not in data["meta"]["builder"]
    data["meta"]["builder"]["kind"] = data["meta"]["builder"].pop("name")
    builder = loads(json.dumps(data)).meta["builder"]
    assert builder["name"] == "best-first" and "kind" not in builder
    assert builder == json.loads(exported.read_text())["meta"]["builder"]


def test_round_errors_name_the_round(exported):
    data = json.loads(exported.read_text())
    data["rounds"][1]["nodes"][1]["P"] = 1.7
    with pytest.raises(TevvizError, match=r"rounds\[1\]\.nodes\[1\]\.P: 1.7 is out of range"):
        parse(data)
    data = json.loads(exported.read_text())
    data["rounds"][0]["graph"]["accepted"] = [0, 99]
    with pytest.raises(TevvizError, match=r"rounds\[0\]\.graph"):
        parse(data)


# DDTree traces, malformed input --------------------------------------------------------------------------------------


def test_ddtree_trace_import():
    trace = {"node_token_ids": [5, 6, 7, 8], "node_depths": [0, 1, 1, 2], "parents": [-1, 0, 0, 1],
             "accepted_indices": [0, 1, 3]}
    imp = parse(trace)
    assert imp.kind == "ddtree" and imp.rounds[0].exit_node == 3 and imp.rounds[0].block_length == 3
    rootless = {"node_token_ids": [6, 7, 8], "node_depths": [1, 1, 2], "parents": [-1, -1, 0],
                "accepted_indices": [0, 2], "root_token_id": 5}
    r = parse([rootless]).rounds[0]
    assert r.tokens == [5, 6, 7, 8] and r.parents == [-1, 0, 0, 1] and r.accepted == [0, 1, 3]


@pytest.mark.parametrize("text, where", [
    ("{", "not valid JSON"),
    ("[1, 2]", "trace[0]: expected an object"),
    ('{"schema": "other/9"}', "unknown format"),
    ('{"schema": "tevviz.session/1", "rounds": {}}', "rounds: expected a list"),
    ('{"node_token_ids": [1, 2], "node_depths": [0, 1], "parents": [-1, 5], "accepted_indices": [0]}',
     "trace.parents[1]: 5 is not an earlier node"),
    ('{"node_token_ids": [1, 2], "node_depths": [0, 2], "parents": [-1, 0], "accepted_indices": [0]}',
     "trace.node_depths[1]"),
    ("[" * 100000 + "]" * 100000, "not valid JSON"),
])
def test_malformed_imports_name_the_field(text, where):
    with pytest.raises(TevvizError, match=None) as e:
        loads(text)
    assert where in str(e.value)


# fuzzing -------------------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["schema", "rounds", "nodes", "graph", "id", "parent", "accepted", "exit_node",
                         "node_token_ids", "parents", "node_depths", "accepted_indices", "token_id", "P", "w"]),
        inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_importer_fuzz_raises_only_tevviz_errors(value):
    try:
        parse(value)
    except TevvizError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_importer_fuzz_on_mutated_real_session(exported, data):
    doc = json.loads(exported.read_text())
    r = data.draw(st.integers(0, len(doc["rounds"]) - 1))
    node = data.draw(st.integers(0, len(doc["rounds"][r]["nodes"]) - 1))
    key = data.draw(st.sampled_from(["parent", "token_id", "P", "w", "depth", "id", "missing"]))
    doc["rounds"][r]["nodes"][node][key] = data.draw(json_values)
    try:
        parse(doc)
    except TevvizError as e:
        assert f"rounds[{r}]" in str(e)
