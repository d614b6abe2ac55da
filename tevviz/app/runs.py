"""Runs: every decoding session the app makes or opens, named by its settings, kept on the server (RunStore) so
that a change of settings, an import, a reload or a link loses nothing; and a run continued where the models allow."""

from __future__ import annotations

import math
from dataclasses import MISSING, fields, replace

from ..engine import BuilderConfig, DecodeConfig, TevvizError, encode_prompt
from ..engine.analysis.speed import PassCosts
from ..engine.core.scoring import check_ids
from ..engine.records import io as tio
from .state import AppState, block_text, decode_settings, view_options

BUILDER_DEFAULTS = {f.name: f.default for f in fields(BuilderConfig) if f.default is not MISSING}
# The settings widgets a reopened run's recorded settings fill in, by their names in `meta`.
SETTING_FIELDS = {"temperature": ("sampling", "temperature"), "top_k": ("sampling", "top_k"),
                  "top_p": ("sampling", "top_p"), "builder": ("builder", "name"), "budget": ("builder", "budget"),
                  "depth": ("builder", "depth"), "children": ("builder", "children"), "width": ("builder", "width"),
                  "auto_budget": ("builder", "auto"), "verifier": ("verifier",), "seed": ("seed",),
                  "max_new_tokens": ("max_new_tokens",), "chat": ("chat",), "stop_below": ("builder", "stop_below")}


def settings_values(meta: dict) -> dict:
    """Widget name -> value of the settings a run recorded (those it has; a builder setting its file predates, the
    builder's default)."""
    meta, out = tio.current_settings(meta), {}
    builder = meta.get("builder")
    for name, path in SETTING_FIELDS.items():
        value = meta
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None and path[0] == "builder" and isinstance(builder, dict):
            # A setting the run's file predates (a stop before chains had one): the run had none, the default.
            value = BUILDER_DEFAULTS.get(path[1])
        if value is not None:
            out[name] = value
    branching = builder.get("branching") if isinstance(builder, dict) else None
    if isinstance(branching, list):
        out["branching"] = ",".join(map(str, branching))
    return out


def config_values(cfg: DecodeConfig) -> dict:
    """Widget name -> value of the settings `cfg` describes, as `settings_values` reads them from a run."""
    values = {}
    for name, path in SETTING_FIELDS.items():
        value = cfg
        for key in path:
            value = getattr(value, key)
        values[name] = value
    values["branching"] = ",".join(map(str, cfg.builder.branching))
    return values


def differing(meta: dict, cfg: DecodeConfig) -> list[str]:
    """The settings a run recorded that `cfg` changes ("temperature 0 → 1"); max new tokens may grow, so it is left
    out (a continuation stops there)."""
    recorded, now = settings_values(meta), config_values(cfg)
    out = []
    for name, old in recorded.items():
        new = now.get(name)
        same = (math.isclose(float(old), float(new), rel_tol=1e-9, abs_tol=1e-12)
                if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool)
                else old == new)
        if not same and name != "max_new_tokens":
            out.append(f"{name} {old} \u2192 {new}")
    return out


def run_name(st: AppState) -> str:
    """The run in a line: its prompt's start, drafter, builder, B, H, T, verifier and seed (from the live config, or
    from the file's settings)."""
    meta = st.meta or {}
    if st.cfg is not None:
        c = st.cfg
        t, kind, budget, depth, auto, stop = (c.sampling.temperature, c.builder.name, c.builder.budget,
                                              c.builder.depth, c.builder.auto, c.builder.stop_below)
        verifier, seed = c.verifier, c.seed
    else:
        s, b = meta.get("sampling") or {}, meta.get("builder") or {}
        t, kind, budget, depth, auto, stop = (s.get("temperature"), b.get("name"), b.get("budget"), b.get("depth"),
                                              b.get("auto"), b.get("stop_below"))
        verifier, seed = meta.get("verifier"), meta.get("seed")
    start = " ".join(st.prompt.split())[:24]
    if kind is None and verifier is None:
        return f"“{start}” · a {st.origin} file, {len(st.rounds)} rounds"
    draft = str(meta.get("draft") or "?").rstrip("/").split("/")[-1]
    size = f"B auto≤{budget}" if auto else f"B {budget}"
    if kind == "sampled" and isinstance(stop, (int, float)) and stop > 0:
        size = f"stop<{stop:g}"  # a stopped chain: no budget, H its longest
    temperature = f"T {t:g}" if isinstance(t, (int, float)) else "T ?"
    return f"“{start}” · {draft} · {kind} {size} H {depth} · {temperature} · {verifier} · seed {seed}"


def session_of(st: AppState) -> dict:
    """A run as the session JSON kept for it (its name in `meta.run_name`, read back by the run picker), and beside
    the session what the app showed of it: the baseline timed for it (`view`, read back by RunStore.load)."""
    meta = {"run_name": run_name(st), **{k: v for k, v in (st.meta or {}).items() if k != "run_name"}}
    out = tio.session_dict(meta, st.prompt, st.prompt_ids, st.generated, st.text, st.rounds)
    return {**out, "view": {"baseline": baseline_json(st.baseline)}} if st.baseline else out


def baseline_json(base: dict) -> dict:
    """A timed baseline (Controller.baseline's entry) as plain JSON: its settings as the widgets hold them."""
    costs = base.get("costs")
    return {**{k: v for k, v in base.items() if k not in ("cfg", "costs")}, "settings": config_values(base["cfg"]),
            "costs": None if costs is None else {"target_ms": costs.target_ms, "draft_ms": costs.draft_ms}}


def baseline_of(saved) -> dict | None:
    """A baseline kept by `baseline_json`, as Controller.baseline made it; None where it is missing or will not
    read (the speed panel then has none, as before it was timed)."""
    if not isinstance(saved, dict):
        return None
    try:
        _, cfg = decode_settings(saved["prompt"], **saved["settings"])
        costs = saved.get("costs")
        if costs is not None:
            costs = PassCosts(*({int(k): float(v) for k, v in costs[p].items()} for p in ("target_ms", "draft_ms")))
        base = {k: saved[k] for k in ("tokens", "seconds", "tokens_per_s", "way", "ways", "prompt")}
        if isinstance(saved.get("decode_threads"), int):  # a file from before it was kept has none
            base["decode_threads"] = saved["decode_threads"]
    except (TevvizError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if not isinstance(base["tokens_per_s"], (int, float)):
        return None
    return {**base, "cfg": cfg, "costs": costs}


def reopened(st: AppState, imported: tio.ImportedSession, run_id: str, history: int, said: str,
             origin: str | None = None) -> AppState:
    """A kept run (`origin` "run") or an imported file (its own kind) as the state shown: its rounds, the newest
    `history` of them."""
    dropped = max(len(imported.rounds) - history, 0)
    return AppState(sid=st.sid, **view_options(st), run_id=run_id,
                    origin=origin or imported.kind, prompt=imported.prompt, prompt_ids=list(imported.prompt_token_ids),
                    generated=list(imported.token_ids), text=imported.text, rounds=list(imported.rounds[dropped:]),
                    meta=dict(imported.meta), seconds=sum(sum(r.stage_ms.values()) for r in imported.rounds) / 1e3,
                    view=0, notice=said, dropped=dropped,
                    dropped_text="".join(block_text(r) for r in imported.rounds[:dropped]),
                    baseline=baseline_of(getattr(imported, "view", {}).get("baseline")))


def continuation(st: AppState, pair, prompt: str, cfg: DecodeConfig) -> tuple[list[int], str]:
    """The token stream a Step continues `st` from, or TevvizError saying why it cannot (then Step starts a new run
    from the prompt): the prompt box must still hold the run's prompt and the settings boxes its settings (one run
    never mixes two), the loaded tokenizer read it as the run did, and every recorded token lie in the loaded
    target's vocabulary."""
    if st.origin in ("round", "ddtree"):
        raise TevvizError(f"a {st.origin} file holds no token stream to continue from")
    if not st.prompt_ids or not st.rounds:
        raise TevvizError("the run records no prompt tokens")
    if prompt != st.prompt:
        raise TevvizError("the prompt box no longer holds the run's prompt")
    if encode_prompt(pair.tokenizer, prompt, chat=cfg.chat) != list(st.prompt_ids):
        raise TevvizError("the loaded tokenizer (with the chat box as it is) reads the prompt as other tokens than "
                          "the run recorded")
    changed = differing(st.meta or {}, cfg)
    if changed:
        raise TevvizError("the settings boxes differ from the run's own (" + ", ".join(changed) + "); put them back "
                          "(reopening the run fills them in) to continue it")
    stream = list(st.prompt_ids) + list(st.generated)
    check_ids(pair, stream)
    if len(st.generated) >= cfg.max_new_tokens:
        raise TevvizError(f"the run has its {len(st.generated)} tokens already; raise max new tokens to go on")
    return stream, ""


def remaining(cfg: DecodeConfig, generated: int) -> DecodeConfig:
    """The settings of a continuation: the same, with the tokens left to the limit."""
    return replace(cfg, max_new_tokens=max(cfg.max_new_tokens - generated, 1))
