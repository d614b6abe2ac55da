"""`tevviz report A --compare B --out X` where X is one of its inputs, however spelled: exit 2, one line, and both
input files byte for byte as they were."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_pair

from tevviz.cli import main
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession
from tevviz.engine.records import io as tio


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("out")
    paths = []
    for name, verifier in (("a", "tev"), ("b", "predraw")):
        s = DecodeSession(tiny_pair("llama"), [1, 2, 3], DecodeConfig(sampling=SamplingConfig(temperature=1.0),
                                                                     verifier=verifier, max_new_tokens=8, seed=0))
        s.run()
        paths.append(folder / f"{name}.json")
        paths[-1].write_text(json.dumps(tio.export_session(s, "t1 t2 t3")), encoding="utf-8")
    return paths


@pytest.mark.parametrize("which, spelled", [(0, "{a}"), (1, "{b}"), (0, "{d}/../{name}/a.json")])
def test_report_compare_refuses_to_write_over_an_input(runs, capsys, which, spelled):
    a, b = runs
    before = [p.read_bytes() for p in runs]
    out = spelled.format(a=a, b=b, d=a.parent, name=a.parent.name)
    assert main(["report", str(a), "--compare", str(b), "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would overwrite the input file" in err[0], err
    assert [p.read_bytes() for p in runs] == before


def test_report_compare_writes_elsewhere(runs, tmp_path):
    a, b = runs
    assert main(["report", str(a), "--compare", str(b), "--out", str(tmp_path / "page.html")]) == 0
    assert (tmp_path / "page.html").stat().st_size > 0
