"""The forward timer (engine/core/timing.py), driven by a fake clock so the expected medians are exact."""

from __future__ import annotations

import pytest
import torch

from tevviz.engine.core.timing import median_ms, sync


class Clock:
    """A clock that only the timed `run` moves, so each timing is exactly what `run` added."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_median_of_the_counted_repeats_in_ms_with_the_warm_up_left_out():
    clock = Clock()
    # Per size, one duration per repeat (s): the first is the warm-up, so a huge one must not reach the median.
    durations = {1: iter([9.0, 0.003, 0.001, 0.002]), 4: iter([9.0, 0.010, 0.030, 0.020])}

    def run(n):
        clock.now += next(durations[n])

    got = median_ms(run, [1, 4], repeats=3, device="cpu", clock=clock)
    assert list(got) == [1, 4]
    assert got[1] == pytest.approx(2.0) and got[4] == pytest.approx(20.0)


def test_an_even_count_of_repeats_takes_the_mean_of_the_middle_two():
    clock = Clock()
    steps = iter([5.0, 0.001, 0.004])  # warm-up, then 1 ms and 4 ms

    def run(n):
        clock.now += next(steps)

    assert median_ms(run, [7], repeats=2, device="cpu", clock=clock) == {7: pytest.approx(2.5)}


def test_the_sizes_are_interleaved_within_each_repeat():
    """A machine's load drifting during the timing must reach every size alike: size order repeats, not blocks."""
    calls = []
    median_ms(calls.append, [3, 1, 2], repeats=2, device="cpu", clock=lambda: 0.0)
    assert calls == [3, 1, 2] * 3  # the warm-up round and two counted ones


def test_sync_waits_only_on_a_cuda_device(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    sync("cpu")
    sync(torch.device("cpu"))
    assert waited == []
    sync("cuda:0")
    assert waited == ["cuda:0"]
