"""Wall-clock timing of forwards, shared by the pass-cost model, the row-path probe and the plain baseline."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from ..errors import TevvizError


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


def machine_key(threads: bool = True) -> str:
    """This machine as a timing choice depends on it: processor, core count, torch version (and thread count)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    key = f"{cpu}|{os.cpu_count()}|torch {torch.__version__}"
    return key + (f"|threads {torch.get_num_threads()}" if threads else "")


def model_key(model) -> str:
    """A model as its timings depend on it: its configuration, dtype and a sample of its output layer's weights."""
    head = model.get_output_embeddings()
    sample = head.weight.detach().reshape(-1)[:4096].float().cpu() if head is not None else torch.zeros(1)
    return f"{model.config.to_json_string(use_diff=False)}|{model.dtype}|{float(sample.sum()):.6e}|" \
           f"{float(sample.abs().sum()):.6e}"


def env_mode(name: str, modes: tuple[str, ...], environ=os.environ) -> str:
    """The mode environment variable `name` asks for, one of `modes` (the first when unset); another is refused."""
    value = environ.get(name, modes[0]).strip().lower() or modes[0]
    if value not in modes:
        raise TevvizError(f"{name} must be one of {', '.join(modes)}, got {value!r}")
    return value


def keep_json(path: Path, data: dict) -> None:
    """Keep a probe's timings at `path` (written whole, then renamed into place); a cache that cannot be written only
    means the next load probes again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
