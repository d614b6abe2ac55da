"""The thread count decoding runs on, chosen by measurement (engine/decode/thread_choice.py): the choice follows the
timings it is given, the kept choice is read back and re-checked, and --threads / $OMP_NUM_THREADS decide first."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import tiny_pair
from tevviz.engine.decode import thread_choice as tc
from tevviz.engine.errors import TevvizError


@pytest.fixture(autouse=True)
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def pair():
    return tiny_pair("llama")


def test_the_fastest_count_by_the_geometric_mean_of_its_passes():
    assert tc.choose({1: {1: 50.0, 16: 60.0}, 2: {1: 31.0, 16: 40.0}}) == 2
    assert tc.choose({1: {1: 31.0, 16: 40.0}, 2: {1: 50.0, 16: 60.0}}) == 1
    # Two threads win one size by 2x and lose the other by 1.5x: the geometric mean (0.82 of one thread's) decides.
    assert tc.choose({1: {1: 40.0, 16: 40.0}, 2: {1: 20.0, 16: 60.0}}) == 2
    assert tc.choose({1: {1: 100.0, 16: 100.0}, 2: {1: 60.0, 16: 60.0}, 4: {1: 40.0, 16: 40.0}}) == 4


def test_more_threads_must_win_clearly():
    # 10% faster on two threads is within the margin: one thread stays, a core free.
    assert tc.choose({1: {1: 50.0, 16: 60.0}, 2: {1: 45.0, 16: 54.0}}) == 1
    assert tc.choose({1: {1: 50.0, 16: 60.0}, 2: {1: 45.0, 16: 54.0}}, margin=0.05) == 2
    # Of several within the margin of the best, the fewest threads.
    assert tc.choose({1: {1: 100.0}, 2: {1: 52.0}, 4: {1: 50.0}}) == 2


def test_the_counts_worth_timing():
    assert tc.candidates(1) == [1]
    assert tc.candidates(2) == [1, 2]
    assert tc.candidates(8) == [1, 2, 4, 7, 8]
    assert tc.candidates(12) == [1, 2, 4, 8, 11, 12]
    assert tc.candidates(8, cap=3) == [1, 2, 3]
    assert tc.candidates(8, cap=1) == [1]


def test_threads_asked_for_or_set_in_the_environment_decide(pair):
    choice = tc.settle(pair, 1, cores=4, environ={"OMP_NUM_THREADS": "3"})
    assert (choice.threads, choice.source, torch.get_num_threads()) == (1, "asked", 1)
    torch.set_num_threads(2)
    choice = tc.settle(pair, None, cores=4, environ={"OMP_NUM_THREADS": "2"})
    assert (choice.threads, choice.source) == (2, "env")  # torch's own reading of it stays
    assert "--threads" in tc.settle(pair, 1, cores=4, environ={}).describe()


def test_spare_and_a_cap_of_one_time_nothing(pair, monkeypatch):
    monkeypatch.setattr(tc, "probe_ms", lambda *a, **k: pytest.fail("probed"))
    choice = tc.settle(pair, None, cores=3, environ={"TEVVIZ_THREADS": "spare"})
    assert (choice.threads, choice.source, torch.get_num_threads()) == (2, "spare", 2)
    choice = tc.settle(pair, None, cores=4, cap=1, environ={})
    assert (choice.threads, choice.source, torch.get_num_threads()) == (1, "only", 1)
    assert "at most 1 of the 4 cores" in choice.describe()
    with pytest.raises(TevvizError, match="TEVVIZ_THREADS must be one of"):
        tc.settle(pair, None, cores=2, environ={"TEVVIZ_THREADS": "fast"})


def test_a_probe_is_kept_re_checked_and_redone_when_its_count_stops_winning(pair, monkeypatch, tmp_path):
    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    timings = {1: {1: 50.0, 16: 60.0}, 2: {1: 30.0, 16: 40.0}}
    probes, checks = [], []

    def fake_probe(model, counts, rows=tc.PROBE_ROWS, repeats=tc.PROBE_REPEATS):
        probes.append(list(counts))
        return {k: dict(timings[k]) for k in counts}

    monkeypatch.setattr(tc, "probe_ms", fake_probe)
    monkeypatch.setattr(tc, "still_wins", lambda model, k: checks.append(k) or wins)
    wins = True
    first = tc.settle(pair, None, cores=2, environ={})
    assert (first.threads, first.source, torch.get_num_threads(), probes) == (2, "probe", 2, [[1, 2]])
    kept = json.loads(tc.cache_file(pair).read_text())
    assert kept["ms"]["2"]["1"] == 30.0 and "machine" in kept

    torch.set_num_threads(1)
    again = tc.settle(pair, None, cores=2, environ={})
    assert (again.threads, again.source, torch.get_num_threads(), len(probes), checks) == (2, "cache", 2, 1, [2])
    assert "timed on this machine before" in again.describe() and "30.0 ms on 2" in again.describe()

    # The machine got busy: the kept count no longer beats one thread, so the whole probe runs again.
    wins, timings = False, {1: {1: 50.0, 16: 60.0}, 2: {1: 70.0, 16: 90.0}}
    busy = tc.settle(pair, None, cores=2, environ={})
    assert (busy.threads, busy.source, torch.get_num_threads(), len(probes)) == (1, "probe", 1, 2)
    # TEVVIZ_THREADS=probe times again whatever is kept.
    tc.settle(pair, None, cores=2, environ={"TEVVIZ_THREADS": "probe"})
    assert len(probes) == 3


def test_a_kept_file_that_does_not_parse_is_probed_again(pair, monkeypatch, tmp_path):
    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    path = tc.cache_file(pair)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    monkeypatch.setattr(tc, "probe_ms", lambda model, counts, **k: {c: {1: 10.0 * c, 16: 20.0 * c} for c in counts})
    assert tc.settle(pair, None, cores=2, environ={}).source == "probe"
    assert tc.read_cached(path) == {1: {1: 10.0, 16: 20.0}, 2: {1: 20.0, 16: 40.0}}


def test_the_probe_times_every_count_and_size_and_restores_the_count(pair):
    torch.set_num_threads(1)
    ms = tc.probe_ms(pair.target, [1, 2], rows=(1, 4), repeats=1)
    assert set(ms) == {1, 2} and all(set(v) == {1, 4} and min(v.values()) > 0 for v in ms.values())
    assert torch.get_num_threads() == 1
    assert tc.still_wins(pair.target, 1)


def test_a_capped_probe_keeps_the_other_counts_timings(pair, monkeypatch, tmp_path):
    """An app capped below the cores and a decode that is not share one file: neither drops the other's counts."""
    monkeypatch.setenv("TEVVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(tc, "probe_ms", lambda model, counts, **k: {c: {1: 100.0 / c} for c in counts})
    monkeypatch.setattr(tc, "still_wins", lambda model, k: True)
    assert tc.settle(pair, None, cores=4, environ={}).threads == 4
    assert tc.settle(pair, None, cores=4, cap=3, environ={"TEVVIZ_THREADS": "probe"}).threads == 3
    assert set(tc.read_cached(tc.cache_file(pair))) == {1, 2, 3, 4}
    assert tc.settle(pair, None, cores=4, environ={}).source == "cache"
