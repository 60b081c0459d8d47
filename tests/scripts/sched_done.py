"""What the stand-in rank programs of tests/scripts share: tell the stand-in scheduler ``done``.

The scheduler starts with the ranks (under mpirun nothing waits for it to listen first), so a
refused connection is retried for up to ``limit`` seconds."""
import os
import socket
import time


def tell_done(limit: float = 60.0) -> None:
    sched = (os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"]))
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
