"""The reference trainer's checkpoints: a network built to be loaded from a checkpoint (its random
initial weights not drawn) trains exactly like one built as usual and loaded the same way."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore


def _built(ckpt_dir, prefix, x, y, path, step=True):
    """(weights skipped?, parameters after the load, loss of one step, parameters after it); without
    ``step``, only whether the weights were skipped (no graph to compile)."""
    import mindspore as ms

    from launcher.workloads.checkpoints import weights_from_checkpoint
    from launcher.workloads.resnet50 import resnet
    from launcher.workloads.resnet50_cifar10 import make_train_step

    ms.set_seed(7)
    with weights_from_checkpoint(ckpt_dir, prefix):
        net = resnet("resnet8", num_classes=10)
    skipped = all(p.has_init for p in net.get_parameters())  # no data drawn yet: the initializer kept
    if not step:
        return skipped, None, None, None
    _, train_net = make_train_step(net, 0.01, 0.9)
    not_loaded, _ = ms.load_param_into_net(train_net, ms.load_checkpoint(path), strict_load=True)
    assert not_loaded == []
    loaded = {p.name: p.asnumpy().copy() for p in train_net.get_parameters()}
    loss = float(train_net(x, y).asnumpy())
    return skipped, loaded, loss, {p.name: p.asnumpy().copy() for p in train_net.get_parameters()}


@pytest.mark.cost(8)  # 3-4 s alone
def test_a_network_built_for_its_checkpoint_trains_like_one_initialised_first(tmp_path) -> None:
    import mindspore as ms
    from mindspore import Tensor

    from launcher.workloads.checkpoints import save_checkpoint
    from launcher.workloads.resnet50 import resnet
    from launcher.workloads.resnet50_cifar10 import make_train_step

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    _, saved = make_train_step(resnet("resnet8", num_classes=10), 0.01, 0.9)
    ckpt = tmp_path / "ckpt_0"
    ckpt.mkdir()
    path = save_checkpoint(saved, str(ckpt), 1, 4, 4, 1, "resnet8")
    rng = np.random.RandomState(0)
    x, y = Tensor(rng.rand(4, 3, 32, 32).astype(np.float32)), Tensor(np.array([1, 2, 3, 4], np.int32))

    usual = _built(None, "resnet8", x, y, path)  # no checkpoint to load: weights drawn
    other = _built(str(ckpt), "resnet50", x, y, path, step=False)  # no checkpoint of this prefix: drawn too
    skipped = _built(str(ckpt), "resnet8", x, y, path)  # built for its checkpoint
    assert (usual[0], other[0], skipped[0]) == (False, False, True)
    assert usual[1].keys() == skipped[1].keys() and all(np.array_equal(usual[1][k], skipped[1][k]) for k in usual[1])
    assert usual[2] == skipped[2] and np.isfinite(usual[2])
    assert all(np.array_equal(usual[3][k], skipped[3][k]) for k in usual[3])
    assert any(not np.array_equal(usual[1][k], usual[3][k]) for k in usual[1])  # the step changed the weights
