"""The app's small shared pieces (app/widgets.py): a capped memo forgets its oldest entries one at a time."""

from __future__ import annotations

from tevviz.app.widgets import remember


def test_a_full_memo_forgets_the_oldest_entry_not_everyone():
    memo: dict = {}
    for sid in "abc":
        remember(memo, sid, sid.upper(), 3)
    remember(memo, "a", "A2", 3)  # a session seen again is the newest
    remember(memo, "d", "D", 3)
    assert memo == {"c": "C", "a": "A2", "d": "D"}  # "b", the oldest, went; the others' widths stay
