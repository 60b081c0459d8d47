"""The ssh launcher: one paramiko connection, one SSH session and one agent per host.

:class:`SshBackend` connects to every host of the plan at once (:func:`~.connection.connect_all`),
copies the rank tables there (:func:`~.transfer.put_file`) and opens one session per host (in
parallel) that runs the host agent (:mod:`~.agent`, :mod:`launcher.execution.ssh.remote_agent`).
Each :meth:`SshBackend.start` sends one ``start`` request to the rank's host agent, which spawns
the rank at once; the agent multiplexes every rank's output over the one channel, and one
thread in mslaunch (:class:`~.pump.Pump`, ``select`` over every channel) writes each rank's output into
its local log file as it arrives, so ``mslaunch logs tail`` works unchanged.  mslaunch's threads
therefore grow per host (paramiko's transport and a sender per connection), never per rank.

Every second mslaunch pings every agent; an agent that says nothing for ``lost_after`` seconds
(or whose connection closes) makes its host *lost*: the wait of each of its unfinished ranks
returns 255 with ``reason`` "connection to H lost", and the supervisor tears the job down
everywhere.  An agent that hears no ping for ``agent_timeout`` seconds, or whose session closes,
ends all of its host's ranks itself, so a cut link or a killed mslaunch leaves nothing behind.

Host agent state machine (:class:`~.hostagent.HostAgent`)::

    opening --session opened, agent sent--> starting --"ready" frame--> ready
    opening --session cannot be opened--> ended (every rank: 255, "cannot start the agent ...")
    starting --no word within start_timeout--> ended (every rank: 255, "did not start within
             --ssh-start-timeout"; a slow login shell is "not started", not "lost")
    ready --silent for lost_after s, or the connection closed--> ended (255, "connection ... lost")
    starting/ready --channel EOF--> ended (unfinished ranks: the agent's exit status and its
             last stderr lines, "ended without an exit status" when it was killed, or
             "connection ... lost (closed)")

Rank handle state machine (:class:`~.hostagent.SshProcess`)::

    requested --"started" pid--> running --"exit" rc, time--> done (rc)
    requested --"error" msg, "exit 127"--> done (127, reason)
    requested/running --its host agent ended--> done (255 or the agent's status, reason)
"""

from __future__ import annotations

import os
import posixpath
import threading
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional

from launcher.errors import LaunchError, MsLaunchError
from launcher.execution.backend import Backend, BackendContext
from launcher.execution.local.zygote import shared_env
from launcher.execution.ssh.agent import AgentConfig, zygote_op
from launcher.execution.ssh.connection import SshConnection, connect_all, connect_each, run_parallel
from launcher.execution.ssh.hostagent import HostAgent, LogFiles, SshProcess
from launcher.execution.ssh.pool import AgentPool, Kept, end_agents
from launcher.execution.ssh.pump import Pump
from launcher.execution.ssh.settings import SSHSettings
from launcher.execution.ssh.transfer import put_file
from launcher.planning.cpu.hostcores import HostCores, HostThreadPlan, HostThreads, host_thread_env, parse_host_cores
from launcher.planning.job.kinds import ArtefactKind
from launcher.planning.job.spec import Plan, ProcPlan
from launcher.planning.text.private import open_private

#: The dynamic cluster's layout: read when a rank joins (``init()``), never by ``import mindspore``,
#: and changed by a restart on other hosts or fewer ranks.  A host's zygote imports without them,
#: so it stays warm across such a restart.
_LAYOUT = frozenset(
    {"MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_TOPO_TIMEOUT", "RANK_SIZE", "RANK_TABLE_FILE"}
)


def zygote_env(plan: Plan) -> Dict[str, str]:
    """What each host's zygote imports under, on top of its agent's environment: the variables
    every rank of ``plan`` has with the same value, but the cluster's layout (:data:`_LAYOUT`)."""
    return {k: v for k, v in shared_env(plan).items() if k not in _LAYOUT}


class SshBackend(Backend):
    """Starts a plan's processes on remote hosts over SSH, one agent per host (the supervisor's
    backend).

    Args:
        plan: the plan; every host of it is connected to at once.
        settings: the SSH settings; ``settings.config`` None means the plan's ``--ssh-config``
            (then ``$MSLAUNCH_SSH_CONFIG``, ``~/.ssh/config``).

    Raises:
        LaunchError: a host cannot be reached / authenticated / verified (every failed host is
            named), or a rank table cannot be copied to a host.  A host whose agent session
            cannot be opened does not raise: its ranks end with 255 and the reason.
    """

    def __init__(self, plan: Plan, settings: SSHSettings = SSHSettings(), record_dir: Optional[str] = None) -> None:
        self.plan = plan
        if settings.config is None and plan.ssh_config:
            settings = replace(settings, config=plan.ssh_config)
        self.settings = settings
        self._hosts = {h.name: h for h in plan.hosts}
        self._handles: List[SshProcess] = []
        self.keep: Optional[AgentPool] = settings.keep
        self._next_id = self.keep.next_id if self.keep is not None else 0
        self.logs = LogFiles()
        self.agents: Dict[str, HostAgent] = {}
        self._pump: Optional[Pump] = None
        self._threads = {t.host: t for t in plan.host_threads}
        self._thread_plans: Dict[str, Optional[HostThreadPlan]] = {}
        self._thread_lock = threading.Lock()
        self.record_dir = record_dir
        #: the agents (and connections) taken from the last attempt, by host
        self.kept = self.keep.take([h.name for h in plan.hosts]) if self.keep is not None else {}
        self.conns = {name: conn for name, (conn, _) in self.kept.items()}
        try:
            self.conns.update(connect_all([h for h in plan.hosts if h.name not in self.kept], settings))
            self._copy_artefacts()
            self._open_agents()
        except BaseException:
            self.close()
            raise
        if self.keep is not None and settings.standby:
            self.keep.standby(self._open_standby)

    def _copy_artefacts(self) -> None:
        """Rank tables go to the same path on every host (their ranks read RANK_TABLE_FILE)."""
        tables = [a for a in self.plan.artefacts if a.kind == ArtefactKind.RANK_TABLE]
        if not tables:
            return

        def copy(conn: SshConnection) -> None:
            for art in tables:
                put_file(conn, posixpath.join(self.plan.job_dir, art.name), art.content.encode("utf-8"))

        results = self._parallel(copy, list(self.conns.values()), "copying the rank table")
        errors = [str(exc) for _, exc in results if exc is not None]
        if errors:
            raise LaunchError("; ".join(errors))

    def _open_agents(self) -> None:
        """One session per host with ranks, opened in parallel (a kept agent is taken as it is);
        with ``settings.zygote`` each is told to have its zygote import; then the pump starts."""
        used = {p.host for p in self.plan.processes}
        opening = []
        for name, conn in self.conns.items():
            if name not in used:
                continue
            if name in self.kept:
                agent = self.kept[name][1]
                agent.adopt(self.settings, self.logs)
            else:
                agent = HostAgent(conn, self._python(name), self.settings, self.logs)
                opening.append(agent)
            self.agents[name] = agent
        self._parallel(lambda a: a.open(), opening, "starting the host agents")
        if self.settings.zygote:
            env = zygote_env(self.plan)
            for name, agent in self.agents.items():
                agent.control(zygote_op(self._python(name), self.settings.zygote, env))
        self._pump = Pump(list(self.agents.values()))
        self._pump.start()

    def _python(self, name: str) -> str:
        """The interpreter of host ``name``'s ranks (and of its agent)."""
        for p in self.plan.processes:
            if p.host == name and len(p.argv) >= 2 and (p.argv[1] == "-m" or not p.argv[1].startswith("-")):
                return p.argv[0]
        host = self._hosts.get(name)
        return host.python if host is not None and host.python else "python3"

    def _open_standby(self) -> Dict[str, Kept]:
        """The spare hosts' connections and agents, their zygotes importing (in the background:
        :meth:`AgentPool.standby`); a host that cannot be reached is left out."""
        hosts = [h for h, _ in self.settings.standby if h.name not in self.conns]
        pythons = dict((h.name, python) for h, python in self.settings.standby)
        conns = connect_each(hosts, self.settings)
        kept: Dict[str, Kept] = {}
        env = zygote_env(self.plan)
        for name, conn in conns.items():
            if not isinstance(conn, SshConnection):
                continue
            agent = HostAgent(conn, pythons[name], self.settings, LogFiles())
            agent.open()
            if agent.ended:
                conn.close()
                continue
            if self.settings.zygote:
                agent.control(zygote_op(pythons[name], self.settings.zygote, env))
            kept[name] = (conn, agent)
        return kept

    def _parallel(self, fn: Callable[[Any], Any], items: List[Any], what: str) -> List[Any]:
        from launcher.execution.stopsignals import Interrupted

        try:
            return run_parallel(fn, items, self.settings.pool)
        except Interrupted as exc:
            raise LaunchError(f"interrupted while {what}", exit_code=128 + exc.signum) from None

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> SshProcess:
        """Ask ``proc``'s host agent to start it; returns at once (the agent reports the pid
        later; a host whose agent cannot start or is lost ends the handle with 255 and a reason).

        Raises:
            LaunchError: the host is not connected.
        """
        agent = self.agents.get(proc.host)
        if agent is None:
            raise LaunchError(f"{proc.name}: host {proc.host} is not in the plan's hosts")
        if not agent.conn.active():
            raise LaunchError(f"{proc.name}: the connection to {agent.conn.target.label} is closed")
        # The log exists (and is empty) before the process, as for local ranks.
        os.close(open_private(log_path))  # 0600: a rank may print its environment
        proc = self._with_threads(proc, agent)
        handle = SshProcess(proc, agent, self._next_id, log_path)
        self._next_id += 1
        self._handles.append(handle)
        agent.add(
            handle,
            AgentConfig.for_rank(proc, cwd, self.plan.job_dir, self.plan.secrets, bool(self.settings.zygote)).start_op(
                handle.rank_id
            ),
        )
        return handle

    def _with_threads(self, proc: ProcPlan, agent: HostAgent) -> ProcPlan:
        """``proc`` with the thread variables its host's cores give it (``plan.host_threads``:
        learned from the agent's "ready" message, decided once per host by the pure rule of
        :func:`~launcher.planning.cpu.hostcores.host_thread_env`); unchanged for other ranks or
        when the agent reported no cores."""
        threads = self._threads.get(proc.host)
        if threads is None or proc.rank not in threads.ranks:
            return proc
        with self._thread_lock:
            if proc.host not in self._thread_plans:
                self._thread_plans[proc.host] = self._decide(threads, agent)
            decided = self._thread_plans[proc.host]
        env = decided.env.get(proc.rank) if decided is not None else None
        if not env:
            return proc
        return replace(proc, env=tuple(env.items()) + tuple(proc.env))

    def _decide(self, threads: HostThreads, agent: HostAgent) -> Optional[HostThreadPlan]:
        """The thread plan of one host from its agent's cores report; says it (``on_note``) and
        records it in ``<record_dir>/host-threads.json``."""
        if not agent.wait_ready():
            return None  # the agent ended: its ranks end too, with the reason
        try:
            cores = parse_host_cores(agent.cores, threads.host, f"the ssh agent on {threads.host}")
        except MsLaunchError as exc:
            self._note(f"{threads.host}: threads not set (the agent reported no cores: {exc})", False)
            return None
        decided = host_thread_env(threads, cores)
        for line in decided.notes:
            self._note(line, False)
        for line in decided.warnings:
            self._note(line, True)
        if self.record_dir is not None:
            self._record(cores, threads, decided)
        return decided

    def _note(self, line: str, warning: bool) -> None:
        if self.settings.on_note is not None:
            self.settings.on_note(("warning: " if warning else "cpu: ") + line)

    def _record(self, cores: HostCores, threads: HostThreads, decided: HostThreadPlan) -> None:
        """One entry per host in ``host-threads.json`` (what was learned, what was set)."""
        import json

        path = os.path.join(str(self.record_dir), "host-threads.json")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        data[threads.host] = {
            "cores": cores.to_json(),
            "env": {str(r): dict(e) for r, e in decided.env.items()},
            "notes": list(decided.notes),
            "warnings": list(decided.warnings),
        }
        from launcher.jobs.files import write_atomic

        write_atomic(path, json.dumps(data, indent=1) + "\n")

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls(ctx.plan, ctx.settings_for("ssh") or SSHSettings(), record_dir=ctx.attempt_dir)

    def close(self) -> None:
        """Stop the pump; hand every agent that still serves to the job's pool (``settings.keep``),
        let the others exit and close their connections."""
        if self._pump is not None:
            self._pump.stop()
        conns = dict(getattr(self, "conns", {}))
        kept: Dict[str, Kept] = {}
        if self.keep is not None:
            for name, agent in self.agents.items():
                if agent.serves() and agent.conn.active():
                    kept[name] = (conns.pop(name), agent)
            self.keep.next_id = max(self.keep.next_id, self._next_id)
        # an agent of this attempt not kept, and a taken one whose host this plan does not use
        ending = [a for n, a in self.agents.items() if n not in kept]
        ending += [a for n, (_, a) in getattr(self, "kept", {}).items() if n not in self.agents]
        end_agents(ending, list(conns.values()))
        if kept:
            assert self.keep is not None  # kept is empty without a pool
            self.keep.put(kept)
        self.logs.close()

    @classmethod
    def end_job(cls, settings: Mapping[str, Any]) -> None:
        """End the agents kept for a restart, if any (the job is over)."""
        ssh = settings.get("ssh")
        if isinstance(ssh, SSHSettings) and ssh.keep is not None:
            ssh.keep.close()
