"""Files and folders only their owner can read: every file mslaunch writes that can hold a value of
the environment (plans, job records, rank logs, env dumps, reports) is created through here.

The modes are given at creation (``os.open``/``os.mkdir``), so no window exists in which the file
has wider bits; the umask only removes bits, so 0600 stays 0600 under any umask.
"""

from __future__ import annotations

import os

#: Mode of every file mslaunch writes that may hold a value of the environment.
PRIVATE_FILE = 0o600
#: Mode of the job directory and of every folder mslaunch creates inside it.
PRIVATE_DIR = 0o700

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def open_private(path: str, append: bool = True) -> int:
    """Open ``path`` for writing, creating it with mode 0600; returns the descriptor.

    Args:
        append: append to an existing file (a rank log of a restarted rank); else truncate it.

    Raises:
        OSError: it cannot be opened.
    """
    flags = os.O_WRONLY | os.O_CREAT | _CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    return os.open(path, flags, PRIVATE_FILE)


def makedirs_private(path: str) -> None:
    """``mkdir -p path``, ``path`` itself created with mode 0700 (its missing parents as ``mkdir -p``
    makes them; an existing ``path`` is left as it is).

    Raises:
        OSError: it cannot be created.
    """
    os.makedirs(path, mode=PRIVATE_DIR, exist_ok=True)
