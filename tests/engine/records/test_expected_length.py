"""One definition of the expected block length on every surface: a speculative-sampling round on a sampled chain
accepts each token with min(1, p / q), so its expected length is not 1 + C_p, and the session summary, `evaluate`,
`tevviz inspect`, the app, the report and the JSON all show RoundRecord.expected_length."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import tiny_pair

from tevviz.app.state import AppState
from tevviz.app.views import stats_markdown, tree_plot
from tevviz.cli import main
from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.analysis.session_tables import summary_table
from tevviz.engine.analysis.summary import summarize
from tevviz.engine.records import io as tio
from tevviz.engine.records.records import expected_length_text
from tevviz.engine.train.evaluation import evaluate
from tevviz.render.report import report_html
from tevviz.render.table import html, rows

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [1, 2, 3]
SPECULATIVE = DecodeConfig(sampling=SamplingConfig(temperature=1.0), builder=BuilderConfig(name="sampled", depth=3),
                           verifier="speculative", max_new_tokens=12, seed=0, missing_top=0)


@pytest.fixture(scope="module")
def session():
    s = DecodeSession(tiny_pair("llama", seed=4), PROMPT, SPECULATIVE)
    s.run()
    chains = [r for r in s.rounds if r.size > 1]
    assert chains and all(r.accept is not None for r in chains)
    # The point of the test: rounds whose expected length is not 1 + C_p.
    assert all(abs(r.expected_length - (1 + r.C_p)) > 1e-3 for r in chains)
    return s


def mean_length(rounds) -> float:
    return statistics.mean(r.expected_length for r in rounds)


def test_summary_and_json(session):
    s = summarize(session.rounds)
    assert s.mean_expected_length == pytest.approx(mean_length(session.rounds))
    assert s.mean_expected_length != pytest.approx(statistics.mean(1 + r.C_p for r in session.rounds))
    back = tio.parse(json.loads(json.dumps(tio.export_session(session, "p"))))
    assert [r.expected_length for r in back.rounds] == pytest.approx([r.expected_length for r in session.rounds])


def test_evaluate(session):
    """evaluate() decodes each prompt as a session of the same settings: its per-prompt mean is that session's."""
    r = evaluate(session.pair, [PROMPT], 1.0, SPECULATIVE.builder, max_new_tokens=12, verifier="speculative")
    assert r.per_prompt_expected_length == pytest.approx([mean_length(session.rounds)])
    assert r.expected_length == pytest.approx(mean_length(session.rounds))


def test_inspect(session, tmp_path, capsys):
    path = tmp_path / "session.json"
    path.write_text(json.dumps(tio.export_session(session, "p")), encoding="utf-8")
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["expected_length"] for row in doc["rounds"]] == pytest.approx(
        [r.expected_length for r in session.rounds])
    assert doc["summary"]["mean_expected_length"] == pytest.approx(mean_length(session.rounds))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    # the summary table's row (rounds, tokens, tau, mean E[L], ...), then the rounds table's below its title and header
    assert out[2].split()[3] == "mean" and out[3].split()[3] == f"{mean_length(session.rounds):.3f}"
    at = out.index("rounds")
    assert out[at + 2].split()[5] == f"{session.rounds[0].expected_length:.3f}"


def test_app(session):
    st = AppState(origin="live", rounds=list(session.rounds), view=0)
    r = session.rounds[0]
    title = tree_plot(st, "P", as_dict=True)["layout"]["title"]["text"]
    assert f"E[L] = {r.expected_length:.3f} (C_p = {r.C_p:.3f})" in title and "1 + C_p =" not in title
    assert expected_length_text(r) in title
    assert f"| {mean_length(session.rounds):.3f} |" in stats_markdown(st)


def test_report(session):
    imported = tio.parse(json.loads(json.dumps(tio.export_session(session, "p"))))
    text = report_html(imported)
    summary = summary_table(imported.rounds)  # the report's summary, as it writes it
    assert html(summary, titled=False) in text
    heads, (cells,) = rows(summary)
    assert cells[heads.index("mean E[L]")] == f"{mean_length(session.rounds):.3f}"
    assert f"<td>{session.rounds[0].expected_length:.3f}</td>" in text  # the round table's E[L] column


def test_decode_json(tmp_path, capsys):
    """`tevviz decode --json` on the embedded pair: its mean is the summary of the rounds it exports."""
    path = tmp_path / "s.json"
    assert main(["decode", "--prompt", "def f(x):", "--temperature", "1", "--builder", "sampled", "--verifier",
                 "speculative", "--depth", "3", "--max-new-tokens", "8", "--json", "--export", str(path),
                 "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    rounds = tio.load(path).rounds
    assert "mean_ceiling" not in out
    assert out["mean_expected_length"] == pytest.approx(mean_length(rounds))
