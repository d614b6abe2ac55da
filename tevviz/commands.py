"""Sub-commands beyond decode/inspect/app (training, evaluation, benchmarks), registered here."""

from __future__ import annotations

EXTRA_HANDLERS: dict = {}


def add_extra_commands(sub) -> None:
    """Add the extra sub-command parsers to `sub`."""
