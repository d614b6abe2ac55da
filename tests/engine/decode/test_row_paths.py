"""The target pass's path per row count, chosen by measurement (engine/decode/row_paths.py, target_pass.row_paths).

The choice follows the timings it is given (never a wall-clock bound here: the timings are made up or come from a
fake clock), is kept per machine and model and read back, and a pass takes the few-row path exactly at the row counts
chosen. Checked to fail against these faults, planted one at a time: `choose` comparing the paths the wrong way
round, `choose` ignoring the margin (a tie taking the few-row path), `TargetPass` ignoring the choice (the split pass
at every count) and the cache read back under another model's key.
"""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_pair

from tevviz.engine.core import few_rows
from tevviz.engine.decode import row_paths as rp
from tevviz.engine.decode import target_pass as tp
from tevviz.engine.errors import TevvizError


def test_the_choice_follows_the_timings_it_is_given():
    ms = {1: {"stock": 70.0, "few_rows": 142.0},  # the one-token pass the few-row path slowed down
          2: {"stock": 97.0, "few_rows": 48.0},
          3: {"stock": 116.0, "few_rows": 67.0},
          4: {"stock": 100.0, "few_rows": 97.0},  # 3% faster: inside the margin, a tie
          5: {"stock": 100.0, "few_rows": 101.0}}
    assert rp.choose(ms) == frozenset({2, 3})
    assert rp.choose(ms, margin=0.0) == frozenset({2, 3, 4})
    flipped = {n: {"stock": t["few_rows"], "few_rows": t["stock"]} for n, t in ms.items()}
    assert rp.choose(flipped) == frozenset({1})  # 70 against 142 taken; 100 against 101 is within the margin


def test_the_probe_times_both_paths_at_every_row_count_interleaved():
    calls = []
    # A fake clock: each path costs what its row count says, so the medians are known exactly.
    cost = {("stock", 1): 3, ("few_rows", 1): 5, ("stock", 2): 8, ("few_rows", 2): 2}
    now = [0.0]

    def clock():
        return now[0]

    def run(path, n):
        calls.append((path, n))
        now[0] += cost[(path, n)] / 1e3

    ms = rp.probe_ms(run, [1, 2], repeats=3, clock=clock)
    want = {1: {"stock": 3.0, "few_rows": 5.0}, 2: {"stock": 8.0, "few_rows": 2.0}}
    assert {n: {k: round(v, 6) for k, v in t.items()} for n, t in ms.items()} == want
    assert calls[:4] == [("stock", 1), ("few_rows", 1), ("stock", 2), ("few_rows", 2)]  # interleaved
    assert len(calls) == 4 * (3 + 1)  # a warm-up round, not counted
    assert rp.choose(ms) == frozenset({2})


def test_a_kept_choice_reads_back_and_a_bad_file_is_probed_again(tmp_path):
    paths = rp.RowPaths(frozenset({2, 3}), {1: {"stock": 1.0, "few_rows": 2.0}, 2: {"stock": 2.0, "few_rows": 1.0},
                                            3: {"stock": 3.0, "few_rows": 1.5}}, "probe")
    f = tmp_path / "row_paths" / "x.json"
    rp.write_cached(f, paths)
    back = rp.read_cached(f)
    assert back.few_rows == paths.few_rows and back.ms == paths.ms and back.source == "cache"
    f.write_text("{not json")
    assert rp.read_cached(f) is None
    assert "few-row path for 2, 3 rows, the model's own layers for 1" in back.describe()


def test_the_mode_is_read_and_a_bad_one_refused():
    assert rp.mode({}) == "auto"
    assert rp.mode({"TEVVIZ_ROW_PATHS": "Stock"}) == "stock"
    with pytest.raises(TevvizError, match="TEVVIZ_ROW_PATHS must be one of"):
        rp.mode({"TEVVIZ_ROW_PATHS": "fastest"})


def test_keys_tell_two_models_apart_and_one_model_from_itself():
    a, b = tiny_pair("llama", seed=0).target, tiny_pair("llama", seed=5).target
    assert rp.cache_file(a) == rp.cache_file(a)
    assert rp.cache_file(a) != rp.cache_file(b)


@pytest.fixture
def split_calls(monkeypatch):
    """The row counts of the passes that took the split (few-row) pass."""
    calls = []
    own = tp._split

    def counted(parts, ids, *a, **kw):
        calls.append(ids.shape[1])
        return own(parts, ids, *a, **kw)

    monkeypatch.setattr(tp, "_split", counted)
    return calls


def test_a_pass_takes_the_few_row_path_exactly_where_the_probe_chose_it(monkeypatch, tmp_path, split_calls):
    monkeypatch.setenv("TEVVIZ_ROW_PATHS", "auto")
    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    model = tiny_pair("llama", seed=3).target
    # Made-up timings in place of the probe's: the few-row path wins at 2 and 5 rows only.
    fake = {n: {"stock": 10.0, "few_rows": 5.0 if n in (2, 5) else 20.0} for n in range(1, few_rows.LIMIT + 1)}
    probes = []
    monkeypatch.setattr(tp, "_probe", lambda m: probes.append(m) or fake)
    forward = tp.TargetPass(model)
    assert forward.paths.few_rows == frozenset({2, 5}) and forward.paths.source == "probe"
    cache = tp.new_cache(model)
    with torch.inference_mode():
        forward(torch.tensor([[3, 4, 5]]), None, None, cache, logits=False)  # a prefill always leaves the head out
        del split_calls[:]
        past = 3
        for n in range(1, few_rows.LIMIT + 2):
            ids = torch.arange(5, 5 + n)[None]
            out = forward(ids, None, torch.arange(past, past + n)[None], cache)
            assert out.logits.shape[:2] == (1, n)
            cache.crop(-n)
    assert split_calls == [2, 5]
    # The choice was kept: a second model object with the same weights reads it back, without a probe.
    tp._PATHS.clear()
    assert tp.row_paths(model).source == "cache" and tp.row_paths(model).few_rows == frozenset({2, 5})
    assert len(probes) == 1


def test_forced_modes_and_explicit_paths(monkeypatch, split_calls):
    model = tiny_pair("llama", seed=4).target
    for mode, expect in (("few", list(range(1, 4))), ("stock", [])):
        monkeypatch.setenv("TEVVIZ_ROW_PATHS", mode)
        tp._PATHS.pop(model, None)
        forward = tp.TargetPass(model)
        del split_calls[:]
        with torch.inference_mode():
            for n in range(1, 4):
                forward(torch.arange(3, 3 + n)[None], None, None, tp.new_cache(model))
        assert split_calls == expect, mode
    del split_calls[:]
    with torch.inference_mode():
        tp.TargetPass(model, "stock")(torch.tensor([[3]]), None, None, tp.new_cache(model))
        tp.TargetPass(model, "few_rows")(torch.tensor([[3]]), None, None, tp.new_cache(model))
    assert split_calls == [1]
    with pytest.raises(ValueError, match="path must be"):
        tp.TargetPass(model, "fast")


def test_a_real_probe_on_a_tiny_model_chooses_by_its_own_timings(monkeypatch, tmp_path):
    monkeypatch.setenv("TEVVIZ_ROW_PATHS", "probe")
    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    model = tiny_pair("qwen2", seed=2).target
    tp._PATHS.pop(model, None)
    paths = tp.row_paths(model)
    assert set(paths.ms) == set(range(1, few_rows.LIMIT + 1))
    assert paths.few_rows == rp.choose(paths.ms)  # whatever this machine measured, the choice is its own
    assert all(t > 0 for row in paths.ms.values() for t in row.values())
    assert list((tmp_path / "row_paths").glob("*.json"))
