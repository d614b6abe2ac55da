"""Wall-clock timing of forwards, shared by the pass-cost model, the row-path probe and the plain baseline."""

from __future__ import annotations

import statistics
import time

import torch


def sync(device) -> None:
    """Wait for an accelerator's queued work, so that a clock read after it includes that work."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(run, sizes, repeats: int, device, clock=time.perf_counter) -> dict:
    """Median ms of `run(n)` for each n, the sizes interleaved in each repeat (the first repeat warms up and is
    not counted), so that a machine's load drifting during the timing reaches every size alike."""
    times: dict = {n: [] for n in sizes}
    for rep in range(repeats + 1):
        for n in sizes:
            sync(device)
            t0 = clock()
            run(n)
            sync(device)
            if rep:
                times[n].append(1e3 * (clock() - t0))
    return {n: statistics.median(v) for n, v in times.items()}
