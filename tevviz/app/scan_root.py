"""Where the app writes its own scans: one temporary folder per process, removed at exit (app/source.py lets the
Scan tab open it; app/scan_view.py writes there)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

_LOCK = threading.Lock()
_ROOT: Path | None = None


def scan_root() -> Path:
    """The app's scan folder, made on first use. Not the session's export folder, which an import or an opened round
    empties."""
    global _ROOT
    with _LOCK:
        if _ROOT is None:
            _ROOT = Path(tempfile.mkdtemp(prefix="tevviz-scans-"))
            atexit.register(shutil.rmtree, _ROOT, True)
        return _ROOT
