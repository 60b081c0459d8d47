"""The reference trainer's checkpoints: names, saving and pruning per rank, and the one
checkpoint every rank of a distributed ``--resume`` loads (the newest one they all have, agreed
through one AllGather).  Imports MindSpore; nothing from the launcher.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Callable, ContextManager, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

from launcher.workloads.cifar10_data import UsageError
from launcher.workloads.cluster import all_gather

#: The file name prefix of the default network's checkpoints; each ``--arch`` has its own (its
#: name), so ``--resume`` never picks another network's checkpoint.
CKPT_PREFIX = "resnet50"
#: How many of each rank's newest checkpoints a distributed ``--resume`` compares.
RESUME_CANDIDATES = 16


def _ckpt_re(prefix: str) -> "re.Pattern[str]":
    return re.compile(r"^" + re.escape(prefix) + r"-(\d+)_(\d+)\.ckpt$")


def _say(text: str) -> None:
    print(text, flush=True)


def list_checkpoints(ckpt_dir: str, prefix: str = CKPT_PREFIX) -> List[Tuple[int, int, str]]:
    """``(epoch, step, path)`` of the ``<prefix>-<epoch>_<step>.ckpt`` files in ``ckpt_dir``,
    oldest first."""
    if not os.path.isdir(ckpt_dir):
        return []
    found = []
    pattern = _ckpt_re(prefix)
    for name in os.listdir(ckpt_dir):
        m = pattern.match(name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), os.path.join(ckpt_dir, name)))
    return sorted(found)


def save_checkpoint(
    train_net: nn.Cell, ckpt_dir: str, epoch: int, step: int, global_step: int, keep: int, prefix: str = CKPT_PREFIX
) -> str:
    """Write ``<prefix>-<epoch>_<step>.ckpt`` atomically (a write that fails leaves no part of it);
    then :func:`prune_checkpoints` to ``keep`` (0: prune nothing)."""
    os.makedirs(ckpt_dir, exist_ok=True)
    final = os.path.join(ckpt_dir, f"{prefix}-{epoch}_{step}.ckpt")
    tmp = os.path.join(ckpt_dir, f".tmp-{os.getpid()}-{prefix}-{epoch}_{step}.ckpt")
    try:
        ms.save_checkpoint(
            train_net, tmp, append_dict={"epoch_num": epoch, "step_num": step, "global_step_saved": global_step}
        )
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    prune_checkpoints(ckpt_dir, keep, prefix)
    return final


def prune_checkpoints(ckpt_dir: str, keep: int, prefix: str = CKPT_PREFIX) -> None:
    """Remove all but the newest ``keep`` checkpoints (0: none), and temp files that other
    processes left half-written (the folder is this rank's alone).  A folder that cannot be read
    now (gone, or not a folder: its disk away) is left as it is: the next write says so."""
    mine = f".tmp-{os.getpid()}-"
    try:
        doomed = [path for _, _, path in list_checkpoints(ckpt_dir, prefix)[:-keep]] if keep > 0 else []
        doomed += [
            os.path.join(ckpt_dir, n) for n in os.listdir(ckpt_dir) if n.startswith(".tmp-") and not n.startswith(mine)
        ]
    except OSError:
        return
    for path in doomed:
        try:
            os.unlink(path)
        except OSError:
            pass


def common_checkpoint(positions: Sequence[Sequence[Tuple[int, int]]]) -> Optional[Tuple[int, int]]:
    """The newest ``(epoch, step)`` that every rank has a checkpoint of (``positions[r]`` are rank
    r's); None when there is none."""
    if not positions:
        return None
    common = set(positions[0])
    for theirs in positions[1:]:
        common &= set(theirs)
    return max(common) if common else None


_GATHER: list = []  # the one AllGather cell of the process: compiled once, whatever gathers through it


def _gather_positions(mine: Sequence[Tuple[int, int]], size: int) -> List[List[Tuple[int, int]]]:
    """Every rank's checkpoint positions (``(epoch, step)``, at most :data:`RESUME_CANDIDATES`),
    by rank, through one AllGather (one graph for every call: MindSpore's compile cache finds
    graphs by the order they were compiled in)."""
    row = np.full((1, 2 * RESUME_CANDIDATES), -1.0, dtype=np.float32)
    for i, (epoch, step) in enumerate(list(mine)[-RESUME_CANDIDATES:]):
        row[0, 2 * i], row[0, 2 * i + 1] = epoch, step
    table = _gather_row(row).reshape(size, RESUME_CANDIDATES, 2)
    return [[(int(e), int(st)) for e, st in table[r] if e >= 0] for r in range(size)]


def _gather_row(row: np.ndarray) -> np.ndarray:
    """Every rank's ``row`` (float32, 1 x 2 * RESUME_CANDIDATES), stacked, through the process's
    one AllGather cell."""
    if not _GATHER:
        _GATHER.append(all_gather())
    return _GATHER[0](Tensor(row)).asnumpy()


def gather_figures(mine: Tuple[float, float], size: int) -> List[Tuple[float, float]]:
    """Every rank's ``mine`` (two numbers: the checkpoint schedule's figures,
    launcher.workloads.ckpt_every.Schedule), by rank, through the same AllGather as the positions
    (no other graph); the same table on every rank.  Call it on every rank at the same step."""
    if size == 1:
        return [(float(mine[0]), float(mine[1]))]
    row = np.full((1, 2 * RESUME_CANDIDATES), -1.0, dtype=np.float32)
    row[0, 0], row[0, 1] = mine
    table = _gather_row(row).reshape(size, 2 * RESUME_CANDIDATES)
    return [(float(table[r, 0]), float(table[r, 1])) for r in range(size)]


def save_on_every_rank(
    train_net: nn.Cell,
    ckpt_dir: str,
    position: Tuple[int, int, int],
    keep: int,
    rank_size: Tuple[int, int],
    prefix: str = CKPT_PREFIX,
    gather: Callable[..., List[List[Tuple[int, int]]]] = _gather_positions,
) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """Write the checkpoint of ``position`` (``(epoch, step, global_step)``) on this rank, and keep
    it only if every rank wrote its own: ``(path, None, None)``, or ``(None, why, error)`` when some
    rank could not (a full disk, a folder gone: ``why`` names the ranks, with this rank's
    ``error``, None if its own write went well).  A write that fails does not end the training:
    the job goes on from the checkpoint before, which every rank still has, since nothing is
    pruned until a checkpoint is on every rank.  With several
    ranks (``rank_size``: this rank, how many) they agree through one AllGather (``gather``, the
    one :func:`resume_point` uses), so call it on every rank at the same step; a rank that wrote a
    checkpoint some other rank did not removes it, so each rank keeps only checkpoints every rank
    has.  With one rank, ``keep`` prunes at once (else the caller prunes after the next step: see
    the trainer's module doc)."""
    epoch, step, global_step = position
    rank, size = rank_size
    path: Optional[str] = None
    error: Optional[str] = None
    try:
        path = save_checkpoint(train_net, ckpt_dir, epoch, step, global_step, keep if size == 1 else 0, prefix)
    except Exception as exc:  # noqa: BLE001  (whatever MindSpore's writer raised: the rank trains on)
        error = _reason(exc)
    why = f"rank {rank}: {error}" if error else None
    if size == 1:
        return path, why, error
    written = gather([(epoch, step)] if path is not None else [], size)
    missing = [r for r, theirs in enumerate(written) if (epoch, step) not in theirs]
    if not missing:
        return path, None, None
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)
    others = [str(r) for r in missing if r != rank]
    if others:
        theirs = f"{'ranks' if len(others) > 1 else 'rank'} {', '.join(others)} could not write theirs"
        why = f"{why}; {theirs}" if why else theirs
    return None, why, error


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def weights_from_checkpoint(ckpt_dir: Optional[str], prefix: str = CKPT_PREFIX) -> ContextManager[object]:
    """Where the network is built when this rank resumes and has a checkpoint (it then loads one
    or stops: :func:`resume_point`): MindSpore's ``no_init_parameters``, so the initializers'
    random weights, which the checkpoint overwrites, are not drawn (ResNet-14 here: the network
    built in 0.09 s instead of 0.39 s).  Elsewhere, or where MindSpore has no such context, a
    context that does nothing."""
    if not ckpt_dir or not list_checkpoints(ckpt_dir, prefix):
        return contextlib.nullcontext()
    try:
        from mindspore.nn.utils import no_init_parameters
    except ImportError:
        return contextlib.nullcontext()
    return no_init_parameters()


def align_compile_order(
    ckpt_dir: Optional[str], size: int, gather: Callable[..., List[List[Tuple[int, int]]]] = _gather_positions
) -> None:
    """In a distributed run with checkpoints that does not resume, gather the positions anyway
    (and ignore them): every attempt, resuming or not, then compiles that AllGather first and the
    train step after it, which MindSpore's compile cache needs (it finds a graph by its position:
    launcher.workloads.compile_cache)."""
    if ckpt_dir and size > 1:
        gather([], size)


def resume_point(
    ckpt_dir: Optional[str],
    size: int,
    gather: Callable[..., List[List[Tuple[int, int]]]] = _gather_positions,
    prefix: str = CKPT_PREFIX,
) -> Optional[str]:
    """The checkpoint ``--resume`` loads: this rank's newest, or with ``size`` > 1 the newest one
    every rank has (newer ones of this rank are removed); None: start from scratch.
    ``gather(mine, size)`` gives every rank's positions (:func:`_gather_positions`).

    Raises:
        UsageError: some rank has checkpoints but none is common to all.
    """
    found = list_checkpoints(ckpt_dir, prefix) if ckpt_dir else []
    if size == 1:
        return found[-1][2] if found else None
    positions = gather([(e, st) for e, st, _ in found], size)
    if not any(positions):
        return None
    pick = common_checkpoint(positions)
    if pick is None:
        newest = ", ".join(
            f"rank {r} {f'{prefix}-{p[-1][0]}_{p[-1][1]}' if p else 'none'}" for r, p in enumerate(positions)
        )
        raise UsageError(
            f"--resume: the ranks have no checkpoint in common (newest: {newest}); every rank "
            "needs CKPT_DIR/ckpt_<rank>/ of the same run (or remove them all to start over)"
        )
    for epoch, step, path in found:
        if (epoch, step) > pick:
            try:
                os.unlink(path)
            except OSError as exc:
                raise UsageError(f"--resume: cannot remove {path} (not on every rank): {exc.strerror}") from None
            _say(f"resume: removed {path}: not on every rank (those steps are trained again)")
    return next(path for epoch, step, path in found if (epoch, step) == pick)


def _resume(
    ckpt_dir: Optional[str], train_net: nn.Cell, opt: nn.Optimizer, spe: int, size: int, prefix: str = CKPT_PREFIX
) -> Tuple[int, int, int]:
    """Load the checkpoint of :func:`resume_point` into ``train_net`` (``--resume``).

    Returns:
        ``(epoch, step, global_step)``: the position before the next step (``step`` steps of
        ``epoch`` done); ``(1, 0, 0)`` when there is no checkpoint.

    Raises:
        UsageError: the checkpoint does not match the network; the ranks have none in common.
    """
    path = resume_point(ckpt_dir, size, prefix=prefix)
    if path is None:
        _say(f"resume: no checkpoint in {ckpt_dir}; starting from scratch")
        return 1, 0, 0
    m = _ckpt_re(prefix).match(os.path.basename(path))
    assert m is not None
    params = ms.load_checkpoint(path)
    meta = {k: params.pop(k) for k in ("epoch_num", "step_num", "global_step_saved") if k in params}
    not_loaded, _ = ms.load_param_into_net(train_net, params, strict_load=True)
    if not_loaded:
        raise UsageError(f"{path}: does not match this network ({len(not_loaded)} parameters missing)")
    epoch = int(_scalar(meta.get("epoch_num", m.group(1))))
    step = int(_scalar(meta.get("step_num", m.group(2))))
    global_step = int(_scalar(meta.get("global_step_saved", opt.global_step.asnumpy())))
    if step >= spe:
        epoch, step = epoch + 1, 0
    _say(f"resume: {path} (global step {global_step}); continuing at epoch {epoch} step {step + 1}")
    return epoch, step, global_step


def _scalar(value: object) -> float:
    """A number from a checkpoint entry (Parameter, Tensor, numpy value or int)."""
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    return float(np.asarray(value).reshape(-1)[0])
