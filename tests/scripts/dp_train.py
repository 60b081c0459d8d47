"""Data-parallel training shaped like MindSpore's startup-method tutorials, for msrun's own flags
(``msrun --worker_num=8 --local_worker_num=8 ... dp_train.py``): every worker trains a small
dense net on its shard of a synthetic MNIST-shaped set (made here, the same on every rank),
``TrainOneStepCell`` under ``DATA_PARALLEL`` (its gradient AllReduce: MindSpore's
``DistributedGradReducer``), ``EPOCHS`` epochs (default 10).  Each worker prints
``dp rank=<r> size=<n> steps=<s> loss=<l>`` at the end and exits 0.
"""

import os

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
init()
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)

rng = np.random.default_rng(0)
labels = rng.integers(0, 10, size=512).astype(np.int32)
images = rng.random((512, 784), dtype=np.float32) * 0.25
images[np.arange(512), 20 * labels] = 1.0  # each label lights its own pixel: learnable


class Items:
    def __getitem__(self, i):
        return images[i], np.array(labels[i], dtype=np.int32)

    def __len__(self):
        return len(labels)


data = ds.GeneratorDataset(Items(), ["image", "label"], shuffle=False, num_shards=size, shard_id=rank).batch(
    16, drop_remainder=True
)
net = nn.SequentialCell([nn.Dense(784, 64), nn.ReLU(), nn.Dense(64, 10)])
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.SGD(net.trainable_params(), 0.1))
step.set_train()
steps, last = 0, None
for epoch in range(int(os.environ.get("EPOCHS", "10"))):
    for image, label in data.create_tuple_iterator():
        last = float(step(image, label).asnumpy())
        steps += 1
print(f"dp rank={rank} size={size} steps={steps} loss={last:.4f}", flush=True)
