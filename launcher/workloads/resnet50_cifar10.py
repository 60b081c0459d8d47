"""ResNet-50 on CIFAR-10: the shipped training workload of mslaunch.

Run it alone (one process, no communication)::

    python -m launcher.workloads.resnet50_cifar10 --data-path DATA --image-size 32 --epochs 1

or under a launcher that sets a distributed environment: the dynamic cluster (``MS_ROLE``,
``MS_WORKER_NUM``, ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, optional ``MS_NODE_ID``), an Ascend rank
table (``RANK_TABLE_FILE``) or OpenMPI (``OMPI_COMM_WORLD_SIZE``). Then the module calls
``mindspore.communication.init()``, trains data-parallel (``gradients_mean=True``) and every
rank reads its own shard of the training set (``num_shards=get_group_size()``,
``shard_id=get_rank()``). With ``MS_ROLE=MS_SCHED`` (the scheduler process a launcher starts with
the same module) it only calls ``init()``: in MindSpore 2.10 the scheduler's ``init()`` serves the
cluster and ends the process itself once every worker has left (exit 0, or 1 if a worker died).

Data: ``--data-path`` is a folder holding ``cifar-10-batches-bin`` or that folder itself.
``Cifar10Dataset`` (exactly 10000 records per ``data_batch*.bin`` / ``test_batch.bin``) reads
full-size files; smaller ones of the same layout (``mslaunch data synth-cifar10 DIR --train 2000``)
are read with numpy into a random-access ``GeneratorDataset``. Both shard as ``DistributedSampler``
does and feed the tutorials' ``create_dataset`` pipeline: random crop 32 (pad 4), random horizontal
flip, resize to ``--image-size`` (skipped at 32), rescale 1/255, normalize with the CIFAR
mean/std, HWC2CHW, label cast to int32, shuffle, batch (drop_remainder). The batch stream repeats
forever; an *epoch* is ``--steps-per-epoch`` steps (0: one pass over this rank's shard).

Gradient accumulation (``--grad-accum K``, default 1): a step is one *optimizer* step over K
batches of ``--batch-size`` (micro-batches): their gradients are summed on each rank, then one
gradient AllReduce and one update (:mod:`launcher.workloads.grad_accum`). Every count the trainer
prints or saves is in optimizer steps: the loss lines (the loss is the mean over the K
micro-batches), ``steps_per_epoch`` and ``batch_size`` (K x ``--batch-size``) of the
``MSLAUNCH_METRIC`` line, the checkpoint names and ``--resume``; a checkpoint holds no accumulator,
so a run can resume with another K. Data parallel (and alone) only: auto and semi-auto parallel
are refused (MindSpore accumulates there only inside one graph).

Output on stdout (flushed after every line; launchers capture it to files)::

    params: 23528522
    data: ...
    MSLAUNCH_METRIC {"batch_size": 32, "epochs": 1, "steps_per_epoch": 40}   (the step budget, for mslaunch top)
    epoch: 1 step: 1, loss is 2.3025854          (LossMonitor's format; step within the epoch)
    epoch 1 throughput: 57.9 img/s per rank, 115.8 img/s total (2 ranks)
    checkpoint: <ckpt-dir>/ckpt_<rank>/resnet50-1_40.ckpt
    accuracy: 0.8125                               (with --eval; over the whole test set)

Network (``--arch``): ResNet-50 by default; ``resnet101``/``resnet152``, ``resnet14``/``resnet26`` (1 or 2
bottleneck blocks a stage: about half a ResNet-50's compile on CPU), or ``resnet8`` (2 stages: tests).

Checkpoints (``--ckpt-dir``): ``<ckpt-dir>/ckpt_<rank>/<arch>-<epoch>_<step>.ckpt`` (the
``ModelCheckpoint`` naming, prefixed with the network's name, so ``--resume`` never loads
another network's; ``step`` is the step within the epoch), written at the end of every
epoch (and every ``--ckpt-every`` steps; ``auto[:N]``: the interval mslaunch offers after a fault,
before it N steps, or for ``auto`` Young/Daly on the ranks' own figures,
launcher/workloads/ckpt_every.py), atomically, keeping the newest ``--keep-checkpoints``; the
time each write took follows its line (``MSLAUNCH_METRIC {"ckpt_ms": ...}``). A checkpoint holds
the parameters, the optimizer state (momentum, ``global_step``), ``epoch_num`` / ``step_num``.
``--resume`` loads the newest one and continues at the next step: ``--epochs`` is the total number
of epochs, so ``--resume --epochs 3`` after a 2-epoch run trains epoch 3.

With several ranks, every rank must resume from the same step (data parallel: the same weights).
A job stopped while its ranks write a checkpoint (a preemption, a failure) can leave the newest
one on some ranks only, so:

- a checkpoint is kept only where every rank wrote its own (one AllGather after the write; a
  failed write is said, ``checkpoint: not written``, and training goes on: at the last step it is
  an error), and older ones than the newest ``--keep-checkpoints`` go after the next step;
- ``--resume`` gathers every rank's checkpoint positions (AllGather) and loads the newest one that
  every rank has; newer ones of this rank (steps that are trained again) are removed. No common
  one while some rank has one is an error (exit 2) naming each rank's newest.

SIGTERM (a preemption, a stop, a launcher's teardown) with ``--ckpt-dir``: the ranks end at the
first step's end where some rank heard it (agreed), write a checkpoint there (``preempted:
checkpoint saved in X s after SIGTERM``) and end by the signal; a rank stuck in a step that cannot
end (its peers are gone) ends after 1.5 step times (:mod:`launcher.workloads.preempt`).
``--resume`` (or a restart) continues after it.

Compile cache: under mslaunch (``MSLAUNCH_COMPILE_CACHE``) MindSpore's compile cache is on there
unless ``MS_COMPILER_CACHE_*`` is set: a restart takes its graphs from it (compile_cache.py); with
``--ckpt-dir`` every attempt gathers the checkpoint positions first, so that graph comes first.

Exit codes: 0 done; 1 training failed (e.g. the loss became NaN); 2 bad arguments or data. Then it
ends as the collective checks do (cluster.exit_now: MindSpore's exit cleanup now and then crashes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Mapping, Optional, Sequence, Tuple

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import Tensor, nn

from launcher.workloads.checkpoints import (
    _resume,
    align_compile_order,
    gather_figures,
    prune_checkpoints,
    save_on_every_rank,
    weights_from_checkpoint,
)
from launcher.workloads.cifar10_data import UsageError, build_pipeline, open_cifar10, resolve_cifar_folder
from launcher.workloads.ckpt_every import parse_ckpt_every, schedule_for
from launcher.workloads.cluster import all_reduce_sum, any_rank, distributed_from_env, exit_now
from launcher.workloads.compile_cache import stop_caching, use_offered_cache
from launcher.workloads.cputhreads import apply_cpu_threads
from launcher.workloads.elastic import keep_global_batch, mirror_checkpoint, planned_size, stand_in_dirs
from launcher.workloads.grad_accum import AccumulatingStep, one_batch_step
from launcher.workloads.preempt import StopOnSignal
from launcher.workloads.resnet50 import ARCHS, SoftmaxCrossEntropyExpand, count_parameters, resnet
from launcher.workloads.restart import resume_on_restart


def _say(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def make_train_step(net: nn.Cell, lr: float = 0.01, momentum: float = 0.9) -> Tuple[nn.Optimizer, nn.Cell]:
    """``(optimizer, train step)``: expanded softmax cross-entropy (sparse labels), Momentum, and
    ``TrainOneStepCell``, which all-reduces the gradients (mean) when the parallel mode is
    data parallel. Call ``train_step(images, labels)`` -> loss; compiled on the first call."""
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=momentum)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, SoftmaxCrossEntropyExpand(sparse=True)), opt)
    train_step.set_train(True)
    return opt, train_step


def make_accumulating_step(
    net: nn.Cell, k: int, distributed: bool, lr: float = 0.01, momentum: float = 0.9
) -> Tuple[nn.Optimizer, AccumulatingStep]:
    """``(optimizer, step)`` for ``--grad-accum k``: the loss and optimizer of
    :func:`make_train_step`, ``k`` micro-batches per optimizer step and one gradient AllReduce
    when ``distributed`` (:mod:`launcher.workloads.grad_accum`)."""
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=momentum)
    return opt, AccumulatingStep(nn.WithLossCell(net, SoftmaxCrossEntropyExpand(sparse=True)), opt, k, distributed)


def set_device(target: str) -> None:
    """``mindspore.set_device(target)``; a device this MindSpore build cannot use is a UsageError."""
    try:
        ms.set_device(target)
    except RuntimeError as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        raise UsageError(
            f"--device-target {target} is not usable with this MindSpore {ms.__version__} build: {first}"
        ) from None


def parse_args(argv: Optional[Sequence[str]], env: Mapping[str, str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m launcher.workloads.resnet50_cifar10",
        description="Train ResNet-50 on CIFAR-10 (binary version) with MindSpore, alone or data-parallel.",
    )
    p.add_argument("--data-path", default=env.get("DATA_PATH"), help="folder with cifar-10-batches-bin (or it)")
    p.add_argument(
        "--arch",
        choices=tuple(ARCHS),
        default="resnet50",
        help="the network (default resnet50; resnet8/14/26: the same training at a fraction of the cost)",
    )
    p.add_argument("--epochs", type=int, default=1, help="total epochs (with --resume: including finished ones)")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size (default 32)")
    p.add_argument("--image-size", type=int, default=224, help="input size (224 as the tutorials; 32: no resize)")
    p.add_argument("--steps-per-epoch", type=int, default=0, help="batches per epoch (0: one pass over the shard)")
    p.add_argument("--lr", type=float, default=0.01, help="Momentum learning rate (default 0.01)")
    p.add_argument("--momentum", type=float, default=0.9, help="Momentum momentum (default 0.9)")
    p.add_argument("--ckpt-dir", default=None, help="save checkpoints to CKPT_DIR/ckpt_<rank>/")
    h = (
        "also save every N global steps (0: epoch ends only); auto[:N]: mslaunch's interval after a fault;"
        " before it N, or for auto Young/Daly on the job's own figures"
    )
    p.add_argument("--ckpt-every", default="0", help=h)
    p.add_argument("--keep-checkpoints", type=int, default=1, help="newest checkpoints to keep (0: all)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint (with several ranks: the newest every rank has)",
    )
    p.add_argument("--eval", action="store_true", help="print the test-set accuracy at the end")
    p.add_argument("--seed", type=int, default=1, help="weights, data order and augmentation seed")
    p.add_argument("--log-every", type=int, default=1, help="print the loss every N steps (default 1)")
    p.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        metavar="K",
        help="micro-batches of --batch-size per optimizer step: their gradients are summed on each "
        "rank, then one AllReduce and one update (default 1); steps count optimizer steps",
    )
    p.add_argument(
        "--parallel-mode",
        default="data_parallel",
        choices=("data_parallel", "auto_parallel", "semi_auto_parallel"),
        help="parallel mode when distributed (CPU: data_parallel only)",
    )
    p.add_argument(
        "--device-target",
        default=env.get("DEVICE_TARGET") or "CPU",
        choices=("CPU", "GPU", "Ascend"),
        help="device (default: $DEVICE_TARGET, else CPU)",
    )
    p.add_argument("--workers", type=int, default=2, help="dataset map workers (default 2)")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "image_size", "log_every", "workers", "grad_accum"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    try:
        args.ckpt_schedule = schedule_for(parse_ckpt_every(args.ckpt_every), os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for name in ("steps_per_epoch", "keep_checkpoints"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.lr <= 0:
        raise UsageError(f"--lr must be > 0, got {args.lr}")
    if args.parallel_mode != "data_parallel" and args.device_target == "CPU":
        raise UsageError(
            f"--parallel-mode {args.parallel_mode} is not supported on CPU (MindSpore supports only "
            "data_parallel there); use --parallel-mode data_parallel or --device-target GPU/Ascend"
        )
    if args.grad_accum > 1 and args.parallel_mode != "data_parallel":
        raise UsageError(
            f"--grad-accum {args.grad_accum} needs --parallel-mode data_parallel: in {args.parallel_mode} MindSpore "
            "puts a gradient AllReduce in every backward pass (it accumulates only inside one graph, with "
            "mindspore.parallel.nn.GradAccumulation); use data_parallel or --grad-accum 1"
        )
    if args.resume and not args.ckpt_dir:
        raise UsageError("--resume needs --ckpt-dir")
    args.resume = resume_on_restart(
        args.resume, args.ckpt_dir, env
    )  # a restart (MSLAUNCH_ATTEMPT >= 1) resumes by itself
    return args


def evaluate(net: nn.Cell, args: argparse.Namespace, rank: int, size: int) -> float:
    """Top-1 accuracy on the whole test set; with ``size`` > 1 each rank scores every size-th
    image and the counts are summed with AllReduce. The last partial batch is zero-padded to the
    batch size, so the graph is compiled once."""
    probe, _ = open_cifar10(args.data_path, "test", shuffle=False)
    n = probe.get_dataset_size()
    sampler = ds.SubsetSampler(list(range(rank, n, size))) if size > 1 else ds.SequentialSampler()
    source, _ = open_cifar10(args.data_path, "test", sampler=sampler, num_parallel_workers=args.workers)
    data = build_pipeline(source, args.batch_size, args.image_size, train=False, workers=args.workers)
    net.set_train(False)
    correct = 0
    total = 0
    for image, label in data.create_tuple_iterator(num_epochs=1, output_numpy=True):
        k = image.shape[0]
        if k < args.batch_size:
            pad = np.zeros((args.batch_size - k,) + image.shape[1:], dtype=image.dtype)
            image = np.concatenate([image, pad])
        logits = net(Tensor(image)).asnumpy()[:k]
        correct += int((logits.argmax(axis=1) == label).sum())
        total += k
    if size > 1:
        summed = all_reduce_sum()(Tensor(np.array([correct, total], dtype=np.float32))).asnumpy()
        correct, total = int(round(float(summed[0]))), int(round(float(summed[1])))
    return correct / total if total else 0.0


def _init_parallel(args: argparse.Namespace, distributed: bool) -> Tuple[int, int]:
    """Graph mode on ``--device-target``; when distributed, the parallel context and ``init()``.

    Returns:
        ``(rank, group size)``; ``(0, 1)`` when not distributed.
    """
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_context(mode=ms.GRAPH_MODE)
    set_device(args.device_target)
    if args.device_target == "CPU":
        apply_cpu_threads()
    if not distributed:
        return 0, 1
    mode = {
        "data_parallel": ms.ParallelMode.DATA_PARALLEL,
        "auto_parallel": ms.ParallelMode.AUTO_PARALLEL,
        "semi_auto_parallel": ms.ParallelMode.SEMI_AUTO_PARALLEL,
    }[args.parallel_mode]
    # As the tutorials: parallel context first, then init() (blocks until the cluster is built).
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    init()
    return get_rank(), get_group_size()


def _training_data(args: argparse.Namespace, rank: int, size: int) -> Tuple[ds.Dataset, int]:
    """This rank's training pipeline and the steps per epoch; prints the ``data:`` and the
    ``MSLAUNCH_METRIC`` step-budget lines.

    Raises:
        UsageError: the shard holds less than one batch.
    """
    source, desc = open_cifar10(
        args.data_path, "train", num_shards=size, shard_id=rank, shuffle=True, num_parallel_workers=args.workers
    )
    data = build_pipeline(source, args.batch_size, args.image_size, train=True, workers=args.workers)
    batches_per_pass = data.get_dataset_size()
    k = args.grad_accum
    steps_per_pass = batches_per_pass // k  # optimizer steps: k batches each
    if steps_per_pass < 1:
        need = f"--batch-size {args.batch_size}" if k == 1 else f"--grad-accum {k} x --batch-size {args.batch_size}"
        raise UsageError(f"{desc}: shard {rank}/{size} has fewer than {need} records")
    spe = min(args.steps_per_epoch, steps_per_pass) if args.steps_per_epoch else steps_per_pass
    line = f"data: {desc}; rank {rank} of {size}: {batches_per_pass} batches of {args.batch_size} per pass"
    if k > 1:
        line += (
            f"; --grad-accum {k}: {steps_per_pass} optimizer steps of {k} batches per pass"
            " (steps count optimizer steps)"
        )
    _say(line)
    # The step budget for `mslaunch top` (progress, ETA): the documented machine-readable line.
    # A step is an optimizer step: its batch is k micro-batches.
    budget = {"batch_size": k * args.batch_size, "epochs": args.epochs, "steps_per_epoch": spe}
    if k > 1:
        budget.update(grad_accum=k, micro_batch_size=args.batch_size)
    _say("MSLAUNCH_METRIC " + json.dumps(budget))
    return data, spe


@dataclass
class _Loop:
    """What the training loop carries from epoch to epoch."""

    args: argparse.Namespace
    train_net: nn.Cell  # what checkpoints save: the network with its loss and the optimizer
    step_fn: Callable[[Iterator[Tuple[Tensor, Tensor]]], float]  # one optimizer step on the next batches: its loss
    batches: Iterator[Tuple[Tensor, Tensor]]  # the endless stream of (image, label) batches
    ckpt_dir: Optional[str]
    spe: int  # steps per epoch
    size: int  # ranks
    global_step: int
    compiled: bool = False  # the first step of a process compiles the graph (it is not timed)
    prune_due: bool = False  # a checkpoint was saved: prune the older ones after the next step
    stop: StopOnSignal = field(default_factory=StopOnSignal)  # SIGTERM: a checkpoint (installed with --ckpt-dir)
    stand_ins: List[str] = field(default_factory=list)  # folders of missing ranks this rank keeps (elastic)
    rank: int = 0


def _train_epoch(loop: _Loop, epoch: int, step: int) -> bool:
    """Train ``epoch`` from step ``step`` + 1 to its end: loss lines, the throughput line and the
    checkpoints.  Returns False (after one line on stderr) when the loss is not finite."""
    args = loop.args
    t_epoch, timed_steps, timed_time = time.perf_counter(), 0, 0.0
    while step < loop.spe:
        t0 = time.perf_counter()
        loop.stop.step_started()
        loss = loop.step_fn(loop.batches)  # --grad-accum batches, one optimizer step
        dt = time.perf_counter() - t0
        stop_due = loop.stop.agreed()  # every rank stops at the same step
        loop.stop.step_done()
        step += 1
        loop.global_step += 1
        if loop.prune_due:  # this step's AllReduce needed every rank: all have saved the newest
            for folder in [loop.ckpt_dir or "", *loop.stand_ins]:
                prune_checkpoints(folder, loop.args.keep_checkpoints, loop.args.arch)
            loop.prune_due = False
        if not math.isfinite(loss):
            sys.stderr.write(f"epoch: {epoch} step: {step}. Invalid loss {loss}, terminating training.\n")
            return False
        if step % args.log_every == 0:
            _say(f"epoch: {epoch} step: {step}, loss is {loss:.7g}")
        if loop.compiled:
            timed_steps += 1
            timed_time += dt
            args.ckpt_schedule.step_took(dt)
        loop.compiled = True
        if loop.ckpt_dir and args.ckpt_schedule.due(loop.global_step) and step < loop.spe:
            _save(loop, epoch, step)
        if stop_due:  # SIGTERM (on some rank): save here, then end by it
            loop.stop.stop_here(lambda: _save(loop, epoch, step))
    if timed_steps == 0:  # an epoch of one (compiling) step: report what we have
        timed_steps, timed_time = loop.spe, time.perf_counter() - t_epoch
    per_rank = timed_steps * args.grad_accum * args.batch_size / timed_time if timed_time > 0 else 0.0
    _say(
        f"epoch {epoch} throughput: {per_rank:.1f} img/s per rank, "
        f"{per_rank * loop.size:.1f} img/s total ({loop.size} ranks)"
    )
    if loop.ckpt_dir:
        _save(loop, epoch, step, last=epoch >= args.epochs)
    return True


def _save(loop: _Loop, epoch: int, step: int, last: bool = False) -> bool:
    """Write a checkpoint at this position on every rank (or on none: a write that failed is
    said, and training goes on; at the run's ``last`` step it is an error); whether it was."""
    assert loop.ckpt_dir is not None
    loop.stop.saving()
    t0 = time.perf_counter()
    where, keep, who = (epoch, step, loop.global_step), loop.args.keep_checkpoints, (loop.rank, loop.size)
    path, why, mine = save_on_every_rank(loop.train_net, loop.ckpt_dir, where, keep, who, loop.args.arch)
    if path is None:
        if last:
            raise RuntimeError(f"checkpoint: not written at epoch {epoch} step {step}: {why}")
        line = f"checkpoint: not written at epoch {epoch} step {step} ({why}); training goes on from the one before"
        _say(line + (f"\nMSLAUNCH_METRIC {json.dumps({'ckpt_failed': mine})}" if mine else ""))  # an event
    else:
        mirror_checkpoint(path, loop.stand_ins)
        loop.prune_due = loop.size > 1
        took = time.perf_counter() - t0
        _say(f"checkpoint: {path}\nMSLAUNCH_METRIC " + json.dumps({"ckpt_ms": round(took * 1000.0, 1)}))
        loop.args.ckpt_schedule.save_took(took)
    schedule = loop.args.ckpt_schedule  # auto: the next save from every rank's figures, agreed
    if schedule.measured:
        schedule.agree(gather_figures(schedule.mine(), loop.size), loop.global_step)
    loop.stop.saved(path is not None)
    return path is not None


def train(args: argparse.Namespace, distributed: bool) -> int:
    """Run the training described by ``args``; returns the exit code."""
    # Data parallel only: the (semi-)auto-parallel modes plan strategies that a cached graph would skip.
    # A run smaller than planned (--min-hosts) compiles other graphs: a folder for each size.
    cache = use_offered_cache(os.environ) if args.parallel_mode == "data_parallel" else None
    if cache:
        _say(f"compile cache: {cache} (MindSpore's; a restart takes the graphs it compiles from there)")
    rank, size = _init_parallel(args, distributed)
    planned = planned_size(os.environ, size)
    if planned > size and args.parallel_mode == "data_parallel":  # fewer ranks: the same global batch
        args.grad_accum, args.batch_size, note = keep_global_batch(args.grad_accum, args.batch_size, size, planned)
        _say(note or "")
    elif planned > size:
        _say(f"elastic: {size} of {planned} planned ranks: the global batch is smaller ({args.parallel_mode})")
    # Same seed on every rank: identical initial weights (data parallel) and one common shuffle
    # order, which the DistributedSampler splits into disjoint shards.
    ms.set_seed(args.seed)
    ds.config.set_seed(args.seed)

    ckpt_dir = os.path.join(args.ckpt_dir, f"ckpt_{rank}") if args.ckpt_dir else None
    stand_ins = stand_in_dirs(ckpt_dir, rank, size, planned) if ckpt_dir else []  # the missing ranks' folders
    with weights_from_checkpoint(ckpt_dir if args.resume else None, args.arch):
        net = resnet(args.arch, num_classes=10)
    _say(f"params: {count_parameters(net)}")
    data, spe = _training_data(args, rank, size)
    step_fn: Callable[[Iterator[Tuple[Tensor, Tensor]]], float]
    if args.grad_accum > 1:
        opt, accumulating = make_accumulating_step(net, args.grad_accum, distributed, args.lr, args.momentum)
        train_net, step_fn = accumulating.state, accumulating.step  # a checkpoint holds no accumulator
    else:
        opt, train_net = make_train_step(net, args.lr, args.momentum)
        step_fn = one_batch_step(train_net)
    if cache:  # every attempt compiles the same graphs in the same order
        align_compile_order(ckpt_dir if not args.resume else None, size)
    # The position *before* the next step: epoch, steps done in it, steps done in all.
    epoch, step, global_step = _resume(ckpt_dir, train_net, opt, spe, size, args.arch) if args.resume else (1, 0, 0)
    if epoch > args.epochs:
        _say(f"nothing to train: already at epoch {epoch - 1} of --epochs {args.epochs}")
        stop_caching(os.environ)  # no train step here: the graphs after it would shift
    else:
        # The stream of batches is endless; an epoch is the next `spe` batches of it. A resumed run
        # draws a new order (seed + global step) instead of replaying the first run's batches.
        if global_step:
            ds.config.set_seed(args.seed + global_step)
        batches = data.repeat().create_tuple_iterator(num_epochs=1)
        loop = _Loop(args, train_net, step_fn, batches, ckpt_dir, spe, size, global_step, rank=rank)
        loop.stand_ins = stand_ins
        if ckpt_dir:  # without, no signal is handled and no step agreed
            loop.stop = StopOnSignal(agree=any_rank(size)).install()
        while epoch <= args.epochs:
            if not _train_epoch(loop, epoch, step):
                return 1
            epoch, step = epoch + 1, 0
    if args.eval:
        _say(f"accuracy: {evaluate(net, args, rank, size):.4f}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    env = os.environ
    try:
        args = parse_args(argv, env)
        if env.get("MS_ROLE") == "MS_SCHED":
            # The scheduler only builds the cluster. Its init() serves the workers and ends the
            # process itself when they have all finished; return in case a version comes back.
            from mindspore.communication import init

            set_device(args.device_target)
            init()
            return 0
        if not args.data_path:
            raise UsageError("--data-path is required (or set DATA_PATH)")
        resolve_cifar_folder(args.data_path)
        return train(args, distributed_from_env(env))
    except UsageError as exc:
        sys.stderr.write(f"resnet50_cifar10: error: {exc}\n")
        return 2


if __name__ == "__main__":  # its code decided: MindSpore's exit cleanup may crash, see exit_now
    exit_now(main())
