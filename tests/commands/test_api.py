"""The notebook API: top-level names import lazily, and the docs/python-api.md example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_loads_no_model_and_no_torch():
    code = ("import sys, tevviz; assert 'torch' not in sys.modules, 'import tevviz loaded torch'; "
            "names = [n for n in tevviz.__all__ if n != '__version__']; "
            "missing = [n for n in names if getattr(tevviz, n, None) is None]; assert not missing, missing; "
            "print(len(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) >= 15


def test_every_api_name_has_a_docstring():
    import tevviz

    for name in tevviz.__all__:
        if name != "__version__":
            assert (getattr(tevviz, name).__doc__ or "").strip(), f"tevviz.{name} has no docstring"


def test_the_documented_example_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "docs/python-api.md", "exec"), scope)  # noqa: S102 - the documented example, run as written
    printed = capsys.readouterr().out
    assert "C_p*" in printed and "gap" in printed and "rounds, tau" in printed
    gap = scope["gap"]
    assert gap.C_p_star >= gap.C_p - 1e-6 and scope["s"].done
    report = (tmp_path / "session-report.html").read_text(encoding="utf-8")
    assert report == scope["html"] and len(report) > 100_000  # plotly.js is inside
    assert any(t.name == "nodes" for t in scope["fig"].data)


def test_a_record_shows_its_tree_in_ipython():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        from tevviz import api

        api._register_notebook_display()
        from conftest import tiny_pair

        s = api.session(tiny_pair("llama", seed=4), "t1 t2", max_new_tokens=4, chat=False)
        record = s.step()
        bundle, _ = shell.display_formatter.format(record)
        assert any("plotly" in k or k == "text/html" for k in bundle), list(bundle)
    finally:
        InteractiveShell.clear_instance()


def test_load_takes_the_cli_and_app_thread_policy(monkeypatch):
    """tevviz.load(threads=N) sets torch's threads; without it, the policy of `tevviz decode` and the app (one fewer
    than torch's default, or $OMP_NUM_THREADS's) rather than a thread on every core; a bad count is one line."""
    import torch

    import tevviz
    from tevviz.engine.errors import TevvizError
    from tevviz.engine.load import threads as policy

    before = torch.get_num_threads()
    try:
        tevviz.load(threads=2)
        assert torch.get_num_threads() == 2
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(policy, "TORCH_DEFAULT_THREADS", 4)
        monkeypatch.setattr(policy.thread_count, "__defaults__", (4, policy.os.environ))
        tevviz.load()
        assert torch.get_num_threads() == 3
        with pytest.raises(TevvizError, match="--threads must be at least 1, got 0"):
            tevviz.load(threads=0)
    finally:
        torch.set_num_threads(before)


def test_decode_scan_and_app_share_one_threads_default():
    """The --threads help (and so its default) of decode, scan and app is one policy."""
    from tevviz.cli import build_parser

    parser = build_parser()
    helps = {}
    for command in ("decode", "scan", "app", "eval"):
        sub = parser._subparsers._group_actions[0].choices[command]
        (action,) = [a for a in sub._actions if "--threads" in a.option_strings]
        helps[command] = (action.default, action.help)
    assert len(set(helps.values())) == 1, helps


def test_the_readme_notebook_snippet_prints_what_it_shows(monkeypatch, capsys, tmp_path):
    """Run as a script, the README's snippet prints its round in one short line (it printed nothing, and in a
    terminal the record's repr ran to 17,000 characters on one line)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## From a notebook"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the README's snippet, run as written
    printed = capsys.readouterr().out.strip()
    record = scope["record"]
    assert printed == repr(record) and "\n" not in printed and len(printed) < 200
    assert printed.startswith(f"RoundRecord(round 0, {record.verifier}, ") and f"{record.size} nodes" in printed
    assert "1 + C_p* " in printed and any(t.name == "nodes" for t in scope["fig"].data)
