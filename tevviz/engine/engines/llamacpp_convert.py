"""A model folder as a GGUF file for llama.cpp, written by llama.cpp's own converter and cached by the folder's content.

The same weights in both engines: float32 by default (tevviz's models load as float32 on a CPU), so that what is left
between the engines is their arithmetic, not a rounding of the weights. The file lives at
<cache>/gguf/<content hash>-<outtype>.gguf; a second export of the same folder reads it back.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import TevvizError
from ..load.pairs import cache_root
from .gguf_runner import FALLBACK_NOTE

OUTTYPES = ("f32", "f16", "bf16", "q8_0")
# What a folder's content is, for the cache key: the weights, the config and the tokenizer (templates included).
CONTENT = ("*.safetensors", "*.bin", "config.json", "generation_config.json", "tokenizer*", "*.jinja", "*.model",
           "special_tokens_map.json", "vocab.json", "merges.txt")


@dataclass(frozen=True)
class Gguf:
    """One exported file: where it is, the folder it came from, and what the converter said worth repeating."""

    path: Path
    folder: Path
    outtype: str
    notes: tuple[str, ...] = ()
    cached: bool = False


def content_hash(folder: Path, target: Path | None = None) -> str:
    """sha256 over the names and bytes of the folder's model files (and a head's target folder, which the
    converter reads for the tokenizer and layer count)."""
    h = hashlib.sha256()
    for root in (folder, target) if target is not None else (folder,):
        files = sorted({p for pattern in CONTENT for p in root.glob(pattern) if p.is_file()})
        for p in files:
            h.update(p.name.encode() + b"\0")
            with p.open("rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
    return h.hexdigest()


def check_converter_needs() -> None:
    """The converter imports sentencepiece for every tokenizer (BPE ones too): said before it runs."""
    if importlib.util.find_spec("sentencepiece") is None:
        raise TevvizError("llama.cpp's converter needs the sentencepiece package (even for BPE tokenizers): "
                          "pip install sentencepiece")


def export_gguf(folder: str | Path, source: Path, outtype: str = "f32", target: str | Path | None = None,
                cache: Path | None = None) -> Gguf:
    """`folder` as GGUF (`target`: the target folder an EAGLE-3 head or block drafter belongs to), cached by content."""
    folder = Path(folder).expanduser().resolve()
    target_dir = Path(target).expanduser().resolve() if target is not None else None
    if outtype not in OUTTYPES:
        raise TevvizError(f"GGUF type {outtype!r}: choose one of {', '.join(OUTTYPES)}")
    if not (folder / "config.json").is_file():
        raise TevvizError(f"{folder} is not a model folder (no config.json)")
    out_dir = (cache or cache_root()) / "gguf"
    key = content_hash(folder, target_dir)[:20]
    out = out_dir / f"{key}-{outtype}.gguf"
    log = out.with_suffix(".log")
    if out.is_file():
        return Gguf(out, folder, outtype, _notes(log), cached=True)
    check_converter_needs()
    out_dir.mkdir(parents=True, exist_ok=True)
    # Files of this process's own: two processes converting one folder at once (test workers, two shells) each
    # write their own, and the last to finish replaces the first's identical file whole.
    partial = out.with_suffix(f".{os.getpid()}.partial")
    own_log = out.with_suffix(f".{os.getpid()}.log")
    cmd = [sys.executable, "-m", "tevviz.engine.engines.gguf_runner", str(source), str(folder), "--outtype", outtype,
           "--outfile", str(partial)]
    if target_dir is not None:
        cmd += ["--target-model-dir", str(target_dir)]
    print(f"converting {folder.name} to GGUF ({outtype}) with llama.cpp's converter ...", file=sys.stderr)
    try:
        with own_log.open("w", encoding="utf-8") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
        os.replace(own_log, log)
        if done.returncode != 0 or not partial.is_file():
            raise TevvizError(f"llama.cpp's converter could not convert {folder}: {converter_error(log)} "
                              f"(its output: {log})")
        os.replace(partial, out)
    finally:  # a failure or a Ctrl-C leaves no file of this process behind in the cache
        partial.unlink(missing_ok=True)
        own_log.unlink(missing_ok=True)
    return Gguf(out, folder, outtype, _notes(log))


def converter_error(log: Path) -> str:
    """The converter's own reason for stopping: the last exception line of its output."""
    lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln.split(":")[0] or ln.startswith(("raise ", "NotImplementedError"))]
    return errors[-1] if errors else (lines[-1] if lines else "no output")


def _notes(log: Path) -> tuple[str, ...]:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    return (FALLBACK_NOTE.removeprefix("tevviz: "),) if FALLBACK_NOTE in text else ()
