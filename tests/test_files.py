"""Output files take the permissions any new file gets, and nothing changes the process umask to learn them.

The app writes exports from several threads: os.umask(0) for a moment, to read the umask, made the files another
thread created in that window world-writable. Checked to fail against that reading of the umask.
"""

from __future__ import annotations

import os
import threading

import pytest

from tevviz.cli import main
from tevviz.files import atomic_folder, atomic_write, new_file_mode


@pytest.fixture
def umask_027(monkeypatch):
    """The process umask 027 for the test, and any later call of os.umask a failure."""
    old = os.umask(0o027)

    def refuse(mask):
        raise AssertionError("os.umask was called: it changes the umask of every thread for a moment")

    monkeypatch.setattr(os, "umask", refuse)
    yield
    monkeypatch.undo()
    os.umask(old)


def test_decode_export_has_the_umask_mode_without_touching_the_umask(umask_027, tmp_path, capsys):
    path = tmp_path / "s.json"
    assert main(["decode", "--prompt", "import os", "--max-new-tokens", "3", "--threads", "1", "--export",
                 str(path)]) == 0
    assert path.stat().st_mode & 0o777 == 0o640
    path.chmod(0o600)  # an existing file keeps its own mode
    assert main(["decode", "--prompt", "import os", "--max-new-tokens", "3", "--threads", "1", "--export",
                 str(path)]) == 0
    assert path.stat().st_mode & 0o777 == 0o600


def test_atomic_writes_from_many_threads_never_touch_the_umask(umask_027, tmp_path):
    """Files and folders written at once from eight threads all come out with the umask's modes."""
    errors = []

    def work(k: int) -> None:
        try:
            for j in range(20):
                atomic_write(tmp_path / f"f{k}-{j}", "x")
            with atomic_folder(tmp_path / f"d{k}") as d:
                (d / "x").write_text("x")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    modes = {(p.name[0], p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    assert modes == {("f", 0o640), ("d", 0o750)} and new_file_mode(tmp_path) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary file was left"
