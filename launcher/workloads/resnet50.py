"""The ResNet-50 network and its loss, as the MindSpore tutorials build them (no data, no training).

:func:`resnet50` is ResNet v1.5 with bottleneck blocks 3-4-6-3 (23,528,522 trainable parameters
with 10 classes); :func:`resnet` builds the other depths of :data:`ARCHS` from the same blocks
(the trainer's ``--arch``); :class:`SoftmaxCrossEntropyExpand` is the tutorials' softmax
cross-entropy in primitive ops.  The trainer is :mod:`launcher.workloads.resnet50_cifar10`.
"""

from __future__ import annotations

from typing import List, Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.common.initializer import HeNormal, Normal


def _conv(in_c: int, out_c: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(
        in_c,
        out_c,
        kernel_size=kernel,
        stride=stride,
        pad_mode="pad",
        padding=kernel // 2,
        has_bias=False,
        weight_init=HeNormal(mode="fan_out", nonlinearity="relu"),
    )


def _bn(channels: int, zero_gamma: bool = False) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=0.9, eps=1e-5, gamma_init="zeros" if zero_gamma else "ones")


class Bottleneck(nn.Cell):
    """ResNet v1.5 bottleneck: 1x1 -> 3x3 (stride here) -> 1x1 (x4), projection shortcut when needed.

    The last BatchNorm's gamma starts at zero, so every block starts as the identity (faster early
    training, same parameter count).
    """

    expansion = 4

    def __init__(self, in_c: int, mid_c: int, stride: int) -> None:
        super().__init__()
        out_c = mid_c * self.expansion
        self.conv1 = _conv(in_c, mid_c, 1)
        self.bn1 = _bn(mid_c)
        self.conv2 = _conv(mid_c, mid_c, 3, stride)
        self.bn2 = _bn(mid_c)
        self.conv3 = _conv(mid_c, out_c, 1)
        self.bn3 = _bn(out_c, zero_gamma=True)
        self.relu = nn.ReLU()
        self.has_down = stride != 1 or in_c != out_c
        if self.has_down:
            self.down = nn.SequentialCell([_conv(in_c, out_c, 1, stride), _bn(out_c)])

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.has_down:
            identity = self.down(x)
        return self.relu(out + identity)


class ResNet(nn.Cell):
    """ResNet with bottleneck blocks; ``layers=(3, 4, 6, 3)`` is ResNet-50."""

    def __init__(self, layers: Sequence[int], num_classes: int) -> None:
        super().__init__()
        self.conv1 = _conv(3, 64, 7, 2)
        self.bn1 = _bn(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        blocks: List[nn.Cell] = []
        in_c = 64
        for i, (n, mid) in enumerate(zip(layers, (64, 128, 256, 512))):
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(Bottleneck(in_c, mid, stride))
                in_c = mid * Bottleneck.expansion
        self.layers = nn.SequentialCell(blocks)
        self.mean = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(in_c, num_classes, weight_init=Normal(0.01), bias_init="zeros")

    def construct(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        x = self.mean(x, (2, 3))
        return self.fc(x)


#: Bottleneck blocks per stage of each network the trainer offers (``--arch``); the depth in the
#: name counts the weighted layers: 3 per block, the stem convolution and the dense layer.
#: ResNet-50/101/152 are He et al.'s; the shallower two (timm's names) train the same way at a
#: fraction of the cost (CI smoke jobs, trying a launcher setup).
ARCHS = {
    "resnet8": (1, 1),
    "resnet14": (1, 1, 1, 1),
    "resnet26": (2, 2, 2, 2),
    "resnet50": (3, 4, 6, 3),
    "resnet101": (3, 4, 23, 3),
    "resnet152": (3, 8, 36, 3),
}


def resnet(arch: str = "resnet50", num_classes: int = 10) -> ResNet:
    """The network ``arch`` names (a key of :data:`ARCHS`)."""
    return ResNet(ARCHS[arch], num_classes)


def resnet50(num_classes: int = 10) -> ResNet:
    """ResNet-50 (bottleneck blocks 3-4-6-3, 2048-d features, one dense layer with bias)."""
    return resnet("resnet50", num_classes)


def count_parameters(net: nn.Cell, trainable_only: bool = True) -> int:
    """Number of scalar parameters of ``net`` (by default only the trainable ones, i.e. not the
    BatchNorm moving statistics). ResNet-50 with 10 classes: 23,528,522."""
    params = net.trainable_params() if trainable_only else net.get_parameters()
    return int(sum(int(np.prod(p.shape)) for p in params))


class SoftmaxCrossEntropyExpand(nn.Cell):
    """Softmax cross-entropy spelled out in primitive ops (the tutorials' loss for auto parallel)."""

    def __init__(self, sparse: bool = False) -> None:
        super().__init__()
        self.exp = ops.Exp()
        self.sum = ops.ReduceSum(keep_dims=True)
        self.onehot = ops.OneHot()
        self.on_value = Tensor(1.0, ms.float32)
        self.off_value = Tensor(0.0, ms.float32)
        self.div = ops.RealDiv()
        self.log = ops.Log()
        self.sum_cross_entropy = ops.ReduceSum(keep_dims=False)
        self.mul = ops.Mul()
        self.mul2 = ops.Mul()
        self.mean = ops.ReduceMean(keep_dims=False)
        self.sparse = sparse
        self.max = ops.ReduceMax(keep_dims=True)
        self.sub = ops.Sub()

    def construct(self, logit, label):
        logit_max = self.max(logit, -1)
        exp = self.exp(self.sub(logit, logit_max))
        exp_sum = self.sum(exp, -1)
        softmax_result = self.div(exp, exp_sum)
        if self.sparse:
            label = self.onehot(label, ops.shape(logit)[1], self.on_value, self.off_value)
        softmax_result_log = self.log(softmax_result)
        loss = self.sum_cross_entropy((self.mul(softmax_result_log, label)), -1)
        loss = self.mul2(ops.scalar_to_tensor(-1.0), loss)
        loss = self.mean(loss, -1)
        return loss
