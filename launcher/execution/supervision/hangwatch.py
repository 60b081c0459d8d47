"""The supervisor's hang watch: progress from the metric follower, the verdict, stack dumps and the
culprit (see :mod:`launcher.logs.hang` and :mod:`launcher.logs.stacks` for the rules).

Wiring: :func:`launcher.execution.runner.run_plan` makes one :class:`HangWatch` per job, gives
:meth:`HangWatch.on_line` to the metrics writer (every rank line it reads) and the watch to the
supervisor, which calls :meth:`begin` at each attempt, :meth:`due` while it waits, and
:meth:`investigate` before teardown when the attempt is hung or a rank's collective timed out.

What a hung attempt leaves: ``<attempt dir>/stacks/`` with one file per process (see
:mod:`launcher.execution.probes.stackdump`; remote backends dump on the rank's host through
:meth:`ProcessHandle.dump_stacks <launcher.execution.backend.ProcessHandle>` when they have it), and
the ``hang`` object of ``summary.json``::

    {"kind": "no_progress" | "collective_timeout", "limit_s": 10.0, "derived": "--hang-timeout 10 s",
     "idle_s": 10.4, "stacks_dir": ".../stacks", "culprit": {"rank": 1, "evidence": "..."} | null,
     "timed_out": {"rank": 0, "line": "..."} | absent,
     "ranks": [{"rank": 0, "host": "h", "last_step": "epoch 0 step 3", "silent_s": 10.2,
                "frame": "AllReduce.__call__ (mindspore/...:12)", "in_collective": true,
                "stack_files": ["rank0.pid123.txt"], "alive": true}, ...]}
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from launcher.execution.backend import ProcessHandle
from launcher.execution.results import ProcResult, RootCause, tail_lines
from launcher.logs.hang import HangPolicy, HangTracker, HangVerdict, step_text
from launcher.logs.metrics import Metric
from launcher.logs.stacks import RankEvidence, collective_timeout, in_collective, innermost_python, judge_culprit, main_thread, parse_pyspy
from launcher.planning.inventory import is_local

__all__ = ["HangWatch", "STACKS_DIR", "culprit_cause", "hang_message"]

#: The attempt's folder of stack dumps.
STACKS_DIR = "stacks"


class HangWatch:
    """One job's hang watch (thread-safe: lines come from the follower's thread).

    Args:
        policy: ``--hang-timeout`` / ``--first-step-timeout``.
        clock: the monotonic clock.
    """

    def __init__(self, policy: HangPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.tracker = HangTracker(policy)
        self._clock = clock
        self.plan_ranks: List[Tuple[int, str]] = []

    def on_line(self, attempt: int, rank: int, metric: Optional[Metric]) -> None:
        """A rank's line arrived (called by the metrics writer for every line)."""
        self.tracker.feed(attempt, rank, metric.progress if metric is not None else None, self._clock())

    def begin(self, attempt: int, ranks: Sequence[Tuple[int, str]]) -> None:
        """Attempt ``attempt`` starts with these ``(rank, host)``."""
        self.plan_ranks = list(ranks)
        self.tracker.begin(attempt, [r for r, _ in ranks], self._clock())

    def due(self) -> Optional[HangVerdict]:
        """The verdict when the current attempt is hung now (never when the policy is off)."""
        if not self.policy.watching:
            return None
        return self.tracker.due(self._clock())

    def timed_out(self, handle: ProcessHandle, tail: Sequence[str]) -> Optional[str]:
        """The collective-timeout line of a failed worker's log tail, or None."""
        if handle.plan.role != "worker":
            return None
        return collective_timeout(tail)

    def investigate(self, handles: Sequence[ProcessHandle], exits: Dict[int, Any], adir: str,
                    verdict: Optional[HangVerdict], timed_out: Optional[Tuple[int, str]] = None) -> Tuple[Dict[str, Any], str]:
        """Dump the stacks of the running ranks, judge the culprit; the ``hang`` object of the summary
        and its one-line message.

        Args:
            handles: the attempt's handles.
            exits: index -> exit of the handles that exited (not dumped).
            adir: the attempt's folder (``stacks/`` goes there).
            verdict: the no-progress verdict, or None for a collective timeout.
            timed_out: ``(rank, line)`` of the rank whose collective timed out.
        """
        folder = os.path.join(adir, STACKS_DIR)
        now = self._clock()
        files = _dump(handles, exits, folder)
        watches = {w.rank: w for w in self.tracker.ranks()}
        alive: Dict[int, bool] = {}
        hosts: Dict[int, str] = {}
        for idx, h in enumerate(handles):
            if h.plan.rank is not None and h.plan.role == "worker":
                alive[h.plan.rank] = idx not in exits and not h.has_exited()
                hosts[h.plan.rank] = h.host
        for p in self.plan_ranks:  # ranks a handle stands for together (mpirun, a Slurm step)
            hosts.setdefault(p[0], p[1])
            if p[0] not in alive:
                alive[p[0]] = any(idx not in exits and not h.has_exited() for idx, h in enumerate(handles) if h.plan.role != "scheduler")
        ranks: List[RankEvidence] = []
        rows: List[Dict[str, Any]] = []
        for rank in sorted(hosts):
            w = watches.get(rank)
            ev = RankEvidence(rank, last_step=w.last_step if w else None,
                              silent_for=None if w is None or w.last_output_at is None else now - w.last_output_at,
                              timed_out=timed_out is not None and timed_out[0] == rank, alive=alive.get(rank, False),
                              stack_files=files.get(rank, []))
            if ev.stack_files:
                _read_frame(ev.stack_files[0], ev)
            ranks.append(ev)
            rows.append({"rank": rank, "host": hosts[rank], "last_step": step_text(ev.last_step),
                         "silent_s": None if ev.silent_for is None else round(ev.silent_for, 1), "frame": ev.frame,
                         "in_collective": ev.in_collective, "alive": ev.alive, "timed_out": ev.timed_out,
                         "stack_files": [os.path.basename(f) for f in ev.stack_files]})
        culprit = judge_culprit(ranks)
        out: Dict[str, Any] = {"kind": "collective_timeout" if verdict is None else "no_progress"}
        if verdict is not None:
            out.update(verdict.to_json())
        else:
            limit, derived = self.tracker.limit()
            out.update({"limit_s": None if limit is None else round(limit, 1), "derived": derived})
        if timed_out is not None:
            out["timed_out"] = {"rank": timed_out[0], "line": timed_out[1]}
        out.update(stacks_dir=folder, culprit=culprit.to_json() if culprit else None, ranks=rows)
        return out, hang_message(out)


def _dump(handles: Sequence[ProcessHandle], exits: Dict[int, Any], folder: str) -> Dict[Optional[int], List[str]]:
    """Dump every running process's stacks at once: remote ranks the backend's way
    (``handle.dump_stacks(folder)`` -> rank -> files), local ones from this machine's process tree
    (a handle without a rank, e.g. mpirun: its descendants named by their ``RANK_ID``).
    Returns rank -> files, the rank's own process first."""
    import threading

    from launcher.execution.probes import stackdump

    out: Dict[Optional[int], List[str]] = {}
    lock = threading.Lock()
    local: List[Tuple[str, int]] = []
    threads: List[threading.Thread] = []

    def remote(fn: Any) -> None:
        try:
            got = fn(folder) or {}
        except Exception:  # a dump must never stop the teardown
            got = {}
        with lock:
            for rank, files in got.items():
                out.setdefault(rank, []).extend(files)

    for idx, h in enumerate(handles):
        if idx in exits or h.has_exited() or h.plan.role == "scheduler":  # ranks only: the scheduler waits by design
            continue
        fn = getattr(h, "dump_stacks", None)
        if callable(fn):
            threads.append(threading.Thread(target=remote, args=(fn,), daemon=True))
        elif h.pid is not None and is_local(h.host):
            name = f"rank{h.plan.rank}" if h.plan.rank is not None else h.plan.name.replace(" ", "")
            local.extend(stackdump.expand([(name, h.pid)], by_env=h.plan.rank is None))
    for t in threads:
        t.start()
    from launcher.execution.probes.stackdump import rank_of_name

    for path in stackdump.dump_many(folder, local):
        name = os.path.basename(path).rpartition(".pid")[0]
        with lock:
            out.setdefault(rank_of_name(name), []).append(path)
    for t in threads:
        t.join(60)
    return out


def _read_frame(path: str, ev: RankEvidence) -> None:
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return
    thread = main_thread(parse_pyspy(text))
    if thread is None or not thread.frames:
        return
    frame = innermost_python(thread)
    ev.frame = str(frame) if frame is not None else str(thread.frames[0])
    ev.in_collective = in_collective(thread)


def culprit_cause(hang: Optional[Dict[str, Any]], results: List[ProcResult]) -> Optional[RootCause]:
    """A hung attempt's root cause: the likely culprit's process (not the rank that timed out)."""
    culprit = (hang or {}).get("culprit")
    if not culprit:
        return None
    for r in results:
        if r.rank == culprit["rank"] and r.name.startswith("rank"):
            return RootCause(replace(r, reason=f"likely culprit of the hang: {culprit['evidence']}"), tail_lines(r.log, 20))
    return None


def hang_message(hang: Dict[str, Any]) -> str:
    """The summary's one line for a hung attempt."""
    if hang.get("kind") == "collective_timeout":
        t = hang.get("timed_out") or {}
        head = f"rank {t.get('rank')}'s collective timed out waiting for the others ({t.get('line', '')[:160]})"
    else:
        head = (f"hung: no rank made progress for {hang.get('idle_s')} s (limit {hang.get('limit_s')} s, {hang.get('derived')})")
    culprit = hang.get("culprit")
    if culprit:
        head += f"; likely culprit: rank {culprit['rank']}: {culprit['evidence']}"
    else:
        head += "; no rank stands out (see the stacks)"
    return head + f"; stacks in {hang.get('stacks_dir')}"
