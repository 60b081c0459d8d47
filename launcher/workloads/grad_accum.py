"""Gradient accumulation for the reference trainer (``--grad-accum K``), data parallel.

One optimizer step is K micro-batches: each one's forward and backward pass adds its gradients
(scaled by 1/K, the ``sens`` of the backward pass) into an accumulator that lives on this rank;
after the K-th, *one* gradient AllReduce (``DistributedGradReducer``, the mean over the ranks
when ``gradients_mean`` is set) and one optimizer update, then the accumulator is zeroed.  With
a loss that is a mean over the batch, K micro-batches of B images make the update of one batch
of K x B images (BatchNorm normalises over each micro-batch of B, as any micro-batching does).

Two graphs, as the structure of MindSpore's gradient-accumulation tutorial (a forward-backward
cell that sums into the accumulator, an optimizer cell, a clearing step): :class:`AccumulateGrads`
(forward, backward, sum; no communication, no update) and :class:`ApplyAccumulated` (reduce,
update, clear).  The network's forward and backward graph is compiled once, for both kinds of
micro-batch.

MindSpore's own ``nn.GradAccumulationCell`` / ``mindspore.parallel.nn.GradAccumulation`` work
only in semi-auto and auto parallel (they slice one large batch inside the graph and rely on the
parallel compiler to place the gradient AllReduce after the last micro-batch): in data parallel
their training cell would update with an accumulator nothing fills.  The auto-parallel context's
``grad_accumulation_step`` > 1 is refused by MindSpore 2.x (deprecated).  Hence the cells here
for data parallel (and a single process).
"""

from __future__ import annotations

from typing import Callable, Iterator, Tuple

import mindspore as ms
from mindspore import Tensor, nn, ops

#: Name prefix of the accumulator's parameters (never in a checkpoint: see :class:`TrainState`).
ACCUM_PREFIX = "grad_accum"

_add_into = ops.MultitypeFuncGraph("add_into")
_zero = ops.MultitypeFuncGraph("zero")


@_add_into.register("Tensor", "Tensor")
def _add_into_tensor(acc, grad):
    return ops.assign_add(acc, grad)


@_zero.register("Tensor")
def _zero_tensor(acc):
    return ops.assign(acc, ops.zeros_like(acc))


class AccumulateGrads(nn.Cell):
    """Forward and backward pass of one micro-batch; adds ``grad / k`` into ``accum``; returns
    the micro-batch's loss.  No communication, no parameter update."""

    def __init__(self, net_with_loss: nn.Cell, weights: ms.ParameterTuple, accum: ms.ParameterTuple, k: int) -> None:
        super().__init__(auto_prefix=False)
        self.network = net_with_loss
        self.network.set_grad()
        self.weights = weights
        self.accum = accum
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.hyper_map = ops.HyperMap()
        self.sens = 1.0 / k

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.fill(loss.dtype, loss.shape, self.sens)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        return ops.depend(loss, self.hyper_map(_add_into, self.accum, grads))


class ApplyAccumulated(nn.Cell):
    """The optimizer step of K micro-batches: the accumulated gradients through one
    ``DistributedGradReducer`` (data parallel; nothing alone), the update, the accumulator
    zeroed.  Returns True."""

    def __init__(self, optimizer: nn.Optimizer, accum: ms.ParameterTuple, distributed: bool) -> None:
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.accum = accum
        self.hyper_map = ops.HyperMap()
        self.grad_reducer: nn.Cell = nn.Identity()
        if distributed:
            # as TrainOneStepCell's: the context's gradients_mean, and the world group's size
            # (the context's device_num stays 1 unless it was set)
            self.grad_reducer = nn.DistributedGradReducer(optimizer.parameters)

    def construct(self):
        grads = self.grad_reducer(self.accum)
        done = self.optimizer(grads)
        accum = ops.depend(self.accum, done)
        return ops.depend(done, self.hyper_map(_zero, accum))


class TrainState(nn.Cell):
    """The network (with its loss) and the optimizer, without the accumulator: what a checkpoint
    holds, with the same parameter names as ``nn.TrainOneStepCell``'s (so a checkpoint does not
    depend on ``--grad-accum``)."""

    def __init__(self, net_with_loss: nn.Cell, optimizer: nn.Optimizer) -> None:
        super().__init__(auto_prefix=False)
        self.network = net_with_loss
        self.optimizer = optimizer


class AccumulatingStep:
    """One optimizer step over ``k`` micro-batches: ``step(batches)`` takes the next ``k``
    ``(image, label)`` batches and returns the mean of their losses (the loss of the
    ``k`` x batch that the step trains on).  ``state`` is what checkpoints save and load."""

    def __init__(self, net_with_loss: nn.Cell, optimizer: nn.Optimizer, k: int, distributed: bool) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self.accum = optimizer.parameters.clone(prefix=ACCUM_PREFIX, init="zeros")
        self.accumulate = AccumulateGrads(net_with_loss, optimizer.parameters, self.accum, k)
        self.apply = ApplyAccumulated(optimizer, self.accum, distributed)
        self.state = TrainState(net_with_loss, optimizer)
        self.accumulate.set_train(True)
        self.apply.set_train(True)
        self.state.set_train(True)
        self.applied = 0  # optimizer steps (each with the one gradient AllReduce when distributed)

    def step(self, batches: Iterator[Tuple[Tensor, Tensor]]) -> float:
        total = 0.0
        for _ in range(self.k):
            image, label = next(batches)
            total += float(self.accumulate(image, label).asnumpy())
        self.apply()
        self.applied += 1
        return total / self.k


def one_batch_step(train_step: nn.Cell) -> Callable[[Iterator[Tuple[Tensor, Tensor]]], float]:
    """``step(batches)`` for K = 1: the next batch through ``train_step`` (``TrainOneStepCell``)."""

    def step(batches: Iterator[Tuple[Tensor, Tensor]]) -> float:
        image, label = next(batches)
        return float(train_step(image, label).asnumpy())

    return step
