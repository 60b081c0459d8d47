"""CIFAR-10 (binary version) for the ResNet-50 trainer: find, read, shard and augment it.

MindSpore's ``Cifar10Dataset`` reads exactly 10000 records from every file, so it is used for
full-size files; smaller files of the same layout are read with numpy into a random-access
``GeneratorDataset``.  :func:`build_pipeline` is the tutorials' ``create_dataset``.  The trainer
is :mod:`launcher.workloads.resnet50_cifar10`.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.transforms as transforms
import mindspore.dataset.vision as vision
import numpy as np

CIFAR_FOLDER = "cifar-10-batches-bin"
CIFAR_RECORD_BYTES = 1 + 3 * 32 * 32
CIFAR_RECORDS_PER_FILE = 10000  # what MindSpore's Cifar10Dataset reads from every file
# The tutorials' normalisation (the seeds' create_dataset), applied after rescale to [0, 1].
CIFAR_MEAN = (0.4465, 0.4822, 0.4914)
CIFAR_STD = (0.2010, 0.1994, 0.2023)


class UsageError(Exception):
    """Bad arguments or data: reported as one line on stderr, exit code 2."""


def resolve_cifar_folder(data_path: str) -> str:
    """The ``cifar-10-batches-bin`` folder for ``data_path`` (that folder or its parent).

    Raises:
        UsageError: neither ``data_path`` nor ``data_path/cifar-10-batches-bin`` holds .bin files.
    """
    for cand in (os.path.join(data_path, CIFAR_FOLDER), data_path):
        if os.path.isdir(cand) and any(n.endswith(".bin") for n in os.listdir(cand)):
            return cand
    raise UsageError(
        f"{data_path}: no CIFAR-10 binary files here or in {CIFAR_FOLDER}/ "
        "(download cifar-10-binary.tar.gz, or run: mslaunch data synth-cifar10 DIR)"
    )


def _cifar_files(folder: str, usage: str) -> List[str]:
    key = "data_batch" if usage == "train" else "test_batch"
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".bin") and key in n)


def read_cifar10_bin(folder: str, usage: str) -> Tuple[np.ndarray, np.ndarray]:
    """All records of ``usage`` ('train' | 'test') in ``folder`` with numpy.

    Returns:
        (images uint8 (N, 32, 32, 3) HWC, labels uint32 (N,)), in file order (files sorted by name),
        i.e. the rows ``Cifar10Dataset(folder, usage, shuffle=False)`` yields for full-size files.

    Raises:
        UsageError: no file, or a file whose size is not a multiple of 3073 bytes.
    """
    files = _cifar_files(folder, usage)
    if not files:
        raise UsageError(f"{folder}: no {'data_batch*' if usage == 'train' else 'test_batch*'}.bin file")
    chunks = []
    for path in files:
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size == 0 or raw.size % CIFAR_RECORD_BYTES:
            raise UsageError(f"{path}: {raw.size} bytes is not a whole number of CIFAR-10 records (3073 bytes each)")
        chunks.append(raw.reshape(-1, CIFAR_RECORD_BYTES))
    rec = np.concatenate(chunks)
    labels = rec[:, 0].astype(np.uint32)
    images = np.ascontiguousarray(rec[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, labels


class _CifarRecords:
    """Random-access source over in-memory records for ``GeneratorDataset`` (which then shards and
    shuffles with the same samplers as ``Cifar10Dataset``). Rows are (image HWC uint8, 0-d uint32
    label array); a 0-d array rather than a numpy scalar, which MindSpore 2.10's row conversion
    (``np.array(x, copy=False)``) rejects under numpy 2."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self._images = images
        self._labels = labels.reshape(-1, 1)

    def __getitem__(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
        return self._images[index], self._labels[index].reshape(())

    def __len__(self) -> int:
        return len(self._images)


def open_cifar10(
    data_path: str,
    usage: str,
    num_shards: Optional[int] = None,
    shard_id: Optional[int] = None,
    shuffle: bool = True,
    sampler: Optional[ds.Sampler] = None,
    num_parallel_workers: int = 2,
) -> Tuple[ds.Dataset, str]:
    """The raw CIFAR-10 source (columns ``image`` uint8 HWC, ``label`` uint32), optionally sharded.

    Uses ``Cifar10Dataset`` when every file of ``usage`` holds exactly 10000 records (the real
    dataset), else the same records read by :func:`read_cifar10_bin` in a ``GeneratorDataset``.

    Returns:
        (dataset, a one-line description of the source).
    """
    folder = resolve_cifar_folder(data_path)
    files = _cifar_files(folder, usage)
    if not files:
        raise UsageError(f"{folder}: no {'data_batch*' if usage == 'train' else 'test_batch*'}.bin file")
    kw: Dict[str, object] = {}
    if sampler is not None:
        kw["sampler"] = sampler
    else:
        kw["shuffle"] = shuffle
        if num_shards is not None and num_shards > 1:
            kw["num_shards"] = num_shards
            kw["shard_id"] = shard_id
    full = all(os.path.getsize(f) == CIFAR_RECORD_BYTES * CIFAR_RECORDS_PER_FILE for f in files)
    if full:
        dataset = ds.Cifar10Dataset(folder, usage=usage, num_parallel_workers=num_parallel_workers, **kw)
        return dataset, f"Cifar10Dataset {folder} ({usage}, {len(files) * CIFAR_RECORDS_PER_FILE} records)"
    images, labels = read_cifar10_bin(folder, usage)
    dataset = ds.GeneratorDataset(
        _CifarRecords(images, labels), column_names=["image", "label"], python_multiprocessing=False, **kw
    )
    return dataset, (
        f"{folder} ({usage}, {len(labels)} records; files are not 10000 records each, which "
        "Cifar10Dataset requires, so read with numpy)"
    )


def build_pipeline(
    source: ds.Dataset, batch_size: int, image_size: int, train: bool, workers: int = 2, shuffle_buffer: int = 1000
) -> ds.Dataset:
    """The tutorials' create_dataset pipeline on ``source`` (augmentation only when ``train``)."""
    ops_img = []
    if train:
        ops_img += [vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip()]
    if image_size != 32:
        ops_img.append(vision.Resize((image_size, image_size)))
    ops_img += [
        vision.Rescale(1.0 / 255.0, 0.0),
        vision.Normalize(CIFAR_MEAN, CIFAR_STD),
        vision.HWC2CHW(),
    ]
    dataset = source.map(operations=transforms.TypeCast(ms.int32), input_columns="label")
    dataset = dataset.map(operations=ops_img, input_columns="image", num_parallel_workers=workers)
    if train:
        dataset = dataset.shuffle(buffer_size=shuffle_buffer)
    return dataset.batch(batch_size=batch_size, drop_remainder=train)
