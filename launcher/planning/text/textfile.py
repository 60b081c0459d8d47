"""The one thin reader behind every ``read_*(path)`` of the planning layer.

Every input file is read with a size cap (:data:`MAX_TEXT_BYTES` unless the caller passes its
own): a file that is larger, or that never ends (``/dev/zero``), is refused after reading one
byte past the cap, so no input file can make mslaunch allocate more than that.
"""

from __future__ import annotations

from typing import Type

from launcher.errors import MsLaunchError

#: Default cap on an input file (hostfile, env file, hccn.conf): 1 MiB, far above any real one.
MAX_TEXT_BYTES = 1 << 20


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


def read_text(path: str, error: Type[MsLaunchError], missing: str, kind: str, limit: int = MAX_TEXT_BYTES) -> str:
    """Read a UTF-8 text file of at most ``limit`` bytes, turning every failure into one ``error``.

    Line ends are normalised as Python's text mode does (``\\r\\n`` and ``\\r`` become ``\\n``).

    Args:
        path: the file.
        error: the MsLaunchError subclass to raise.
        missing: the message when the file does not exist (say what to pass instead).
        kind: what the file should be, for the other messages (``"a hostfile"``).
        limit: the largest accepted size in bytes.

    Raises:
        error: missing file, a directory, larger than ``limit``, not UTF-8 (naming the line of
            the first bad byte), or unreadable.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise error(missing, path=path) from None
    except IsADirectoryError:
        raise error(f"is a directory, not {kind}", path=path) from None
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
        raise error(f"cannot read {kind}: {getattr(exc, 'strerror', None) or exc}", path=path) from None
    if len(data) > limit:
        raise error(f"larger than {_size(limit)}; is this {kind}?", path=path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"not UTF-8 text ({exc.reason}); is this {kind}?", path=path, line=line) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")
