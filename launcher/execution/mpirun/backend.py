"""The mpirun launcher: one OpenMPI ``mpirun`` process runs every rank (and the scheduler).

mpirun's own output goes to ``<attempt dir>/mpirun.log``; each rank's output goes to its
``worker_<rank>.log`` through the per-rank wrapper (``templates/mslaunch-rank.sh``).  When a
rank fails, mpirun ends the others and reports the first failure; :func:`parse_first_failure`
reads that report so the summary can name the rank.

A lost host is typed from the backend's own records, not from mpirun's messages: mpirun's rsh
agent (the ssh that runs its daemon on each remote host) is wrapped by
:mod:`launcher.execution.mpirun.rshwatch`, which records how each host's session ended in
``<attempt dir>/mpirun/orted_<host>.json``.  The host whose session failed first, unasked, while
mslaunch was not tearing the attempt down (:func:`lost_host`) is lost: its ranks end with
``host_lost`` and a restart leaves it out (docs/spare-hosts.md).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, StartRequest, ToolCheck
from launcher.execution.hostthreads import WatchesHostThreads, watch_host_threads
from launcher.execution.ports import check_scheduler_port
from launcher.execution.process.handle import RankFigures, WatchdogLink
from launcher.execution.process.spawn import LocalProcess
from launcher.execution.process.standin import StandInProcess, launcher_plan, read_json_record, start_standin
from launcher.execution.results import ProcResult
from launcher.planning.backends.mpirun import mpirun_command, mpirun_plan_launch
from launcher.planning.job.kinds import Method
from launcher.planning.job.spec import Plan, ProcPlan
from launcher.planning.text.private import makedirs_private

_NAME_RE = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]")
_EXIT_RE = re.compile(r"Exit code:\s*(-?\d+)")
_SIGNAL_RE = re.compile(r"exited on signal (\d+)")
_NOTICED_RE = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")


def parse_first_failure(text: str) -> Optional[Tuple[int, Optional[int], Optional[int]]]:
    """From mpirun's output, ``(mpi_rank, exit_code, signal)`` of the first failed process.

    OpenMPI 4.1 prints ``Process name: [[J,1],R]`` then ``Exit code: C`` for a non-zero exit,
    or ``Process name: [[J,1],R] ... exited on signal N`` for a signal death; for a signal death
    it also prints ``mpirun noticed that process rank R with PID P on node H exited on signal N
    (Name).`` (the only report when the process died by a signal).
    """
    noticed = _NOTICED_RE.search(text)
    if noticed:
        return int(noticed.group(1)), None, int(noticed.group(2))
    m = _NAME_RE.search(text)
    if not m:
        return None
    rest = text[m.end() : m.end() + 400]
    before = text[max(0, m.start() - 400) : m.start()]
    code = _EXIT_RE.search(rest)
    sig = _SIGNAL_RE.search(before + rest)
    return int(m.group(1)), int(code.group(1)) if code else None, int(sig.group(1)) if sig else None


#: Folder of the rsh agent wrapper's records in an attempt dir.
STATUS_DIR = "mpirun"


def watched_agent(argv: Tuple[str, ...], status_dir: str) -> Tuple[str, ...]:
    """``argv`` with its ``plm_rsh_agent`` wrapped by :mod:`launcher.execution.mpirun.rshwatch`
    (unchanged when mpirun starts no remote daemon)."""
    out = list(argv)
    for i in range(len(out) - 2):
        if out[i] == "--mca" and out[i + 1] == "plm_rsh_agent":
            words = out[i + 2].split()
            out[i + 2] = " ".join(
                [sys.executable, "-m", "launcher.execution.mpirun.rshwatch", status_dir, str(len(words)), *words]
            )
            break
    return tuple(out)


def lost_host(status_dir: str) -> Optional[Tuple[str, str]]:
    """``(host, how)`` of the host mpirun lost, from the wrapper's records: the first session to
    end with a failure while not asked to stop (ssh's 255: the connection or the daemon gone);
    None when no session did."""
    ended: List[Dict[str, Any]] = []
    try:
        names = os.listdir(status_dir)
    except OSError:
        return None
    for name in names:
        if name.startswith("orted_") and name.endswith(".json"):
            rec = read_json_record(os.path.join(status_dir, name))
            if rec is not None and rec.get("returncode") not in (0, None):
                ended.append(rec)
    if not ended:
        return None
    first = min(ended, key=lambda r: float(r.get("ended") or 0))
    if first.get("stopped"):
        return None
    rc = int(first["returncode"])
    why = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
    return str(first["host"]), f"mpirun's daemon on {first['host']} lost (its ssh session ended: {why})"


class MpirunProcess(StandInProcess):
    """mpirun, standing for every process of the plan."""

    def __init__(self, base: LocalProcess, plan: Plan, adir: str) -> None:
        super().__init__(base)
        self.job = plan
        self.adir = adir
        self._pids: Dict[str, Tuple[Optional[int], str, Optional[int]]] = {}

    def read_lost(self, rc: int) -> Dict[str, str]:
        """The host mpirun lost (:func:`lost_host`), read when mpirun failed by itself, before a
        teardown could end other daemons' sessions."""
        lost = lost_host(os.path.join(self.adir, STATUS_DIR))
        return dict([lost]) if lost else {}

    def host_pids(self) -> Dict[str, Tuple[Optional[int], str, Optional[int]]]:
        """Each rank's (and the scheduler's) pid on its host, as the rank wrapper recorded it
        (:mod:`launcher.execution.process.rankpids`)."""
        from launcher.execution.process.rankpids import named

        procs = self.job.ranks + ((self.job.scheduler,) if self.job.scheduler is not None else ())
        if len(self._pids) < len(procs):  # once every one is known, the folder is not read again
            self._pids = named(self.adir, tuple((p.name, p.rank, p.host) for p in procs))
        return self._pids

    def rank_figures(self) -> Dict[int, Tuple[str, RankFigures]]:
        """Each worker's scheduler figures, as the sampler its wrapper started on its host last
        wrote them (:mod:`launcher.execution.process.rankfigures`)."""
        from launcher.execution.process.rankfigures import read

        out: Dict[int, Tuple[str, RankFigures]] = {}
        for p in self.job.ranks:
            figs = read(self.adir, p.rank) if p.rank is not None else None
            if figs is not None and p.rank is not None:
                out[p.rank] = (p.host, figs)
        return out

    def stop_gracefully(self) -> None:
        # mpirun forwards SIGTERM to its ranks and then ends them itself; signal only mpirun.
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def dump_stacks(self, folder: str) -> Dict[Optional[int], List[str]]:
        """The ranks on this machine (mpirun's descendants, named by their ``RANK_ID``), then those
        OpenMPI started on other hosts, dumped on their hosts over ssh (:mod:`launcher.execution.mpirun.dump`)."""
        from launcher.execution.mpirun.dump import remote_dumps
        from launcher.planning.backends.mpirun import MpirunPlan

        out = super().dump_stacks(folder)
        settings = self.job.backend_settings
        agent = settings.options.rsh_agent if isinstance(settings, MpirunPlan) else None
        for rank, files in remote_dumps(
            self.job, agent, self.adir, folder, skip=[r for r in out if r is not None]
        ).items():
            out.setdefault(rank, []).extend(files)
        return out

    def outcomes(
        self, rc: Optional[int], when: Optional[float], torn: bool, note: Optional[str] = None
    ) -> List[ProcResult]:
        """Per-process results from mpirun's exit and its report (see :func:`report_outcomes`)."""
        try:
            with open(self.log_path, "r", encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            text = ""
        lost = self.lost(rc) if not torn else {}
        return report_outcomes(self.job, self.adir, text, self.own_result(rc, when), torn, lost or None)


def report_outcomes(
    plan: Plan, attempt_dir: str, report: str, mpirun: ProcResult, torn: bool, lost: Optional[Mapping[str, str]] = None
) -> List[ProcResult]:
    """One result per planned process from mpirun's own result and its output (pure).

    All 0 when mpirun exited 0; else the first failure mpirun reported (see
    :func:`parse_first_failure`; MPI rank 0 is the scheduler when there is one) gets its code
    or signal, and every other process is "ended by mpirun".  When mpirun reported no rank
    (bad hosts, too few slots, ...) and was not torn down, ``mpirun`` itself is added as failed.
    A process on a host of ``lost`` (:func:`lost_host`) ends lost with it (``host_lost``), and
    is the failure: what mpirun reports then is a consequence.

    Args:
        plan: the plan mpirun ran.
        attempt_dir: the attempt's log folder.
        report: mpirun's output (``mpirun.log``).
        mpirun: mpirun's own result (its returncode, times, log, pid).
        torn: mslaunch ended mpirun (teardown).
        lost: host -> how it was lost, for the host mpirun lost (None: none).
    """
    rc, started, when = mpirun.returncode, mpirun.started, mpirun.ended
    first = parse_first_failure(report) if rc not in (0, None) and not lost else None
    offset = 1 if plan.scheduler is not None else 0
    out: List[ProcResult] = []
    for proc in plan.processes:
        log = proc.log if attempt_dir == plan.job_dir else os.path.join(attempt_dir, os.path.basename(proc.log))
        mpi_rank = 0 if proc.rank is None else proc.rank + offset
        if rc == 0:
            out.append(ProcResult(proc.name, proc.rank, proc.host, 0, started, when, log))
        elif lost and proc.host in lost:
            out.append(
                ProcResult(
                    proc.name,
                    proc.rank,
                    proc.host,
                    None,
                    started,
                    when,
                    log,
                    reason=lost[proc.host],
                    host_lost=lost[proc.host],
                )
            )
        elif first is not None and first[0] == mpi_rank:
            code = -first[2] if first[2] is not None else (first[1] if first[1] is not None else 1)
            out.append(ProcResult(proc.name, proc.rank, proc.host, code, started, when, log))
        else:
            out.append(
                ProcResult(
                    proc.name, proc.rank, proc.host, None, started, when, log, torn_down=True, reason="ended by mpirun"
                )
            )
    if first is None and not lost and rc not in (0, None) and not torn:
        out.append(mpirun)  # mpirun itself failed: its own output says why
    return out


MPIRUN_CHECK = ToolCheck("mpirun", "mpirun", "apt-get install openmpi-bin")


class MpirunBackend(WatchesHostThreads, Backend):
    """Starts the plan's mpirun argv (:func:`launcher.planning.backends.mpirun.mpirun_command`) as one
    local process standing for every planned process.

    Args:
        plan: the plan (planned for ``--launcher mpirun``).
        attempt_dir: the attempt's log folder (mpirun.log, and the ranks' logs via the wrapper).
        watchdog: the job's watchdog: mpirun registers with it and is a child subreaper, so
            if mslaunch dies the watchdog ends mpirun and everything below it on this host
            (wrappers, ranks, the scheduler, their descendants); remote orteds end their ranks
            when mpirun's connection drops.
    """

    prepares_rank_dirs = False  # the wrapper makes device<rank>/ on each host
    doctor_check = MPIRUN_CHECK

    def __init__(self, plan: Plan, attempt_dir: str, watchdog: Optional[WatchdogLink] = None) -> None:
        self.plan = plan
        self.attempt_dir = attempt_dir
        self.watchdog = watchdog

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        backend = cls(ctx.plan, ctx.attempt_dir or ctx.plan.job_dir, ctx.watchdog)
        backend.threads_watch = watch_host_threads(ctx, "mpirun", backend.attempt_dir)
        return backend

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        check_scheduler_port(plan)

    @classmethod
    def describe(cls, plan: Plan) -> Dict[str, Any]:
        return {"mpirun": list(mpirun_command(plan))}

    def requests(self, plan: Plan, attempt_dir: str) -> Tuple[StartRequest, ...]:
        """One request: mpirun itself, logging to ``<attempt dir>/mpirun.log``; the ranks' values
        in its environment (their carriers: :mod:`launcher.planning.backends.mpirun`), none on its
        command line."""
        status_dir = os.path.join(attempt_dir, STATUS_DIR)
        makedirs_private(status_dir)
        argv, env = mpirun_plan_launch(plan, attempt_dir)
        argv = watched_agent(argv, status_dir)
        log = os.path.join(attempt_dir, "mpirun.log")
        cwd = plan.ranks[0].cwd if plan.method != Method.RANKTABLE else plan.job_dir
        proc = launcher_plan("mpirun", argv, cwd, log, env=tuple(env.items()))
        return (StartRequest(proc, log, proc.cwd),)

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> MpirunProcess:
        """Start mpirun (the one process of :meth:`requests`).

        Raises:
            LaunchError: mpirun is not installed.
        """
        exe = proc.argv[0]
        if shutil.which(exe) is None:
            raise LaunchError(
                f"{exe} not found; install OpenMPI (Debian: apt-get install openmpi-bin) or use --launcher local/ssh"
            )
        # Without a watchdog: if mslaunch dies, mpirun gets SIGTERM and ends its ranks itself.
        base = start_standin(proc, log_path, cwd, self.watchdog)
        return MpirunProcess(base, self.plan, self.attempt_dir)
