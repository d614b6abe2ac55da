"""`tevviz report` (tevviz/commands/decoding.py: cmd_report): the page's title."""

from __future__ import annotations

import html

from _cli import exported

from tevviz.cli import main


def test_report_title(tmp_path, capsys):
    exported(["--max-new-tokens", "2"], tmp_path, capsys)
    session = tmp_path / "s.json"
    title = "Fib <draft> & co"
    assert main(["report", str(session), "-o", str(tmp_path / "t.html"), "--title", title]) == 0
    text = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert f"<title>{html.escape(title)}</title>" in text and f"<h1>{html.escape(title)}</h1>" in text
    assert main(["report", str(session), "-o", str(tmp_path / "d.html")]) == 0
    default = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert "<title>tevviz report: " in default and html.escape(title) not in default
