"""The house's rules that a change could break unseen: the renderers and the records they read import no torch (the
report, the app's figures and a scan's tables work on a machine without it)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import tevviz.render
from tevviz.engine import records

# The engine's records room (what a round and a session are, and the numbers read from them) and the few
# other torch-free modules the renderers and --help read.
TORCH_FREE_ENGINE = tuple(f"records.{m.name}" for m in pkgutil.iter_modules(records.__path__)) + (
    "errors", "load.pairs", "draft.builder_kinds", "engines.acceptance", "engines.formats")


def test_the_renderers_and_the_records_import_no_torch():
    render = [f"tevviz.render.{m.name}" for m in pkgutil.iter_modules(tevviz.render.__path__)]
    engine = [f"tevviz.engine.{m}" for m in TORCH_FREE_ENGINE]
    code = ("import importlib, sys\n"
            f"for name in {render + engine!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'torch' not in sys.modules, name + ' imports torch'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1]


def test_the_readmes_map_names_every_room_of_the_engine_and_every_module_in_it():
    from pathlib import Path

    import tevviz.engine

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    engine = Path(tevviz.engine.__file__).parent
    rooms = [p for p in sorted(engine.iterdir()) if (p / "__init__.py").is_file()]
    assert rooms and not [p.name for p in engine.glob("*.py") if p.stem not in ("__init__", "errors")]
    for room in rooms:
        entry = layout[layout.index(f"- `{room.name}/`:"):]
        entry = entry[:entry.index("\n  - `") if "\n  - `" in entry else entry.index("\n- `")]
        missing = [m.stem for m in room.glob("*.py") if m.stem != "__init__" and f"`{m.stem}`" not in entry]
        assert not missing, f"README.md's map of {room.name}/ leaves out {missing}"
