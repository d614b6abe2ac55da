"""EAGLE-3 heads' config.json in its four dialects (docs/eagle3.md): recognising one, reading it into a `HeadConfig`,
deciding which target states it reads (as `hidden_states` indices, with why), and writing each dialect back.

Dialects: EAGLE's own (`LlamaForCausalLM` plus `draft_vocab_size`), SpecForge/SGLang (`LlamaForCausalLMEagle3`, ids
in `eagle_config` as outputs of layers), vLLM (`Eagle3LlamaForCausalLM`, ids at the top level as `hidden_states`
indices) and vLLM speculators (`Eagle3Speculator`, the decoder in `transformer_layer_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TevvizError

EAGLE, SPECFORGE, VLLM, SPECULATORS = "eagle", "specforge", "vllm", "speculators"
ARCHITECTURES = {"LlamaForCausalLMEagle3": SPECFORGE, "Eagle3LlamaForCausalLM": VLLM, "Eagle3Speculator": SPECULATORS}
DIALECT_NAMES = {EAGLE: "EAGLE's own", SPECFORGE: "SpecForge/SGLang", VLLM: "vLLM", SPECULATORS: "vLLM speculators"}
IDS_KEY = "eagle_aux_hidden_state_layer_ids"
FLAGS = ("norm_before_fc", "fc_norm", "norm_before_residual", "norm_output")  # the head's optional norm variants
DECODER_KEYS = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class HeadConfig:
    """What an EAGLE-3 head's config says, checked, whatever its dialect."""

    dialect: str
    decoder: dict  # the Llama decoder settings (hidden size, heads, RoPE, vocab_size...)
    draft_vocab_size: int
    target_hidden_size: int | None  # Ht when it differs from the head's hidden size
    ids: tuple[int, ...] | None  # layer ids as written (None: the config names none)
    flags: tuple[tuple[str, bool], ...]  # FLAGS as the config sets them

    @property
    def hidden_size(self) -> int:
        return self.decoder["hidden_size"]

    @property
    def vocab_size(self) -> int:
        return self.decoder["vocab_size"]

    def flag(self, name: str) -> bool:
        return dict(self.flags)[name]


def _arch(raw: dict) -> list[str]:
    arch = raw.get("architectures") or []
    return [str(a) for a in arch] if isinstance(arch, list) else [str(arch)]


def looks_like_head(raw: dict) -> bool:
    """Whether a config.json describes an EAGLE-style head (so a bad one is refused as one, not loaded as a causal
    LM): a known dialect, any architecture naming EAGLE, or EAGLE fields; never a DFlash block drafter."""
    arch = _arch(raw)
    if "dflash_config" in raw or any("dflash" in a.lower() for a in arch):
        return False
    return (any("eagle" in a.lower() for a in arch) or "draft_vocab_size" in raw or "eagle_config" in raw
            or raw.get("speculators_model_type") == "eagle3")


def dialect_of(raw: dict, where: str) -> str:
    """The dialect of a head's config, or an error naming the architecture."""
    arch = _arch(raw)
    known = [ARCHITECTURES[a] for a in arch if a in ARCHITECTURES]
    if len(arch) == 1 and known:
        return known[0]
    if arch == ["LlamaForCausalLM"] and "draft_vocab_size" in raw:
        return EAGLE
    raise TevvizError(f"{where}: architectures {arch or '(none)'} is not an EAGLE-3 head tevviz can load; it loads "
                      f"{', '.join(ARCHITECTURES)} and LlamaForCausalLM with draft_vocab_size (EAGLE's own)")


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _ids(value, field: str, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or any(not isinstance(i, int) or isinstance(i, bool) for i in value):
        raise TevvizError(f"{where}: {field} must be a non-empty list of integers, got {value!r}")
    return tuple(value)


def _pick(raw: dict, key: str, *more: dict):
    """`key` from the top level, else from the first of `more` that has it."""
    for d in (raw, *more):
        if isinstance(d, dict) and key in d:
            return d[key]
    return None


def parse_head_config(raw: dict, where: str) -> HeadConfig:
    """Read and check a head's config.json in any dialect; a clear error names the field."""
    dialect = dialect_of(raw, where)
    decoder, spec, ids_field, ids = raw, {}, IDS_KEY, raw.get(IDS_KEY)
    if dialect == SPECULATORS:
        decoder = raw.get("transformer_layer_config")
        if not isinstance(decoder, dict):
            raise TevvizError(f"{where}: transformer_layer_config must be an object (the head's decoder settings), "
                              f"got {type(decoder).__name__}")
        spec = raw.get("speculators_config") if isinstance(raw.get("speculators_config"), dict) else {}
        ids = _pick(raw, IDS_KEY, spec)
    elif dialect == SPECFORGE:
        ecfg = raw.get("eagle_config") or {}
        if not isinstance(ecfg, dict):
            raise TevvizError(f"{where}: eagle_config must be an object, got {type(ecfg).__name__}")
        ids_field, ids = f"eagle_config.{IDS_KEY}", ecfg.get(IDS_KEY)
    for key in DECODER_KEYS:
        if not _positive_int(decoder.get(key)):
            field = key if decoder is raw else f"transformer_layer_config.{key}"
            raise TevvizError(f"{where}: config field {field} must be a positive integer, got {decoder.get(key)!r}")
    layers = decoder.get("num_hidden_layers", 1)
    if layers != 1:
        raise TevvizError(f"{where}: num_hidden_layers is {layers!r}; an EAGLE-3 head has one decoder layer "
                          "(midlayer)")
    draft_vocab = _pick(raw, "draft_vocab_size", spec)
    draft_vocab = decoder["vocab_size"] if draft_vocab is None else draft_vocab
    if not _positive_int(draft_vocab) or draft_vocab > decoder["vocab_size"]:
        raise TevvizError(f"{where}: draft_vocab_size must be an integer in [1, vocab_size = "
                          f"{decoder['vocab_size']}], got {draft_vocab!r}")
    ht = _pick(raw, "target_hidden_size", spec, decoder)
    if ht is not None and not _positive_int(ht):
        raise TevvizError(f"{where}: target_hidden_size must be a positive integer, got {ht!r}")
    flags = []
    for name in FLAGS:
        value = _pick(raw, name, spec, decoder)
        if value is not None and not isinstance(value, bool):
            raise TevvizError(f"{where}: {name} must be true or false, got {value!r}")
        flags.append((name, bool(value)))
    from .block_model import _check_attention_fields

    _check_attention_fields(dict(decoder), where)
    return HeadConfig(dialect, dict(decoder), draft_vocab, ht, _ids(ids, ids_field, where), tuple(flags))


def eagle_default(n_layers: int) -> tuple[int, ...]:
    """EAGLE's own choice, as `hidden_states` indices: [2, N // 2, N - 3] of a target of N decoder layers."""
    return 2, n_layers // 2, n_layers - 3


def layer_reading(cfg: HeadConfig, n_layers: int) -> tuple[tuple[int, ...], str]:
    """The target states the head reads, as `hidden_states` indices, and why (the dialect's convention)."""
    name = DIALECT_NAMES[cfg.dialect]
    if cfg.ids is None:
        ids = eagle_default(n_layers)
        return ids, f"{name} dialect names no layer ids: EAGLE's default [2, N // 2, N - 3] = {list(ids)}"
    if cfg.dialect == SPECFORGE:
        # SpecForge writes outputs of layers ([1, N // 2 - 1, N - 4]); heads that write inputs of layers start at
        # 2 or more. SGLang tells them apart by the first id (its PR 25454): only a leading 1 means outputs.
        if cfg.ids[0] == 1:
            ids = tuple(i + 1 for i in cfg.ids)
            return ids, (f"{name} dialect: eagle_config ids {list(cfg.ids)} start with 1, so they are outputs of "
                         f"layers (SGLang's first-id rule): hidden_states {list(ids)}")
        return cfg.ids, (f"{name} dialect: eagle_config ids {list(cfg.ids)} do not start with 1, so they are "
                         f"hidden_states indices (SGLang's first-id rule)")
    return cfg.ids, f"{name} dialect: {IDS_KEY} {list(cfg.ids)} are hidden_states indices"


def written_ids(ids: tuple[int, ...], dialect: str, n_layers: int | None) -> list[int] | None:
    """The ids a `dialect` config writes so that `layer_reading` reads `ids` (hidden_states indices) back; None
    where the dialect leaves them out (EAGLE's default), an error where it cannot say them."""
    if n_layers is not None and tuple(ids) == eagle_default(n_layers) and dialect in (EAGLE, SPECFORGE):
        return None
    if dialect == SPECFORGE:
        if ids[0] == 1:
            raise TevvizError(f"hidden_states ids {list(ids)} cannot be written in the SpecForge dialect: a leading 1 "
                              "reads as the output of layer 1 (hidden_states 2) under SGLang's first-id rule")
        return [i - 1 for i in ids] if ids[0] == 2 else list(ids)
    return list(ids)  # EAGLE's own dialect: ids other than the default go at the top level, as vLLM reads them


def dialect_config(cfg: HeadConfig, dialect: str, ids: tuple[int, ...], n_layers: int | None) -> dict:
    """config.json of the head `cfg` in `dialect`, reading the target states `ids` (hidden_states indices)."""
    decoder = {k: v for k, v in cfg.decoder.items() if k not in (IDS_KEY, "architectures", "eagle_config",
                                                                     "draft_vocab_size", "target_hidden_size", *FLAGS)}
    decoder.update(model_type="llama", num_hidden_layers=1)
    written = written_ids(tuple(ids), dialect, n_layers)
    extra = {"draft_vocab_size": cfg.draft_vocab_size} | {k: v for k, v in cfg.flags if v}
    if cfg.target_hidden_size is not None:
        extra["target_hidden_size"] = cfg.target_hidden_size
    if dialect == SPECULATORS:
        spec = {"algorithm": "eagle3", "default_proposal_method": "greedy"}
        return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "model_type": "speculators",
                **extra, IDS_KEY: written, "transformer_layer_config": decoder, "speculators_config": spec}
    if dialect == SPECFORGE:
        out = {**decoder, "architectures": ["LlamaForCausalLMEagle3"], **extra}
        return out | ({"eagle_config": {IDS_KEY: written, "use_aux_hidden_state": True}} if written else {})
    if dialect == VLLM:
        return {**decoder, "architectures": ["Eagle3LlamaForCausalLM"], **extra} | ({IDS_KEY: written} if written
                                                                                    else {})
    if dialect == EAGLE:
        return {**decoder, "architectures": ["LlamaForCausalLM"], **extra} | ({IDS_KEY: written} if written else {})
    raise TevvizError(f"unknown EAGLE-3 dialect {dialect!r}; choose one of {', '.join(DIALECT_NAMES)}")
