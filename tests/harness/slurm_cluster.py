"""A throwaway multi-node Slurm 22.05 cluster on one machine, built on a namespace cluster.

Each Slurm node is a host of a :class:`tests.harness.netns_cluster.NamespaceCluster` (its own
network namespace and address; its sshd keeps running, so the ssh and slurm backends can be
compared on the same nodes).  ``slurmctld`` runs in the root namespace as a child of this object
(``-D``); each node runs one ``slurmd -D`` entered with ``nsenter --net=/run/netns/<ns> unshare
--uts`` (not ``ip netns exec``, which hides /sys/fs/cgroup from slurmd) after setting its own
hostname ``node<k>``.  ``NodeAddr`` is the namespace's address.  Clients (srun, sbatch, squeue,
scancel, sinfo, scontrol, salloc) need only ``SLURM_CONF`` (see :meth:`SlurmCluster.env`).

Use from Python::

    with SlurmCluster(3) as cluster:
        subprocess.run(["srun", "-N3", "hostname"], env=cluster.env())
        cluster.wait_idle()          # between jobs: every node idle again

or by hand::

    python -m tests.harness.slurm_cluster up --dir /tmp/mslslurm      # prints SLURM_CONF=...
    SLURM_CONF=/tmp/mslslurm/slurm/slurm.conf srun -N3 hostname
    python -m tests.harness.slurm_cluster down --dir /tmp/mslslurm

On-disk layout (under the namespace cluster's work dir)::

    slurm/slurm.conf              the cluster's configuration (SlurmctldPort: a free port)
    slurm/ctld/                   StateSaveLocation
    slurm/spool/node<k>/          SlurmdSpoolDir
    slurm/log/slurmctld.log, slurm/log/slurmd-node<k>.log
    slurm/run/*.pid               pid files
    slurm/state.json              daemon pids for ``down`` (with the namespace cluster's state.json)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence

from launcher.execution.process.watchdog import descendants, process_parents
from tests.harness.netns_cluster import NamespaceCluster, NamespaceClusterError

#: The Slurm executables the cluster needs.
DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "salloc", "squeue", "scancel", "sinfo", "scontrol")

_CONF = """\
ClusterName=mslns
SlurmctldHost={ctl_name}({ctl_addr})
SlurmUser=root
SlurmctldPort={port}
SlurmdPort=6818
AuthType=auth/none
CredType=cred/none
StateSaveLocation={d}/ctld
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmdParameters=config_overrides
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
# mslaunch in a batch step tears down and writes its summary between SIGTERM and SIGKILL: 2 s
# was too short under the suite's load (Slurm's default is 30 s)
KillWait=10
MinJobAge=10
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=20
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
"""


def _starts_later(start: str, seconds: float) -> bool:
    """Whether squeue's start time (``%S``: local time, ``2026-11-29T02:13:05``) is more than
    ``seconds`` away.  False for ``N/A``: a job past its begin time that the scheduler has not
    started yet shows that, with its reason still ``BeginTime``."""
    try:
        return time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S")) - time.time() > seconds
    except ValueError:
        return False


class SlurmClusterError(RuntimeError):
    """Setting up or tearing down the Slurm cluster failed; the message says what."""


def slurm_unavailable_reason() -> Optional[str]:
    """Why a Slurm cluster cannot run here (beyond the namespace cluster's needs), or None."""
    for exe in DAEMONS + CLIENTS:
        if shutil.which(exe) is None and not os.path.exists(f"/usr/sbin/{exe}"):
            return f"Slurm test cluster needs '{exe}' (apt-get install slurmctld slurmd slurm-client)"
    if shutil.which("nsenter") is None or shutil.which("unshare") is None:
        return "Slurm test cluster needs nsenter and unshare (util-linux)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    """``n_nodes`` Slurm nodes ``node1..nodeN`` on a namespace cluster (see the module doc).

    Args:
        n_nodes: number of nodes (>= 1).
        workdir: work dir of the namespace cluster (None: a fresh temp dir).
        cpus: CPUs each node declares (``SlurmdParameters=config_overrides``: more than the
            machine has is fine; they bound how many tasks Slurm places per node).
        start_timeout: seconds to wait for every node to be idle.

    Attributes:
        net: the namespace cluster (hosts ``h1..hN``, sshd on each).
        nodes: Slurm node names, ``node1..nodeN`` (node k is host ``h<k>``).
        conf: path of slurm.conf.

    Raises:
        SlurmClusterError / NamespaceClusterError: a step failed; everything is removed first.
    """

    def __init__(
        self,
        n_nodes: int = 3,
        workdir: Optional[str] = None,
        *,
        cpus: int = 4,
        start_timeout: float = 30.0,
        _attach: Optional[Dict[str, object]] = None,
    ) -> None:
        self._procs: Dict[str, subprocess.Popen] = {}
        self._pids: Dict[str, int] = {}
        self._closed = False
        if _attach is not None:  # from_state
            self.net = _attach["net"]  # type: ignore[assignment]
            self.nodes = list(_attach["nodes"])  # type: ignore[arg-type]
            self.dir = str(_attach["dir"])
            self.conf = os.path.join(self.dir, "slurm.conf")
            self._pids = dict(_attach["pids"])  # type: ignore[arg-type]
            return
        reason = slurm_unavailable_reason()
        if reason:
            raise SlurmClusterError(reason)
        self.net = NamespaceCluster(n_nodes, workdir)
        self.nodes = [f"node{h.index + 1}" for h in self.net.hosts]
        self.dir = os.path.join(self.net.workdir, "slurm")
        self.conf = os.path.join(self.dir, "slurm.conf")
        try:
            self._write_conf(cpus)
            self._start(start_timeout)
            self._write_state()
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise

    # ---------------------------------------------------------------- public

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """An environment for Slurm clients: ``base`` (default os.environ) without inherited
        ``SLURM_*`` job variables, plus ``SLURM_CONF``."""
        src = dict(os.environ if base is None else base)
        out = {k: v for k, v in src.items() if not k.startswith("SLURM_")}
        out["SLURM_CONF"] = self.conf
        return out

    def run(self, argv: Sequence[str], timeout: float = 60.0, **kwargs: object) -> subprocess.CompletedProcess:
        """Run a Slurm client command with :meth:`env`; text output captured."""
        return subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]

    def addr(self, node: str) -> str:
        """The address of ``node`` (``nodeK`` -> host ``hK``'s address)."""
        return self.net.hosts[self.nodes.index(node)].ip

    def idle_nodes(self) -> List[str]:
        """The nodes ``sinfo`` reports idle."""
        res = self.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], timeout=15)
        return sorted(set(res.stdout.split())) if res.returncode == 0 else []

    def completing_nodes(self) -> List[str]:
        """The nodes ``sinfo`` reports still completing a job (``["?"]`` when sinfo failed)."""
        res = self.run(["sinfo", "-h", "-N", "-t", "completing", "-o", "%N"], timeout=15)
        return sorted(set(res.stdout.split())) if res.returncode == 0 else ["?"]

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until no job is left and every node is idle (back-to-back jobs wait for the
        previous one to complete)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            jobs = self.run(["squeue", "-h", "-o", "%i"], timeout=15)
            if jobs.returncode == 0 and not jobs.stdout.strip() and self.idle_nodes() == sorted(self.nodes):
                self.wait_quiet(max(1.0, end - time.monotonic()))
                return
            time.sleep(0.1)
        raise SlurmClusterError(
            f"nodes not idle after {timeout:g} s: idle={self.idle_nodes()} "
            f"queue={self.run(['squeue', '-h']).stdout.strip()!r}"
        )

    def node_pids(self, include_slurm: bool = True) -> Dict[str, List[int]]:
        """Pids in each node's namespace other than sshd and that node's slurmd, by node name
        (only nodes with such processes are listed): what jobs left behind.

        ``include_slurm=False`` leaves out ``slurmstepd`` (Slurm's per-step daemon, which
        lingers ~1-2 s after its step ended): then only the jobs' own processes are listed.
        """
        out: Dict[str, List[int]] = {}
        for node, h in zip(self.nodes, self.net.hosts):
            daemon = self._pids.get(node)
            keep = {daemon} | _descendants_of(daemon) if daemon else set()
            pids = [p for p in self.net.pids_in(h.index) if p not in keep]
            if not include_slurm:
                pids = [p for p in pids if not _cmdline(p).startswith("slurmstepd")]
            if pids:
                out[node] = pids
        return out

    def wait_quiet(self, timeout: float = 30.0) -> None:
        """Wait until no process is left in any node but sshd and slurmd (slurmstepd included).

        Raises:
            SlurmClusterError: something is still there after ``timeout``.
        """
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.node_pids():
                return
            time.sleep(0.05)
        left = {n: [(p, _cmdline(p)[:80]) for p in ps] for n, ps in self.node_pids().items()}
        raise SlurmClusterError(f"processes left on the nodes after {timeout:g} s: {left}")

    @contextlib.contextmanager
    def allocation(self, nodes: int = 3, per_node: int = 2, extra: Sequence[str] = ()) -> Iterator[Dict[str, str]]:
        """An allocation (``salloc --no-shell``) for the duration of the ``with``; yields the
        environment a process inside it has (as under ``salloc``: ``SLURM_JOB_ID``,
        ``SLURM_JOB_NODELIST``, ``SLURM_NTASKS_PER_NODE``, ``SLURM_CONF``).  Cancelled after it."""
        res = self.run(
            ["salloc", "--no-shell", f"-N{nodes}", f"--ntasks-per-node={per_node}", "--immediate=30", *extra],
            timeout=60,
        )
        m = re.search(r"Granted job allocation (\d+)", res.stderr)
        if res.returncode != 0 or not m:
            raise SlurmClusterError(f"salloc failed: {res.stderr.strip()}")
        job = m.group(1)
        try:
            nodelist = self.run(["squeue", "-h", "-j", job, "-o", "%N"]).stdout.strip()
            env = self.env()
            env.update(
                {
                    "SLURM_JOB_ID": job,
                    "SLURM_JOBID": job,
                    "SLURM_JOB_NODELIST": nodelist,
                    "SLURM_NODELIST": nodelist,
                    "SLURM_NTASKS_PER_NODE": str(per_node),
                    "SLURM_JOB_NUM_NODES": str(nodes),
                }
            )
            yield env
        finally:
            self.run(["scancel", job], timeout=30)
            self.wait_idle()

    def release_requeued(self, job: str, timeout: float = 60.0) -> None:
        """Start a requeued job soon: Slurm holds a requeued batch job back (BeginTime ~2 min on);
        this moves its start time forward while it waits, until it runs again (or left the
        queue).  Call it after the job was asked to requeue.

        The new start is set only once no node is completing a job (the previous run ended
        everywhere; a node down or busy with another job does not hold it back) and to one
        second later: each slurmd revokes the previous run's credential when it ends
        it, and refuses a credential created in the same second as that revocation ("Job
        credential revoked": the requeued job is then killed instead of started).  It is set
        only while the job's start is more than 10 s away (Slurm's hold of a requeued job): once
        the new start has passed, squeue still says ``BeginTime`` until the scheduler's next pass
        starts the job, and a start moved a second forward at every poll kept it a second ahead
        of that pass, under load for minutes.  A job that does not run again in ``timeout`` s
        fails with what Slurm said of it."""
        end = time.monotonic() + timeout
        seen_pending = False
        state, completing = "", []  # type: str, List[str]
        while time.monotonic() < end:
            state = self.run(["squeue", "-h", "-j", job, "-o", "%T %r %S"]).stdout.strip()
            if state.startswith("PENDING"):
                seen_pending = True
                if " BeginTime " in state and _starts_later(state.rsplit(" ", 1)[1], 10.0):
                    completing = self.completing_nodes()
                    if not completing:
                        self.run(["scontrol", "update", f"jobid={job}", "StartTime=now+1"])
            elif seen_pending or not state:
                return
            time.sleep(0.2)
        raise SlurmClusterError(
            f"job {job} did not run again within {timeout:g} s (state {state!r}; nodes completing a job at the"
            f" last look: {completing or 'none'}); slurmctld: {self.ctld_log_lines(f'JobId={job}')[-8:]}"
        )

    def wait_left_queue(self, job: str, timeout: float) -> None:
        """Wait until Slurm job ``job`` is no longer in the queue (ended, requeues included)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.run(["squeue", "-h", "-j", job, "-o", "%i"]).stdout.strip():
                return
            time.sleep(0.2)
        raise SlurmClusterError(f"job {job} still in the queue after {timeout:g} s")

    def ctld_log_lines(self, needle: str) -> List[str]:
        """slurmctld's log lines containing ``needle`` (for failure messages)."""
        try:
            with open(os.path.join(self.dir, "log", "slurmctld.log"), errors="replace") as fh:
                return [line.rstrip() for line in fh if needle in line]
        except OSError:
            return []

    def start_slurmd(self, node: str, timeout: float = 30.0) -> None:
        """Start ``node``'s slurmd again (after :func:`tests.harness.hostfaults.stop_slurmd`) and
        wait until Slurm holds the node responding (``ReturnToService=2`` takes a node that was
        down for not responding back; it also ends what the node still runs of jobs it is no
        longer part of).

        Raises:
            SlurmClusterError: the node does not respond within ``timeout``.
        """
        with open(os.path.join(self.dir, "log", "daemons.out"), "ab") as log:
            self._spawn_slurmd(node, self.env(), log)
        self._write_state()
        end = time.monotonic() + timeout
        state = ""
        while time.monotonic() < end:
            res = self.run(["sinfo", "-h", "-n", node, "-o", "%T"], timeout=15)
            state = res.stdout.strip()
            if res.returncode == 0 and state and not state.endswith("*") and state not in ("down", "unknown"):
                return
            time.sleep(0.1)
        raise SlurmClusterError(f"{node} not responding {timeout:g} s after its slurmd started again (state {state!r})")

    def daemon_pids(self) -> Dict[str, int]:
        """``slurmctld`` and each node's daemon launcher pid."""
        return dict(self._pids)

    def close(self) -> None:
        """Cancel jobs, kill the daemons by pid, reap them, then remove the namespace cluster."""
        if self._closed:
            return
        with contextlib.suppress(Exception):
            self.run(["scancel", "--full", "-u", "root"], timeout=10)
        for name, pid in list(self._pids.items()):
            _kill_tree(pid)
        for proc in self._procs.values():
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
        for name, pid in list(self._pids.items()):  # not our children (from_state): wait for them to go
            end = time.monotonic() + 10
            while os.path.exists(f"/proc/{pid}") and _state(pid) not in (None, "Z") and time.monotonic() < end:
                time.sleep(0.02)
        # slurmstepd processes of finished steps may still linger in the namespaces: the
        # namespace cluster's close kills every process there.
        self.net.close()
        self._closed = True

    def __enter__(self) -> "SlurmCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_state(cls, workdir: str) -> "SlurmCluster":
        """Re-attach to a cluster started by ``up`` (its work dir)."""
        net = NamespaceCluster.from_state(workdir)
        sdir = os.path.join(workdir, "slurm")
        with open(os.path.join(sdir, "state.json"), encoding="utf-8") as fh:
            state = json.load(fh)
        return cls(_attach={"net": net, "nodes": state["nodes"], "dir": sdir, "pids": state["pids"]})

    def detach(self) -> None:
        """Keep the cluster running after this process exits (for ``up``)."""
        self.net.detach()
        for proc in self._procs.values():
            proc.returncode = 0  # do not let Popen's finaliser think it must reap them

    # ---------------------------------------------------------------- setup

    def _write_conf(self, cpus: int) -> None:
        for sub in ("ctld", "run", "log", *(f"spool/{n}" for n in self.nodes)):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        lines = [
            f"NodeName={n} NodeAddr={h.ip} CPUs={cpus} RealMemory=1000 State=UNKNOWN"
            for n, h in zip(self.nodes, self.net.hosts)
        ]
        text = _CONF.format(
            ctl_name=socket.gethostname().split(".")[0],
            ctl_addr=self.net.bridge_ip,
            port=_free_port(),
            d=self.dir,
            nodes="\n".join(lines),
        )
        with open(self.conf, "w", encoding="utf-8") as fh:
            fh.write(text)

    def _start(self, timeout: float) -> None:
        env = self.env()
        log = open(os.path.join(self.dir, "log", "daemons.out"), "ab")
        try:
            ctld = subprocess.Popen(
                [_exe("slurmctld"), "-D", "-i", "-f", self.conf],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._procs["slurmctld"], self._pids["slurmctld"] = ctld, ctld.pid
            for node in self.nodes:
                self._spawn_slurmd(node, env, log)
        finally:
            log.close()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmClusterError(f"{name} exited with {proc.returncode}; see {self.dir}/log")
            if self.idle_nodes() == sorted(self.nodes):
                return
            time.sleep(0.1)
        raise SlurmClusterError(f"nodes not idle after {timeout:g} s (idle: {self.idle_nodes()}); see {self.dir}/log")

    def _spawn_slurmd(self, node: str, env: Dict[str, str], log: object) -> None:
        h = self.net.hosts[self.nodes.index(node)]
        script = f"hostname {node} && exec {_exe('slurmd')} -D -f {self.conf} -N {node}"
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{h.netns}", "unshare", "--uts", "sh", "-c", script],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,  # type: ignore[arg-type]
            start_new_session=True,
        )
        self._procs[node], self._pids[node] = proc, proc.pid

    def _write_state(self) -> None:
        with open(os.path.join(self.dir, "state.json"), "w", encoding="utf-8") as fh:
            json.dump({"nodes": self.nodes, "pids": self._pids}, fh)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _state(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0].decode()
    except (OSError, IndexError):
        return None


def _descendants_of(pid: Optional[int]) -> set:
    """Every pid below ``pid`` now (the watchdog's own walk of /proc)."""
    if pid is None:
        return set()
    return descendants([pid], process_parents())


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants (a daemon launcher: sh/unshare then slurmd)."""
    for p in sorted(_descendants_of(pid)) + [pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``up`` / ``down`` for a Slurm cluster kept in ``--dir``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.harness.slurm_cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create the cluster and leave it running")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--dir", required=True, help="work dir (missing or empty)")
    up.add_argument("--cpus", type=int, default=4)
    down = sub.add_parser("down", help="remove everything 'up' created")
    down.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            cluster = SlurmCluster(args.nodes, args.dir, cpus=args.cpus)
            cluster.detach()
            print(f"SLURM_CONF={cluster.conf}")
            for node in cluster.nodes:
                print(f"{node} {cluster.addr(node)}")
            return 0
        if not os.path.exists(os.path.join(args.dir, "slurm", "state.json")):
            print(f"no Slurm cluster state in {args.dir}; nothing to do")
            return 0
        SlurmCluster.from_state(args.dir).close()
        print("Slurm cluster removed")
        return 0
    except (SlurmClusterError, NamespaceClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
