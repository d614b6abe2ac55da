"""The Scan tab's work apart from its widgets: scans opened and started from the app, their tables and figures as
plain values, and a scanned round turned into the AppState the Decode tab shows. No gradio here."""

from __future__ import annotations

import datetime
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..engine import DecodeConfig, TevvizError
from ..engine.load.pairs import assets_dir
from ..engine.scan.prompt_files import file_digest, read_prompts
from ..engine.scan.scan_files import (
    RECORDS,
    ScanData,
    open_scan,
    read_prompt,
    write_manifest,
)
from ..engine.scan.scan_run import ScanProgress, plan_prompts, scan_manifest, scan_steps
from ..render.scan_figures import scan_figures
from ..render.scan_tables import (
    category_rows,
    depth_rows,
    loss_rows,
    markdown_table,
    missed_rows,
    settings_line,
    worst_rows,
)
from .controller import Controller
from .model_thread import MODEL_THREAD
from .scan_root import scan_root
from .state import AppState, block_text, view_options

OPEN_CACHE = 8  # scans kept open (their summaries and where each prompt lies), by folder
WORST = 20  # rounds listed among those that lost most
_OPENED: OrderedDict[Path, tuple[tuple, ScanData]] = OrderedDict()
_LOCK = threading.Lock()



def scan_prompt_files() -> dict[str, Path]:
    """The shipped held-out prompt sets with categories (assets/scan_prompts), by name."""
    folder = assets_dir() / "scan_prompts"
    return {p.stem: p for p in sorted(folder.glob("*.jsonl"))} if folder.is_dir() else {}


def open_cached(folder: str | Path) -> ScanData:
    """An opened scan, read again only when its records changed."""
    path = Path(str(folder).strip()).expanduser()
    if not str(folder).strip():
        raise TevvizError("type the path of a scan folder (one that holds manifest.json and records.jsonl)")
    records = path / RECORDS
    stat = records.stat() if records.is_file() else None
    key = (stat.st_mtime_ns, stat.st_size) if stat else None
    with _LOCK:
        hit = _OPENED.get(path.resolve())
        if hit is not None and hit[0] == key:
            _OPENED.move_to_end(path.resolve())
            return hit[1]
    data = open_scan(path, worst=WORST)
    with _LOCK:
        _OPENED[path.resolve()] = (key, data)
        while len(_OPENED) > OPEN_CACHE:
            _OPENED.popitem(last=False)
    return data


@dataclass(frozen=True)
class ScanShown:
    """What the Scan tab shows of a scan, as plain values."""

    summary: str  # markdown: the folder, settings and the category table
    depth: str  # markdown: acceptance and the loss by depth
    missed: str  # markdown: the tokens the trees missed most
    figures: dict[str, dict]  # categories, acceptance, loss, lengths
    worst_head: list[str]
    worst_rows: list[list[str]]
    worst_keys: list[str]  # "prompt id\tround index" per row, the values of the round picker


def round_key(prompt: str, index: int) -> str:
    return f"{prompt}\t{index}"


ACCEPTANCE_NOTE = ("Acceptance by depth, conditional / marginal: of the rounds that reached d - 1, the share that "
                   "accepted at d / the share of all rounds that reached d:")


def shown(data: ScanData) -> ScanShown:
    s = data.summary
    notes = [f"*{n}*" for n in data.problems]
    if data.unfinished:
        notes.append(f"*{data.unfinished} rounds of an unfinished prompt at the end are left out.*")
    summary = "\n\n".join([f"**{data.folder}**: {len(data.index)} prompts; {settings_line(data.manifest)}",
                           markdown_table(*category_rows(s.groups)), *notes])
    depth = "\n\n".join([ACCEPTANCE_NOTE, markdown_table(*depth_rows(s.groups)),
                         "Where the mass went (mean exit mass per round by depth):",
                         markdown_table(*loss_rows(s.groups))])
    missed = ("Target tokens the trees missed most (each round's best missing child):\n\n"
              + markdown_table(*missed_rows(s, 15))) if s.missed else "No missing tokens recorded."
    head, rows = worst_rows(s, len(s.worst))
    return ScanShown(summary, depth, missed, scan_figures(s.groups), head, rows,
                     [round_key(w.prompt, w.round) for w in s.worst])


def _settings_meta(manifest: dict, line: dict) -> dict:
    """The meta of an imported session (engine.records.io.session_meta's keys) for one scanned prompt."""
    settings, models = manifest.get("settings") or {}, manifest.get("models") or {}
    return {"target": (models.get("target") or {}).get("name"), "draft": (models.get("draft") or {}).get("name"),
            "dtype": (models.get("target") or {}).get("dtype"), "device": manifest.get("device"),
            "sampling": settings.get("sampling"), "builder": settings.get("builder"),
            "verifier": settings.get("verifier"), "seed": line.get("seed"),
            "max_new_tokens": settings.get("max_new_tokens"), "chat": line.get("chat"),
            "tevviz": manifest.get("tevviz")}


def round_state(st: AppState, data: ScanData, key: str, history: int) -> AppState:
    """A scanned round as the Decode tab shows an import: its prompt's rounds with the prompt and the stream, so that
    Re-score and Optimal tree see its context; the history cap keeps a window of rounds around it."""
    key = str(key or "").strip()
    # The picker's values are "id<TAB>round"; a typed "id round" opens any round of the scan.
    prompt_id, _, index = key.partition("\t") if "\t" in key else key.rpartition(" ")
    block = read_prompt(data, prompt_id)
    where = {r.index: i for i, r in enumerate(block.rounds)}
    if not index.isdigit() or int(index) not in where:
        raise TevvizError(f"prompt {prompt_id!r} of {data.folder} has no round {index!r}")
    view = where[int(index)]
    rounds, line = block.rounds, block.line
    end = min(len(rounds), max(view + 1, history))
    start = max(0, end - history)
    generated = [t for r in rounds[:end] for t in r.committed]
    text = line.get("text", "") if end == len(rounds) else "".join(block_text(r) for r in rounds[:end])
    r = rounds[view]
    lost = next((w.lost for w in data.summary.worst if w.prompt == prompt_id and w.round == r.index), None)
    said = (f"scan {data.folder}: prompt {prompt_id} ({line.get('category', '?')}), round {r.index}"
            + (f", lost {lost:.3f}" if lost is not None else "")
            + f"; opened as a run of its own; the Decode tab's settings are the scan's "
            f"(seed {line.get('seed')} is this prompt's own in the scan), so Re-score, Optimal tree and Step use them")
    return AppState(sid=st.sid, **view_options(st), origin="scan",
                    prompt=line.get("prompt", ""), prompt_ids=list(line.get("prompt_token_ids", [])),
                    generated=generated, text=text, rounds=list(rounds[start:end]),
                    meta=_settings_meta(data.manifest, line), seconds=float(line.get("seconds", 0.0)),
                    view=view - start, notice=said, dropped=start,
                    dropped_text="".join(block_text(x) for x in rounds[:start]))


def widget_settings(st: AppState) -> dict:
    """The Decode tab's settings widgets set to a scanned round's settings, by `decode_settings` name."""
    meta = st.meta
    sampling, builder = meta.get("sampling") or {}, meta.get("builder") or {}
    return {"prompt": st.prompt, "temperature": sampling.get("temperature"), "top_k": sampling.get("top_k"),
            "top_p": sampling.get("top_p"), "seed": meta.get("seed"), "builder": builder.get("name"),
            "budget": builder.get("budget"), "depth": builder.get("depth"), "children": builder.get("children"),
            "width": builder.get("width"), "branching": ",".join(map(str, builder.get("branching") or [])),
            "verifier": meta.get("verifier"), "max_new_tokens": meta.get("max_new_tokens"),
            "chat": bool(meta.get("chat")), "auto_budget": bool(builder.get("auto")),
            "stop_below": builder.get("stop_below") or 0.0}


@dataclass
class AppScan:
    """A scan started from the app on a browser session's pair, written under the session's export folder."""

    folder: Path
    steps: Iterator[ScanProgress]
    total: int


def start_scan(ctl: Controller, sid: str, prompts_file: Path, limit: int, cfg: DecodeConfig,
               stop: threading.Event) -> AppScan:
    """Plan a scan of the first `limit` prompts (0: all) of `prompts_file` with the session's pair and `cfg`; its
    prompts are decoded one at a time on the model thread as `steps` is iterated."""
    prompts, skipped = read_prompts(prompts_file, skip_bad=True)
    prompts = prompts[:limit] if limit > 0 else prompts
    pair = MODEL_THREAD.call(ctl.session_pair, sid)
    planned, problems = plan_prompts(pair, prompts, cfg.chat, skip_bad=True, where=str(prompts_file))
    if not planned:
        raise TevvizError(f"none of the prompts of {prompts_file.name} fits these models")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    folder = scan_root() / sid / f"scan-{prompts_file.stem}-{stamp}"
    folder.mkdir(parents=True)
    manifest = MODEL_THREAD.call(scan_manifest, pair, cfg, cfg.chat, prompts_file, file_digest(prompts_file),
                                 len(prompts), len(planned), None, skipped + problems)
    write_manifest(folder, manifest)
    steps = scan_steps(pair, planned, cfg, folder, stop=stop.is_set, call=MODEL_THREAD.call)
    return AppScan(folder, steps, len(planned))
