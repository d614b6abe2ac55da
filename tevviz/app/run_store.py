"""Runs kept on the server: each browser's decoding runs as session JSON files, so a reload, a link or a switch of
settings loses nothing.

Files live in one folder per browser (`<cache>/runs/<user>/<run>.json`, the ids made of hex digits only, so no link
reaches a path outside it); each folder keeps its newest `MAX_RUNS` runs, the whole store its newest `MAX_BYTES`.
Writes happen on one background thread, newest state of a run last, so a Step never waits for its run's file.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import TevvizError
from ..engine.load.pairs import cache_root
from ..engine.records import io as tio
from ..files import atomic_write_json

MAX_RUNS = 24  # per browser; the oldest run goes first
MAX_BYTES = 512 * 1024 * 1024  # the whole store; the oldest files go first
ID = re.compile(r"[0-9a-f]{32}")  # fullmatch: `$` would let a trailing newline through
logger = logging.getLogger("tevviz")


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class KeptRun(tio.ImportedSession):
    """A kept run as read back: the session, and what the app showed of it beyond the session (`view`: the
    baseline timed for it), which a session file for others does not hold."""

    view: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StoredRun:
    """A run on disk: its id, name and when it was last written."""

    run_id: str
    name: str
    written: float


class RunStore:
    """Session JSON files by browser and run id, capped by count and by bytes."""

    def __init__(self, root: Path | None = None, max_runs: int = MAX_RUNS, max_bytes: int = MAX_BYTES):
        self.root = Path(root) if root is not None else cache_root() / "runs"
        self.max_runs, self.max_bytes = max_runs, max_bytes
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tevviz-runs")
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], dict] = {}  # the newest unwritten state of each run
        self._dropped: dict[str, list[str]] = {}  # user -> names of runs the cap removed, not yet said

    def path(self, user: str, run_id: str) -> Path:
        """The file of a run; TevvizError for ids that are not ours (so a link never names another path)."""
        if not (ID.fullmatch(user or "") and ID.fullmatch(run_id or "")):
            raise TevvizError("that link names no run of this app (a run id is 32 hex digits)")
        return self.root / user / f"{run_id}.json"

    def save(self, user: str, run_id: str, session: dict, wait: bool = False) -> None:
        """Write a run's session JSON in the background (the newest state wins); `wait` for it to be on disk."""
        key = (user, run_id)
        self.path(user, run_id)
        with self._lock:
            queued = key in self._pending
            self._pending[key] = session
        future = None if queued else self._writer.submit(self._write, key)
        if wait:
            (future or self._writer.submit(lambda: None)).result()

    def _write(self, key: tuple[str, str]) -> None:
        with self._lock:
            session = self._pending.pop(key, None)
        if session is None:
            return
        user, run_id = key
        try:
            path = self.path(user, run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, session)
            self._cap(user)
        except (OSError, TevvizError) as e:  # a full disk must not stop decoding; the run stays in the browser
            logger.warning("run %s not saved: %s", run_id[:8], e)

    def _cap(self, user: str) -> None:
        files = sorted((self.root / user).glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in files[: max(len(files) - self.max_runs, 0)]:
            self._dropped.setdefault(user, []).append(_name(old))
            old.unlink(missing_ok=True)
        everything = sorted(self.root.glob("*/*.json"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in everything)
        for old in everything:
            if total <= self.max_bytes:
                break
            total -= old.stat().st_size
            self._dropped.setdefault(old.parent.name, []).append(_name(old))
            old.unlink(missing_ok=True)

    def dropped(self, user: str) -> list[str]:
        """Names of this browser's runs the caps removed since the last call."""
        return self._dropped.pop(user, [])

    def load(self, user: str, run_id: str) -> KeptRun:
        """A run as an imported session with its `view`; TevvizError naming what is missing."""
        path = self.path(user, run_id)
        self.flush()
        if not path.is_file():
            raise TevvizError("that run is not on this server (removed by the cap of "
                              f"{self.max_runs} runs per browser, or never saved here)")
        raw = path.read_bytes()
        try:
            data = json.loads(raw) if len(raw) <= tio.MAX_BYTES else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return KeptRun(**tio.loads(raw).__dict__)  # its error says what is wrong with the file
        view = data.get("view")
        return KeptRun(**tio.parse(data).__dict__, view=view if isinstance(view, dict) else {})

    def runs(self, user: str) -> list[StoredRun]:
        """This browser's runs, newest first."""
        if not ID.fullmatch(user or ""):
            return []
        out = []  # not waiting for the writer: a run being written is listed by its last file, or shown as it is
        for path in (self.root / user).glob("*.json"):
            try:
                out.append(StoredRun(path.stem, _name(path), path.stat().st_mtime))
            except OSError:
                continue
        return sorted(out, key=lambda r: -r.written)

    def flush(self) -> None:
        """Wait for the writes queued so far."""
        self._writer.submit(lambda: None).result()


def _name(path: Path) -> str:
    """A run's name from its file, read from the start of the file (meta comes first), else its id."""
    try:
        with path.open("rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return path.stem[:8]
    found = re.search(r'"run_name":\s*("(?:[^"\\]|\\.)*")', head)
    try:
        return json.loads(found.group(1)) if found else path.stem[:8]
    except ValueError:
        return path.stem[:8]
