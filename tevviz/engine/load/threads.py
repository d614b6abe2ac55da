"""One policy for torch's CPU threads, shared by the command line, the app and the notebook API: the count while
models load, and the fallback of the measured choice once they have (engine/decode/thread_choice.py).

`--threads N` (or `threads=N`) when given; else, when $OMP_NUM_THREADS is set, what torch read from it; else one
fewer than torch's default (one a core), at least 1. Torch threads that must meet at every op stall whenever
anything else on the machine takes a core: a browser, a server, another job (README.md, *Use*, and
docs/app-latency.md have measured cases), so unmeasured, a core is left free.
"""

from __future__ import annotations

import os

import torch

from ..errors import TevvizError

TORCH_DEFAULT_THREADS = torch.get_num_threads()  # read at import, before this policy changed it


def thread_count(requested: int | None, default: int = TORCH_DEFAULT_THREADS, environ=os.environ) -> int | None:
    """The thread count the policy picks: `requested`, else None (keep torch's) when $OMP_NUM_THREADS is set, else
    one fewer than `default`, at least 1."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise TevvizError(f"--threads must be at least 1, got {requested!r}")
        return requested
    if environ.get("OMP_NUM_THREADS"):
        return None
    return max(default - 1, 1)


def use_threads(requested: int | None = None) -> int:
    """Set torch's CPU threads by the policy; the count in use after it."""
    n = thread_count(requested)
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)
    return torch.get_num_threads()
