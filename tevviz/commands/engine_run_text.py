"""The text `tevviz engine run llama.cpp` prints, from its result dict (the same dict --json prints)."""

from __future__ import annotations


def _f(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def depth_table(a: dict, b: dict) -> list[str]:
    """Both engines' marginal and conditional acceptance by depth, side by side (engines.tables), with what they
    mean."""
    from ..engine.engines.tables import engines_depth_table
    from ..render.table import text

    return text(engines_depth_table(a, b))


def _length(d: dict) -> str:
    x = d["acceptance_length"]
    return "-" if x is None else f"{x:.3f}"


def speed_lines(speed: dict, accepted: dict) -> list[str]:
    """Each engine's tokens/s with and without the drafter, and the ratio; where no drafted token was accepted, that
    drafting did not pay (or did not run) instead of a ratio."""
    lines = [f"speed (tokens/s, the same prompts, threads {speed['threads']}):"]
    for engine in ("llama.cpp", "tevviz"):
        s = speed[engine]
        line = (f"  {engine:9}  with the drafter {_f(s['draft_tokens_per_s'], 1)}, "
                f"plain {_f(s['plain_tokens_per_s'], 1)}")
        if not accepted[engine]:
            line += ": no drafted token was accepted, so drafting did not pay (or did not run); no speed-up"
        elif s["speedup"] is not None:
            line += f": {s['speedup']:.2f}x"
        lines.append(line)
    return lines


def run_text(result: dict) -> str:
    """The comparison as a person reads it."""
    a, b, st = result["llama.cpp"], result["tevviz"], result["settings"]
    lines = [(f"llama.cpp ({st.get('llama_version') or st.get('llama_server')}, {st['spec_type']}) beside tevviz "
              f"(chain + TEV): {st['prompts']}, T = {st['temperature']:g}, up to {st['max_new_tokens']} new tokens, "
              f"chains up to {st['depth']}, threads {st['threads']}"),
             "",
             *depth_table(a, b),
             (f"acceptance length (1 + accepted / steps): llama.cpp {_length(a)} over {a['steps']} steps, tevviz "
              f"{_length(b)} over {b['steps']} steps"),
             "",
             "per prompt (acceptance length; 'same' where both engines wrote the same tokens):"]
    for row in result["per_prompt"]:
        lines.append(f"  {row['prompt']:>12}  llama.cpp {_f(row['llama.cpp'], 2)}  tevviz {_f(row['tevviz'], 2)}"
                     f"{'  same' if row['same_tokens'] else '  differ'}")
    for p in result["parts"]:
        lines.append(f"  part: prompt {p['prompt']} round {p['round']} (from token {p['position']}): {p['what']} "
                     f"differ, llama.cpp accepted {p['accepted']['llama.cpp']} -> {p['tokens']['llama.cpp']}, "
                     f"tevviz {p['accepted']['tevviz']} -> {p['tokens']['tevviz']}")
    lines += ["", *speed_lines(result["speed"], {"llama.cpp": a["accepted"], "tevviz": b["accepted"]}), "",
              "verdict: " + result["verdict"]["text"], "likely causes, and what was the same:"]
    lines += [f"  - {c}" for c in result["verdict"]["causes"]]
    if st.get("interrupted"):
        lines.append(f"interrupted: {st['prompts_run']} prompts run")
    return "\n".join(lines)
