"""The thread policy (tevviz/engine/load/threads.py) honours $OMP_NUM_THREADS: set, it keeps the count torch read
from it (in a fresh process, where torch reads it); unset, one fewer than torch's default; --threads wins over both."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tevviz.engine.load.threads import thread_count

SHOW = ("import torch; before = torch.get_num_threads(); from tevviz.engine.load.threads import use_threads; "
        "print(before, use_threads())")


def fresh_process(env_threads: str | None) -> tuple[int, int]:
    """(torch's own count, the policy's) in a new process, with $OMP_NUM_THREADS as given."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if env_threads is not None:
        env["OMP_NUM_THREADS"] = env_threads
    done = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    return before, after


def test_omp_num_threads_is_the_count_in_use():
    cores, unset = fresh_process(None)
    if cores < 2:
        pytest.skip("one core: the policy's count and torch's are both 1, nothing to tell apart")
    assert unset == cores - 1  # a core left free
    # torch caps $OMP_NUM_THREADS at its core count: ask for all the cores, which the unset policy would not keep
    assert fresh_process(str(cores)) == (cores, cores)
    assert fresh_process("1") == (1, 1)


def test_the_policy_by_hand():
    assert thread_count(None, default=8, environ={"OMP_NUM_THREADS": "3"}) is None  # torch's own reading stays
    assert thread_count(None, default=8, environ={}) == 7
    assert thread_count(None, default=1, environ={}) == 1
    assert thread_count(5, default=8, environ={"OMP_NUM_THREADS": "3"}) == 5
