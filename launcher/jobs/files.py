"""Small file helpers for artefacts mslaunch writes (rank tables, plans, summaries)."""

from __future__ import annotations

import os
import tempfile
from typing import Optional, Union

from launcher.errors import MsLaunchError

__all__ = ["check_writable", "write_atomic"]


def write_atomic(path: str, text: Union[str, bytes], mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one, never a part.

    The text goes to a temporary file in the same folder (``.<name>.<random>.tmp``, created 0600 by
    ``mkstemp`` whatever the umask), is flushed and fsynced, gets ``mode``, and is renamed over
    ``path`` with ``os.replace``; the folder is then
    fsynced (best effort).  On any failure the temporary file is removed and ``path`` is left as
    it was.

    Args:
        path: the destination file; its folder must exist.
        text: the content: ``str`` (written as UTF-8) or ``bytes``.
        mode: permission bits of the new file (not filtered by the umask); 0600 unless the file
            can never hold a value of the environment and others must read it.

    Raises:
        MsLaunchError: naming ``path`` when the folder is missing or not writable, ``path`` is a
            directory, or the disk is full.
    """
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    if os.path.isdir(path):
        raise MsLaunchError("is a directory; give a file name to write", path=path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder)
    except FileNotFoundError:
        raise MsLaunchError(f"cannot write: folder {folder} does not exist", path=path) from None
    except OSError as exc:
        raise MsLaunchError(f"cannot write: {exc.strerror or exc}", path=path) from None
    try:
        try:
            data = text.encode("utf-8") if isinstance(text, str) else text
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise MsLaunchError(f"cannot write: {exc.strerror or exc}", path=path) from None
    _fsync_dir(folder)


def check_writable(path: str, field: Optional[str] = None) -> None:
    """Check, without writing anything, that :func:`write_atomic` can later create or replace ``path``.

    Its folder must exist, be a directory and be writable (``write_atomic`` creates a temporary
    file there); ``path`` must not be a directory.

    Raises:
        MsLaunchError: naming ``field`` (e.g. ``--junit``) and ``path``, saying what is wrong.
    """
    where = f"{field} {path}" if field else path
    if not path or not path.strip():
        raise MsLaunchError("needs a file name", field=field)
    if path.endswith(os.sep) or os.path.isdir(path):
        raise MsLaunchError(f"{where}: is a directory; give a file name to write")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise MsLaunchError(f"{where}: folder {folder} does not exist; create it first")
    if not os.path.isdir(folder):
        raise MsLaunchError(f"{where}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise MsLaunchError(f"{where}: folder {folder} is not writable")


def _fsync_dir(folder: str) -> None:
    """fsync a directory so a rename in it is durable (ignored where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
