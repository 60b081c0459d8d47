"""A MindSpore op called with shapes that do not broadcast, from the user's own function (needs mindspore).

MindSpore raises a ValueError whose message carries its own sections (``- C++ Call Stack:``);
the innermost frame of the user's files is ``forward`` in this file.
"""
import numpy as np


def forward(a, b):
    import mindspore as ms
    from mindspore import ops

    return ops.add(ms.Tensor(a), ms.Tensor(b)).asnumpy()


def main():
    forward(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))


if __name__ == "__main__":
    main()
