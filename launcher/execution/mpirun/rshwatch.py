"""The mpirun backend's rsh agent wrapper: runs mpirun's ssh to one host and records how it ended.

``python -m launcher.execution.mpirun.rshwatch STATUS_DIR N AGENT... HOST COMMAND...``

mpirun (``plm_rsh_agent``) starts one agent per remote host to run its daemon (``orted``) there,
with ``plm_rsh_no_tree_spawn`` all from this machine: ``AGENT... HOST COMMAND...``, where the
agent is the ``N`` words after ``N`` (the planned ssh command line).  This wrapper runs that
command as its child and, when it ends, writes ``STATUS_DIR/orted_<HOST>.json``::

    {"host", "pid", "started", "ended", "returncode", "stopped"}

``returncode`` follows subprocess (255: ssh lost the connection or the daemon was killed);
``stopped`` is true when the wrapper was asked to stop (mpirun ending its daemons, or mslaunch's
teardown) before ssh ended: such an end is a consequence, not a lost host.  Stop signals are passed
on to ssh.  The wrapper exits with ssh's code, as ssh would.

A daemon whose session ends unasked, with a failure, before any other is the host mpirun lost
(:func:`launcher.execution.mpirun.backend.lost_host`): the backend's own record, by process,
never a reading of mpirun's messages.

Standard library only (it runs once per host and attempt).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List, Optional

#: The records' file name for a host.
RECORD = "orted_{host}.json"


def record_path(status_dir: str, host: str) -> str:
    """Where the record of ``host``'s daemon session goes (a host name is a safe file name here:
    it has no ``/``; anything else is replaced)."""
    safe = "".join(c if c.isalnum() or c in ".-_:" else "_" for c in host)
    return os.path.join(status_dir, RECORD.format(host=safe))


def main(argv: List[str]) -> int:
    if len(argv) < 3 or not argv[1].isdigit() or len(argv) < 3 + int(argv[1]):
        sys.stderr.write("usage: python -m launcher.execution.mpirun.rshwatch STATUS_DIR N AGENT... HOST COMMAND...\n")
        return 2
    status_dir, n = argv[0], int(argv[1])
    command = argv[2:]
    host = command[n]
    stopped = False
    child: Optional["subprocess.Popen[bytes]"] = None

    def on_stop(signum: int, _frame: Any) -> None:
        nonlocal stopped
        stopped = True
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_stop)
    started = time.time()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write(f"mslaunch: cannot run {command[0]!r}: {exc.strerror}\n")
        return 127
    rc = child.wait()
    record = {
        "host": host,
        "pid": child.pid,
        "started": started,
        "ended": time.time(),
        "returncode": rc,
        "stopped": stopped,
    }
    path = record_path(status_dir, host)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # private as every file of the job dir
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # the attempt dir is gone: nobody reads it
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
