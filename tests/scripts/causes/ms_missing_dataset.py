"""A MindSpore dataset pointed at a folder that is not there (needs mindspore).

    ms_missing_dataset.py [FOLDER]
"""
import sys


def load(folder):
    import mindspore.dataset as ds

    return ds.Cifar10Dataset(folder)


if __name__ == "__main__":
    load(sys.argv[1] if len(sys.argv) > 1 else "/data/cifar-10-batches-bin")
