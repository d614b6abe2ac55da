"""What a scan costs over decoding the same prompts in a loop, as `tevviz decode` does after loading the models.

Both arms decode the same held-out prompts with the same settings and seeds (the scan's seed plus the prompt's
position). The loop: encode, DecodeSession, run, summarise and decode the text, per prompt (`tevviz decode`'s work
after loading; a shell loop of `tevviz decode` would add a process start and a model load per prompt). The scan:
its fixed start (prompt planning, the manifest with the models' fingerprints), then per prompt `decode_prompt` and
the fsynced append of its block, as `run_scan` does. Per prompt the two arms run back to back in alternating order,
so that a shared machine's load falls on both alike. The scan's writing is also timed apart (serialising the records,
appending with fsync). With --memory N, a scan of N short prompts samples resident memory as it goes (flat, if all
is well).
"""

from __future__ import annotations

import datetime
import gc
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from common import table, write

from tevviz.engine.analysis.summary import summarize
from tevviz.engine.core.sampling import SamplingConfig
from tevviz.engine.decode.session import DecodeConfig, DecodeSession, encode_prompt
from tevviz.engine.load.models import ModelSource, assets_dir
from tevviz.engine.scan.prompt_files import ScanPrompt, read_prompts
from tevviz.engine.scan.scan_files import (
    RecordWriter,
    block_bytes,
    open_scan,
    read_prompt,
    write_manifest,
)
from tevviz.engine.scan.scan_run import decode_prompt, plan_prompts, run_scan, scan_manifest

DATE = "2026-12-03"


def decode_one(pair, p: ScanPrompt, cfg: DecodeConfig, chat: bool) -> None:
    """One prompt as `tevviz decode` does it once its models are loaded: encode, decode, summarise, the text."""
    s = DecodeSession(pair, encode_prompt(pair.tokenizer, p.text, chat=chat), replace(cfg, seed=cfg.seed + p.position,
                                                                                      chat=chat))
    s.run()
    summarize(s.rounds)
    pair.tokenizer.decode(s.generated)


def scan_setup(pair, prompts: list[ScanPrompt], cfg: DecodeConfig, chat: bool, folder: Path):
    """A scan's fixed work before its first prompt (planning, the manifest with the models' fingerprints)."""
    planned, _ = plan_prompts(pair, prompts, chat)
    folder.mkdir(parents=True)
    write_manifest(folder, scan_manifest(pair, cfg, chat, Path("prompts"), "-", len(prompts), len(planned), None, []))
    return planned


def paired_run(pair, prompts: list[ScanPrompt], cfg: DecodeConfig, chat: bool, folder: Path, rep: int) -> dict:
    """One repeat: per prompt, the loop's work and the scan's (its decode and its fsynced append) back to back, in
    alternating order, so that the load of a shared machine falls on both alike."""
    t0 = time.perf_counter()
    planned = scan_setup(pair, prompts, cfg, chat, folder)
    fixed = time.perf_counter() - t0
    loop, scanned = [], []
    with RecordWriter(folder) as writer:
        for k, (p, item) in enumerate(zip(prompts, planned)):
            for arm in ((0, 1) if (k + rep) % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                if arm == 0:
                    decode_one(pair, p, cfg, chat)
                else:
                    writer.append(decode_prompt(pair, item, cfg)[0])
                (loop if arm == 0 else scanned).append(time.perf_counter() - t0)
    return {"repeat": rep, "loop_s": sum(loop), "scan_s": fixed + sum(scanned), "fixed_s": fixed,
            "overhead": (fixed + sum(scanned)) / sum(loop) - 1, "per_prompt": list(zip(loop, scanned))}


def writing_cost(folder: Path) -> dict:
    """Seconds the scan's records cost to serialise and to append with fsync, measured again on its own records."""
    data = open_scan(folder)
    blocks = [read_prompt(data, pid) for pid in data.index]
    t0 = time.perf_counter()
    raw = [block_bytes(b.line, [r.to_dict() for r in b.rounds]) for b in blocks]
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, RecordWriter(Path(tmp)) as w:
        for chunk in raw:
            w.append(chunk)
    t2 = time.perf_counter()
    return {"serialise_s": t1 - t0, "append_fsync_s": t2 - t1, "bytes": sum(map(len, raw)),
            "rounds": sum(len(b.rounds) for b in blocks)}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def memory_scan(pair, prompts: list[ScanPrompt], n: int, cfg: DecodeConfig, chat: bool, root: Path) -> list[dict]:
    """Scan n short prompts (the set cycled, ids made unique) and sample resident memory every n / 10 prompts."""
    many = [ScanPrompt(f"{p.id}-{k}", p.text, p.category, k, k + 1) for k, p in
            ((k, prompts[k % len(prompts)]) for k in range(n))]
    planned, _ = plan_prompts(pair, many, chat)
    samples, every = [], max(n // 10, 1)

    def sample(step) -> None:
        if step.done % every == 0:
            gc.collect()
            samples.append({"prompts": step.done, "rss_mb": round(rss_mb(), 1)})

    (root / "memory").mkdir()
    run_scan(pair, planned, cfg, root / "memory", progress=sample)
    return samples


def main() -> None:
    from common import parser

    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--optimal", action="store_true", help="both arms compute every round's optimal tree")
    ap.add_argument("--memory", type=int, default=0, help="also scan this many short prompts, sampling memory")
    ap.set_defaults(limit=12)
    args = ap.parse_args()
    torch.set_num_threads(args.threads or 1)
    name = args.pair or "stdlib"
    pair = ModelSource(target=args.target, draft=args.draft, pair=args.pair, dtype=args.dtype,
                       device=args.device).load()
    prompts = read_prompts(args.prompts or assets_dir() / "scan_prompts" / f"{name}.jsonl")[0]
    # Every k-th prompt, so that a short run still spans the categories.
    prompts = [prompts[round(i * len(prompts) / args.limit)] for i in range(min(args.limit, len(prompts)))]
    chat = bool(prompts[0].chat)
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=args.temperature), max_new_tokens=args.max_new_tokens,
                       optimal=args.optimal)
    rows, cost = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for p in prompts[:2]:  # warm-up
            decode_one(pair, p, cfg, chat)
        for rep in range(args.repeats):
            rows.append(paired_run(pair, prompts, cfg, chat, Path(tmp) / f"scan{rep}", rep))
            cost = writing_cost(Path(tmp) / f"scan{rep}")
        memory = memory_scan(pair, prompts, args.memory, DecodeConfig(max_new_tokens=2), chat, Path(tmp)) \
            if args.memory else []
    # Over every (prompt, repeat) pair: the scan's extra seconds, as a share of the loop's mean, with its SE.
    extra = [b - a for r in rows for a, b in r["per_prompt"]]
    mean_loop = statistics.mean(a for r in rows for a, _ in r["per_prompt"])
    paired = (statistics.mean(extra) / mean_loop, statistics.stdev(extra) / len(extra) ** 0.5 / mean_loop)
    overhead = statistics.median(r["overhead"] for r in rows)
    loop = statistics.median(r["loop_s"] for r in rows)
    print(f"{len(prompts)} {name} prompts, {cfg.max_new_tokens} new tokens, T = {args.temperature:g}, "
          f"optimal {'on' if args.optimal else 'off'}, {torch.get_num_threads()} thread(s)")
    print(table(rows, ["repeat", "loop_s", "scan_s", "overhead"]))
    print(f"median overhead {overhead:+.2%}; per prompt, paired: {paired[0]:+.2%} ± {paired[1]:.2%}; "
          f"writing the records: serialise {cost['serialise_s'] * 1e3:.0f} ms, "
          f"append + fsync {cost['append_fsync_s'] * 1e3:.0f} ms for {cost['rounds']} rounds, "
          f"{cost['bytes'] / 1e6:.1f} MB "
          f"({(cost['serialise_s'] + cost['append_fsync_s']) / loop:.2%} of the loop's time)")
    if memory:
        print(table(memory, ["prompts", "rss_mb"]))
    tag = "_optimal" if args.optimal else ""
    args.out = args.out or str(Path(__file__).parent / "results" / f"scan_overhead_{name}{tag}_{DATE}.json")
    write("scan_overhead", args, {"question": "a scan's wall time over a loop of tevviz decode's work on the same "
                                              "prompts (goal: <= 5%)", "date": DATE, "prompts": [p.id for p in prompts],
                                  "rows": rows, "median_overhead": overhead,
                                  "paired_overhead": {"mean": paired[0], "se": paired[1], "pairs": len(extra)},
                                  "writing": cost, "memory": memory,
                                  "run_at": datetime.datetime.now().isoformat(timespec="seconds")})


if __name__ == "__main__":
    main()
