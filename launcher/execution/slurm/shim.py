"""The per-task shim of the slurm backend: runs one planned process inside a Slurm task.

``python -m launcher.execution.slurm.shim TASKS_FILE workers|scheduler``

Runs on a Slurm node (the job dir is on a filesystem every node sees).  It reads
``TASKS_FILE`` (written by the backend before srun starts)::

    {"scheduler": PROC or null, "workers": [PROC, ...], "status_dir": DIR}
    PROC = {"name", "rank", "argv", "env": [[K, V], ...], "cwd", "log"[, "threads": THREADS]
            [, "secrets": {NAME: CARRIER}]}   (a secret's value is in srun's environment, as CARRIER)
    THREADS = {"set": [VAR, ...], "user_omp": STR or null}     (ranks of a remote host)

picks its process (``workers``: index ``SLURM_PROCID``), and runs it as a child in its own
session with exactly that argv/cwd and ``os.environ`` + the planned env, output appended to
the planned log.  Its own records, in ``status_dir`` (written atomically)::

    <key>.start.json   {"pid", "node", "started", "job", "step"}      when the child started
    <key>.exit.json    {"returncode", "ended", "node", "stopped"[, "cut_off"]}   when it ended

``key`` is ``rank_<r>`` or ``scheduler``; ``returncode`` follows subprocess (negative: killed by
that signal); ``stopped`` is true when the shim was asked to stop (SIGTERM/SIGINT/SIGHUP, e.g.
Slurm ending the step because another task failed) before the child ended, so that exit is a
consequence, not a cause; ``cut_off`` is true when the shim ended its rank because mslaunch's
heartbeats stopped (``"beat": {"addr", "token"}`` in the tasks file: see
:mod:`launcher.execution.slurm.beat`).  A stop signal is passed on to the child's process group.  The shim
exits with the child's code (128+N for signal N), so ``--kill-on-bad-exit`` sees a failure.

A worker with ``threads`` gets those thread variables from its node's usable cores (see
:func:`thread_env`); the first task on a node writes what it decided at the top of its log and in
``<attempt dir>/host-threads/<node>.json``.

Standard library only, but for the thread rule (:mod:`launcher.planning.cpu.hostcores`, imported only
for a worker with ``threads``): it runs once per rank on every node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

#: Prefix of the variables of srun's environment that carry the secrets to the shim
#: (``<prefix><n>_<NAME>``); the tasks file names each secret's carrier, never its value.
SECRET_CARRIER = "MSLAUNCH_SECRET_"


def record_key(rank: Optional[int]) -> str:
    """The ``<key>`` of a process's records: ``rank_<r>``, or ``scheduler`` (rank None)."""
    return "scheduler" if rank is None else f"rank_{rank}"


def _write(path: str, data: Dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(_create_private(tmp, os.O_TRUNC), "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _create_private(path: str, flag: int) -> int:
    """Open ``path`` for writing (``flag``: ``os.O_TRUNC`` or ``os.O_APPEND``), created 0600 whatever
    the umask: a rank may print its environment into its log."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | flag | getattr(os, "O_CLOEXEC", 0), 0o600)


def _child_setup() -> None:
    """In the rank before exec: die with the shim (PR_SET_PDEATHSIG=SIGKILL), so a rank never
    outlives the task Slurm tracks, whatever ends the shim."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(137)


def _subreaper() -> None:
    """Make the shim a child subreaper: what the rank orphans stays below the shim (Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def thread_env(
    threads: Dict[str, Any], node: str, environ: Dict[str, str]
) -> Tuple[Dict[str, str], List[str], Optional[Dict[str, Any]]]:
    """This task's thread variables from its node's usable cores, by the rule of
    :func:`launcher.planning.cpu.hostcores.host_thread_env`: the cpuset and cgroup CPU quota this task
    runs under (:mod:`launcher.execution.probes.host_cores`) shared by the step's tasks on this
    node (:func:`launcher.planning.backends.slurm.tasks_on_node`), each at most
    ``SLURM_CPUS_PER_TASK`` when the user asked Slurm for CPUs per task; a thread variable already
    in the environment (the user's) wins.

    Returns ``(env, lines, record)``: the variables, and for the node's first task the lines
    for its log (what was decided, a warning when oversubscribed) and the node's record; ``[]``
    and None for the others."""
    from launcher.execution.probes.host_cores import read_host_cores
    from launcher.planning.backends.slurm import tasks_on_node
    from launcher.planning.cpu.hostcores import HostThreads, host_thread_env, parse_host_cores

    here = tasks_on_node(environ)
    if here is None:
        return (
            {},
            [f"mslaunch: cpu: {node}: threads not set (no SLURM_STEP_TASKS_PER_NODE/SLURM_LOCALID in the task)"],
            None,
        )
    k, local = here
    per_task = environ.get("SLURM_CPUS_PER_TASK", "")
    per_rank = int(per_task) if per_task.isdigit() and int(per_task) > 0 else None
    cores = parse_host_cores(read_host_cores(), node, f"the Slurm task shim on {node}")
    decided = host_thread_env(
        HostThreads(node, tuple(range(k)), tuple(threads.get("set") or ()), threads.get("user_omp")),
        cores,
        per_rank,
        f"SLURM_CPUS_PER_TASK={per_task}",
    )
    if local != 0:
        return dict(decided.env.get(local, {})), [], None
    lines = [f"mslaunch: cpu: {n}" for n in decided.notes] + [f"mslaunch: warning: {w}" for w in decided.warnings]
    record = {
        "cores": cores.to_json(),
        "env": {str(r): dict(e) for r, e in decided.env.items()},
        "cpus_per_task": per_rank,
        "notes": list(decided.notes),
        "warnings": list(decided.warnings),
    }
    return dict(decided.env.get(local, {})), lines, record


def main(argv: List[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("workers", "scheduler"):
        sys.stderr.write("usage: python -m launcher.execution.slurm.shim TASKS_FILE workers|scheduler\n")
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        tasks = json.load(fh)
    proc = tasks["scheduler"] if argv[1] == "scheduler" else tasks["workers"][int(os.environ["SLURM_PROCID"])]
    key = record_key(proc["rank"])
    status_dir = tasks["status_dir"]
    node = socket.gethostname()
    env = dict(os.environ)
    # The job token marks mslaunch's processes on the launching machine for its watchdog; ranks
    # on the nodes are ended through Slurm (scancel), so they do not carry it.
    env.pop("MSLAUNCH_JOB_TOKEN", None)
    env.update({k: v for k, v in proc["env"]})
    # Secrets are not in the tasks file: srun's environment carried them here (see the backend).
    for name, carrier in (proc.get("secrets") or {}).items():
        if carrier in os.environ:
            env[name] = os.environ[carrier]
    for var in [k for k in env if k.startswith(SECRET_CARRIER)]:
        del env[var]
    lines: List[str] = []
    if proc.get("threads") and argv[1] == "workers":
        try:
            more, lines, record = thread_env(proc["threads"], node, env)
        except Exception as exc:  # noqa: BLE001 - the rank runs without them; its log says why
            more, lines, record = {}, [f"mslaunch: cpu: {node}: threads not set ({exc})"], None
        env.update(more)
        if record is not None:
            folder = os.path.join(os.path.dirname(status_dir), "host-threads")
            os.makedirs(folder, mode=0o700, exist_ok=True)
            _write(os.path.join(folder, f"{node}.json"), record)
    stopped = False
    child: "subprocess.Popen[bytes] | None" = None

    def on_stop(signum: int, _frame: Any) -> None:
        nonlocal stopped
        stopped = True
        if child is not None:
            try:
                os.killpg(child.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_stop)
    with open(_create_private(proc["log"], os.O_APPEND), "ab", buffering=0) as log:
        if lines:
            log.write(("\n".join(lines) + "\n").encode())
        try:
            _subreaper()
            child = subprocess.Popen(
                proc["argv"],
                cwd=proc["cwd"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_child_setup,
            )
        except OSError as exc:
            log.write(f"mslaunch: cannot start {proc['argv'][0]!r} on {node}: {exc.strerror}\n".encode())
            _write(
                os.path.join(status_dir, f"{key}.exit.json"),
                {"returncode": 127, "ended": time.time(), "node": node, "stopped": stopped},
            )
            return 127
    _write(
        os.path.join(status_dir, f"{key}.start.json"),
        {
            "pid": child.pid,
            "node": node,
            "started": time.time(),
            "job": os.environ.get("SLURM_JOB_ID"),
            "step": os.environ.get("SLURM_STEP_ID"),
        },
    )
    if argv[1] == "workers" and proc["rank"] is not None:  # the straggler watch's figures of this rank
        from launcher.execution.process.rankfigures import path_of, sample_until_gone

        path = path_of(os.path.dirname(status_dir), proc["rank"])
        threading.Thread(target=sample_until_gone, args=(child.pid, path), daemon=True).start()
    done = threading.Event()
    cut_off = threading.Event()
    if tasks.get("beat"):  # heartbeats with mslaunch (launcher.execution.slurm.beat)
        from launcher.execution.slurm.beat import SHIM_TIMEOUT, shim_beat

        def lost() -> None:  # mslaunch said nothing for long: the node is cut off; end the rank
            cut_off.set()
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        beat = tasks["beat"]
        addr = (str(beat["addr"][0]), int(beat["addr"][1]))
        here = os.environ.get("SLURMD_NODENAME") or node
        timeout = float(beat.get("timeout") or SHIM_TIMEOUT)
        threading.Thread(
            target=shim_beat,
            args=(addr, str(beat["token"]), here, key, lost, done, timeout),
            kwargs={"on_signal": lambda signum: on_stop(signum, None)},  # mslaunch's teardown, as Slurm's
            daemon=True,
        ).start()
    if stopped:  # a stop signal came before the child existed
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
    ended = time.time()
    done.set()
    end: Dict[str, Any] = {"returncode": rc, "ended": ended, "node": node, "stopped": stopped}
    if cut_off.is_set():
        end["cut_off"] = True
    _write(os.path.join(status_dir, f"{key}.exit.json"), end)
    # whatever the rank left in its session ends with it
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
