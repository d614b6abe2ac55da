"""`tevviz engine run llama.cpp`'s work: export the models, start the servers, run every prompt in both engines
(interleaved prompt by prompt: llama.cpp with and without the drafter, then tevviz with and without), compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..engine.engines.llamacpp_compare import acceptance, clustered_diffs, first_part, verdict
from ..engine.engines.llamacpp_run import Speed, speedup
from ..engine.errors import TevvizError

WARM_TOKENS = 8  # a short first request on each side, untimed: first-call costs are not decoding speed


def _status(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _tokenizer_cause(server, tokenizer, ids: list[int]) -> str:
    """Whether llama.cpp's own tokenizer reads the templated prompt text back to tevviz's ids."""
    text = tokenizer.decode(ids)
    try:
        theirs = server.tokenize(text)
    except TevvizError as e:  # a server of the user's own without /tokenize
        return f"tokenizer: not checked ({e})"
    if list(theirs) == list(ids):
        return ("tokenizer: llama.cpp's tokenizer gives the same ids for the templated prompt text (both engines read "
                "the same ids here in any case: they are sent as ids)")
    at = next((i for i, (a, b) in enumerate(zip(theirs, ids)) if a != b), min(len(theirs), len(ids)))
    return (f"tokenizer: llama.cpp's tokenizer splits the templated prompt text differently from token {at} "
            f"({len(theirs)} ids against {len(ids)}): the runs here send ids, but a client sending text would give "
            "llama.cpp another prompt")


def _reading_cause(pair, server_log: str) -> str:
    """Which target states each engine's drafter reads: tevviz's reading and the layers llama.cpp's log names."""
    import re

    from ..engine.draft.drafters import reading_of

    reading = reading_of(pair)
    if reading is None:
        return "layer reading: none (an autoregressive drafter reads no target states)"
    found = re.search(r"extract_layers = \[([\d, ]+)\]", server_log)
    theirs = f"the inputs of layers [{found.group(1)}]" if found else "layers its log does not name"
    return (f"layer reading: tevviz's drafter reads hidden_states {list(reading.layer_ids)} ({reading.why}); "
            f"llama.cpp's reads {theirs}, which are hidden_states of the same indices")


def _static_causes(args, pair, gguf_notes: list[str], tok_cause: str, reading: str) -> list[str]:
    dtype = str(pair.target.dtype).removeprefix("torch.")
    causes = [("template: the same prompt ids in both engines (tevviz's encoding, through the chat template for "
               "chat prompts, sent to llama-server as ids)"),
              tok_cause,
              (f"precision: llama.cpp's GGUF weights are {args.gguf_type}, tevviz's {dtype}; each engine's own float "
               "arithmetic (ggml's kernels against torch's) can still order near ties differently"),
              reading]
    return causes + [f"conversion: {n}" for n in dict.fromkeys(gguf_notes)]


def run_both(args, source, server_bin: Path, llama_source: Path, rows: list[dict], out: Path, threads: int,
             kind: str, spec_type: str) -> dict:
    """Both engines on every prompt; the comparison as one JSON-ready dict."""
    from dataclasses import replace

    from ..engine.draft.drafters import folder_kind
    from ..engine.engines.llamacpp_causes import part_cause
    from ..engine.engines.llamacpp_convert import export_gguf
    from ..engine.engines.llamacpp_run import chain_config, llama_prompt, prompt_seed, tevviz_plain, tevviz_prompt
    from ..engine.engines.llamacpp_server import LlamaServer, ServerSpec
    from ..engine.scan.doctor import encode_rows
    from .common import Interrupt, UntilStopped, settle_threads

    target, draft = source.resolved()
    t_gguf = export_gguf(target, llama_source, args.gguf_type)
    # a causal LM converts alone; a head or block drafter beside its target (the converter reads its tokenizer and
    # layer count)
    alone = folder_kind(draft).causal_lm
    d_gguf = export_gguf(draft, llama_source, args.gguf_type, target=None if alone else target)
    _status(f"GGUF: {t_gguf.path.name} (target), {d_gguf.path.name} (draft){' (cached)' if d_gguf.cached else ''}")
    pair = source.load()
    # Both engines run on the count tevviz decodes fastest on here (or --threads): the same threads on both sides.
    threads = settle_threads(pair, args.threads).threads
    ids = encode_rows(pair.tokenizer, rows)
    cfg = chain_config(args.depth, args.temperature, args.max_new_tokens, args.seed, args.ignore_eos)
    with_draft = ServerSpec(server_bin, t_gguf.path, d_gguf.path, spec_type, args.depth, threads)
    plain = ServerSpec(server_bin, t_gguf.path, threads=threads)
    runs: dict[str, list] = {"llama.cpp": [], "tevviz": []}
    speeds = {k: Speed() for k in ("llama.cpp draft", "llama.cpp plain", "tevviz draft", "tevviz plain")}
    responses = []
    with LlamaServer(with_draft, out / "llama-server-draft.log") as sd, Interrupt("prompt") as stop:
        sp = LlamaServer(plain, out / "llama-server-plain.log") if not args.no_speed else None
        try:
            if sp is not None:
                sp.start()
            tok_cause = _tokenizer_cause(sd, pair.tokenizer, ids[0])
            reading = _reading_cause(pair, sd.log_since(0))
            for s in (sd, sp):  # warm-up, untimed
                if s is not None:
                    s.complete(ids[0], WARM_TOKENS, args.temperature, args.seed)
            tevviz_prompt(pair, "warm-up", ids[0], chain_config(args.depth, args.temperature, WARM_TOKENS))
            todo = UntilStopped(list(zip(rows, ids)), stop)
            for n, (row, p_ids) in enumerate(todo, 1):
                name = str(row["id"])
                seed = prompt_seed(args.seed, name)
                _status(f"prompt {n} of {len(todo)}: {name}")
                lt, resp, _ = llama_prompt(sd, name, p_ids, args.max_new_tokens, args.temperature, seed,
                                           args.ignore_eos)
                runs["llama.cpp"].append(lt.run)
                speeds["llama.cpp draft"] = speeds["llama.cpp draft"].add(lt.tokens, lt.seconds)
                responses.append({"prompt": name, "draft": resp})
                if sp is not None:
                    pt, presp, _ = llama_prompt(sp, name, p_ids, args.max_new_tokens, args.temperature, seed,
                                                args.ignore_eos)
                    speeds["llama.cpp plain"] = speeds["llama.cpp plain"].add(pt.tokens, pt.seconds)
                    responses[-1]["plain"] = presp
                p_cfg = replace(cfg, seed=seed)
                tt = tevviz_prompt(pair, name, p_ids, p_cfg)
                runs["tevviz"].append(tt.run)
                speeds["tevviz draft"] = speeds["tevviz draft"].add(tt.tokens, tt.seconds)
                if sp is not None:
                    speeds["tevviz plain"] = speeds["tevviz plain"].add(*tevviz_plain(pair, p_ids, p_cfg))
            (out / "metrics-draft.txt").write_text(sd.metrics(), encoding="utf-8")
        finally:
            if sp is not None:
                sp.stop()
    (out / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses), encoding="utf-8")
    llama = acceptance("llama.cpp", runs["llama.cpp"], args.depth)
    tev = acceptance("tevviz", runs["tevviz"], args.depth)
    greedy = args.temperature == 0
    from ..engine.decode.session import stop_ids

    ends = frozenset(stop_ids(pair))
    parts = [p for a, b in zip(runs["llama.cpp"], runs["tevviz"]) if (p := first_part(a, b, ends))] if greedy else []
    causes = _static_causes(args, pair, list(t_gguf.notes + d_gguf.notes), tok_cause, reading)
    by_id = {str(r["id"]): i for i, r in enumerate(rows)}
    # the first parts explained, first; the rest are listed in `parts`
    explained = [part_cause(pair, ids[by_id[p.prompt]], runs["llama.cpp"][by_id[p.prompt]],
                            runs["tevviz"][by_id[p.prompt]], p)
                 for p in parts[:3]]
    causes = explained + causes
    # SEs over prompts: a prompt's rounds share its text (and at T > 0 each engine samples its own)
    judged = verdict(llama, tev, parts, greedy, tuple(causes),
                     clustered_diffs(runs["llama.cpp"], runs["tevviz"], args.depth))
    return {
        "llama.cpp": llama.to_dict(), "tevviz": tev.to_dict(),
        "per_prompt": [{"prompt": a.prompt, "llama.cpp": a_acc.acceptance_length, "tevviz": b_acc.acceptance_length,
                        "llama.cpp_steps": [s[0] for s in a.steps], "tevviz_steps": [s[0] for s in b.steps],
                        "same_tokens": a.tokens == b.tokens, "llama.cpp_tokens": list(a.tokens),
                        "tevviz_tokens": list(b.tokens)}
                       for a, b, a_acc, b_acc in zip(runs["llama.cpp"], runs["tevviz"], llama.prompts, tev.prompts)],
        "parts": [p.to_dict() for p in parts], "verdict": judged.to_dict(),
        "speed": _speed(speeds, threads, args.no_speed),
        "settings": {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens, "depth": args.depth,
                     "spec_type": spec_type, "threads": threads, "gguf_type": args.gguf_type,
                     "target": str(target), "draft": str(draft), "target_gguf": str(t_gguf.path),
                     "draft_gguf": str(d_gguf.path), "ignore_eos": args.ignore_eos, "interrupted": stop.requested,
                     "prompts_run": len(runs["tevviz"])},
    }


def _speed(speeds: dict[str, Speed], threads: int, skipped: bool) -> dict:
    def one(engine: str) -> dict:
        d, p = speeds[f"{engine} draft"], speeds[f"{engine} plain"]
        return {"draft_tokens_per_s": d.tokens_per_s, "plain_tokens_per_s": None if skipped else p.tokens_per_s,
                "speedup": None if skipped else speedup(d, p), "tokens": d.tokens, "plain_tokens": p.tokens}

    return {"threads": threads, "llama.cpp": one("llama.cpp"), "tevviz": one("tevviz")}
