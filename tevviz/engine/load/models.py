"""Loading a target/draft pair from hub ids, local folders or .gguf files, with the checks tree decoding needs."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..core.kv import check_gatherable, new_cache
from ..draft.drafters import folder_defaults, folder_kind
from ..errors import TevvizError
from .pairs import DEFAULT_PAIR, NamedPair, assets_dir, named_pair

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def embedded_pair_paths() -> tuple[Path, Path]:
    """Folders of the shipped stdlib target and draft."""
    pair = named_pair(DEFAULT_PAIR)
    return pair.target_path(), assets_dir() / "models" / pair.drafters[0]


def shipped_drafters(target: str | None = None) -> dict[str, Path]:
    """The shipped drafters of `target`'s named pair (the embedded pair's by default), by folder name."""
    from .pairs import pair_of_target

    pair = pair_of_target(target)
    return pair.drafter_paths() if pair is not None else {}


def resolve_device(device: str | None) -> str | None:
    """`auto` picks cuda, then mps, then cpu; anything else is passed through (None: where the model loads)."""
    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


@dataclass
class ModelPair:
    """A target and a draft that share one tokenizer."""

    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    target_name: str
    draft_name: str
    # What drafting calls: the draft itself, or its torch.compile'd twin (--compile-draft). Training and saving
    # always use `draft`.
    draft_call: torch.nn.Module | None = field(default=None, repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def drafting(self) -> torch.nn.Module:
        """The module the tree builder runs."""
        return self.draft if self.draft_call is None else self.draft_call

    @property
    def draft_kind(self) -> str:
        """The name of the drafter's kind (drafters.drafter_kinds())."""
        from ..draft.drafters import drafter_kind_of

        return drafter_kind_of(self.draft).name

    @property
    def context_length(self) -> int:
        """Positions both models accept."""
        lengths = [getattr(m.config.get_text_config(), "max_position_embeddings", None)
                   for m in (self.target, self.draft)]
        return min((n for n in lengths if n), default=1 << 31)


GGUF_MAGIC = b"GGUF"


def check_source(name: str, role: str, revision: str | None = None) -> None:
    """Refuse a local path that does not exist, a folder without a config or weights, or a file that is not GGUF."""
    p = Path(name).expanduser()
    looks_local = name.startswith((".", "/", "~")) or p.exists() or name.count("/") > 1 or name.endswith(".gguf")
    if looks_local and not p.exists():
        raise TevvizError(f"{role} model path {name!r} does not exist")
    if not p.exists():
        check_hub_id(name, role, revision)
    if p.is_file():
        with p.open("rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise TevvizError(f"{role} model file {name!r} is not a GGUF file; "
                                  "give a .gguf file or an HF model folder")
    elif p.is_dir():
        if not (p / "config.json").exists():
            raise TevvizError(f"{role} model folder {name!r} has no config.json; is it a Hugging Face model folder?")
        if not any(p.glob("*.safetensors")) and not any(p.glob("*.bin")):
            raise TevvizError(f"{role} model folder {name!r} has no weights (*.safetensors or *.bin)")


def hf_location(name: str, revision: str | None = None) -> tuple[str, dict]:
    """What `from_pretrained` takes for `name`: a .gguf file becomes its folder plus `gguf_file`; a hub id, when the
    hub cannot be reached, is read from the local cache alone (no retries)."""
    p = Path(name).expanduser()
    if p.is_file():
        return str(p.parent), {"gguf_file": p.name}
    if p.exists():
        return name, {}
    kw = {"revision": revision} if revision else {}
    return name, kw | ({"local_files_only": True} if hub_unreachable() else {})


HUB_TIMEOUT_S = 3.0  # a connection to the hub's endpoint takes less than this, or the hub counts as unreachable
HUB_RECHECK_S = 30.0  # how long one probe's answer stands
_HUB_PROBE: dict[str, tuple[float, str | None]] = {}  # endpoint -> (when probed, why unreachable or None)


def hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached now (HF_HUB_OFFLINE set, no route or name resolution within
    HUB_TIMEOUT_S), or None. One TCP connection, not huggingface_hub's retries (about 50 s without a network)."""
    import socket
    import time
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # through a proxy: only huggingface_hub knows the way
    endpoint = constants.ENDPOINT
    when, why = _HUB_PROBE.get(endpoint, (-math.inf, None))
    if time.monotonic() - when < HUB_RECHECK_S:
        return why
    url = urlparse(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 HUB_TIMEOUT_S).close()
        why = None
    except OSError as e:
        why = f"{endpoint} cannot be reached ({e.strerror or e})"
    _HUB_PROBE[endpoint] = (time.monotonic(), why)
    return why


def check_hub_id(name: str, role: str, revision: str | None = None) -> None:
    """Refuse at once a hub id that can be neither downloaded (the hub unreachable) nor read from the local cache."""
    why = hub_unreachable()
    if why is None:
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str):
        raise TevvizError(f"{role} model {name!r} is a hub id, but {why} and it is not in the local Hugging Face "
                          "cache: connect to the network, or give a local folder or .gguf file")


def load_tokenizer(name: str, role: str, trust_remote_code: bool = False, revision: str | None = None):
    """The tokenizer of a model folder, hub id or .gguf file."""
    from transformers import AutoTokenizer

    where, kw = hf_location(name, revision)
    try:
        return AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code, **kw)
    except (OSError, ValueError) as e:
        raise TevvizError(f"cannot load the {role} tokenizer {name!r}: {str(e).splitlines()[0]}") from None


def load_model(name: str, role: str, dtype: str = "auto", device: str | None = None, device_map=None,
               attn_implementation: str = "sdpa", trust_remote_code: bool = False, revision: str | None = None):
    """One causal LM, in eval mode, with clear errors for the usual mistakes."""
    from transformers import AutoConfig, AutoModelForCausalLM

    check_source(name, role, revision)
    if dtype not in DTYPES:
        raise TevvizError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if attn_implementation not in ("sdpa", "eager"):
        raise TevvizError(f"attn_implementation must be sdpa or eager, got {attn_implementation!r}")
    device = resolve_device(device)
    where, kw = hf_location(name, revision)
    try:
        config = AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code, **kw)
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise TevvizError(f"{role} model {name!r} needs remote code; "
                              "pass --trust-remote-code if you trust it") from None
        raise TevvizError(f"cannot read the {role} model config {name!r}: {e}") from None
    except (OSError, ImportError) as e:
        raise TevvizError(f"cannot load the {role} model {name!r}: {str(e).splitlines()[0]}") from None
    # A GGUF file is dequantised to float32 whatever "auto" would say; half precision is asked for explicitly.
    torch_dtype = torch.float32 if "gguf_file" in kw and dtype == "auto" else DTYPES[dtype]
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, dtype=torch_dtype, device_map=device_map, attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code, **kw,
        )
    except ValueError as e:
        msg = str(e).splitlines()[0]
        if "Unrecognized configuration class" in msg:
            raise TevvizError(f"{role} model {name!r} ({type(config).__name__}) "
                              "is not a causal language model") from None
        raise TevvizError(f"cannot load the {role} model {name!r}: {msg}") from None
    except (OSError, ImportError) as e:
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
            f"({only_t} entries only in the target's, {only_d} only in the draft's); "
            "the draft's tokens must be the target's"
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


@dataclass(frozen=True)
class ModelSource:
    """Where a pair comes from and how to load it: the one value the CLI, the app and the benchmarks pass on."""

    target: str | None = None  # hub id, HF folder or .gguf file; None: the named pair's target
    draft: str | None = None  # likewise; None: the named pair's default drafter
    pair: str | None = None  # a named pair (stdlib, smollm2); None: stdlib unless target and draft are given
    dtype: str = "auto"
    device: str | None = "auto"  # auto: cuda, then mps, then cpu
    device_map: str | None = None  # "auto" spreads the target over GPUs (accelerate)
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    revision: str | None = None  # for hub ids
    compile_draft: bool = False  # draft forwards through torch.compile (about a minute of compiling first)
    layer_ids: tuple[int, ...] | None = None  # --layer-ids: the target states the drafter reads (hidden_states indices)

    def resolved(self) -> tuple[str, str]:
        """The target and draft to load, with the named pair filled in."""
        if self.pair is not None or self.target is None:
            target, draft = named_pair(self.pair or DEFAULT_PAIR).paths()
            return self.target or str(target), self.draft or str(draft)
        if self.draft is None:
            raise TevvizError("give both --target and --draft "
                              "(or --pair NAME, whose target a --draft alone goes beside)")
        return self.target, self.draft

    @property
    def named(self) -> NamedPair | None:
        """The named pair whose target this source loads, or None for the user's own target."""
        return named_pair(self.pair or DEFAULT_PAIR) if self.target is None else None

    def load_kwargs(self) -> dict:
        return {"dtype": self.dtype, "device": self.device, "device_map": self.device_map,
                "attn_implementation": self.attn_implementation, "trust_remote_code": self.trust_remote_code,
                "revision": self.revision}

    def load(self) -> ModelPair:
        """Load and check the pair."""
        target, draft = self.resolved()
        pair = load_pair(target, draft, **self.load_kwargs())
        if self.layer_ids is not None:
            from ..draft.drafters import override_reading

            override_reading(pair, self.layer_ids)
        return compiled_draft(pair) if self.compile_draft else pair


def load_pair(target: str | None = None, draft: str | None = None, dtype: str = "auto", device: str | None = None,
              device_map=None, attn_implementation: str = "sdpa", trust_remote_code: bool = False,
              revision: str | None = None) -> ModelPair:
    """Load a target and a draft (the embedded stdlib pair when both are None) and check they fit together."""
    if (target is None) != (draft is None):
        raise TevvizError("give both --target and --draft, or neither for the embedded pair")
    if target is None:
        t_path, d_path = named_pair(DEFAULT_PAIR).paths()
        target, draft = str(t_path), str(d_path)
    kw = {"dtype": dtype, "device": resolve_device(device), "device_map": device_map,
          "attn_implementation": attn_implementation, "trust_remote_code": trust_remote_code, "revision": revision}
    for name, role in ((target, "target"), (draft, "draft")):
        check_source(name, role, revision)
    if revision and all(Path(n).expanduser().exists() for n in (target, draft)):
        # from_pretrained ignores a revision for a local folder or file: a wrong one would pass unnoticed.
        raise TevvizError(f"--revision {revision!r} picks a branch, tag or commit of a hub id, but the target "
                          f"{target!r} and the draft {draft!r} are local: check that revision out there, or leave "
                          "--revision out")
    tok_t = load_tokenizer(target, "target", trust_remote_code, revision)
    check_draft_tokenizer(tok_t, draft, target, trust_remote_code, revision)
    # The drafter's own checks against the target's config first (a block drafter's fields): a bad one loads nothing.
    folder_kind(draft).check_folder(draft, lambda: target_config(target, trust_remote_code, revision))
    t_model = load_model(target, "target", **kw)
    # A sharded target spreads itself; the small draft sits on the target's input device.
    d_kw = dict(kw, device_map=None, device=str(t_model.device)) if device_map is not None else kw
    check_cache(t_model, "target")
    d_model = load_draft(draft, t_model, d_kw)
    return ModelPair(t_model, d_model, tok_t, target, draft)


def drafter_defaults(draft: str) -> tuple[str, int | None]:
    """The builder a draft path's trees take by default, and its natural depth (None: the builders' default), read
    from the folder's config alone, before anything loads (the drafter kind's own)."""
    return folder_defaults(draft)


def target_config(name: str, trust_remote_code: bool = False, revision: str | None = None):
    """The config of a target model path or hub id (no weights loaded)."""
    from transformers import AutoConfig

    where, kw = hf_location(name, revision)
    try:
        return AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code, **kw)
    except (OSError, ValueError, ImportError) as e:
        raise TevvizError(f"cannot read the target model config {name!r}: {str(e).splitlines()[0]}") from None


def check_draft_tokenizer(tok_target, draft: str, target_name: str, trust_remote_code: bool = False,
                          revision: str | None = None) -> None:
    """Refuse a draft whose tokenizer disagrees with the target's; a drafter that reads the target's tokens (a block
    drafter) may carry no tokenizer at all."""
    p = Path(draft).expanduser()
    if p.is_dir() and not folder_kind(draft).own_tokenizer(p):
        return
    tok = load_tokenizer(draft, "draft", trust_remote_code, revision)
    check_vocabularies(tok_target, tok, target_name, draft)


def load_draft(draft: str, target, kw: dict):
    """The draft model at `draft` beside a loaded `target`, loaded by its drafter kind."""
    return folder_kind(draft).load(draft, target, kw)


def compiled_draft(pair: ModelPair) -> ModelPair:
    """`pair` whose tree builder runs the draft through torch.compile (dynamic shapes: widths and cache lengths vary).

    Only the draft: the target's logits, which every exactness guarantee rests on, stay those of the eager model.
    """
    return replace(pair, draft_call=torch.compile(pair.draft, dynamic=True))


def with_draft(base: ModelPair, draft: str, source: ModelSource | None = None) -> ModelPair:
    """`base`'s target and tokenizer beside the draft model at `draft`, checked as `load_pair` checks a pair."""
    kw = (source or ModelSource()).load_kwargs()
    kw.update(device=str(base.device), device_map=None)
    check_source(draft, "draft", kw["revision"])
    check_draft_tokenizer(base.tokenizer, draft, base.target_name, kw["trust_remote_code"], kw["revision"])
    model = load_draft(draft, base.target, kw)
    pair = ModelPair(base.target, model, base.tokenizer, base.target_name, draft)
    return compiled_draft(pair) if base.draft_call is not None else pair
