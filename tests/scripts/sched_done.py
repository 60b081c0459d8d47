"""What the stand-in rank programs of tests/scripts share: a stand-in scheduler that ends once
every worker said ``done``, and the workers' ``done``.

The scheduler starts with the ranks (under mpirun nothing waits for it to listen first), so a
refused connection is retried for up to ``limit`` seconds."""

import os
import socket
import time


def _address():
    return os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])


def serve_until_done(timeout: float = 600.0) -> None:
    """Listen on the scheduler's address until every worker (``MS_WORKER_NUM``, default 1) said
    ``done`` (as MindSpore's scheduler ends); give up after ``timeout`` seconds without a caller."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(_address())
    sock.listen(16)
    sock.settimeout(timeout)
    done = 0
    while done < int(os.environ.get("MS_WORKER_NUM", "1")):  # mslaunch's port probes connect and send nothing
        conn = sock.accept()[0]
        conn.settimeout(10)
        try:
            done += conn.recv(16) == b"done"
        except OSError:
            pass
        conn.close()


def tell_done(limit: float = 60.0) -> None:
    sched = _address()
    deadline = time.monotonic() + limit
    while True:
        try:
            with socket.create_connection(sched, timeout=10) as conn:
                conn.sendall(b"done")
            return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
