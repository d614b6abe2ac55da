"""A block round's per-depth rows (tevviz/engine/records/draft_rows.py, tevviz/render/block_rows.py): exported and
imported back (a tampered row named), drawn as the drafter's side of the round, and carried through the optimal
tree, the verifier comparison, the export and the report."""

from __future__ import annotations

import json
import math

import pytest
from _dflash import BS, greedy_cfg
from conftest import VOCAB

from tevviz.engine import BuilderConfig, DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.errors import TevvizError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_block_round_exports_its_rows_and_imports_them_back(block_pair):
    """The JSON carries each depth's top tokens; they rebuild the tree, and a tampered row is named on import."""
    from tevviz.engine.records.io import parse_round
    from tevviz.engine.records.records import RoundRecord

    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=12, budget=10))
    s.run()
    assert len(s.rounds[0].draft_rows) == BS - 1  # the first round drafts the whole block's depths
    for r in s.rounds:
        d = json.loads(json.dumps(r.to_dict()))
        if r.size == 1:  # the last token alone: nothing drafted, no rows
            assert "draft_rows" not in d["graph"]
            continue
        rows = d["graph"]["draft_rows"]
        assert 1 <= len(rows) <= BS - 1  # fewer near the token limit
        assert all(len(row) == 10 for row in rows)  # K = min(B, V) per depth
        assert parse_round(d).to_dict() == RoundRecord.from_dict(d).to_dict() == r.to_dict()
    bad = json.loads(json.dumps(s.rounds[0].to_dict()))
    row = bad["graph"]["draft_rows"][0]
    row[0], row[1] = row[1], row[0]  # two ranks swapped: no longer sorted
    with pytest.raises(TevvizError, match=r"round.graph.draft_rows\[0\]\[1\].logprob: rows must be sorted"):
        parse_round(bad)
    bad = json.loads(json.dumps(s.rounds[0].to_dict()))
    bad["graph"]["draft_rows"][0][0]["token_id"] = (bad["graph"]["draft_rows"][0][0]["token_id"] + 1) % VOCAB
    with pytest.raises(TevvizError, match="do not rebuild this round's tree"):
        parse_round(bad)


def test_the_drafter_side_of_a_block_round_is_drawn(block_pair):
    """The heat map's cells are q_d of each depth's top tokens; each committed token is marked at its rank."""
    from tevviz.render.block_rows import block_rows_figure, committed_by_depth
    from tevviz.render.graph import node_metric, round_graph

    s = DecodeSession(block_pair, [5, 9, 11, 2], greedy_cfg("tev", n=30, budget=16))
    s.run()
    r = max(s.rounds, key=lambda x: len(x.accepted))  # a round with an accepted node
    fig = block_rows_figure(r, ranks=5)
    heat = fig.data[0]
    assert [row[0] for row in heat.z] == pytest.approx([math.exp(row[0]["logprob"]) for row in r.draft_rows])
    committed = committed_by_depth(r)
    assert [c.token for c in committed] == [r.tokens[v] for v in r.accepted[1:]] + [r.bonus_token]
    for c in committed:
        if c.accepted:  # an accepted node is the drafter's own: its rank is where the tree took it from
            node = r.accepted[c.depth]
            assert r.draft_rows[c.depth - 1][c.rank]["token_id"] == r.tokens[node]
            assert c.target_p == r.p_edge[node]
    shown = [c for c in committed if c.rank is not None and c.rank < 5]
    marks = fig.data[1] if len(fig.data) > 1 else None
    assert (marks is None and not shown) or list(marks.x) == [c.rank for c in shown]
    G = round_graph(r.to_dict())  # the tree coloured by q(v) = exp(path score)
    assert node_metric(G.nodes[1], "q") == pytest.approx(math.exp(r.scores[1]))


def test_optimal_tree_comparison_and_report_work_on_block_rounds(block_pair, tmp_path):
    """A DDTree round is a fixed tree: its optimal tree bounds it, the verifier comparison draws on it, and the
    session's report and export hold its rows."""
    from tevviz.engine.records import io as tio
    from tevviz.engine.verify.comparison import compare_verifiers
    from tevviz.render.report import write_report

    prompt = [5, 9, 11, 2]
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=1.0), max_new_tokens=10, stop_on_eos=False,
                       builder=BuilderConfig(name="ddtree", budget=12, depth=BS - 1), optimal=True)
    s = DecodeSession(block_pair, prompt, cfg)
    first = s.step()
    gap = first.coverage_gap()
    assert first.optimal_bounds and gap.gap is not None and gap.C_p_star >= first.C_p - 1e-6
    comparison = compare_verifiers(block_pair, prompt, first, SamplingConfig(temperature=1.0), 400, seed=0)
    assert comparison.draws == 400 and {law.name for law in comparison.laws} >= {"tev", "predraw", "residual"}
    s.run()
    path = tmp_path / "block.json"
    path.write_text(json.dumps(tio.export_session(s, "t5 t9 t11 t2")))
    imported = tio.load(path)
    assert imported.rounds[0].draft_rows == first.draft_rows
    assert write_report(imported, tmp_path / "block.html") > 0
