"""Stack dumps of running processes on this machine: py-spy, else the kernel's view from /proc.

One file per process, ``<dir>/rank<R>.pid<P>.txt`` (``scheduler.pid<P>.txt``): the rank's process
and each of its descendants.  The file starts with a ``# mslaunch stack dump`` header naming the
tool; then ``py-spy dump --native`` output (every thread's Python stack, native frames where py-spy
can unwind them), or ``py-spy dump`` without ``--native`` when that fails, or, where py-spy is
missing or fails, each thread's state, ``wchan`` and kernel stack (``/proc/<pid>/task/<tid>/stack``,
readable by root) — said so in the file.  Processes are dumped at once (a thread each), every
py-spy call bounded by :data:`PYSPY_TIMEOUT`.

This module also runs stand-alone on remote hosts (``python -m launcher.execution.stackdump DIR
NAME=PID ...``): the ssh agents and Slurm's ``srun`` on a node call it, so it uses the stdlib only.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["PYSPY_TIMEOUT", "descendants", "dump_process", "dump_tree", "dump_many", "pyspy_path"]

#: Seconds one py-spy call may take.
PYSPY_TIMEOUT = 10.0


def pyspy_path() -> Optional[str]:
    """py-spy next to this interpreter (the venv's wheel), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def descendants(pid: int) -> List[int]:
    """Every descendant of ``pid`` (from /proc's children lists), breadth first."""
    out: List[int] = []
    todo = [pid]
    while todo:
        cur = todo.pop(0)
        kids: List[int] = []
        try:
            for tid in os.listdir(f"/proc/{cur}/task"):
                with open(f"/proc/{cur}/task/{tid}/children") as fh:
                    kids.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            pass
        for k in kids:
            if k not in out and k != pid:
                out.append(k)
                todo.append(k)
    return out


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read().strip()
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"


def proc_view(pid: int) -> str:
    """Each thread's name, state, wchan and kernel stack from /proc."""
    lines = [f"cmdline: {_read(f'/proc/{pid}/cmdline').replace(chr(0), ' ').strip()}"]
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as exc:
        return f"process {pid}: {exc.strerror}\n"
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        state = next((ln.split(":", 1)[1].strip() for ln in _read(f"{base}/status").splitlines() if ln.startswith("State:")), "?")
        lines.append(f'task {tid} [{state}] "{_read(f"{base}/comm")}"  wchan: {_read(f"{base}/wchan") or "0"}')
        stack = _read(f"{base}/stack")
        lines.extend("    kernel: " + s for s in stack.splitlines() if s)
    return "\n".join(lines) + "\n"


def _pyspy(exe: str, pid: int, native: bool) -> Tuple[bool, str]:
    argv = [exe, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=PYSPY_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return False, f"py-spy took over {PYSPY_TIMEOUT:g} s"
    except OSError as exc:
        return False, f"py-spy could not run: {exc.strerror}"
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 or "Thread " not in text:
        return False, (text.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:300]
    return True, text


def dump_process(pid: int, path: str, label: str) -> str:
    """Dump one process into ``path``; returns the tool used (``py-spy --native``, ``py-spy``, ``/proc``)."""
    exe = pyspy_path()
    why = "py-spy is not installed (pip install py-spy)"
    body, tool = "", "/proc"
    if exe is not None:
        for native in (True, False):
            ok, text = _pyspy(exe, pid, native)
            if ok:
                body, tool = text, "py-spy --native" if native else "py-spy"
                break
            why = f"py-spy failed: {text}"
    if tool == "/proc":
        body = f"# {why}; the kernel's view from /proc instead (no Python frames)\n" + proc_view(pid)
    head = f"# mslaunch stack dump: {label}, pid {pid}, {time.strftime('%Y-%m-%dT%H:%M:%S')}, tool: {tool}\n"
    with open(path, "w") as fh:
        fh.write(head + body)
    return tool


def dump_tree(pid: int, folder: str, name: str) -> List[str]:
    """Dump ``pid`` and its descendants into ``folder`` (``<name>.pid<P>.txt`` each); returns the files."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return dump_many(folder, [(name, p) for p in [pid] + descendants(pid)])


def dump_many(folder: str, targets: Sequence[Tuple[str, int]]) -> List[str]:
    """Dump every ``(name, pid)`` at once (a thread each); returns the files written."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    files: Dict[int, str] = {}

    def one(idx: int, name: str, pid: int) -> None:
        path = os.path.join(folder, f"{name}.pid{pid}.txt")
        try:
            dump_process(pid, path, name)
            files[idx] = path
        except OSError:
            pass

    threads = [threading.Thread(target=one, args=(i, n, p), daemon=True) for i, (n, p) in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PYSPY_TIMEOUT * 2 + 5)
    return [files[i] for i in sorted(files)]


def main(argv: Sequence[str]) -> int:
    """``stackdump DIR NAME=PID ...``: dump each process and its descendants; prints the files."""
    if len(argv) < 1:
        sys.stderr.write("usage: stackdump DIR NAME=PID ...\n")
        return 2
    folder, targets = argv[0], []
    for item in argv[1:]:
        name, _, pid = item.partition("=")
        if pid.isdigit():
            targets.extend((name, p) for p in [int(pid)] + descendants(int(pid)))
    for path in dump_many(folder, targets):
        sys.stdout.write(path + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
