"""Opens a checkpoint that is not there: ``FileNotFoundError: [Errno 2] No such file or directory``.

    missing_file.py [PATH]
"""
import sys


def restore(path):
    with open(path, "rb") as fh:
        return fh.read()


if __name__ == "__main__":
    restore(sys.argv[1] if len(sys.argv) > 1 else "/ckpt/resnet50-3_100.ckpt")
