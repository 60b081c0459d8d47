"""The reference trainer in a job that goes on with fewer ranks (``mslaunch run --min-hosts``):
the same global batch, and the checkpoints of the ranks that are missing kept current.

No MindSpore here (the rules are plain arithmetic and files; the trainer calls them).

mslaunch gives every process the job's planned world size and the current one
(``MSLAUNCH_PLANNED_WORLD_SIZE``, ``MSLAUNCH_WORLD_SIZE``).  Data parallel, a step's global batch
is ``G = K x micro-batch x ranks``; with fewer ranks each rank takes ``G / current`` images a step
(:func:`keep_global_batch`), as the fewest micro-batches ``K'`` of one size ``B'`` that make it
exactly, with ``B'`` no larger than the user's micro-batch (its memory) and no smaller than half
of it (DeepSpeed's elastic training picks its micro-batch and accumulation the same way: the
global batch exact, the micro-batch from what fits).  Where no such ``B'`` exists (``G`` not a
multiple of the ranks left, e.g. 32 on 3 ranks, or only micro-batches below half of ``B``) the
trainer keeps ``B`` and takes the nearest whole ``K' = K x planned / current`` (halves up), the
nearest global batch the ranks left can make (3 of 4 ranks at 8: ``K' = 1``, 24 instead of 32).  It
says which in one line; the learning rate is left as it is (the global batch is the same, or the
nearest).  The steps per epoch stay the same: each rank's shard grows by ``planned / current``
and so does its batch.

Checkpoints: rank ``r`` writes ``CKPT_DIR/ckpt_<r>/``; a restart resumes from the newest step that
every rank has.  While the job is smaller, the ranks that are missing write nothing, so when
hosts come back their folders would hold only older steps and hold the whole job back to them.
So each rank also keeps the folders of the missing ranks ``r + current, r + 2 x current, ...``
(:func:`stand_in_dirs`): a hard link to the checkpoint it wrote (data parallel: the same
weights), or a copy where a link cannot be made.  This needs the checkpoint folder to be one
folder for every host (a shared file system), as resuming on a spare host already does.
"""

from __future__ import annotations

import os
import shutil
from typing import List, Mapping, Optional, Tuple

__all__ = [
    "PLANNED_VAR",
    "cache_subfolder",
    "keep_global_batch",
    "mirror_checkpoint",
    "planned_size",
    "smaller",
    "stand_in_dirs",
]

PLANNED_VAR = "MSLAUNCH_PLANNED_WORLD_SIZE"
SIZE_VAR = "MSLAUNCH_WORLD_SIZE"


def smaller(env: Mapping[str, str]) -> bool:
    """This run has fewer ranks than the job planned (known before ``init()``, from mslaunch's
    variables): the trainer's graphs differ from the planned run's (another ``K``), so MindSpore's
    compile cache, which finds a graph by its position, is not used."""
    try:
        return int(env.get(SIZE_VAR, "")) < int(env.get(PLANNED_VAR, ""))
    except ValueError:
        return False


def cache_subfolder(env: Mapping[str, str]) -> Optional[str]:
    """The compile cache's folder for a run with fewer ranks than planned, ``world-N-of-P`` (None at
    the planned size): its graphs are other graphs, the same in every attempt of that size (the
    same arguments give the same ``K`` and micro-batch), so each size keeps its own."""
    if not smaller(env):
        return None
    return f"world-{int(env[SIZE_VAR])}-of-{int(env[PLANNED_VAR])}"


def planned_size(env: Mapping[str, str], size: int) -> int:
    """The job's planned world size (``MSLAUNCH_PLANNED_WORLD_SIZE``), never below ``size``;
    ``size`` when the variable is unset or not a positive number."""
    try:
        planned = int(env.get(PLANNED_VAR, ""))
    except ValueError:
        return size
    return max(planned, size)


def keep_global_batch(k: int, micro_batch: int, size: int, planned: int) -> Tuple[int, int, Optional[str]]:
    """``(K for this run, the micro-batch for this run, the one line that says so or None)`` (see
    the module doc).

    Args:
        k: ``--grad-accum`` as given (micro-batches per optimizer step at the planned size).
        micro_batch: ``--batch-size``.
        size: ranks now.
        planned: ranks planned.
    """
    if planned <= size or size < 1:
        return k, micro_batch, None
    want = k * micro_batch * planned
    new, batch = _exact(want, micro_batch, size) or (max(1, int(k * planned / size + 0.5)), micro_batch)
    got = new * batch * size
    resized = f" (--batch-size {micro_batch} -> {batch})" if batch != micro_batch else ""
    line = (
        f"elastic: {size} of {planned} planned ranks: --grad-accum {k} -> {new} micro-batches of {batch}{resized} "
        "per step, "
    )
    if got == want:
        line += f"so a step's global batch stays {want}"
    else:
        line += f"the nearest to the planned global batch of {want}: {got}"
    return new, batch, line


def _exact(want: int, micro_batch: int, size: int) -> Optional[Tuple[int, int]]:
    """The fewest micro-batches ``K'`` of one size ``B'`` with ``K' x B' x size == want`` and
    ``micro_batch / 2 <= B' <= micro_batch``: ``(K', B')``, or None."""
    if want % size:
        return None
    per_rank = want // size
    for n in range(max(1, -(-per_rank // micro_batch)), 2 * per_rank // micro_batch + 1):
        if per_rank % n == 0:
            return n, per_rank // n
    return None


def stand_in_dirs(ckpt_dir: str, rank: int, size: int, planned: int) -> List[str]:
    """The folders of the missing ranks that rank ``rank`` keeps (``ckpt_dir`` is its own,
    ``<root>/ckpt_<rank>``): ranks ``rank + size``, ``rank + 2 x size``, ... below ``planned``."""
    root = os.path.dirname(os.path.abspath(ckpt_dir))
    return [os.path.join(root, f"ckpt_{q}") for q in range(rank + size, planned, size)]


def mirror_checkpoint(path: str, dirs: List[str]) -> List[str]:
    """Put the checkpoint ``path`` into each of ``dirs`` under its own name, atomically (a hard
    link, or a copy where the folders are on other file systems); the paths written."""
    out = []
    name = os.path.basename(path)
    for folder in dirs:
        os.makedirs(folder, exist_ok=True)
        final = os.path.join(folder, name)
        tmp = os.path.join(folder, f".tmp-{os.getpid()}-{name}")
        try:
            os.link(path, tmp)
        except OSError:
            shutil.copyfile(path, tmp)
        os.replace(tmp, final)
        out.append(final)
    return out
