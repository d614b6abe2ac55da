"""Which shard of a scan this process is, read from its launcher's environment (`tevviz scan --shard auto`).

torchrun and `accelerate launch` set RANK and WORLD_SIZE (and LOCAL_RANK, the process's place on its machine); a
Slurm array sets SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT; `srun` sets SLURM_PROCID and SLURM_NTASKS. The
first of these families that is set decides. No process group is opened: a scan's ranks share nothing but the
folder they write into. No torch here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import TevvizError

# (index variable, count variable, who sets them), in the order they are read.
FAMILIES = (
    ("RANK", "WORLD_SIZE", "torchrun or accelerate launch"),
    ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "a Slurm array"),
    ("SLURM_PROCID", "SLURM_NTASKS", "srun"),
)


@dataclass(frozen=True)
class LaunchRank:
    """This process's shard: `index` of `count`, the variables it was read from, LOCAL_RANK if set, and how many
    ranks share this machine (LOCAL_WORLD_SIZE, else 1)."""

    index: int
    count: int
    source: str  # "RANK/WORLD_SIZE", ...; "" when no launcher's variables are set
    local: int | None = None
    on_machine: int = 1

    def label(self) -> str:
        where = f"from {self.source}" if self.source else "no launcher's variables set"
        return f"shard {self.index} of {self.count} ({where})"


def _set(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip() != ""


def _whole(env: Mapping[str, str], name: str, least: int) -> int:
    text = env[name].strip()
    try:
        value = int(text)
    except ValueError:
        raise TevvizError(f"--shard auto: {name}={text!r} is not a whole number") from None
    if value < least:
        raise TevvizError(f"--shard auto: {name}={value} must be at least {least}")
    return value


def _array_index(env: Mapping[str, str], task: int, count: int) -> int:
    """A Slurm array's task id as a 0-based index: ids run MIN, MIN + STEP, ... (`--array=1-8` starts at 1)."""
    low = _whole(env, "SLURM_ARRAY_TASK_MIN", 0) if _set(env, "SLURM_ARRAY_TASK_MIN") else 0
    step = _whole(env, "SLURM_ARRAY_TASK_STEP", 1) if _set(env, "SLURM_ARRAY_TASK_STEP") else 1
    index, off = divmod(task - low, step)
    if task < low or off or index >= count:
        raise TevvizError(f"--shard auto: SLURM_ARRAY_TASK_ID={task} is not one of the {count} ids {low}, "
                          f"{low + step}, ... of an evenly spaced array; give --shard I/N for an array of other ids")
    # Several tasks in one array element would all take this element's shard and write the same file.
    if _set(env, "SLURM_NTASKS") and _whole(env, "SLURM_NTASKS", 1) > 1:
        raise TevvizError(f"--shard auto: array task {task} runs {env['SLURM_NTASKS'].strip()} tasks "
                          "(SLURM_NTASKS), which would scan the same shard; run one task per array element, or give "
                          "--shard I/N")
    return index


def launch_rank(env: Mapping[str, str] | None = None) -> LaunchRank:
    """This process's shard from `env` (default: os.environ); a missing partner variable or a bad value is refused
    in words. With no launcher's variables the process is shard 0 of 1: the whole scan."""
    env = os.environ if env is None else env
    local = _whole(env, "LOCAL_RANK", 0) if _set(env, "LOCAL_RANK") else None
    on_machine = _whole(env, "LOCAL_WORLD_SIZE", 1) if _set(env, "LOCAL_WORLD_SIZE") else 1
    for index_name, count_name, who in FAMILIES:
        present = [name for name in (index_name, count_name) if _set(env, name)]
        if not present:
            continue
        if len(present) == 1:
            missing = count_name if present[0] == index_name else index_name
            raise TevvizError(f"--shard auto: {present[0]} is set but {missing} is not (both come from {who})")
        count = _whole(env, count_name, 1)
        index = _whole(env, index_name, 0)
        if index_name == "SLURM_ARRAY_TASK_ID":
            index = _array_index(env, index, count)
        elif index >= count:
            raise TevvizError(f"--shard auto: {index_name}={index} must be below {count_name}={count}")
        return LaunchRank(index, count, f"{index_name}/{count_name}", local, on_machine)
    return LaunchRank(0, 1, "", local, on_machine)


def pinned_device(device: str, local: int | None, visible: int) -> str:
    """The device a rank loads on: a bare `cuda` becomes `cuda:LOCAL_RANK` (one GPU per process on a machine);
    an explicit `cuda:K`, another device, or no LOCAL_RANK leaves it as given. `visible`: CUDA devices seen."""
    if local is None or device != "cuda":
        return device
    if local >= visible:
        raise TevvizError(f"--shard auto: LOCAL_RANK={local}, but this process sees {visible} CUDA device"
                          f"{'' if visible == 1 else 's'}; start at most {visible} processes a machine, or give "
                          "--device cuda:K")
    return f"cuda:{local}"
