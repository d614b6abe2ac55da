"""A per-round number added to the registry as one entry (round_numbers.NUMBERS) shows on every surface that reads
the registry: the run comparison's table, `tevviz eval`'s table, the report's summary and round tables, and the app's
statistics table."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_pair

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.records import io as tio
from tevviz.engine.records import round_numbers
from tevviz.engine.records.round_numbers import NUMBERS, RoundNumber

PROBE = RoundNumber("probe", "probe L", "the block length plus a quarter: a number no surface knows by name", "tokens",
                    lambda r: r.block_length + 0.25, session="mean_probe", scan="probe", column=True)
HEADING = "mean probe L"


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", seed=4)


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setitem(NUMBERS, PROBE.name, PROBE)
    return PROBE


def decoded(pair, prompt: list[int], temperature: float = 0.3) -> DecodeSession:
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=temperature), builder=BuilderConfig(children=4),
                       max_new_tokens=12)
    s = DecodeSession(pair, prompt, cfg)
    s.run()
    return s


def mean_probe(rounds) -> str:
    return f"{sum(r.block_length + 0.25 for r in rounds) / len(rounds):.3f}"


def test_the_registry_selections_hold_a_new_number(probe):
    assert probe in round_numbers.SESSION and probe in round_numbers.SCAN and probe in round_numbers.COLUMNS


def test_the_run_comparison_table_shows_it(pair, probe):
    from tevviz.engine.analysis.run_depths import depth_analysis, depth_table
    from tevviz.render.table import text

    a, b = decoded(pair, [1, 2, 3]).rounds, decoded(pair, [1, 2, 3], 1.0).rounds
    _, means = depth_analysis(depth_table(a, b))
    (row,) = [r for r in means.rows if r["number"] == HEADING]
    assert f"{row['a'].mean:.3f}" == mean_probe(a) and f"{row['b'].mean:.3f}" == mean_probe(b)
    assert any(line.lstrip().startswith(HEADING) and mean_probe(a) in line for line in text(means))


def test_the_evaluation_table_shows_it(pair, probe):
    from tevviz.engine.analysis.eval_table import eval_means
    from tevviz.engine.train.evaluation import evaluate
    from tevviz.render.table import text

    prompts = [[1, 2, 3], [4, 5, 6]]
    result = evaluate(pair, prompts, 0.3, BuilderConfig(children=4), max_new_tokens=8)
    table = eval_means([result], [2], "eval")
    assert "probe" in [c.key for c in table.columns]
    lines = text(table)
    assert HEADING in lines[1]
    assert result.per_prompt["probe"] == pytest.approx([t + 0.25 for t in result.per_prompt_tau])
    assert f"{sum(result.per_prompt['probe']) / 2:.3f}" in lines[2]
    assert "probe" not in result.to_dict()  # the JSON keeps its keys


def test_the_report_tables_show_it(pair, probe):
    from tevviz.engine.analysis.session_tables import rounds_table, summary_table
    from tevviz.render.report import report_html
    from tevviz.render.table import html, rows

    s = decoded(pair, [1, 2, 3])
    imported = tio.loads(json.dumps(tio.export_session(s, "t1 t2 t3")))
    page = report_html(imported)
    summary, rounds = summary_table(imported.rounds), rounds_table(imported.rounds)
    assert html(summary, titled=False) in page and html(rounds, titled=False) in page
    heads, (cells,) = rows(summary)
    assert cells[heads.index(HEADING)] == mean_probe(s.rounds)
    assert "<th>probe L</th>" in page and '<p class="note">probe L: the block length plus a quarter' in page


def test_the_app_statistics_table_shows_it(pair, probe):
    from tevviz.app.state import AppState
    from tevviz.app.views import stats_markdown

    s = decoded(pair, [1, 2, 3])
    st = AppState(origin="live", rounds=s.rounds, generated=[t for r in s.rounds for t in r.committed])
    head, _, cells = stats_markdown(st).splitlines()[:3]
    column = [h.strip() for h in head.split("|")].index(HEADING)
    assert [c.strip() for c in cells.split("|")][column] == mean_probe(s.rounds)
