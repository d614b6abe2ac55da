"""Stop buttons that stop the work: a flag per browser session and action, checked by the work between its steps.

Gradio's `cancels=[event]` only drops the browser's wait: the model thread would go on computing and hold up the
next action. So a long action runs inside `Stops.job(sid, action)` and checks its `Job` between prompts, steps or
timings (`Job.tick`); where the steps are engine passes the app cannot reach, `Job.watch(model)` checks before each
forward of that model. Either raises `Stopped`, which says how far the work got and carries what it kept.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..engine import TevvizError


class Stopped(TevvizError):
    """Work ended by its Stop button after `done` of `total` `unit`; `kept` is what it finished, for the caller."""

    def __init__(self, what: str, done: int, total: int, unit: str, kept: Any = None, said: str = ""):
        self.what, self.done, self.total, self.unit, self.kept = what, done, total, unit, kept
        one = unit[:-2] if unit.endswith("sses") else unit[:-1]  # "target passes": "target pass"
        where = f"after {done} of {total} {unit}" if total else f"after {done} {one if done == 1 else unit}"
        super().__init__(f"{what} stopped {where}" + (f": {said}" if said else ""))

    def saying(self, said: str, kept: Any = None) -> Stopped:
        """The same stop, with what was kept told (and handed on)."""
        return Stopped(self.what, self.done, self.total, self.unit, self.kept if kept is None else kept, said)


class Job:
    """One running action's view of its stop flag, and how far it got."""

    def __init__(self, what: str, flag: threading.Event):
        self.what, self._flag = what, flag
        self.done, self.total, self.unit = 0, 0, "steps"

    @property
    def stopped(self) -> bool:
        return self._flag.is_set()

    def stop(self) -> Stopped:
        """The Stopped this job raises, at the count it reached."""
        return Stopped(self.what, self.done, self.total, self.unit)

    def tick(self, done: int, total: int, unit: str | None = None) -> None:
        """Note that `done` of `total` steps are finished; raise Stopped if Stop was pressed and steps are left."""
        self.done, self.total, self.unit = done, total, unit or self.unit
        if self.stopped and done < total:
            raise self.stop()

    def check(self) -> None:
        """Raise Stopped if Stop was pressed."""
        if self.stopped:
            raise self.stop()

    @contextlib.contextmanager
    def watch(self, model, count: bool = False) -> Iterator[None]:
        """Check the flag before every forward of `model` (its input embeddings: every path through it starts there),
        for engine loops that tell nobody between their passes; `count`: each pass is a step done."""

        def check(module, args):
            self.check()
            if count:
                self.done += 1

        handle = model.get_input_embeddings().register_forward_pre_hook(check)
        try:
            yield
        finally:
            handle.remove()


class Stops:
    """The stop flags of the running actions, by (browser session, action)."""

    def __init__(self):
        self._flags: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def job(self, sid: str, action: str, what: str | None = None) -> Iterator[Job]:
        """A fresh flag for `action` of browser session `sid` while the block runs: a Stop pressed before it began,
        or after it ended, stops nothing."""
        flag = threading.Event()
        with self._lock:
            self._flags[(sid, action)] = flag
        try:
            yield Job(what or action, flag)
        finally:
            with self._lock:
                if self._flags.get((sid, action)) is flag:
                    del self._flags[(sid, action)]

    def stop(self, sid: str, *actions: str) -> list[str]:
        """Raise the flags of `actions` (every action when none is named) running for `sid`; the ones raised."""
        with self._lock:
            hit = [(k, f) for k, f in self._flags.items() if k[0] == sid and (not actions or k[1] in actions)]
        for _, flag in hit:
            flag.set()
        return [k[1] for k, _ in hit]

    def running(self, sid: str) -> list[str]:
        """The actions of `sid` that could be stopped now."""
        with self._lock:
            return [a for s, a in self._flags if s == sid]
