"""Loading and writing EAGLE-3 heads (docs/eagle3.md): a folder's config in any dialect and its tensors, checked
against the target before anything loads; written back in any dialect."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from ..errors import TevvizError
from .block_model import read_config, target_shape
from .eagle3_config import (
    IDS_KEY,
    SPECFORGE,
    VLLM,
    HeadConfig,
    dialect_config,
    layer_reading,
    looks_like_head,
    parse_head_config,
)
from .eagle3_model import Eagle3Head, LayerReading

WEIGHTS = "model.safetensors"
IGNORED = ("verifier_",)  # tensors some exports carry for the verifier (its norm or head), not the head's


def is_head_folder(folder: Path) -> bool:
    """Whether a local folder's config describes an EAGLE-style head (read from the config alone)."""
    return looks_like_head(read_config(folder))


def _where(path) -> str:
    return f"EAGLE-3 head {str(path)!r}"


def _ids_field(cfg: HeadConfig) -> str:
    return f"eagle_config.{IDS_KEY}" if cfg.dialect == SPECFORGE else IDS_KEY


def check_target(cfg: HeadConfig, target, where: str) -> LayerReading:
    """Refuse a head whose vocabulary, width or layer ids do not fit `target` (a model or its config); the
    reading of the target it takes."""
    n_layers, hidden, vocab = target_shape(target)
    if cfg.vocab_size != vocab:
        raise TevvizError(f"{where}: vocab_size {cfg.vocab_size} does not match the target's head ({vocab} rows)")
    if cfg.target_hidden_size is None and cfg.hidden_size != hidden:
        raise TevvizError(f"{where}: hidden_size {cfg.hidden_size} does not match the target's {hidden}, and the "
                          "config has no target_hidden_size (the width of the target states fc reads)")
    if cfg.target_hidden_size is not None and cfg.target_hidden_size != hidden:
        raise TevvizError(f"{where}: target_hidden_size {cfg.target_hidden_size} does not match the target's "
                          f"hidden size {hidden}")
    ids, why = layer_reading(cfg, n_layers)
    field = f"{_ids_field(cfg)} {list(cfg.ids)}" if cfg.ids is not None else "EAGLE's default layers"
    bad = [i for i in ids if not 0 <= i <= n_layers]
    if bad:
        read = f", read as hidden_states {list(ids)}," if cfg.ids != ids else ""
        raise TevvizError(f"{where}: {field}{read} name {bad}, beyond the target's {n_layers} layers (hidden_states "
                          f"indices run from 0, the embedding output, to {n_layers}, the last layer's output)")
    return LayerReading(ids, why, cfg.flag("norm_before_fc"))


def check_folder(path: str, target_config) -> None:
    """The head's config checked against the target's config (a thunk) before anything loads."""
    folder = Path(path).expanduser()
    raw = read_config(folder)
    if not raw:
        raise TevvizError(f"{_where(path)} has no readable config.json")
    check_target(parse_head_config(raw, _where(path)), target_config(), _where(path))


def read_tensors(folder: Path, where: str) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's *.safetensors (or pytorch_model*.bin), under the layout's names: `layers.0.`
    read as `midlayer.`, a `model.` prefix dropped, the verifier's own tensors left out."""
    files = sorted(folder.glob("*.safetensors"))
    state: dict[str, torch.Tensor] = {}
    if files:
        from safetensors.torch import load_file

        for f in files:
            state.update(load_file(str(f)))
    else:
        files = sorted(folder.glob("pytorch_model*.bin"))
        for f in files:
            state.update(torch.load(str(f), map_location="cpu", weights_only=True))
    if not files:
        raise TevvizError(f"{where} has no weights (*.safetensors or pytorch_model.bin)")
    out = {}
    for name, tensor in state.items():
        name = name.removeprefix("model.")
        if name.startswith(IGNORED):
            continue
        out["midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name] = tensor
    return out


def check_vocab_map(d2t: torch.Tensor, t2d: torch.Tensor | None, vocab: int, where: str) -> torch.Tensor:
    """Refuse a draft vocabulary map that breaks EAGLE's invariants; the target ids of the draft ids."""
    if d2t.dtype.is_floating_point or d2t.dtype == torch.bool or d2t.dim() != 1:
        raise TevvizError(f"{where}: d2t must be a 1-D integer tensor, got {d2t.dtype} of shape {tuple(d2t.shape)}")
    ids = torch.arange(d2t.shape[0]) + d2t.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise TevvizError(f"{where}: d2t maps draft ids to target ids outside [0, {vocab}) "
                          f"(arange(draft_vocab_size) + d2t must lie in the target's vocabulary)")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        bad = int(torch.nonzero(ids[1:] <= ids[:-1])[0]) + 1
        raise TevvizError(f"{where}: d2t: arange(draft_vocab_size) + d2t must increase strictly, but draft id {bad} "
                          f"maps to {int(ids[bad])}, not above {int(ids[bad - 1])}")
    if t2d is not None:
        if t2d.dim() != 1 or t2d.shape[0] != vocab:
            raise TevvizError(f"{where}: t2d must have one entry per target token ({vocab}), got shape "
                              f"{tuple(t2d.shape)}")
        if not (t2d.dtype == torch.bool or bool(((t2d == 0) | (t2d == 1)).all())):
            raise TevvizError(f"{where}: t2d must be a boolean mask over the target's vocabulary")
        t2d = t2d.bool()
        if int(t2d.sum()) != d2t.shape[0]:
            raise TevvizError(f"{where}: t2d marks {int(t2d.sum())} target tokens but draft_vocab_size is "
                              f"{d2t.shape[0]}; t2d disagrees with d2t")
        if not bool(t2d[ids].all()):
            raise TevvizError(f"{where}: t2d disagrees with d2t: target id {int(ids[~t2d[ids]][0])} is drafted "
                              "(arange + d2t) but not marked in t2d")
    return ids


def _expected(cfg: HeadConfig, target_hidden: int, n_layers: int, reading: LayerReading, state: dict) -> Eagle3Head:
    """The head the config and the tensors present describe, built on the meta device (no memory)."""
    fc_norm = cfg.flag("fc_norm") or any(k.startswith("fc_norm.") for k in state)
    input_norm = cfg.flag("norm_before_fc") or "input_norm.weight" in state
    with torch.device("meta"):
        return Eagle3Head(cfg, target_hidden, n_layers, reading, "embed_tokens.weight" in state, fc_norm, input_norm)


def load_head(path, target) -> Eagle3Head:
    """An EAGLE-3 head folder checked against `target`, on its device and in its dtype; loads nothing on error."""
    folder, where = Path(str(path)).expanduser(), _where(path)
    raw = read_config(folder)
    if not raw:
        raise TevvizError(f"{where} has no readable config.json")
    cfg = parse_head_config(raw, where)
    reading = check_target(cfg, target, where)
    n_layers, hidden, vocab = target_shape(target)
    state = read_tensors(folder, where)
    if "embed_tokens.weight" not in state and cfg.hidden_size != hidden:
        raise TevvizError(f"{where} has no embed_tokens.weight, and its hidden_size {cfg.hidden_size} differs from "
                          f"the target's {hidden}, so the target's embedding cannot stand in")
    if "d2t" not in state and cfg.draft_vocab_size != vocab:
        raise TevvizError(f"{where} is missing weights: d2t (draft_vocab_size {cfg.draft_vocab_size} is not the "
                          f"vocabulary's {vocab}, so the draft ids need their map)")
    d2t = state.pop("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
    t2d = state.pop("t2d", None)
    if d2t.shape != (cfg.draft_vocab_size,):
        raise TevvizError(f"{where}: d2t has shape {tuple(d2t.shape)}, draft_vocab_size says ({cfg.draft_vocab_size},)")
    ids = check_vocab_map(d2t, t2d, vocab, where)
    model = _expected(cfg, hidden, n_layers, reading, state)
    shapes = {k: v.shape for k, v in model.state_dict().items() if not k.startswith("rotary.")}
    shapes.pop("d2t"), shapes.pop("t2d")
    missing, extra = sorted(set(shapes) - set(state)), sorted(set(state) - set(shapes))
    if missing:
        why = " (norm_before_fc: true)" if missing == ["input_norm.weight"] else ""
        raise TevvizError(f"{where} is missing weights: {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}"
                          f"{why}")
    if extra:
        raise TevvizError(f"{where} has weights an EAGLE-3 head does not: {', '.join(extra[:6])}")
    for k, shape in shapes.items():
        if tuple(state[k].shape) != tuple(shape):
            raise TevvizError(f"{where}: weight {k} has shape {tuple(state[k].shape)}, the config and the target say "
                              f"{tuple(shape)}")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    model = _expected(cfg, hidden, n_layers, reading, state).to_empty(device="cpu")
    model.rotary = LlamaRotaryEmbedding(model.config)  # its frequency table, computed on a real device
    model.load_state_dict(state, strict=False)
    model.d2t.copy_(d2t.long())
    model.t2d.zero_()[ids] = True
    model.identity_vocab = cfg.draft_vocab_size == vocab and not bool(d2t.any())
    # The head runs at the target's positions, as serving engines run it, whatever length it was trained at.
    tcfg = target.config.get_text_config() if hasattr(target, "config") else target.get_text_config()
    model.config.max_position_embeddings = max(model.config.max_position_embeddings or 0,
                                               getattr(tcfg, "max_position_embeddings", 0) or 0)
    if model.embed_tokens is None:
        model.use_target_embedding(target.get_input_embeddings())
    emb = target.get_input_embeddings().weight
    return model.to(device=emb.device, dtype=emb.dtype).eval().requires_grad_(False)


def save_head(model: Eagle3Head, folder, dialect: str = VLLM, dtype: torch.dtype | None = None) -> None:
    """Write `model` as a head folder in `dialect` (vLLM's by default: its layer ids are read one way only), reading
    the target states it reads now: config.json and model.safetensors (in `dtype` if given)."""
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    flags = tuple((k, model.reading.norm_before_fc if k == "norm_before_fc" else v) for k, v in model.head.flags)
    cfg = replace(model.head, flags=flags)
    raw = dialect_config(cfg, dialect, model.layer_ids, model.n_target_layers)
    state = {k: (v.to(dtype) if dtype is not None and v.dtype.is_floating_point else v).detach().contiguous().cpu()
             for k, v in model.state_dict().items() if not k.startswith("rotary.")}
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    save_file(state, str(out / WEIGHTS))
