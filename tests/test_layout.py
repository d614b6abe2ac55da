"""The house's rules that a change could break unseen: the renderers and the records they read import no torch (the
report, the app's figures and a scan's tables work on a machine without it)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import tevviz.render

# The engine modules the renderers read: what a round and a session are, and the numbers read from them.
TORCH_FREE_ENGINE = ("records", "round_time", "round_numbers", "summary", "scan_stats", "io", "json_checks",
                     "ddtree_trace", "draft_rows", "run_compare", "run_depths", "speed", "doctor_report", "errors",
                     "pairs", "builder_kinds")


def test_the_renderers_and_the_records_import_no_torch():
    render = [f"tevviz.render.{m.name}" for m in pkgutil.iter_modules(tevviz.render.__path__)]
    engine = [f"tevviz.engine.{m}" for m in TORCH_FREE_ENGINE]
    code = ("import importlib, sys\n"
            f"for name in {render + engine!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'torch' not in sys.modules, name + ' imports torch'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1]
