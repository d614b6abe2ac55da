"""Scan manifests compared (resume, merge, compare) and shards merged into one folder. No torch here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import TevvizError
from .scan_files import AUTO, RECORDS, ScanData, open_scan, read_manifest, write_manifest


def _fingerprints(manifest: dict) -> dict:
    models = manifest.get("models") or {}
    return {role: {k: (models.get(role) or {}).get(k) for k in ("fingerprint", "dtype", "parameters")}
            for role in ("target", "draft")}


def differences(a: dict, b: dict, models: tuple[str, ...] = ("target", "draft"), prompts: bool = True) -> list[str]:
    """What differs between two manifests in their settings, the given models' weights and the prompt file.

    Models compare by fingerprint, not name: the same weights sit at different paths on different machines.
    """
    out = []
    sa, sb = a.get("settings") or {}, b.get("settings") or {}
    for key in sorted(set(sa) | set(sb)):  # a key one manifest lacks differs, even from an explicit null
        if key not in sa or key not in sb or sa[key] != sb[key]:
            out.append(f"setting {key}: {_setting(sa, key)} against {_setting(sb, key)}")
    fa, fb = _fingerprints(a), _fingerprints(b)
    for role in models:
        if fa[role] != fb[role]:
            na, nb = ((m.get("models") or {}).get(role, {}).get("name", "?") for m in (a, b))
            out.append(f"{role} model: {na} ({fa[role]['fingerprint']}) against {nb} ({fb[role]['fingerprint']})")
    if prompts:
        pa, pb = a.get("prompts") or {}, b.get("prompts") or {}
        if pa.get("sha256") != pb.get("sha256"):
            out.append(f"prompt file: {pa.get('file')} (sha256 {str(pa.get('sha256'))[:12]}) against "
                       f"{pb.get('file')} (sha256 {str(pb.get('sha256'))[:12]})")
    return out


def _setting(settings: dict, key: str) -> str:
    return repr(settings[key]) if key in settings else "(not recorded)"


def check_resume(folder: Path, manifest: dict) -> None:
    """Refuse to resume a scan folder whose settings, models, prompt file or shard differ from this run's."""
    old = read_manifest(folder)
    problems = differences(old, manifest)
    if old.get("shard") != manifest.get("shard"):
        problems.append(f"shard: {old.get('shard')} against {manifest.get('shard')}")
    if problems:
        raise TevvizError(f"cannot resume {folder}: it was scanned otherwise ({'; '.join(problems)})")


def shard_label(m: dict) -> str:
    """How a manifest says its folder was split: unsharded, shard I/N, or one file a rank (--shard auto)."""
    s = m.get("shard")
    if s == AUTO:
        return "sharded by rank (--shard auto)"
    return "unsharded" if not s else f"shard {s['index']}/{s['count']}"


def plan_merge(folders: list[str | Path]) -> tuple[list[ScanData], list[str]]:
    """Open the shards and check that they belong together; returns them and notes on missing prompts."""
    if not folders or (len(folders) == 1 and read_manifest(folders[0]).get("shard") != AUTO):
        raise TevvizError("give at least two scan folders to merge, or the one folder of a --shard auto scan")
    scans = [open_scan(f, worst=0) for f in folders]
    first = scans[0].manifest
    for s in scans[1:]:
        problems = differences(first, s.manifest)
        if problems:
            raise TevvizError(f"{s.folder} does not belong with {scans[0].folder}: {'; '.join(problems)}")
    # A --shard auto folder holds any splits at once (its files are named by rank and count).
    counts = {s.manifest["shard"]["count"] for s in scans if isinstance(s.manifest.get("shard"), dict)}
    counts |= {None for s in scans if not s.manifest.get("shard")}
    if len(counts) > 1:
        raise TevvizError(f"the folders are shards of different splits: {sorted(map(str, counts))}")
    seen: dict[int, Path] = {}
    for s in scans:
        for e in s.index.values():
            if e.position in seen:
                raise TevvizError(f"prompt {e.id!r} (position {e.position}) is in both {seen[e.position]} and "
                                  f"{s.folder}")
            seen[e.position] = s.folder
    notes = [f"{s.folder}: {shard_label(s.manifest)}, {len(s.index)} of {s.manifest.get('scanned', '?')} prompts"
             + (f", {len(s.problems)} damaged lines left out" if s.problems else "") for s in scans]
    total = (first.get("prompts") or {}).get("count")
    if isinstance(total, int) and len(seen) < total:
        notes.append(f"the merge holds {len(seen)} of the file's {total} prompts")
    return scans, notes


def merge(folders: list[str | Path], out: str | Path) -> tuple[int, list[str]]:
    """Join shard folders into `out` in prompt-file order; refuses, writing nothing, shards that do not match.

    Each prompt's block is copied byte for byte, so the merge holds exactly what the shards recorded.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TevvizError(f"--out {str(out)!r} exists and is not an empty folder")
    scans, notes = plan_merge(folders)
    entries = sorted(((e, s) for s in scans for e in s.index.values()), key=lambda es: es[0].position)
    tmp = out.with_name(f".{out.name}.merging-{os.getpid()}")
    tmp.mkdir(parents=True)
    try:
        with open(tmp / RECORDS, "wb") as w:
            for e, s in entries:
                with open(s.folder / e.file, "rb") as f:
                    f.seek(e.start)
                    w.write(f.read(e.end - e.start))
            w.flush()
            os.fsync(w.fileno())
        manifest = dict(scans[0].manifest, shard=None, scanned=len(entries),
                        merged_from=[f"{s.folder} ({shard_label(s.manifest)})" for s in scans])
        write_manifest(tmp, manifest)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return len(entries), notes


def check_comparable(a: ScanData, b: ScanData) -> list[str]:
    """Refuse two scans of different targets; return notes on what else differs (the drafter is the point)."""
    target = differences(a.manifest, b.manifest, models=("target",), prompts=False)
    target = [p for p in target if p.startswith("target")]
    if target:
        raise TevvizError(f"the scans decode different targets: {target[0]}")
    notes = differences(a.manifest, b.manifest, models=("draft",))
    if not any(n.startswith("draft") for n in notes):
        notes.append("both scans used the same draft weights")
    return notes
