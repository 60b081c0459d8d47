"""Helpers of the fault tests (``tests/execution/test_faults_*.py``): find every process a job caused.

A fault test gives every process of its job a unique marker in its command line (see
``tests/scripts/escaper.py``), snapshots mslaunch's descendants before hurting it, and then
waits until none of them, and no process carrying the marker, is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Dict, Iterable, List, Tuple

import psutil

from tests.harness.cli import mslaunch_argv, run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ESCAPER = os.path.join(HERE, "scripts", "escaper.py")


def new_marker() -> str:
    return "mslfault" + uuid.uuid4().hex[:12]


def marked(marker: str) -> List[int]:
    """Pids of live (non-zombie) processes with ``marker`` in their command line."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in part for part in (p.info["cmdline"] or ())):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def tree(pid: int) -> Dict[int, float]:
    """pid -> create time of ``pid``'s descendants (a snapshot)."""
    out = {}
    try:
        for c in psutil.Process(pid).children(recursive=True):
            try:
                out[c.pid] = c.create_time()
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def alive(snapshot: Dict[int, float]) -> List[int]:
    """Pids of ``snapshot`` that still run (same create time, not a zombie)."""
    left = []
    for pid, created in snapshot.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.Error:
            pass
    return left


def wait_for(cond, timeout: float, interval: float = 0.05):
    """Poll ``cond()`` until it returns a truthy value or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_or_fail(cond, timeout: float, what: str, interval: float = 0.05):
    """:func:`wait_for`, failing the test with "timed out waiting for <what>" if ``cond`` never holds."""
    value = wait_for(cond, timeout, interval)
    if not value:
        raise AssertionError(f"timed out waiting for {what}")
    return value


def survivors(marker: str, snapshot: Dict[int, float], timeout: float = 20.0) -> List[int]:
    """Wait until nothing marked and nothing of ``snapshot`` runs; what is left then."""
    left = wait_for(lambda: not (marked(marker) or alive(snapshot)), timeout)
    return [] if left else sorted(set(marked(marker)) | set(alive(snapshot)))


def kill_all(pids: Iterable[int]) -> None:
    """Safety net after a failed test: SIGKILL the given pids (found by marker or snapshot)."""
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


class Fault:
    """One fault test's job: ``mslaunch run`` with a unique marker, from ``tmp_path``."""

    def __init__(self, tmp_path, env=None) -> None:
        self.tmp = tmp_path
        self.marker = new_marker()
        self.dir = tmp_path / "job"
        self.piddir = tmp_path / "pids"
        self.piddir.mkdir(exist_ok=True)
        self.env = dict(os.environ if env is None else env, PIDDIR=str(self.piddir))

    def args(self, *prog, np=2, extra=()):
        """The CLI's arguments of ``mslaunch run`` of this job."""
        return [
            "run",
            *(("--np", str(np)) if np is not None else ()),
            "--master-port",
            "auto",
            "--no-sched-wait",
            "--log-dir",
            str(self.dir),
            "--grace",
            "2",
            "--tee",
            "none",
            *extra,
            *prog,
        ]

    def popen(self, *prog, **kw):
        return subprocess.Popen(
            mslaunch_argv(*self.args(*prog, **kw)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=str(self.tmp),
        )

    def run(self, *prog, timeout=120, **kw):
        return run_process(*self.args(*prog, **kw), env=self.env, cwd=str(self.tmp), timeout=timeout)

    def summary(self):
        return json.loads((self.dir / "summary.json").read_text())


def escaper(f: Fault, mode: str, *args: str):
    """The program part of an argv running ``tests/scripts/escaper.py`` with ``f``'s marker."""
    return ("--no-python", sys.executable, ESCAPER, f.marker, mode, *args)


def handles_sigterm(pid: int) -> bool:
    """True once process ``pid`` catches SIGTERM (``SigCgt`` in /proc/<pid>/status): for
    ``python -m launcher run``, from its first statement on (before that the interpreter is
    still starting and SIGTERM would end it with no Python code run)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
    except (OSError, ValueError):
        pass
    return False


def signal_during_startup(proc: "subprocess.Popen[str]", delay: float, sig: int) -> Tuple[Dict[int, float], str, str]:
    """Send ``sig`` to a starting ``mslaunch`` ``delay`` s after its handler is installed (or
    when it ended, if sooner); returns the process tree seen just before, and its output."""
    assert wait_for(lambda: handles_sigterm(proc.pid), 60)
    try:
        proc.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    snapshot = tree(proc.pid)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return snapshot, out, err
