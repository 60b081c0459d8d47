"""The synthetic CIFAR-10 writer: exact binary layout, determinism, atomic writes, and (with
MindSpore) that MindSpore reads it and the trainer's shards are disjoint and cover the set."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from launcher.errors import MsLaunchError
from launcher.workloads import cifar10_synth as synth

REC = 3073
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
TRAIN_NAMES = [f"data_batch_{i}.bin" for i in range(1, 6)]


def _records(path: Path) -> np.ndarray:
    raw = np.fromfile(path, dtype=np.uint8)
    assert raw.size % REC == 0, path
    return raw.reshape(-1, REC)


def _train_records(folder: Path) -> np.ndarray:
    return np.concatenate([_records(folder / n) for n in TRAIN_NAMES])


def _bytes_of(folder: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_layout_sizes_records_labels_and_meta(tmp_path: Path) -> None:
    out = synth.write_synthetic_cifar10(str(tmp_path), train=23, test=7, seed=0)
    folder = tmp_path / "cifar-10-batches-bin"
    assert out == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(TRAIN_NAMES + ["test_batch.bin", "batches.meta.txt"])
    # 23 records over 5 files: 5,5,5,4,4 (the first 23 % 5 files get one more).
    assert [(folder / n).stat().st_size for n in TRAIN_NAMES] == [5 * REC, 5 * REC, 5 * REC, 4 * REC, 4 * REC]
    assert (folder / "test_batch.bin").stat().st_size == 7 * REC
    assert (folder / "batches.meta.txt").read_text(encoding="ascii") == "\n".join(CLASSES) + "\n"
    train = _train_records(folder)
    test = _records(folder / "test_batch.bin")
    assert train.shape == (23, REC) and test.shape == (7, REC)
    for rec in (train, test):
        assert rec[:, 0].max() <= 9  # uint8: >= 0
    # Labels are balanced: i % 10 for i < N, in a shuffled order.
    assert sorted(train[:, 0].tolist()) == sorted(i % 10 for i in range(23))
    # No two images are the same (every image has its own noise).
    assert len({r[1:].tobytes() for r in train}) == 23
    for p in folder.iterdir():
        assert p.stat().st_mode & 0o777 == 0o644, p


def test_pixels_are_chw_planes_with_a_class_colour(tmp_path: Path) -> None:
    """Bytes 1..1024 are the red plane, 1025..2048 green, 2049..3072 blue (row-major): class 0's
    colour is red, class 1's green, class 2's blue, so the plane means must show it."""
    synth.write_synthetic_cifar10(str(tmp_path), train=300, test=5, seed=1)
    train = _train_records(tmp_path / "cifar-10-batches-bin")
    planes = train[:, 1:].reshape(-1, 3, 1024).astype(np.float64).mean(axis=2)  # (N, RGB)
    for label, channel in ((0, 0), (1, 1), (2, 2)):
        mean = planes[train[:, 0] == label].mean(axis=0)
        others = [c for c in range(3) if c != channel]
        assert mean[channel] > max(mean[others]) + 40, (label, mean)
    # The class is recoverable from the mean colour alone by nearest class centroid.
    centroids = np.stack([planes[train[:, 0] == c].mean(axis=0) for c in range(10)])
    guess = np.argmin(((planes[:, None, :] - centroids[None]) ** 2).sum(axis=2), axis=1)
    assert (guess == train[:, 0]).mean() > 0.9


def test_deterministic_for_a_seed_and_seeds_differ(tmp_path: Path) -> None:
    a = _bytes_of(Path(synth.write_synthetic_cifar10(str(tmp_path / "a"), train=40, test=10, seed=7)))
    b = _bytes_of(Path(synth.write_synthetic_cifar10(str(tmp_path / "b"), train=40, test=10, seed=7)))
    c = _bytes_of(Path(synth.write_synthetic_cifar10(str(tmp_path / "c"), train=40, test=10, seed=8)))
    assert a == b
    for name in TRAIN_NAMES + ["test_batch.bin"]:
        assert a[name] != c[name], name
    # The train set does not depend on the test count (separate random streams).
    d = _bytes_of(Path(synth.write_synthetic_cifar10(str(tmp_path / "d"), train=40, test=3, seed=7)))
    assert all(a[n] == d[n] for n in TRAIN_NAMES)


def test_writes_are_atomic_replaces_in_the_same_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[tuple] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        calls.append((src, dst, os.path.getsize(src)))
        real_replace(src, dst)

    monkeypatch.setattr(synth.os, "replace", spy)
    folder = Path(synth.write_synthetic_cifar10(str(tmp_path), train=10, test=2, seed=0))
    names = TRAIN_NAMES + ["test_batch.bin", "batches.meta.txt"]
    assert [Path(dst).name for _, dst, _ in calls] == names
    for src, dst, size in calls:
        assert os.path.dirname(src) == os.path.dirname(dst) == str(folder)  # same filesystem: atomic
        assert Path(src).name.startswith(".") and src.endswith(".tmp")
        assert os.path.getsize(dst) == size  # the complete file was written before the move
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)  # no temp file left


def test_a_failed_write_leaves_old_files_intact_and_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = Path(synth.write_synthetic_cifar10(str(tmp_path), train=10, test=2, seed=0))
    before = _bytes_of(folder)
    real_replace = os.replace
    count = {"n": 0}

    def failing(src: str, dst: str) -> None:
        count["n"] += 1
        if count["n"] == 3:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(synth.os, "replace", failing)
    with pytest.raises(synth.SynthDataError, match="No space left on device"):
        synth.write_synthetic_cifar10(str(tmp_path), train=10, test=2, seed=1)
    after = _bytes_of(folder)
    assert sorted(after) == sorted(before)  # the failed temp file was removed
    # Files 1-2 were replaced whole (seed 1), file 3 onwards are untouched (seed 0).
    assert after["data_batch_1.bin"] != before["data_batch_1.bin"]
    for name in TRAIN_NAMES[2:] + ["test_batch.bin", "batches.meta.txt"]:
        assert after[name] == before[name], name


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"train": 4}, "--train must be at least 5"),
        ({"test": 0}, "--test must be at least 1"),
        ({"seed": -1}, "--seed must be >= 0"),
    ],
)
def test_bad_counts_raise_a_one_line_error(tmp_path: Path, kwargs: dict, message: str) -> None:
    args = {"train": 10, "test": 2, "seed": 0, **kwargs}
    with pytest.raises(synth.SynthDataError, match=message):
        synth.write_synthetic_cifar10(str(tmp_path), **args)
    assert not (tmp_path / "cifar-10-batches-bin").exists()


@pytest.mark.e2e
def test_module_main_and_cli_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher.workloads.cifar10_synth",
            str(tmp_path / "m"),
            "--train",
            "12",
            "--test",
            "3",
            "--seed",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "m" / "cifar-10-batches-bin"
    assert proc.stdout.strip() == f"wrote 12 train + 3 test records (seed 5) to {folder}"

    from typer.testing import CliRunner

    from launcher.cli.data import app

    result = CliRunner().invoke(
        app, ["synth-cifar10", str(tmp_path / "c"), "--train", "12", "--test", "3", "--seed", "5"]
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'c' / 'cifar-10-batches-bin'}: 12 train records" in result.output
    assert _bytes_of(tmp_path / "m" / "cifar-10-batches-bin") == _bytes_of(tmp_path / "c" / "cifar-10-batches-bin")

    bad = CliRunner().invoke(app, ["synth-cifar10", str(tmp_path / "x"), "--train", "2"])
    assert isinstance(bad.exception, MsLaunchError)  # the top-level app prints it and exits 2
    assert bad.exception.exit_code == 2


# --------------------------------------------------------------------------------------------
# With MindSpore: its reader and the trainer's shards
# --------------------------------------------------------------------------------------------


def _hwc_hashes(records: np.ndarray) -> List[str]:
    """sha1 of each record's image as MindSpore yields it (HWC uint8)."""
    imgs = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return [hashlib.sha1(np.ascontiguousarray(im).tobytes()).hexdigest() for im in imgs]


def _shard_hashes(data_path: str, usage: str, shard: int, shuffle: bool) -> List[str]:
    import mindspore.dataset as ds

    from launcher.workloads.cifar10_data import open_cifar10

    ds.config.set_seed(3)  # what every rank of the trainer does (same --seed on all ranks)
    source, _ = open_cifar10(data_path, usage, num_shards=2, shard_id=shard, shuffle=shuffle)
    return [
        hashlib.sha1(np.ascontiguousarray(img).tobytes()).hexdigest()
        for img, _ in source.create_tuple_iterator(num_epochs=1, output_numpy=True)
    ]


@pytest.mark.mindspore
@pytest.mark.parametrize("shuffle", [True, False])
def test_trainer_shards_are_disjoint_and_cover_a_small_set(tmp_path: Path, shuffle: bool) -> None:
    """2 shards over 100 records (the numpy-backed source the trainer uses for small files),
    with the trainer's shuffled sampler and a sequential one."""
    synth.write_synthetic_cifar10(str(tmp_path), train=100, test=2, seed=0)
    everything = _hwc_hashes(_train_records(tmp_path / "cifar-10-batches-bin"))
    assert len(set(everything)) == 100
    s0 = _shard_hashes(str(tmp_path), "train", 0, shuffle)
    s1 = _shard_hashes(str(tmp_path), "train", 1, shuffle)
    assert len(s0) == len(s1) == 50
    assert len(set(s0)) == 50 and len(set(s1)) == 50
    assert not set(s0) & set(s1)
    assert set(s0) | set(s1) == set(everything)


@pytest.mark.mindspore
def test_uneven_shards_are_padded_by_mindspore(tmp_path: Path) -> None:
    """With a count the ranks do not divide, MindSpore's DistributedSampler pads every shard to
    the same length by wrapping around: 101 records -> 51 + 51, one record in both shards."""
    synth.write_synthetic_cifar10(str(tmp_path), train=101, test=2, seed=0)
    everything = _hwc_hashes(_train_records(tmp_path / "cifar-10-batches-bin"))
    s0 = _shard_hashes(str(tmp_path), "train", 0, True)
    s1 = _shard_hashes(str(tmp_path), "train", 1, True)
    assert len(s0) == len(s1) == 51
    assert set(s0) | set(s1) == set(everything)
    assert len(set(s0) & set(s1)) == 1


@pytest.mark.mindspore
def test_cifar10dataset_reads_the_layout_and_shards_it(tmp_path: Path) -> None:
    """A 10000-record test_batch.bin is what MindSpore's own Cifar10Dataset reads (it needs 10000
    records per file): same images (HWC) and labels in file order, and 2 shards disjoint + complete."""
    import mindspore.dataset as ds

    from launcher.workloads.cifar10_data import open_cifar10

    synth.write_synthetic_cifar10(str(tmp_path), train=5, test=10000, seed=2)
    records = _records(tmp_path / "cifar-10-batches-bin" / "test_batch.bin")
    source, desc = open_cifar10(str(tmp_path), "test", shuffle=False)
    assert desc.startswith("Cifar10Dataset ")
    assert isinstance(source, ds.Cifar10Dataset)
    rows = list(source.create_tuple_iterator(num_epochs=1, output_numpy=True))
    assert len(rows) == 10000
    images = np.stack([img for img, _ in rows])
    labels = np.array([int(lab) for _, lab in rows])
    assert np.array_equal(labels, records[:, 0])
    assert np.array_equal(images, records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    s0 = _shard_hashes(str(tmp_path), "test", 0, shuffle=True)
    s1 = _shard_hashes(str(tmp_path), "test", 1, shuffle=True)
    assert len(s0) == len(s1) == 5000
    assert not set(s0) & set(s1)
    assert set(s0) | set(s1) == set(_hwc_hashes(records))
