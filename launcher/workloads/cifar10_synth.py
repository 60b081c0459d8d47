"""Synthetic CIFAR-10 in CIFAR-10's own binary layout (pure numpy; no MindSpore import).

Writes ``DIR/cifar-10-batches-bin/``, byte-for-byte the layout of the real
``cifar-10-binary.tar.gz`` so ``mindspore.dataset.Cifar10Dataset`` (and every other CIFAR-10
binary reader) reads it unchanged::

    DIR/cifar-10-batches-bin/
        batches.meta.txt      the 10 class names, one a line ("airplane" ... "truck")
        data_batch_1.bin      training records; the N train records are split over the five
        ...                   files as evenly as possible (file i gets N//5, the first N%5 one more)
        data_batch_5.bin
        test_batch.bin        the M test records

    record = 1 label byte (0..9) + 3072 pixel bytes: the 1024 red values, then the 1024 green,
             then the 1024 blue values of a 32x32 image, each plane row-major (CHW, uint8).

The images carry a class signal a ResNet learns within a few hundred steps, and which survives
CIFAR's random crop (pad 4) and horizontal flip: each class has its own colour (a dominant hue
over the whole image) and its own low-frequency pattern (horizontal stripes of a class-specific
frequency plus a radial blob); every image adds a random per-image brightness shift and
per-pixel Gaussian noise, so no two images are identical.

Output is a pure function of ``(train, test, seed)``: the train and test sets come from
separate random streams, so the train set for a seed does not depend on ``test``.

Every file is written to a temporary name in the same directory and moved into place with
``os.replace``, so a reader never sees a partial file and an interrupted run leaves earlier
files intact.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import List, Optional, Sequence

import numpy as np

#: The folder name CIFAR-10's binary tarball unpacks to (and Cifar10Dataset is pointed at).
FOLDER = "cifar-10-batches-bin"
CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
META_FILE = "batches.meta.txt"
IMAGE_BYTES = 3 * 32 * 32
RECORD_BYTES = 1 + IMAGE_BYTES

# One RGB colour per class, well apart from each other (0..255).
_COLOURS = np.array(
    [
        [200, 60, 60],
        [60, 200, 60],
        [60, 60, 200],
        [200, 200, 60],
        [200, 60, 200],
        [60, 200, 200],
        [230, 140, 40],
        [130, 60, 160],
        [110, 110, 110],
        [230, 230, 230],
    ],
    dtype=np.float32,
)


class SynthDataError(Exception):
    """A count is out of range or the data cannot be written (one line; ``path`` names the file).

    The workloads stand apart from the launcher's layers, so this is their own exception; the
    ``mslaunch data`` command turns it into the launcher's one-line error.
    """

    def __init__(self, message: str, path: Optional[str] = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.message = message
        self.path = path


def _write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``:
    readers see the old file or the whole new one, never a part; a failed write leaves no
    temporary file.

    Raises:
        OSError: the write or the rename failed (the caller names the folder).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _templates() -> np.ndarray:
    """The 10 class templates, float32 of shape (10, 3, 32, 32), values around 0..255."""
    y, x = np.mgrid[0:32, 0:32].astype(np.float32)
    out = np.empty((10, 3, 32, 32), dtype=np.float32)
    for c in range(10):
        # Horizontal stripes: vary along y only, so a horizontal flip leaves them unchanged and
        # a crop of +-4 px only shifts their phase.
        stripes = np.sin(2.0 * np.pi * (c % 5 + 1) * y / 32.0)
        # A radial blob whose centre depends on the class (mirror-symmetric pairs of classes
        # differ by colour anyway).
        cy, cx = 8 + 16 * ((c // 5) % 2), 16
        blob = np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * 7.0**2))
        pattern = 35.0 * stripes + 50.0 * blob
        for ch in range(3):
            out[c, ch] = 0.75 * _COLOURS[c, ch] + pattern * (1.0 if ch == c % 3 else 0.4)
    return out


def _records(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` records as a uint8 array of shape (n, 3073): label byte, then CHW pixels."""
    labels = np.arange(n, dtype=np.int64) % 10
    rng.shuffle(labels)
    templates = _templates()
    out = np.empty((n, RECORD_BYTES), dtype=np.uint8)
    out[:, 0] = labels
    chunk = 1024
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        lab = labels[start:stop]
        img = templates[lab]
        img = img + rng.normal(0.0, 25.0, size=(stop - start, 1, 1, 1)).astype(np.float32)
        img = img + rng.normal(0.0, 45.0, size=img.shape).astype(np.float32)
        out[start:stop, 1:] = np.clip(np.rint(img), 0, 255).astype(np.uint8).reshape(stop - start, -1)
    return out


def _split(n: int, parts: int) -> List[int]:
    """Sizes of ``parts`` near-equal consecutive pieces of ``n`` (the first ``n % parts`` get one more)."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def write_synthetic_cifar10(directory: str, train: int = 2000, test: int = 500, seed: int = 0) -> str:
    """Write a synthetic CIFAR-10 (binary version) under ``directory``.

    Args:
        directory: parent folder; created if missing. The data goes to ``directory/cifar-10-batches-bin``.
        train: number of training records (>= 5, spread over data_batch_1..5.bin).
        test: number of test records (>= 1, in test_batch.bin).
        seed: the output is a pure function of (train, test, seed).

    Returns:
        The path of the ``cifar-10-batches-bin`` folder written.

    Raises:
        SynthDataError: a count is out of range, or the folder cannot be written.
    """
    if train < len(TRAIN_FILES):
        raise SynthDataError(f"--train must be at least {len(TRAIN_FILES)} (one record per batch file), got {train}")
    if test < 1:
        raise SynthDataError(f"--test must be at least 1, got {test}")
    if seed < 0:
        raise SynthDataError(f"--seed must be >= 0, got {seed}")
    out_dir = os.path.join(os.fspath(directory), FOLDER)
    try:
        os.makedirs(out_dir, exist_ok=True)
        train_rec = _records(train, np.random.default_rng([seed, 0]))
        test_rec = _records(test, np.random.default_rng([seed, 1]))
        start = 0
        for name, size in zip(TRAIN_FILES, _split(train, len(TRAIN_FILES))):
            _write_atomic(os.path.join(out_dir, name), train_rec[start : start + size].tobytes())
            start += size
        _write_atomic(os.path.join(out_dir, TEST_FILE), test_rec.tobytes())
        _write_atomic(os.path.join(out_dir, META_FILE), ("\n".join(CLASSES) + "\n").encode("ascii"))
    except OSError as exc:
        raise SynthDataError(f"cannot write synthetic CIFAR-10: {exc.strerror or exc}", path=out_dir) from exc
    return out_dir


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m launcher.workloads.cifar10_synth DIR [--train N] [--test M] [--seed S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m launcher.workloads.cifar10_synth",
        description="Write a synthetic CIFAR-10 (binary layout) to DIR/cifar-10-batches-bin.",
    )
    parser.add_argument("dir")
    parser.add_argument("--train", type=int, default=2000, help="training records (default 2000)")
    parser.add_argument("--test", type=int, default=500, help="test records (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    try:
        path = write_synthetic_cifar10(args.dir, train=args.train, test=args.test, seed=args.seed)
    except SynthDataError as exc:
        sys.stderr.write(f"cifar10_synth: error: {exc}\n")
        return 2
    print(f"wrote {args.train} train + {args.test} test records (seed {args.seed}) to {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
