"""Run llama.cpp's own `convert_hf_to_gguf.py` (llamacpp_convert.py calls this in a child process).

    python -m tevviz.engine.engines.gguf_runner LLAMA_CPP_SOURCE [converter arguments ...]

One addition to the converter, for tokenizers it does not list: it names a BPE pre-tokenizer by the hash of one
string's token ids, known only for published models. A tokenizer of our own (the embedded stdlib pair's) has no
entry, and the converter stops. Where the tokenizer's pre-tokenizer is the plain byte-level one with GPT-2's regex
(its tokenizer.json says so), the file is written with llama.cpp's "gpt-2" pre-tokenizer, which is that regex; any
other unknown pre-tokenizer still stops the converter. Everything else is the converter's own code, unchanged.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

FALLBACK_NOTE = "tevviz: the converter does not list this tokenizer; its byte-level GPT-2 pre-tokenizer is 'gpt-2'"


def gpt2_byte_level(model_dir: Path) -> bool:
    """Whether tokenizer.json's pre-tokenizer is the byte-level one with GPT-2's regex and nothing else."""
    try:
        spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    pre = spec.get("pre_tokenizer") or {}
    return (pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and spec.get("normalizer") is None
            and (spec.get("model") or {}).get("type") == "BPE")


def main(argv: list[str]) -> None:
    source = Path(argv[0])
    sys.path[:0] = [str(source / "gguf-py"), str(source)]
    from conversion import base  # llama.cpp's converter package, from `source`

    own = base.TextModel.get_vocab_base_pre

    def vocab_base_pre(self, tokenizer) -> str:
        try:
            return own(self, tokenizer)
        except NotImplementedError:
            if not gpt2_byte_level(Path(self.dir_model)):
                raise
            print(FALLBACK_NOTE, file=sys.stderr)
            return "gpt-2"

    base.TextModel.get_vocab_base_pre = vocab_base_pre
    sys.argv = [str(source / "convert_hf_to_gguf.py"), *argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
