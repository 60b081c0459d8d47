"""The remote agent: runs every rank of one host under the ssh launcher (one agent per host).

This file is sent as source text to the remote host (mslaunch need not be installed there),
after the sources of :mod:`launcher.execution.process.proctree` (processes from /proc) and
:mod:`launcher.execution.ssh.remote_link` (the frames it writes), and
runs under the host's Python (``python:`` in the inventory, else ``python3``), started once per
host by :mod:`launcher.execution.ssh` as::

    exec <python> -S -u -c '<BOOTSTRAP>'

It must therefore stay self-contained: standard library only, Python >= 3.6, no imports from
``launcher``, no annotations.  :data:`BOOTSTRAP` reads a decimal length line and then that many
bytes of JSON ``{"src": <this file>, "cfg": {...}}`` from stdin with ``os.read`` (nothing is
left in a Python buffer, so the agent reads fd 0 directly afterwards) and calls :func:`main`
with ``cfg``:

    host          the host's name as the inventory gives it (for messages)
    ping_timeout  seconds without a byte on stdin after which every rank is ended (link lost)
    heartbeat     seconds between heartbeat frames
    sched_every   seconds between samples of the ranks' scheduler figures (default SCHED_EVERY)

The protocol (requests on stdin, frames on stdout) is described in :mod:`launcher.execution.ssh.agent`.

State machine of one rank::

    start op --cwd/env dump/exec fail--> "error", "exit 127"
    start op with "zygote", the host's zygote importing --> waiting --its "ready"--> forked (below);
        --the zygote cannot serve (not fork-safe, ended)--> spawned as a plain process
    start op --spawned (or forked by the zygote: remote_zygote.py, its exit from the zygote's
        report, its output through a FIFO)--> running ("started" pid) --reaped--> draining (leftovers of the rank
        killed, its pipe read to EOF, at most 2 s) --> "exit rc"
    running --term op--> SIGTERM (then SIGCONT) to its group;  --kill op--> SIGKILL to its group and tree
    heartbeats name the running ranks whose process is stopped by a signal (state T), and every
    sched_every s carry each running rank's tree's CPU and run-delay seconds and TCP send-queued
    bytes (the straggler watch)

State machine of the agent::

    running --stdin EOF, a signal, a write error, or no byte on stdin for ping_timeout s-->
    ending: SIGTERM to every rank group and descendant, 2 s, SIGKILL, reap, exit frames
    (best effort), exit

The agent is single-threaded: one ``poll`` loop over stdin, every rank's pipe, stdout (when
output is queued; stdout is non-blocking, so a stalled link never stops the ping timeout) and a
SIGCHLD wake-up pipe.  Output is batched into frames (:class:`launcher.execution.ssh.remote_link.Outbox`),
so many ranks' lines leave in few SSH packets.  Each rank runs in its own session (``start_new_session``), so its
process
group is its pid; the agent is a child subreaper (Linux), so orphans of a rank are re-parented
to it; they are attributed to their rank by snapshots of its tree (every second while ranks
run, walked from each rank's ``/proc/<pid>/task/*/children`` files) and by their group/session,
and are killed when that rank exits.
Nothing here runs a shell.
"""

import json
import os
import signal
import time

try:  # in the launcher; sent to a host, :func:`launcher.execution.probes.program_source` puts its source first
    from launcher.execution.probes.host_cores import read_host_cores
    from launcher.execution.process.proctree import (
        SchedCounter,
        become_subreaper,
        below,
        is_stopped,
        kill_quietly,
        killpg_quietly,
        proc_table,
        set_parent_death_signal,
        tree_below,
    )
    from launcher.execution.ssh.remote_link import MAGIC, OUT_LIMIT, Outbox, poll_fds, set_nonblocking
    from launcher.execution.ssh.remote_start import (
        StartError,
        plain_process,
        prepare_cwd,
        start_failure,
        write_env_dump,
        zygote_request,
    )
    from launcher.execution.ssh.remote_zygote import joined_now, joins_expired
except ImportError:
    pass

#: Seconds a finished rank's pipe may stay open (a leftover we could not attribute holds it).
DRAIN_LIMIT = 2.0
#: Seconds between process-tree snapshots while ranks run.
SNAPSHOT_EVERY = 1.0
#: Seconds between samples of the ranks' scheduler figures (sent with a heartbeat).
SCHED_EVERY = 2.0


def main(cfg):
    """Serve the launcher as ``cfg`` says until it goes away; exits the process (never returns)."""
    become_subreaper()
    agent = Agent(cfg)
    try:
        agent.run()
    finally:
        agent.end_all()
    os._exit(0)


class Rank(object):
    """One rank: its id, process, pipe, and what is known of its tree."""

    def __init__(self, rid):
        self.id = rid
        self.pid = None
        self.popen = None
        self.fd = None
        self.rc = None
        self.ended_at = None
        self.reaped_mono = None
        self.tree = set()  # pids seen below it in snapshots
        self.reported = False
        self.sched = SchedCounter()  # its tree's CPU and run-delay seconds
        self.join = None  # a JoinTrack while it joins MindSpore's cluster under SCHED_BATCH (remote_zygote.py)


class Agent(object):
    """The select loop serving one launcher connection (see the module doc)."""

    def __init__(self, cfg):
        self.host = cfg.get("host", "this host")
        self.ping_timeout = float(cfg.get("ping_timeout", 8.0))
        self.heartbeat = float(cfg.get("heartbeat", 1.0))
        self.sched_every = float(cfg.get("sched_every", SCHED_EVERY))
        self.next_sched = 0.0
        self.ranks = {}
        self.by_pid = {}
        self.outbox = Outbox(1)
        self.inbuf = b""
        self.last_in = time.monotonic()
        self.gone = False  # the launcher is gone (EOF, silence, signal, write error)
        self.next_beat = 0.0  # set by run()
        self.me = os.getpid()
        self.base_env = dict(os.environ)
        self.zygote = None  # the host's warm zygote (a ZygoteLink), once a "zygote" request asked for one
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w, 1):
            set_nonblocking(fd)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, _noop)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.outbox.raw(MAGIC)
        try:
            cores = read_host_cores()
        except Exception as exc:  # noqa: BLE001 - the agent runs without it; the launcher then sets no threads here
            cores = {"error": str(exc)}
        self.message({"ev": "ready", "pid": self.me, "time": time.time(), "cores": cores})

    # ------------------------------------------------------------ output

    def frame(self, kind, rid, data):
        self.outbox.frame(kind, rid, data)

    def message(self, obj):
        self.outbox.message(obj)

    def flush(self):
        """Write what stdout takes now; a broken link means the launcher is gone."""
        if not self.outbox.flush():
            self.gone = True

    # ------------------------------------------------------------ the loop

    def beat(self):
        """Queue a heartbeat when one is due; returns when the next one is."""
        now = time.monotonic()
        if now >= self.next_beat:
            # ranks stopped by a signal (SIGSTOP, ^Z): no exit and no output tells it; the
            # launcher's hang watch judges them (--stopped-timeout)
            stopped = [r.id for r in self.ranks.values() if r.rc is None and r.pid is not None and is_stopped(r.pid)]
            beat = {"ev": "hb", "time": time.time(), "stopped": stopped}
            if now >= self.next_sched:  # each rank's CPU and run-delay seconds: the straggler watch
                beat["sched"] = self.sched_figures()
                self.next_sched = now + self.sched_every
            self.message(beat)
            self.next_beat = now + self.heartbeat
        return self.next_beat

    def sched_figures(self):
        """``{id: [agent time, cpu s, delay s, send-queued bytes]}`` of the running ranks (:class:`SchedCounter`)."""
        got = {str(r.id): r.sched.sample(r.pid) for r in self.ranks.values() if r.rc is None and r.pid is not None}
        return {k: v for k, v in got.items() if v is not None}

    def run(self):
        self.next_beat = time.monotonic() + self.heartbeat
        next_snap = time.monotonic() + SNAPSHOT_EVERY
        while not self.gone:
            next_beat = self.beat()
            now = time.monotonic()
            if now >= next_snap:
                if any(r.rc is None and r.pid is not None for r in self.ranks.values()):
                    self.snapshot()
                    joins_expired(self.ranks.values(), now)
                next_snap = now + SNAPSHOT_EVERY
            rlist = [0, self.wake_r]
            z = self.zygote
            zfd = None
            if z is not None:
                z.late(now, self)
                zfd = z.fd()
            if zfd is not None:
                rlist.append(zfd)
            if len(self.outbox) < OUT_LIMIT:
                rlist += [r.fd for r in self.ranks.values() if r.fd is not None]
            wlist = [1] if self.outbox.due(now) else []
            timeout = min(next_beat - now, 0.25)
            if len(self.outbox) and not wlist:
                timeout = min(timeout, self.outbox.deadline() - now)
            timeout = max(0.0, timeout)
            readable, writable = poll_fds(rlist, wlist, timeout)
            if 0 in readable:
                self.read_stdin()
            if self.wake_r in readable:
                try:
                    while os.read(self.wake_r, 4096):
                        pass
                except OSError:
                    pass
            if z is not None and zfd is not None and zfd in readable:
                z.read(self, now)
            for r in list(self.ranks.values()):
                if r.fd is not None and r.fd in readable:
                    self.read_rank(r)
            self.reap()
            self.finish_ranks()
            if self.outbox.due(time.monotonic()):
                self.flush()
            if time.monotonic() - self.last_in > self.ping_timeout:
                self.gone = True

    def _on_signal(self, signum, frame):
        self.gone = True

    def read_stdin(self):
        try:
            data = os.read(0, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.gone = True
            return
        self.last_in = time.monotonic()
        self.inbuf += data
        while b"\n" in self.inbuf:
            line, self.inbuf = self.inbuf.split(b"\n", 1)
            if line.strip():
                try:
                    op = json.loads(line.decode("utf-8"))
                except ValueError:
                    continue
                self.handle(op)
                self.beat()  # many starts on a loaded host: the launcher still hears from us
                self.flush()

    def handle(self, op):
        kind = op.get("op")
        if kind == "start":
            self.start(int(op["id"]), op.get("cfg") or {})
        elif kind == "zygote":
            self.zygote = zygote_request(self.zygote, op, self.base_env)
        elif kind in ("term", "kill"):
            rid = op.get("id")
            targets = list(self.ranks.values()) if rid is None else [self.ranks[rid]] if rid in self.ranks else []
            for r in targets:
                if r.pid is None and r.rc is None and self.zygote is not None and self.zygote.cancel(r):
                    r.rc = -(signal.SIGTERM if kind == "term" else signal.SIGKILL)
                    r.ended_at, r.reaped_mono = time.time(), 0.0
                elif kind == "term":
                    if r.rc is None and r.pid is not None:  # the group only, as the local launcher does
                        killpg_quietly(r.pid, signal.SIGTERM)
                        killpg_quietly(r.pid, signal.SIGCONT)  # a stopped rank acts on it at once
                else:
                    self.kill_tree(r)

    # ------------------------------------------------------------ ranks

    def start(self, rid, cfg):
        """Start rank ``rid`` (forked from the zygote when ``cfg`` asks and it can); failures
        become "error" and "exit 127" for that rank only."""
        r = Rank(rid)
        self.ranks[rid] = r
        try:
            env = dict(self.base_env)
            env.update({str(k): str(v) for k, v in (cfg.get("env") or {}).items()})
            argv = [str(a) for a in cfg["argv"]]
            cwd = prepare_cwd(cfg, self.host)
            write_env_dump(cfg.get("env_dump"), env, cfg.get("secrets") or (), self.host)
        except StartError as exc:
            return self.failed(r, str(exc))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            return self.failed(r, start_failure(exc, cfg.get("argv") or [], self.host))
        z = self.zygote
        if cfg.get("zygote") and z is not None and z.takes(argv, env):
            return z.start(r, argv, env, cwd, self)
        self.spawn(r, argv, env, cwd)

    def spawn(self, r, argv, env, cwd):
        """Start rank ``r`` as a plain process (the agent's child)."""
        try:
            popen, rfd = plain_process(argv, env, cwd, _child_setup)
        except (OSError, ValueError, TypeError) as exc:
            return self.failed(r, start_failure(exc, argv, self.host))
        set_nonblocking(rfd)
        r.popen, r.fd = popen, rfd
        self.spawned(r, popen.pid)

    def spawned(self, r, pid):
        r.pid = pid
        self.by_pid[pid] = r  # a forked rank is reaped here too once its zygote is gone (we are the subreaper)
        self.message({"ev": "started", "id": r.id, "pid": pid})

    def exited(self, r, rc):
        """Rank ``r`` (forked by the zygote) exited: as :meth:`reap` does for a child."""
        if self.by_pid.pop(r.pid, None) is None:
            return  # reaped here already
        r.rc, r.ended_at, r.reaped_mono = rc, time.time(), time.monotonic()
        self.kill_leftovers(r, proc_table())

    def note(self, text):
        self.message({"ev": "note", "msg": text})

    def failed(self, r, msg):
        self.message({"ev": "error", "id": r.id, "msg": msg.replace("\n", " ")})
        r.rc, r.ended_at, r.reported = 127, time.time(), True
        self.message({"ev": "exit", "id": r.id, "rc": 127, "time": r.ended_at})

    def read_rank(self, r):
        """Frame what rank ``r``'s pipe holds; close it at EOF."""
        try:
            data = os.read(r.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self.frame(b"O", r.id, data)
            joined_now(r, data)
        else:
            os.close(r.fd)
            r.fd = None

    def reap(self):
        """Collect every exited child: ranks get their returncode (and what they left behind is
        killed), orphans are just reaped."""
        exited = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == 0:
                break
            r = self.by_pid.pop(pid, None)
            if r is None:
                continue
            r.rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            r.ended_at = time.time()
            r.reaped_mono = time.monotonic()
            if r.popen is not None:
                r.popen.returncode = r.rc  # subprocess must not wait for it again
            exited.append(r)
        if exited:
            table = proc_table()  # one scan for every rank that exited
            for r in exited:
                self.kill_leftovers(r, table)

    def finish_ranks(self):
        """Report ranks that exited once their output is all framed (or the drain limit passed)."""
        for r in self.ranks.values():
            if r.reported or r.rc is None:
                continue
            if r.fd is not None:
                while r.fd is not None:  # read what is there now
                    before = len(self.outbox)
                    self.read_rank(r)
                    if len(self.outbox) == before:
                        break
                if r.fd is not None and time.monotonic() - r.reaped_mono < DRAIN_LIMIT:
                    continue
                if r.fd is not None:
                    os.close(r.fd)
                    r.fd = None
            r.reported = True
            self.message({"ev": "exit", "id": r.id, "rc": r.rc, "time": r.ended_at})

    # ------------------------------------------------------------ trees

    def snapshot(self, table=None):
        """Remember which processes live below each running rank (from ``table``, else from
        the ranks' children files, else from a scan of every process)."""
        running = [r for r in self.ranks.values() if r.rc is None and r.pid is not None]
        if table is None:
            trees = [tree_below(r.pid) for r in running]
            if all(t is not None for t in trees):
                for r, t in zip(running, trees):
                    r.tree.update(t)
                return
            table = proc_table()
        for r in running:
            r.tree.update(below(table, [r.pid]))

    def owned(self, r, table):
        """Pids of live processes that belong to rank ``r``: its group or session, its tree,
        their descendants; orphans nobody else claims when no other rank runs."""
        roots = set()
        others_running = any(o is not r and o.rc is None and o.pid is not None for o in self.ranks.values())
        zygote = self.zygote.pid if self.zygote is not None else None
        for pid, (ppid, pgid, sid) in table.items():
            if pid == self.me or pid == zygote:
                continue
            if pid in r.tree or (r.pid is not None and (pgid == r.pid or sid == r.pid or pid == r.pid)):
                roots.add(pid)
            elif ppid == self.me and pid not in self.by_pid and not others_running:
                if not any(pid in o.tree for o in self.ranks.values() if o is not r):
                    roots.add(pid)
        roots.discard(self.me)
        return roots | set(below(table, roots))

    def kill_tree(self, r):
        """SIGKILL to rank ``r``'s group and every process attributed to it."""
        if r.pid is None:
            return
        table = proc_table()
        if r.rc is None:
            self.snapshot(table)
            # the group first, in one go: killed one by one, a shell whose child died first
            # could end normally (exit 0) before its own SIGKILL came
            killpg_quietly(r.pid, signal.SIGKILL)
        for pid in self.owned(r, table):
            if pid not in self.by_pid or pid == r.pid:
                kill_quietly(pid, signal.SIGKILL)

    def kill_leftovers(self, r, table):
        """Rank ``r`` exited: kill whatever it left behind (we are its subreaper)."""
        for pid in self.owned(r, table):
            if pid not in self.by_pid:
                kill_quietly(pid, signal.SIGKILL)

    def end_all(self):
        """The launcher is gone: SIGTERM every rank and descendant, 2 s, SIGKILL, reap, report."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

        def everything(sig):
            for r in self.ranks.values():
                if r.rc is None and r.pid is not None:
                    killpg_quietly(r.pid, sig)
            for pid in below(proc_table(), [self.me]):
                kill_quietly(pid, sig)

        everything(signal.SIGTERM)
        everything(signal.SIGCONT)  # a stopped process acts on the SIGTERM at once
        z = self.zygote
        if z is not None:
            z.state = "ended"  # it forks nothing more, and nothing waiting for it starts now
        deadline = time.monotonic() + 2.0
        while self.by_pid and time.monotonic() < deadline:
            self.reap()
            if z is not None and z.fd() is not None:  # the exits of ranks it forked and reaped
                z.read(self, time.monotonic())
            time.sleep(0.02)
        for _ in range(50):
            everything(signal.SIGKILL)
            self.reap()
            if not below(proc_table(), [self.me]):
                break
            time.sleep(0.02)
        self.reap()
        for r in self.ranks.values():
            if r.rc is None:  # reaped by its zygote, which died before saying so, or never forked
                r.rc, r.ended_at = -signal.SIGKILL, time.time()
            if r.fd is not None:
                try:
                    os.close(r.fd)
                except OSError:
                    pass
                r.fd = None
        self.finish_ranks()
        self.flush()
        if self.zygote is not None:
            self.zygote.discard()


def _child_setup():
    """In a rank before exec: no blocked signals, and it dies with the agent."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    set_parent_death_signal(signal.SIGKILL)


def _noop(signum, frame):
    pass
