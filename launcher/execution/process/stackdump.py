"""Stack dumps of running processes on this machine: py-spy, else the kernel's view from /proc.

One file per process, ``<dir>/rank<R>.pid<P>.txt`` (``scheduler.pid<P>.txt``): the rank's process
and each of its descendants.  The file starts with a ``# mslaunch stack dump`` header naming the
tool; then ``py-spy dump --native`` output (every thread's Python stack, native frames where py-spy
can unwind them), or ``py-spy dump`` without ``--native`` when that fails, or, where py-spy is
missing or fails, each thread's state, ``wchan`` and kernel stack (``/proc/<pid>/task/<tid>/stack``,
readable by root) — said so in the file.  Processes are dumped at once (a thread each), every
py-spy call bounded by :data:`PYSPY_TIMEOUT`.

This module also runs stand-alone on remote hosts (``stackdump --stdout NAME=PID ...``, see
:func:`main`): over the ssh backend's connection (as source text: mslaunch need not be installed
there) and by an ``srun`` on a Slurm node, so it uses the stdlib only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:  # sent to a host, :func:`launcher.execution.probes.program_source` puts proctree's source first
    from launcher.execution.process.proctree import below, proc_table, tree_below
except ImportError:
    pass

__all__ = [
    "PYSPY_TIMEOUT",
    "REMOTE_TIMEOUT",
    "descendants",
    "dump_each",
    "remote_dump",
    "dump_process",
    "dump_many",
    "expand",
    "pyspy_path",
    "rank_of_name",
    "ranks_by_marker",
    "targets",
    "write_dumps",
]

#: Seconds one py-spy call may take.
PYSPY_TIMEOUT = 10.0


def _create_private(path: str) -> int:
    """Create (or truncate) ``path`` with mode 0600, whatever the umask: a dump may show a rank's
    environment (stdlib only, as this module runs alone: :func:`launcher.planning.text.private.open_private`)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)


def pyspy_path(pid: Optional[int] = None) -> Optional[str]:
    """py-spy next to the target's own interpreter (``argv[0]`` of ``pid``: a rank run by a venv's
    Python finds that venv's wheel), else next to this interpreter, else on PATH, else
    ``$MSLAUNCH_PYSPY``."""
    dirs = []
    if pid is not None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                first = fh.read().split(b"\0")[0].decode("utf-8", "replace")
            if os.path.isabs(first):
                dirs.append(os.path.dirname(first))
        except OSError:
            pass
    dirs.append(os.path.dirname(sys.executable))
    for folder in dirs:
        here = os.path.join(folder, "py-spy")
        if os.access(here, os.X_OK):
            return here
    found = shutil.which("py-spy")
    hint = os.environ.get("MSLAUNCH_PYSPY")
    return found or (hint if hint and os.access(hint, os.X_OK) else None)


def descendants(pid: int) -> List[int]:
    """Every descendant of ``pid``, breadth first (from /proc's children lists, else a scan of
    every process)."""
    found = tree_below(pid)
    return below(proc_table(), [pid]) if found is None else found


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
        state = next(
            (ln.split(":", 1)[1].strip() for ln in _read(f"{base}/status").splitlines() if ln.startswith("State:")), "?"
        )
        lines.append(f'task {tid} [{state}] "{_read(f"{base}/comm")}"  wchan: {_read(f"{base}/wchan") or "0"}')
        stack = _read(f"{base}/stack")
        lines.extend("    kernel: " + s for s in stack.splitlines() if s)
    return "\n".join(lines) + "\n"


def _pyspy(exe: str, pid: int, native: bool) -> Tuple[bool, str]:
    argv = [exe, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=PYSPY_TIMEOUT,
            check=False,
        )
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
    exe = pyspy_path(pid)
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
    with os.fdopen(_create_private(path), "w") as fh:
        fh.write(head + body)
    return tool


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


def _rank_of(pid: int) -> Optional[str]:
    """``RANK_ID`` from a process's environment (a rank started by mpirun's wrapper), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            for item in fh.read().split(b"\0"):
                if item.startswith(b"RANK_ID="):
                    value = item[8:].decode("ascii", "replace")
                    return value if value.isdigit() else None
    except OSError:
        return None
    return None


def expand(targets: Sequence[Tuple[str, int]], by_env: bool = False) -> List[Tuple[str, int]]:
    """Each ``(name, pid)`` and its descendants (the process first).  ``by_env``: a descendant whose
    environment has ``RANK_ID=r`` is named ``rank<r>`` (the ranks under mpirun)."""
    out: List[Tuple[str, int]] = []
    for name, pid in targets:
        for p in [pid] + descendants(pid):
            rank = _rank_of(p) if by_env else None
            out.append((f"rank{rank}" if rank is not None else name, p))
    return out


def _environ(pid: int) -> Dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            items = fh.read().split(b"\0")
    except OSError:
        return {}
    return dict(item.partition(b"=")[::2] for item in items if b"=" in item)


def ranks_by_marker(key: str, value: str, ranks: Sequence[int]) -> List[Tuple[str, int]]:
    """``(rank<R>, pid)`` of the top process of each of ``ranks`` on this host: a process whose
    environment (as it was started, ``/proc/PID/environ``) holds ``key=value`` (the job's marker)
    and ``RANK_ID=R``, whose parent holds no such ``RANK_ID`` (the ranks OpenMPI started, found
    without reading any command line)."""
    table = proc_table()
    want = {str(r).encode() for r in ranks}
    found: Dict[int, bytes] = {}
    for pid in table:
        env = _environ(pid)
        if env.get(key.encode()) == value.encode() and env.get(b"RANK_ID") in want:
            found[pid] = env[b"RANK_ID"]
    tops = [(f"rank{rank.decode()}", pid) for pid, rank in found.items() if found.get(table[pid][0]) != rank]
    return sorted(tops, key=lambda t: (int(t[0][4:]), t[1]))


def main(argv: Sequence[str]) -> int:
    """``stackdump (DIR | --stdout) (NAME=PID ... | --marker KEY=VALUE --ranks R,R...)``: dump each
    process and its descendants.

    With a DIR the files are written there and their paths printed; with ``--stdout`` (remote
    hosts) each dump is printed as one JSON line ``{"name", "pid", "text"}`` instead.  With
    ``--marker`` the processes are the ranks found by :func:`ranks_by_marker` (their descendants
    named by their ``RANK_ID``).
    """
    import json
    import tempfile

    if len(argv) < 1:
        sys.stderr.write("usage: stackdump (DIR | --stdout) (NAME=PID ... | --marker KEY=VALUE --ranks R,R...)\n")
        return 2
    to_stdout = argv[0] == "--stdout"
    folder = tempfile.mkdtemp(prefix="mslaunch-stacks-") if to_stdout else argv[0]
    targets = []
    rest = list(argv[1:])
    by_env = "--marker" in rest and "--ranks" in rest
    if by_env:
        key, _, value = rest[rest.index("--marker") + 1].partition("=")
        ranks = [int(r) for r in rest[rest.index("--ranks") + 1].split(",") if r.isdigit()]
        targets = ranks_by_marker(key, value, ranks)
        rest = []
    for item in rest:
        name, _, pid = item.partition("=")
        if pid.isdigit():
            targets.append((name, int(pid)))
    try:
        for path in dump_many(folder, expand(targets, by_env=by_env)):
            if not to_stdout:
                sys.stdout.write(path + "\n")
                continue
            base = os.path.basename(path)
            name, _, tail = base.rpartition(".pid")
            with open(path, errors="replace") as fh:
                sys.stdout.write(json.dumps({"name": name, "pid": int(tail[:-4]), "text": fh.read()}) + "\n")
    finally:
        if to_stdout:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


# ---------------------------------------------------------------- the launcher's side of a remote dump

_NAME_RE = re.compile(r"^rank(\d+)$")

#: Seconds a remote dump may take (py-spy's own bound is 10 s a process; they run at once).
REMOTE_TIMEOUT = 30.0


def rank_of_name(name: str) -> Optional[int]:
    m = _NAME_RE.match(name)
    return int(m.group(1)) if m else None


def write_dumps(folder: str, output: str) -> Dict[Optional[int], List[str]]:
    """Write the dumps of a remote ``stackdump --stdout`` into ``folder``; rank -> files (main process first)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    out: Dict[Optional[int], List[str]] = {}
    for line in output.splitlines():
        try:
            rec = json.loads(line)
            name, pid, text = str(rec["name"]), int(rec["pid"]), str(rec["text"])
        except (ValueError, KeyError, TypeError):
            continue
        safe = re.sub(r"[^\w.-]", "_", name)
        path = os.path.join(folder, f"{safe}.pid{pid}.txt")
        with os.fdopen(_create_private(path), "w") as fh:
            fh.write(text)
        out.setdefault(rank_of_name(safe), []).append(path)
    return out


def remote_dump(argv: Sequence[str], folder: str) -> Dict[Optional[int], List[str]]:
    """Run ``argv`` (a ``stackdump --stdout`` on another host: over ssh, in an srun step) within
    :data:`REMOTE_TIMEOUT` and write its dumps into ``folder``; rank -> files ({} when it failed)."""
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=REMOTE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return write_dumps(folder, done.stdout.decode("utf-8", "replace"))


def dump_each(
    groups: Dict[str, Any], dump_one: Callable[[str, Any], Dict[Optional[int], List[str]]]
) -> Dict[Optional[int], List[str]]:
    """``dump_one(host, what)`` for every host of ``groups`` at once (each within
    :data:`REMOTE_TIMEOUT`); every host's rank -> files, merged."""
    out: Dict[Optional[int], List[str]] = {}
    lock = threading.Lock()

    def one(host: str, what: Any) -> None:
        got = dump_one(host, what)
        with lock:
            for rank, files in got.items():
                out.setdefault(rank, []).extend(files)

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in groups.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(REMOTE_TIMEOUT + 5)
    return out


def targets(procs: Sequence[Tuple[str, int]]) -> List[str]:
    """``name=pid`` arguments of a ``--stdout`` dump."""
    return [f"{name}={pid}" for name, pid in procs]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
