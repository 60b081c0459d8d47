"""One Slurm node's facts for ``mslaunch doctor --launcher slurm``: its host name, its Python's
version and MindSpore's (None when it is not installed), as one JSON object on stdout.

Runs on each node of the allocation as ``srun ... python -c <this source>``
(:mod:`launcher.execution.slurm.doctor`).  Standard library only, Python >= 3.6, no imports
from ``launcher``, no annotations.
"""

import importlib.util
import json
import platform
import socket


def main():
    ms = None
    if importlib.util.find_spec("mindspore") is not None:
        from importlib.metadata import version

        try:
            ms = version("mindspore")
        except Exception:
            ms = "?"
    print(json.dumps({"node": socket.gethostname(), "python": platform.python_version(), "mindspore": ms}))


if __name__ == "__main__":
    main()
