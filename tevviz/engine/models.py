"""Loading a target/draft pair from hub ids or local folders, with the checks tree decoding needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import TevvizError
from .kv import check_gatherable, new_cache

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PACKAGE = Path(__file__).resolve().parent.parent


def assets_dir() -> Path:
    """The shipped assets: inside the installed package, or beside it in a source checkout."""
    for candidate in (_PACKAGE / "assets", _PACKAGE.parent / "assets"):
        if (candidate / "models").is_dir():
            return candidate
    return _PACKAGE.parent / "assets"


def embedded_pair_paths() -> tuple[Path, Path]:
    """Folders of the shipped stdlib target and draft."""
    models = assets_dir() / "models"
    return models / "tevviz-stdlib-target", models / "tevviz-stdlib-draft"


def shipped_drafters() -> dict[str, Path]:
    """The shipped drafters of the embedded target, by name (the original and the exit-trained one)."""
    models = assets_dir() / "models"
    names = ("tevviz-stdlib-draft", "tevviz-stdlib-draft-exittrain")
    return {n: models / n for n in names if (models / n / "config.json").is_file()}


@dataclass
class ModelPair:
    """A target and a draft that share one tokenizer."""

    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    target_name: str
    draft_name: str

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def context_length(self) -> int:
        """Positions both models accept."""
        lengths = [getattr(m.config.get_text_config(), "max_position_embeddings", None) for m in (self.target, self.draft)]
        return min((n for n in lengths if n), default=1 << 31)


def check_source(name: str, role: str) -> None:
    """Refuse a local path that does not exist, or a folder without a config or weights."""
    p = Path(name).expanduser()
    looks_local = name.startswith((".", "/", "~")) or p.exists() or name.count("/") > 1
    if looks_local and not p.exists():
        raise TevvizError(f"{role} model path {name!r} does not exist")
    if p.is_dir():
        if not (p / "config.json").exists():
            raise TevvizError(f"{role} model folder {name!r} has no config.json; is it a Hugging Face model folder?")
        if not any(p.glob("*.safetensors")) and not any(p.glob("*.bin")):
            raise TevvizError(f"{role} model folder {name!r} has no weights (*.safetensors or *.bin)")


def load_model(name: str, role: str, dtype: str = "auto", device: str | None = None, device_map=None,
               attn_implementation: str = "sdpa", trust_remote_code: bool = False):
    """One causal LM, in eval mode, with clear errors for the usual mistakes."""
    from transformers import AutoConfig, AutoModelForCausalLM

    check_source(name, role)
    if dtype not in DTYPES:
        raise TevvizError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if attn_implementation not in ("sdpa", "eager"):
        raise TevvizError(f"attn_implementation must be sdpa or eager, got {attn_implementation!r}")
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise TevvizError(f"{role} model {name!r} needs remote code; pass --trust-remote-code if you trust it") from None
        raise TevvizError(f"cannot read the {role} model config {name!r}: {e}") from None
    except OSError as e:
        raise TevvizError(f"cannot load the {role} model {name!r}: {str(e).splitlines()[0]}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=DTYPES[dtype], device_map=device_map, attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
        )
    except ValueError as e:
        msg = str(e).splitlines()[0]
        if "Unrecognized configuration class" in msg:
            raise TevvizError(f"{role} model {name!r} ({type(config).__name__}) is not a causal language model") from None
        raise TevvizError(f"cannot load the {role} model {name!r}: {msg}") from None
    except OSError as e:
        raise TevvizError(f"cannot load the {role} model {name!r}: {str(e).splitlines()[0]}") from None
    if device is not None and device_map is None:
        try:
            model = model.to(device)
        except (RuntimeError, AssertionError) as e:
            raise TevvizError(f"cannot move the {role} model to device {device!r}: {str(e).splitlines()[0]}") from None
    return model.eval().requires_grad_(False)


def check_vocabularies(tok_target, tok_draft, target_name: str, draft_name: str) -> None:
    """Refuse a pair whose tokenizers map tokens to different ids (vocabulary or special tokens)."""
    vt, vd = tok_target.get_vocab(), tok_draft.get_vocab()
    if vt != vd:
        only_t = len(set(vt.items()) - set(vd.items()))
        only_d = len(set(vd.items()) - set(vt.items()))
        raise TevvizError(
            f"draft {draft_name!r} and target {target_name!r} have different vocabularies "
            f"({only_t} entries only in the target's, {only_d} only in the draft's); the draft's tokens must be the target's"
        )
    st, sd = tok_target.special_tokens_map, tok_draft.special_tokens_map
    for key in ("bos_token", "eos_token"):
        if st.get(key) != sd.get(key):
            raise TevvizError(f"draft and target disagree on {key}: {sd.get(key)!r} vs {st.get(key)!r}")


def check_cache(model, role: str) -> None:
    """Run one token through `model` and refuse it if its cache cannot be gathered along a tree path."""
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=model.device), cache=cache, use_cache=True)
    try:
        check_gatherable(cache)
    except TevvizError as e:
        raise TevvizError(f"{role} model: {e}") from None


def load_pair(target: str | None = None, draft: str | None = None, dtype: str = "auto", device: str | None = None,
              device_map=None, attn_implementation: str = "sdpa", trust_remote_code: bool = False) -> ModelPair:
    """Load a target and a draft (the embedded stdlib pair when both are None) and check they fit together."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if (target is None) != (draft is None):
        raise TevvizError("give both --target and --draft, or neither for the embedded pair")
    if target is None:
        t_path, d_path = embedded_pair_paths()
        if not t_path.exists():
            raise TevvizError(f"the embedded model pair is missing from {t_path.parent}; reinstall tevviz")
        target, draft = str(t_path), str(d_path)
    kw = {"dtype": dtype, "device": device, "device_map": device_map, "attn_implementation": attn_implementation,
          "trust_remote_code": trust_remote_code}
    for name, role in ((target, "target"), (draft, "draft")):
        check_source(name, role)
    try:
        tok_t = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
        tok_d = AutoTokenizer.from_pretrained(draft, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise TevvizError(f"cannot load the tokenizers: {str(e).splitlines()[0]}") from None
    check_vocabularies(tok_t, tok_d, target, draft)
    t_model = load_model(target, "target", **kw)
    # A sharded target spreads itself; the small draft sits on the target's input device.
    d_kw = dict(kw, device_map=None, device=str(t_model.device)) if device_map is not None else kw
    d_model = load_model(draft, "draft", **d_kw)
    check_cache(t_model, "target")
    check_cache(d_model, "draft")
    return ModelPair(t_model, d_model, tok_t, target, draft)
