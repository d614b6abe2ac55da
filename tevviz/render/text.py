"""Generated text of a session as (text, label) spans for `gr.HighlightedText`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def highlighted_blocks(rounds: Sequence[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """Per round: the accepted tokens (root excluded) labelled "round k", then the bonus token labelled "bonus"."""
    spans: list[tuple[str, str | None]] = []
    for i, r in enumerate(rounds):
        info = r["graph"]
        text_of = {n["id"]: n["text"] for n in r["nodes"]}
        # The root is the previous round's bonus token, already emitted there.
        accepted = "".join(text_of[v] or "" for v in info["accepted"][1:])
        if accepted:
            spans.append((accepted, f"round {info.get('round', i)}"))
        spans.append((info["bonus_text"] or "", "bonus"))
    return spans
