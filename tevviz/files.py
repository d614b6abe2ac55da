"""Output files: checked before the work starts, written atomically (a temporary file renamed into place).

An interrupted or failed write leaves the old file, or none, never half a file: the data goes to a
temporary file in the same folder, which replaces the target only once it is complete.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .engine.errors import TevvizError


def check_writable(path: str | Path, flag: str) -> Path:
    """`path` as a Path once a file can be written there, else a TevvizError naming `flag` and the reason."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise TevvizError(f"{flag} {str(path)!r} is a folder; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise TevvizError(f"{flag} {str(path)!r}: the file is not writable")
    _check_folder(p.parent, flag, path)
    return p


def check_folder_writable(path: str | Path, flag: str) -> Path:
    """`path` as a Path once a folder can be made there (it may exist empty), else a TevvizError naming `flag`."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise TevvizError(f"{flag} {str(path)!r} is a file, not a folder")
    if p.is_dir() and any(p.iterdir()):
        raise TevvizError(f"{flag} {str(path)!r} exists and is not empty")
    _check_folder(p.parent, flag, path)
    return p


def _check_folder(folder: Path, flag: str, path: str | Path) -> None:
    """That `folder` exists and takes a new file (made and removed again: permissions, a read-only disk, quotas)."""
    if not folder.is_dir():
        raise TevvizError(f"{flag} {str(path)!r}: no folder {str(folder)!r}")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".tevviz-", suffix=".check")
    except OSError as e:
        raise TevvizError(f"{flag} {str(path)!r}: cannot write in {str(folder)!r} ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def _new_file(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """A new empty file in `folder` (an fd open for writing, and its path) with the permissions any new file there
    gets: 0o666 less the umask, or the folder's default ACL. mkstemp would make it 0600; the umask is never read
    (os.umask sets it to read it, a window in which another thread's new files would be world-writable)."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def _new_folder(folder: Path, prefix: str, suffix: str) -> Path:
    """A new empty folder in `folder` with the permissions any new folder there gets (mkdtemp would make it 0700)."""
    for _ in range(100):
        path = Path(folder) / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            path.mkdir(0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def new_file_mode(folder: str | Path) -> int:
    """The permission bits a new file made in `folder` gets (made and removed again)."""
    fd, path = _new_file(Path(folder), ".tevviz-", ".mode")
    try:
        return os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)
        os.unlink(path)


def atomic_write(path: str | Path, data: str | bytes | Iterable[str | bytes]) -> int:
    """Write `data` (text as UTF-8, or an iterable of pieces) to `path` all at once; the bytes written."""
    p = Path(path).expanduser()
    pieces = [data] if isinstance(data, (str, bytes)) else data
    fd, tmp = _new_file(p.parent, f".{p.name}.", ".partial")
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                size += f.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
            f.flush()
            os.fsync(f.fileno())
        if p.exists():
            os.chmod(tmp, p.stat().st_mode & 0o777)
        os.replace(tmp, p)
    except BaseException:
        # Ctrl-C included: the target keeps its old content, and the partial file goes.
        Path(tmp).unlink(missing_ok=True)
        raise
    return size


def json_pieces(obj) -> Iterator[str]:
    """`obj` as compact JSON text, piece by piece (json.dump's own chunks)."""
    return json.JSONEncoder().iterencode(obj)


def atomic_write_json(path: str | Path, obj) -> int:
    """`obj` as JSON at `path`, atomically; the bytes written."""
    return atomic_write(path, json_pieces(obj))


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A temporary folder beside `path` to fill; renamed to `path` (absent or empty) when the block ends cleanly."""
    p = Path(path).expanduser()
    tmp = _new_folder(p.parent, f".{p.name}.", ".partial")
    try:
        yield tmp
        if p.is_dir():
            p.rmdir()  # an empty folder the user made: replaced by the finished one
        os.replace(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
