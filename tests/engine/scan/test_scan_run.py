"""`tevviz scan` on the embedded stdlib pair: resume after a real kill, shards merged, the aggregates and a compare by
hand, bad input, the HTML report; subprocesses run `python -m tevviz scan`."""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tevviz.cli import main as tevviz_main
from tevviz.commands import cmd_report
from tevviz.engine.load.models import assets_dir
from tevviz.engine.scan.scan_files import (
    MANIFEST,
    RECORDS,
    complete_end,
    done_ids,
    open_scan,
    read_manifest,
    write_manifest,
)

IDS = ("fn00", "fn05", "cls01", "doc02", "loop03", "err04")  # in the file's order
ARGS = ["--max-new-tokens", "12", "--temperature", "1", "--seed", "3", "--device", "cpu", "--threads", "1"]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    """Six held-out prompts of five categories."""
    rows = [json.loads(line) for line in (assets_dir() / "scan_prompts" / "stdlib.jsonl").read_text().splitlines()]
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["id"] in IDS))
    return path


@pytest.fixture(scope="module")
def full(prompts, tmp_path_factory) -> tuple[Path, dict]:
    """One uninterrupted scan and its --json summary."""
    folder = tmp_path_factory.mktemp("full") / "scan"
    out = run_main([str(prompts), "-o", str(folder), *ARGS, "--json"])
    return folder, out


def main(argv: list[str]) -> int:
    """`tevviz scan ARGV` in this process, with the command line's exit statuses."""
    return tevviz_main(["scan", *argv])


def run_main(argv: list[str]) -> dict:
    """The scan command in this process; its JSON output."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def records(folder: Path) -> dict[str, list]:
    """Each prompt's lines without what timing changes (stage times, seconds)."""
    out: dict[str, list] = {}
    for line in (folder / RECORDS).read_text().splitlines():
        d = json.loads(line)
        if d["type"] == "round":
            d["round"]["graph"].pop("stage_ms")
            out.setdefault(d["prompt"], []).append(d)
        else:
            d.pop("seconds")
            out.setdefault(d["id"], []).append(d)
    return out


def untimed(out: dict) -> dict:
    """A --json summary's groups without what timing changes."""
    return {k: {f: v for f, v in g.items() if f not in ("seconds", "tokens_per_s")}
            for k, g in out["summary"]["groups"].items()}


def spawn(argv: list[str]) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tevviz", "scan", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen, folder: Path, count: int, timeout: float = 60.0) -> None:
    """Poll until `count` prompts are finished in `folder` (the process still running)."""
    end = time.monotonic() + timeout
    while len(done_ids(folder)) < count:
        assert proc.poll() is None, f"the scan ended early: {proc.communicate()}"
        assert time.monotonic() < end, "the scan did not get that far in time"
        time.sleep(0.02)


def test_resume_after_a_kill_gives_the_uninterrupted_records(prompts, full, tmp_path, capsys):
    folder = tmp_path / "scan"
    proc = spawn([str(prompts), "-o", str(folder), *ARGS])
    wait_for(proc, folder, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    kept = len(done_ids(folder))
    assert 2 <= kept < len(IDS)
    # What the killed run finished, byte for byte (its timings included): a resume that decoded any of it again
    # would write other timings, so every later state of the file must begin with these bytes.
    finished = (folder / RECORDS).read_bytes()[:complete_end(folder / RECORDS)]
    assert finished.count(b'{"type":"prompt"') == kept
    # The resumed scan is stopped in turn by a launcher's SIGTERM (here from a thread of this process, once one more
    # prompt is in): it says how to go on and returns 130.
    fired = []
    timer = threading.Thread(target=terminate_after, args=(folder, kept + 1, fired), daemon=True)
    previous = signal.signal(signal.SIGTERM, lambda *a: fired.append("late"))  # a safety net for a late signal
    try:
        timer.start()
        assert main([str(prompts), "-o", str(folder), *ARGS, "--resume"]) == 130
    finally:
        timer.join()
        signal.signal(signal.SIGTERM, previous)
    assert fired == ["sent"] and "interrupted" in capsys.readouterr().err
    assert kept < len(done_ids(folder)) < len(IDS)
    assert (folder / RECORDS).read_bytes().startswith(finished), "the resume decoded a finished prompt again"
    finished = (folder / RECORDS).read_bytes()[:complete_end(folder / RECORDS)]
    summary = run_main([str(prompts), "-o", str(folder), *ARGS, "--resume", "--json"])
    text = (folder / RECORDS).read_bytes()
    assert text.startswith(finished), "the second resume decoded a finished prompt again"
    assert text.count(b'{"type":"prompt"') == len(IDS)
    assert records(folder) == records(full[0])
    assert list(records(folder)) == list(IDS)  # each prompt once, in the file's order
    assert untimed(summary) == untimed(full[1])


def terminate_after(folder: Path, count: int, fired: list) -> None:
    end = time.monotonic() + 60
    while len(done_ids(folder)) < count and time.monotonic() < end:
        time.sleep(0.01)
    fired.append("sent")
    os.kill(os.getpid(), signal.SIGTERM)


def test_shards_merged_equal_one_unsharded_scan(prompts, full, tmp_path):
    shards = [tmp_path / f"shard{i}" for i in range(3)]
    for i, folder in enumerate(shards):
        run_main([str(prompts), "-o", str(folder), *ARGS, "--shard", f"{i}/3", "--json"])
        assert read_manifest(folder)["shard"] == {"index": i, "count": 3}
    merged = tmp_path / "merged"
    out = run_main(["merge", *map(str, shards), "-o", str(merged), "--json"])
    assert records(merged) == records(full[0])
    assert read_manifest(merged)["shard"] is None and untimed(out) == untimed(full[1])
    # A shard scanned with another seed, or another draft, does not belong: the merge is refused and writes nothing.
    for key, change in (("settings", {"seed": 4}), ("models", None)):
        odd = tmp_path / f"odd-{key}"
        shutil.copytree(shards[1], odd)
        m = read_manifest(odd)
        if change:
            m[key] |= change
        else:
            m["models"]["draft"]["fingerprint"] = "0" * 24
        write_manifest(odd, m)
        target = tmp_path / f"refused-{key}"
        assert main(["merge", str(shards[0]), str(odd), str(shards[2]), "-o", str(target)]) == 2
        assert not target.exists() and not list(tmp_path.glob(".refused*"))
    assert main(["merge", str(shards[0]), str(shards[0]), "-o", str(tmp_path / "twice")]) == 2


def test_aggregates_equal_a_hand_computation_on_a_small_scan(full):
    folder, out = full
    lines = [json.loads(line) for line in (folder / RECORDS).read_text().splitlines()]
    rounds, prompt_lines = {}, [d for d in lines if d["type"] == "prompt"]
    for d in lines:
        if d["type"] == "round":
            rounds.setdefault(d["prompt"], []).append(d["round"])
    groups = out["summary"]["groups"]
    for cat in ["all", *dict.fromkeys(p["category"] for p in prompt_lines)]:
        ids = [p["id"] for p in prompt_lines if cat in ("all", p["category"])]
        tau = [statistics.mean(len(r["graph"]["accepted"]) for r in rounds[i]) for i in ids]
        ceiling = [statistics.mean(1 + sum(n["P"] for n in r["nodes"][1:]) for r in rounds[i]) for i in ids]
        g = groups[cat]
        assert g["prompts"] == len(ids) and g["rounds"] == sum(len(rounds[i]) for i in ids)
        assert g["tau"]["mean"] == pytest.approx(statistics.mean(tau))
        assert g["expected_length"]["mean"] == pytest.approx(statistics.mean(ceiling))
        if len(ids) > 1:
            assert g["expected_length"]["se"] == pytest.approx(statistics.stdev(ceiling) / math.sqrt(len(ids)))
        # Acceptance by depth, pooled: rounds whose exit node is at d or deeper, among all rounds (marginal) and among
        # those at d - 1 or deeper (conditional).
        trees = [r for i in ids for r in rounds[i]]
        reached = lambda d, trees=trees: [r for r in trees if len(r["graph"]["accepted"]) - 1 >= d]
        for d in (1, 2):
            assert g["acceptance_marginal"][d - 1] == pytest.approx(len(reached(d)) / len(trees))
            assert g["acceptance_conditional"][d - 1] == pytest.approx(len(reached(d)) / len(reached(d - 1)))
        tokens = sum(len(p["token_ids"]) for p in prompt_lines if p["id"] in ids)
        assert g["tokens_per_s"] == pytest.approx(tokens / sum(p["seconds"] for p in prompt_lines if p["id"] in ids))


def test_bad_prompt_lines_stop_before_decoding_or_are_skipped(prompts, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    good = prompts.read_text().splitlines()
    bad.write_text(good[0] + "\n" + '{"prompt": 3}\n' + good[1] + "\n")
    folder = tmp_path / "scan"
    assert main([str(bad), "-o", str(folder), *ARGS]) == 2
    assert "bad.jsonl:2: needs a non-empty string field 'prompt'" in capsys.readouterr().err
    assert not folder.exists()
    out = run_main([str(bad), "-o", str(folder), *ARGS, "--skip-bad", "--json", "--max-new-tokens", "4"])
    assert [p["id"] for p in out["summary"]["prompts"]] == ["fn00", "fn05"]
    assert "bad.jsonl:2" in out["manifest"]["prompts"]["skipped"][0]
    # A folder that holds a scan is not overwritten, and --resume refuses other settings.
    assert main([str(bad), "-o", str(folder), *ARGS]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main([str(bad), "-o", str(folder), *ARGS, "--skip-bad", "--resume", "--max-new-tokens", "5"]) == 2
    assert "setting max_new_tokens: 4 against 5" in capsys.readouterr().err


def test_compare_two_drafters_with_paired_standard_errors(prompts, full, tmp_path, capsys):
    other = tmp_path / "exittrain"
    draft = assets_dir() / "models" / "tevviz-stdlib-draft-exittrain"
    run_main([str(prompts), "-o", str(other), *ARGS, "--draft", str(draft), "--json"])
    out = run_main(["compare", str(full[0]), str(other), "--json"])
    assert any(n.startswith("draft model") for n in out["differences"])
    a, b = (open_scan(f).summary.prompts for f in (full[0], other))
    diffs = [pb.expected_length - pa.expected_length for pa, pb in zip(a, b)]
    d = out["groups"]["all"]["metrics"]["expected_length"]
    assert d["n"] == len(IDS) and d["mean"] == pytest.approx(statistics.mean(diffs))
    assert d["se"] == pytest.approx(statistics.stdev(diffs) / math.sqrt(len(IDS)))
    assert main(["compare", str(full[0]), str(other)]) == 0
    text = capsys.readouterr().out
    assert "B - A per category" in text and "function head" in text
    # Scans of another target are not paired.
    odd = tmp_path / "odd"
    shutil.copytree(other, odd)
    m = read_manifest(odd)
    m["models"]["target"]["fingerprint"] = "1" * 24
    write_manifest(odd, m)
    assert main(["compare", str(full[0]), str(odd)]) == 2
    assert "different targets" in capsys.readouterr().err


def test_show_and_the_html_report(full, tmp_path, capsys):
    folder = full[0]
    assert main(["show", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "acceptance by depth" in text and "rounds that lost most" in text and "loop" in text
    out = tmp_path / "scan.html"
    args = argparse.Namespace(file=str(folder), out=str(out), title=None)
    assert cmd_report(args) == 0
    page = out.read_text()
    for needle in ('id="categories"', 'id="worst"', 'id="tree"', "error handling"):
        assert needle in page
    # The page's packed data, as its script reads it: a div per figure, and the worst rounds' trees.
    blob = re.search(r'id="report-data">([^<]+)<', page).group(1)
    data = json.loads(gzip.decompress(base64.b64decode(blob)))
    assert all(f'id="{key}"' in page for key in data["figures"]) and len(data["figures"]) == 4
    worst = open_scan(folder).summary.worst
    assert [t["caption"].split(",")[0] for t in data["trees"]] == [f"prompt {w.prompt} ({w.category})" for w in worst]
    assert set(data["trees"][0]) >= {"fixed", "template", "nodes", "values", "layout"} and data["metrics"]
    assert (folder / MANIFEST).is_file()


def test_a_speculative_scan_with_optimal_trees_has_no_gap_for_its_chains(tmp_path, capsys):
    """`--builder sampled --verifier speculative --optimal`: a sampled chain's optimal tree bounds nothing, so its
    rounds carry no drafter gap; the scan's statistics and its worst rounds are made without them (it ended in a
    TypeError summing their None gaps)."""
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "import os\n"}) + "\n")
    out = run_main([str(path), "-o", str(tmp_path / "scan"), "--builder", "sampled", "--verifier", "speculative",
                    "--temperature", "1", "--optimal", "--max-new-tokens", "12", "--seed", "0", "--threads", "1",
                    "--device", "cpu", "--json"])
    rounds = [json.loads(x)["round"] for x in (tmp_path / "scan" / RECORDS).read_text().splitlines()
              if json.loads(x)["type"] == "round"]
    chains = [r for r in rounds if len(r["nodes"]) > 1]
    assert chains and all(r["graph"].get("optimal") for r in chains), "test setup: drafted rounds with optimal trees"
    group = out["summary"]["groups"]["all"]
    assert group["optimal_ceiling"]["mean"] is not None and group["gap"]["n"] <= len(rounds) - len(chains)
    worst = out["summary"]["worst_rounds"]
    assert worst and all(isinstance(w["lost"], float) for w in worst)
    assert all(w["C_p_star"] is None for w in worst if w["size"] > 1), "a chain ranked by a drafter gap"
