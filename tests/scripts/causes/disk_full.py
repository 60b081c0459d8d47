"""Writes a checkpoint where there is no space: ``OSError: [Errno 28] No space left on device``.

    disk_full.py [PATH]   (default /dev/full, which always answers ENOSPC)
"""
import sys


def save_checkpoint(path):
    with open(path, "wb") as fh:
        fh.write(b"\0" * (1 << 20))
        fh.flush()


if __name__ == "__main__":
    save_checkpoint(sys.argv[1] if len(sys.argv) > 1 else "/dev/full")
