"""Files over SFTP: write a file atomically on a host (and read it back), read a file."""

from __future__ import annotations

import os
import posixpath
import threading
from typing import List

import paramiko

from launcher.errors import LaunchError
from launcher.execution.ssh.connection import SshConnection


def put_file(conn: SshConnection, path: str, content: bytes, mode: int = 0o600) -> None:
    """Write ``content`` to ``path`` on the host atomically (``mkdir -p`` its folder), read it
    back and compare.

    Raises:
        LaunchError: the file cannot be written or reads back different.
    """
    sftp = conn.sftp()
    try:
        folder = posixpath.dirname(path)
        parts: List[str] = []
        while folder not in ("", "/"):
            try:
                sftp.stat(folder)
                break
            except IOError:
                parts.append(folder)
                folder = posixpath.dirname(folder)
        for d in reversed(parts):
            try:
                sftp.mkdir(d, mode=0o700)
            except IOError:
                sftp.stat(d)  # created meanwhile (shared filesystem): fine; else raise
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        with sftp.open(tmp, "wb") as fh:
            fh.write(content)
        sftp.chmod(tmp, mode)
        sftp.posix_rename(tmp, path)
        with sftp.open(path, "rb") as fh:
            back = fh.read()
    except (IOError, OSError, paramiko.SSHException) as exc:
        raise LaunchError(f"cannot write {path} on {conn.target.label}: {exc}") from None
    finally:
        sftp.close()
    if back != content:
        raise LaunchError(
            f"{path} on {conn.target.label} reads back different from what was written; check the remote disk"
        )


def read_file(conn: SshConnection, path: str, limit: int = 1 << 20) -> bytes:
    """The content of ``path`` on the host.

    Raises:
        LaunchError: missing or unreadable (the message names host and path).
    """
    sftp = conn.sftp()
    try:
        with sftp.open(path, "rb") as fh:
            return fh.read(limit)
    except IOError as exc:
        if getattr(exc, "errno", None) == 2:
            raise LaunchError(f"{path} does not exist on {conn.target.label}") from None
        raise LaunchError(f"cannot read {path} on {conn.target.label}: {exc}") from None
    finally:
        sftp.close()
