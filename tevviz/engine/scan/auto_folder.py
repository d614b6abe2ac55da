"""The folder of a `--shard auto` scan: one manifest, one records file a rank (`records-RANK-of-COUNT.jsonl`).

Every rank of a launch, and every later launch with any number of ranks, joins the same folder: the first to come
writes the manifest (each rank writes an equal one, whole, so which lands last does not matter), the others check
theirs against it as a resume does. A rank appends only to its own file and cuts only its own file's unfinished
end; it skips every prompt finished in any file, so a restart with another count decodes nothing twice. No torch.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TevvizError
from .ranks import LaunchRank
from .scan_files import MANIFEST, SHARD_RECORDS, repair, shard_records_name, write_manifest
from .scan_merge import check_resume


def _ours(name: str) -> bool:
    """A file a rank of a --shard auto scan writes (its records, or a manifest on its way in)."""
    return SHARD_RECORDS.fullmatch(name) is not None or (name.startswith(f".{MANIFEST}-") and name.endswith(".tmp"))


def join_folder(folder: Path, manifest: dict) -> None:
    """Make the folder of a --shard auto scan, or join the one another rank or an earlier launch made; a folder of
    another scan (other settings, models, prompt file, or not sharded by rank) is refused, changing nothing."""
    if folder.exists() and not folder.is_dir():
        raise TevvizError(f"-o {str(folder)!r} is a file")
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / MANIFEST).is_file():
        strangers = sorted(p.name for p in folder.iterdir() if not _ours(p.name))
        if strangers:
            raise TevvizError(f"-o {str(folder)!r} holds {strangers[0]!r} but no {MANIFEST}: not a scan folder")
        write_manifest(folder, manifest)
    check_resume(folder, manifest)


def rank_file(folder: Path, rank: LaunchRank) -> tuple[str, int]:
    """This rank's records file, its unfinished end (a killed earlier launch's) cut off; returns its name and the
    bytes dropped."""
    name = shard_records_name(rank.index, rank.count)
    return name, repair(folder, name)


def share(planned: list, rank: LaunchRank) -> list:
    """The prompts a rank scans: those at positions `index`, `index + count`, ... of the prompt file."""
    return [p for p in planned if p.prompt.position % rank.count == rank.index]
