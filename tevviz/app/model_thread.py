"""Model work on one thread: the thread that loaded the models, which is the main thread under `launch`.

Gradio runs each handler on a worker thread of its own pool. On a CPU build of torch (OpenMP) MKL's
matmuls run single-threaded off the main thread, so a decoding round there is slower than on the main
thread, while with one torch thread the two are equal (docs/app-latency.md; `benchmarks/thread_cost.py`
measures it). So `launch` keeps the main thread as the model thread: handlers hand their model calls to
it and wait. When no model thread is serving (tests, a notebook, an app launched without blocking), a
call runs where it is made.

The app also leaves a core free by default (`app_threads`): two torch threads that must meet at every op
stall whenever the browser, on the same machine, takes a core.
"""

from __future__ import annotations

import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import torch

from ..engine.errors import TevvizError

T = TypeVar("T")


def app_threads(requested: int | None, default: int, environ=os.environ) -> int | None:
    """torch's CPU threads for the app: `requested`, else None (keep) when $OMP_NUM_THREADS is set, else one
    fewer than torch's `default`, at least 1 (a core for the browser and the server's own Python)."""
    if requested is not None:
        if requested < 1:
            raise TevvizError(f"--threads must be at least 1, got {requested}")
        return requested
    if environ.get("OMP_NUM_THREADS"):
        return None
    return max(default - 1, 1)


TORCH_DEFAULT_THREADS = torch.get_num_threads()  # read at import, before any launch changed it


class ModelThread:
    """A queue of model calls served by one thread (`serve`); `call` runs a function there and waits."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._owner: int | None = None  # ident of the serving thread, while it serves
        self._lock = threading.Lock()  # a call is queued only while someone serves

    @property
    def serving(self) -> bool:
        return self._owner is not None

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """`fn(*args, **kwargs)` on the model thread (here, when none serves or this is it); its result or error."""
        with self._lock:
            here = self._owner is None or self._owner == threading.get_ident()
            if not here:
                done: Future = Future()
                # The caller's context travels with the call: Gradio finds a handler's progress bar through it.
                self._jobs.put((done, contextvars.copy_context(), fn, args, kwargs))
        return fn(*args, **kwargs) if here else done.result()

    def serve(self, until: Callable[[], bool], poll_s: float = 0.2) -> None:
        """Serve calls on this thread until `until()` is true (checked every `poll_s`) or KeyboardInterrupt."""
        with self._lock:
            self._owner = threading.get_ident()
        try:
            while not until():
                try:
                    job = self._jobs.get(timeout=poll_s)
                except queue.Empty:
                    continue
                err = _run(*job)
                if isinstance(err, (KeyboardInterrupt, SystemExit)):
                    raise err
        finally:
            with self._lock:
                self._owner = None
            # Calls queued before serving stopped run on threads of their own instead of waiting forever.
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                threading.Thread(target=_run, args=job, daemon=True).start()


def _run(done: Future, ctx: contextvars.Context, fn: Callable, args: tuple, kwargs: dict) -> BaseException | None:
    """Run one queued call into its future; the error it raised, if any.

    An error reaches the waiting caller as if raised there, except Ctrl-C and exit: those stay with the serving
    thread (re-raised by `serve`), and the caller, a handler inside Gradio's event loop, gets a TevvizError.
    """
    if not done.set_running_or_notify_cancel():
        return None
    try:
        done.set_result(ctx.run(fn, *args, **kwargs))
    except (KeyboardInterrupt, SystemExit) as e:
        done.set_exception(TevvizError("the app is shutting down"))
        return e
    except Exception as e:  # noqa: BLE001 -- every error belongs to the caller
        done.set_exception(e)
        return e
    return None


MODEL_THREAD = ModelThread()


def on_model_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorate a function that runs the models: each call goes to MODEL_THREAD."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return MODEL_THREAD.call(fn, *args, **kwargs)

    return wrapper
