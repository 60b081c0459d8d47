"""The health check's channels to one host's probe: JSON lines out, JSON lines in.

:class:`ProbeLink` is one probe (a reader thread fills a queue of its answers); :class:`LocalLink`
runs it as a child of mslaunch for ``localhost``, :class:`SshLink` over an SSH session.  Both
end their probe within a bounded time (:meth:`ProbeLink.close`, :meth:`ProbeLink.reap`), so a
host that stopped answering never holds the check up.  :mod:`launcher.execution.checks.health`
drives them.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from typing import Any, Dict, List, Mapping, Optional


class ProbeLink:
    """One probe: send JSON lines, receive JSON lines (a reader thread fills a queue)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.dead: Optional[str] = None
        self.pid: Optional[int] = None  #: the probe's pid on its host, once it answered ``start``
        #: addresses whose connection to the probe's sink it refused (no or a bad token)
        self.refused: List[str] = []

    def _pump(self, read: Any) -> None:
        buf = b""
        try:
            while True:
                chunk = read(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.lines.put(line.decode("utf-8", "replace"))
        except Exception:
            pass
        self.lines.put(None)

    def send(self, obj: Dict[str, Any]) -> None:
        raise NotImplementedError

    def recv(self, deadline: float) -> Dict[str, Any]:
        """The next answer, or ``{"error": ...}`` when the probe ended or ``deadline`` passed."""
        if self.dead:
            return {"error": self.dead}
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.dead = "no answer in time"
            return {"error": self.dead}
        if line is None:
            self.dead = f"the probe ended{self._said()}"
            return {"error": self.dead}
        try:
            data = json.loads(line)
        except ValueError:
            return {"error": f"the probe said {line[:200]!r}"}
        if not isinstance(data, dict):
            return {"error": f"the probe said {line[:200]!r}"}
        self.refused += [str(a) for a in data.pop("refused", None) or ()]
        return data

    def _said(self) -> str:
        return ""

    def end(self) -> None:
        """Ask the probe to exit (``quit``, then the end of its stdin)."""
        raise NotImplementedError

    def reap(self, deadline: float, kill: float) -> None:
        """Wait for the probe to exit until ``deadline``, then kill it (waiting ``kill`` seconds at most)."""
        raise NotImplementedError


class LocalLink(ProbeLink):
    def __init__(self, host: str, argv: List[str], env: Mapping[str, str]) -> None:
        super().__init__(host)
        import os

        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
            start_new_session=True,
        )
        threading.Thread(target=self._pump, args=(self.proc.stdout.read1,), daemon=True).start()  # type: ignore[union-attr]  # stdout=PIPE: a BufferedReader

    def send(self, obj: Dict[str, Any]) -> None:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())  # type: ignore[union-attr]  # stdin=PIPE
            self.proc.stdin.flush()  # type: ignore[union-attr]  # stdin=PIPE
        except OSError as exc:
            self.dead = self.dead or f"the probe ended: {exc}"

    def _said(self) -> str:
        try:
            err = self.proc.stderr.read1(4096).decode("utf-8", "replace").strip()  # type: ignore[union-attr]  # stderr=PIPE: a BufferedReader
        except Exception:
            err = ""
        return f": {err.splitlines()[-1]}" if err else ""

    def end(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]  # stdin=PIPE
        except OSError:
            pass

    def reap(self, deadline: float, kill: float) -> None:
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            import os
            import signal

            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class SshLink(ProbeLink):
    def __init__(self, host: str, conn: Any, command: str) -> None:
        super().__init__(host)
        self.conn = conn
        self.chan = conn.open_channel()
        self.chan.exec_command(command)
        threading.Thread(target=self._pump, args=(self.chan.recv,), daemon=True).start()

    def send(self, obj: Dict[str, Any]) -> None:
        self.conn.send(self.chan, (json.dumps(obj) + "\n").encode())

    def _said(self) -> str:
        try:
            err = (
                self.chan.recv_stderr(4096).decode("utf-8", "replace").strip() if self.chan.recv_stderr_ready() else ""
            )
        except Exception:
            err = ""
        return f": {err.splitlines()[-1]}" if err else ""

    def end(self) -> None:
        self.conn.send(self.chan, (json.dumps({"op": "quit"}) + "\n").encode())
        self.conn.send_eof(self.chan)

    def reap(self, deadline: float, kill: float) -> None:
        """Wait for the probe's exit until ``deadline``; then kill it by its pid (from ``start``),
        waiting ``kill`` seconds at most: a host whose link is gone never answers (opening the
        session would wait the connect timeout); the probe's own lifetime ends it there."""
        while not self.chan.exit_status_ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.chan.exit_status_ready() and self.pid is not None:

            def run() -> None:
                try:
                    self.conn.run(f"kill -9 {int(self.pid)}", timeout=kill)  # type: ignore[arg-type]  # self.pid checked not None above (a closure loses the narrowing)
                except Exception:
                    pass  # the probe's own lifetime ends it

            t = threading.Thread(target=run, name=f"health-kill-{self.host}", daemon=True)
            t.start()
            t.join(kill)
        self.chan.close()
