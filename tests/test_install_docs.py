"""The README's install commands and CI's: PyTorch's CPU wheel index where the README says so, none in CI."""

from __future__ import annotations

import re

from _cli import ROOT

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def readme_commands() -> list[str]:
    """The shell lines of the README's set-up blocks."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = text[text.index("## Set-up"): text.index("\n## ", text.index("## Set-up") + 1)]
    blocks = re.findall(r"```bash\n(.*?)```", setup, re.DOTALL)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_readme_install_is_right_on_a_plain_package_index():
    lines = readme_commands()
    torch_lines = [ln for ln in lines if re.search(r"pip install[^&]*\btorch\b", ln)]
    cpu = [ln for ln in torch_lines if "cpu" in ln.lower()]
    assert len(cpu) == 1, torch_lines
    # PyTorch's own CPU wheel index, as PyTorch documents it: a plain index would take the CUDA build.
    assert f"--index-url {CPU_INDEX}" in cpu[0] and "torch==2.13.0" in cpu[0]
    gpu = [ln for ln in torch_lines if ln not in cpu]
    assert gpu and all("torch==2.13.0" in ln and "cpu" not in ln for ln in gpu), torch_lines
    assert any('pip install -e ".[dev]"' in ln for ln in lines)
    assert any(re.search(r"(^|&& )tevviz$", ln) for ln in lines)
    tests = [ln for ln in lines if "pytest" in ln]
    assert any(ln.startswith("python3 -m pytest") and "-m" not in ln.split("pytest", 1)[1] for ln in tests)
    assert any(" -k " in ln or "tests/" in ln for ln in tests), "a quick subset of the tests"


def test_ci_keeps_the_local_cpu_build_and_no_torch_index():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # CI reaches PyPI alone; this machine's pip configuration takes a local CPU build of that version.
    assert "\npython3 -m pip install -q torch==2.13.0\n" in ci
    assert not [ln for ln in ci.splitlines() if "download.pytorch.org" in ln and not ln.lstrip().startswith("#")]
