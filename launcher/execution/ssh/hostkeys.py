"""Host keys: known_hosts checking as OpenSSH does it.

Known keys come from the ``UserKnownHostsFile`` list (default ``~/.ssh/known_hosts``) and the
global files.  An unknown key is refused (:class:`RefuseUnknownPolicy`) with a message saying how
to verify and add it, unless ``accept_new`` (``--ssh-accept-new``) or the config's
``StrictHostKeyChecking accept-new``/``no``: then it is trusted and appended to the first
known_hosts file (:class:`AcceptNewPolicy`, trust on first use).  A *changed* key is always
refused (paramiko raises ``BadHostKeyException`` before any policy is asked).
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading

import paramiko

from launcher.errors import LaunchError


def fingerprint(key: paramiko.PKey) -> str:
    """``SHA256:...`` as OpenSSH prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


class UnknownHostKey(LaunchError, paramiko.SSHException):
    """The server's host key is in no known_hosts file (a paramiko ``SSHException`` too, so
    paramiko's ``connect`` lets it through unchanged)."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


class RefuseUnknownPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking yes``: refuse hosts whose key is not known."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key)


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking accept-new``: trust an unknown key and record it.

    The key is added to the client and appended to ``path`` (created 0600, its folder 0700) as
    ``<host> <type> <base64>``.  Keys that *changed* never reach a policy: paramiko refuses them.
    """

    _lock = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            folder = os.path.dirname(self.path)
            if folder and not os.path.isdir(folder):
                os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="ascii") as fh:
                fh.write(line)
