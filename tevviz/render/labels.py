"""Token labels as the tree draws them: whitespace made visible, markup escaped, and their width in pixels.

Labels are set in a monospace font, so a label's width is known here without a browser: `label_px` is an upper bound
of what the browser draws (tests/app/test_browser.py measures the drawn labels and checks that none overlap).
"""

from __future__ import annotations

import html
import unicodedata

FONT_SIZE = 10
# Monospace fonts draw ASCII at 0.55-0.61 em (DejaVu Sans Mono, Menlo, Consolas, Courier New): 0.62 is an upper bound.
# Other characters may come from a proportional fallback font: up to an em, and two for a wide (East Asian) one.
ASCII_EM = 0.62
OTHER_EM = 1.05
WIDE_EM = 2.0
FONT_FAMILY = "DejaVu Sans Mono, Menlo, Consolas, Liberation Mono, Courier New, monospace"
ELLIPSIS = "…"
VISIBLE = {" ": "⎵", "\n": "↵", "\t": "⇥", "\r": "␍"}


RUN = 3  # in a token of whitespace alone, a run of this many of one character or more is drawn as it and its count


def token_label(text: str | None) -> str:
    """A token as a label: spaces, newlines and tabs drawn as ⎵ ↵ ⇥ (in a token of whitespace alone, a run
    of three or more as ⎵×8), other control characters as their code."""
    if text is None:
        return "?"
    if text == "":
        return "∅"
    out = []
    # Sibling tokens of indentation or blank lines differ in their count alone: cut to fit,
    # four spaces and eight were both "⎵⎵…"; "⎵×4" and "⎵×8" stay apart, and shorter.
    # Not beside other characters: "   1" is no "⎵×31".
    counted = all(ch in VISIBLE for ch in text)
    for ch, run in _runs(text):
        if ch in VISIBLE:
            out.append(VISIBLE[ch] + f"×{run}" if counted and run >= RUN else VISIBLE[ch] * run)
            continue
        for c in ch * run:
            if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"):
                out.append(f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
            else:
                out.append(c)
    return "".join(out)


def _runs(text: str):
    """(character, how many in a row) along `text`."""
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or text[i] != text[start]:
            yield text[start], i - start
            start = i


def char_px(ch: str, size: float = FONT_SIZE) -> float:
    """Upper bound of one character's advance in the label font."""
    if ord(ch) < 128:
        return ASCII_EM * size
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return WIDE_EM * size
    return OTHER_EM * size


def label_px(label: str, size: float = FONT_SIZE) -> float:
    """Upper bound of a label's drawn width in pixels."""
    return sum(char_px(ch, size) for ch in label)


def fit_label(label: str, max_px: float, min_chars: int = 2, size: float = FONT_SIZE) -> str | None:
    """`label`, or its start with an ellipsis, in at most `max_px`; None when not even `min_chars` characters fit."""
    if label_px(label, size) <= max_px:
        return label
    room = max_px - label_px(ELLIPSIS, size)
    kept = ""
    for ch in label:
        if label_px(kept + ch, size) > room:
            break
        kept += ch
    return kept + ELLIPSIS if len(kept) >= min(min_chars, len(label)) and kept else None


def markup(label: str) -> str:
    """A label as plotly text: '<' and '&' escaped, so a token like '<|endoftext|>' is not read as markup."""
    return html.escape(label, quote=False)
