"""The one thin reader behind every ``read_*(path)`` of the planning layer."""
from __future__ import annotations

from typing import Type

from launcher.errors import MsLaunchError


def read_text(path: str, error: Type[MsLaunchError], missing: str, kind: str) -> str:
    """Read a UTF-8 text file, turning every failure into one ``error`` naming ``path``.

    Args:
        path: the file.
        error: the MsLaunchError subclass to raise.
        missing: the message when the file does not exist (say what to pass instead).
        kind: what the file should be, for the other messages (``"a hostfile"``).

    Raises:
        error: missing file, a directory, not UTF-8, or unreadable.
    """
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise error(missing, path=path) from None
    except IsADirectoryError:
        raise error(f"is a directory, not {kind}", path=path) from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason}); is this {kind}?", path=path) from None
    except OSError as exc:
        raise error(f"cannot read {kind}: {exc.strerror or exc}", path=path) from None
