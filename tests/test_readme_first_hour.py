"""What a newcomer reads first in README.md: the set-up block says what to do when PyTorch's CPU index cannot be
reached and how to tell a CPU build from a CUDA one, and the SmolLM2 section names every drafter the pair ships."""

from __future__ import annotations

import re
from pathlib import Path

from tevviz.engine.load.pairs import named_pair

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_the_set_up_block_says_what_to_do_without_pytorchs_index():
    block = re.search(r"```bash\n(.*?)```", section("Set-up"), re.DOTALL).group(1)
    lines = block.splitlines()
    cpu = next(i for i, ln in enumerate(lines) if "download.pytorch.org/whl/cpu" in ln)
    plain = next(i for i, ln in enumerate(lines) if ln.strip() == "pip install torch==2.13.0")
    after = "\n".join(lines[plain + 1:])
    assert cpu < plain and "cannot be reached" in after and "plain line" in after
    assert 'python -c "import torch; print(torch.version.cuda)"' in after and "None" in after


def test_the_smollm2_section_names_every_drafter_the_pair_ships():
    text = section("A real pretrained pair: SmolLM2-135M-Instruct")
    shipped = named_pair("smollm2").drafters
    assert "tevviz-smollm2-eagle3-head" in shipped
    assert [d for d in shipped if f"`{d}`" not in text and f"/{d}`" not in text] == []
