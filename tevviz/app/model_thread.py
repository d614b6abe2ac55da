"""Model work on one thread: the thread that loaded the models, which is the main thread under `launch`.

Gradio runs each handler on a worker thread of its own pool. On a CPU build of torch (OpenMP) MKL's
matmuls run single-threaded off the main thread, so a decoding round there is slower than on the main
thread, while with one torch thread the two are equal (docs/app-latency.md; `benchmarks/thread_cost.py`
measures it). So `launch` keeps the main thread as the model thread: handlers hand their model calls to
it and wait. When no model thread is serving (tests, a notebook, an app launched without blocking), a
call runs where it is made.

The app's thread count is the CLI's and the notebook API's: `--threads`, else the count whose target passes run
fastest on this machine (engine/decode/thread_choice.py), chosen on this thread after the models load; bound to this
machine only, at most one fewer than the cores: two torch threads that must meet at every op stall whenever the
browser, on the same machine, takes a core (on the embedded pair a Step took 1.5-1.9x as long, docs/app-latency.md).
"""

from __future__ import annotations

import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from ..engine.errors import TevvizError
from ..engine.load.threads import TORCH_DEFAULT_THREADS, thread_count

T = TypeVar("T")


# The app's thread policy is everyone's (engine/load/threads.py); the old names stay for the app's callers.
app_threads = thread_count
__all__ = ["MODEL_THREAD", "TORCH_DEFAULT_THREADS", "ModelThread", "app_threads"]


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
