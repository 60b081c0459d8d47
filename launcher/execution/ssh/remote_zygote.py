"""The ssh agent's warm zygote: ranks of a host forked from one process that imported MindSpore once.

Sent to the host with the agent (:mod:`launcher.execution.ssh.remote_agent`), so: standard library
only, no imports from ``launcher`` (guarded), no annotations.  The zygote itself is the local
launcher's (:mod:`launcher.execution.local.zygote_server` and the child's side,
:mod:`launcher.execution.local.zygote_child`), sent as source text in the ``zygote`` request
(:func:`launcher.execution.ssh.agent.zygote_op`) and run as ``<python> -c <source> MODULE...``
under the environment every rank of the job shares.  The agent keeps one zygote per host; as the
agent outlives an attempt (the launcher's agent pool, :mod:`launcher.execution.ssh.pool`), a
restart forks its ranks from the zygote the last attempt left, warm.

Life of one zygote (:class:`ZygoteLink`)::

    started --{"ready"}--> ready --a "zygote" request of another attempt--> checking
        --{"pong"}: one thread, nothing of the last attempt left--> ready
    any state --{"unsafe"}, its output's end, or a failed start--> ended (``why`` says why):
        every rank waiting for it, and every later one, starts as a plain process

A rank forked from the zygote is the zygote's child, not the agent's: its exit comes as the
zygote's ``{"exit": pid, "status": rc}`` line, and its output through a FIFO the agent reads as it
reads a plain rank's pipe (the agent holds a write end of it too until the rank's exit is known,
so the FIFO reads no end before the child opened it).  The rank dies with the zygote, and the
zygote with the agent (``PR_SET_PDEATHSIG``), as a plain rank dies with the agent.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any  # noqa: F401 - for the type comments

try:  # in the launcher; sent to a host, the agent's source comes first
    from launcher.execution.process.fastjoin import zygote_env
    from launcher.execution.process.proctree import JOINED, batch_start_wanted, restore_normal, set_parent_death_signal
except ImportError:
    pass

#: Seconds a zygote may take to import before the starts waiting for it go ahead as plain processes.
READY_LIMIT = 60.0
#: Seconds a rank forked under ``SCHED_BATCH`` keeps it at most without the end-of-init line
#: (``proctree.JOINED``; :mod:`launcher.execution.local.joinsched` says why the policy).
JOIN_LIMIT = 120.0


class JoinTrack(object):
    """A rank forked under ``SCHED_BATCH``: its output is watched for :data:`JOINED` (the agent
    then gives its threads ``SCHED_OTHER`` back, :func:`restore_normal`), for :data:`JOIN_LIMIT`
    seconds at most."""

    def __init__(self, now):
        self.since = now
        self.tail = b""

    def joined(self, data):
        """Whether ``data``, the rank's next output, holds the line (also across two reads)."""
        text = self.tail + data
        if JOINED in text:
            return True
        self.tail = text[-len(JOINED) :]
        return False

    def expired(self, now):
        return now - self.since > JOIN_LIMIT


def joined_now(r, data):
    """Rank ``r`` (the agent's, with ``join``, ``pid``) wrote ``data``: once it shows the rank
    joined, its threads get ``SCHED_OTHER`` back."""
    if r.join is not None and r.pid is not None and r.join.joined(data):
        r.join = None
        restore_normal(r.pid)


def joins_expired(ranks, now):
    """Running ``ranks`` that did not say they joined within :data:`JOIN_LIMIT` s get
    ``SCHED_OTHER`` back anyway (``GLOG_v=3`` hides the line)."""
    for r in ranks:
        if r.join is not None and r.pid is not None and r.rc is None and r.join.expired(now):
            r.join = None
            restore_normal(r.pid)


def comparable(env):
    """What an import may read of ``env``: all but the launcher's own ``MSLAUNCH_*`` variables
    (the attempt number, the offered checkpoint interval, ...)."""
    return dict((k, v) for k, v in env.items() if not k.startswith("MSLAUNCH_"))


def forkable(argv, python):
    """True for ``<python> script ...`` and ``<python> -m module ...`` (what the zygote can run)."""
    if len(argv) < 2 or argv[0] != python:
        return False
    if argv[1] == "-m":
        return len(argv) >= 3
    return not argv[1].startswith("-")


def _python_vars(env):
    return dict((k, v) for k, v in env.items() if k.startswith("PYTHON"))


class ZygoteLink(object):
    """One zygote process under the agent: its replies, and the ranks waiting for it or forked by it.

    The agent calls :meth:`fd` (to poll), :meth:`read` when it is readable, :meth:`takes` and
    :meth:`start` for a rank; the zygote's events come back through the agent's ``spawned``,
    ``exited``, ``spawn`` (a plain start instead) and ``note`` methods.
    """

    def __init__(self, python, preload, env, src):
        self.python = python
        self.preload = list(preload)
        self.env = env
        self.src = src
        self.proc = None  # type: Any
        self.buf = b""
        self.state = "starting"  # "starting" | "ready" | "checking" | "ended"
        self.why = None  # why it ended
        self.waiting = []  # (rank, argv, env, cwd) until it is ready
        self.asked = []  # ranks whose fork was asked, in order (the zygote answers in order)
        self.children = {}  # pid -> rank
        self.fifos = {}  # rank id -> (path, the agent's write end)
        self.dir = ""  # its folder: the FIFOs, its stderr
        self.started_at = None
        self.eof = False  # its output ended (it exited)

    # ------------------------------------------------------------ the process

    def begin(self, now):
        """Start the zygote; False (and ``why``) when it cannot start."""
        try:
            self.dir = tempfile.mkdtemp(prefix="mslaunch-zygote-")
            err = os.open(os.path.join(self.dir, "zygote.err"), os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                self.proc = subprocess.Popen(
                    [self.python, "-c", self.src] + self.preload,
                    cwd=self.dir,  # its sys.path[0]: an empty folder, so nothing of a home folder shadows the preload
                    env=zygote_env(self.env)[0],  # with the fastjoin shim, when it can be built here
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    close_fds=True,
                    preexec_fn=_zygote_setup,
                )
            finally:
                os.close(err)
        except (OSError, ValueError) as exc:
            self.end("it could not start: %s" % (getattr(exc, "strerror", None) or exc))
            return False
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.started_at = now
        return True

    def fd(self):
        """The descriptor to poll for its replies (None once its output ended)."""
        if self.proc is None or self.eof:
            return None
        return self.proc.stdout.fileno()

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def send(self, obj):
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode("utf-8"))
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def same(self, python, preload, env):
        """Whether a request for ``python``/``preload``/``env`` may fork from this zygote."""
        return (
            self.state != "ended"
            and (self.python, self.preload) == (python, list(preload))
            and comparable(self.env) == comparable(env)
        )

    def check(self):
        """A new attempt: ask whether it is still fit (one thread, nothing of the last attempt under it)."""
        if self.state == "ready" and not self.asked:
            if self.send({"ping": True}):
                self.state = "checking"
            else:
                self.end("it is gone")

    def end(self, why, agent=None):
        """It forks no more: what waits for it starts as plain processes; the process ends once
        nothing it forked runs (a rank it forked dies with it)."""
        if self.state != "ended":
            self.state, self.why = "ended", why
            waiting, self.waiting = self.waiting, []
            asked, self.asked = self.asked, []
            if agent is not None:
                if waiting or asked:
                    agent.note("zygote on %s: %s; starting ranks as plain processes" % (agent.host, why))
                for r, argv, env, cwd in asked + waiting:
                    self.drop_fifo(r.id)
                    if r.fd is not None:  # the FIFO's reader
                        os.close(r.fd)
                        r.fd = None
                    agent.spawn(r, argv, env, cwd)
        if not self.children:
            self.close()

    def close(self):
        """Close its stdin: it exits (and a rank it forked dies with it)."""
        if self.proc is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except (OSError, ValueError):
                pass

    def discard(self):
        """The agent ends: remove the FIFOs' folder (the zygote dies with the agent)."""
        for rid in list(self.fifos):
            self.drop_fifo(rid)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ ranks

    def takes(self, argv, env):
        """Whether a rank with ``argv``/``env`` is forked from this zygote (else it starts plain)."""
        return self.state != "ended" and forkable(argv, self.python) and _python_vars(env) == _python_vars(self.env)

    def start(self, r, argv, env, cwd, agent):
        """Fork rank ``r`` once the zygote is ready (at once when it is)."""
        if self.state in ("starting", "checking"):
            self.waiting.append((r, argv, env, cwd))
            return
        self.fork(r, argv, env, cwd, agent)

    def fork(self, r, argv, env, cwd, agent):
        try:
            path = os.path.join(self.dir, "rank-%d" % r.id)
            os.mkfifo(path, 0o600)
            rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            agent.note("zygote on %s: no FIFO for a rank's output (%s); a plain process instead" % (agent.host, exc))
            return agent.spawn(r, argv, env, cwd)
        self.fifos[r.id] = (path, wfd)
        request = {
            "argv": list(argv[1:]),
            "env": env,
            "cwd": cwd or os.getcwd(),
            "log": path,
            "cpus": None,
            "title": " ".join(argv),
            "interpreter": argv[0],
            "batch_start": batch_start_wanted(env),
            "die_with_parent": True,
        }
        if not self.send(request):
            os.close(rfd)
            self.drop_fifo(r.id)
            self.end("it is gone", agent)
            return agent.spawn(r, argv, env, cwd)
        r.fd = rfd
        r.join = JoinTrack(time.monotonic()) if request["batch_start"] else None
        self.asked.append((r, argv, env, cwd))

    def cancel(self, r):
        """Rank ``r`` is ended before its fork was asked: True when it was still waiting."""
        for i, w in enumerate(self.waiting):
            if w[0] is r:
                del self.waiting[i]
                return True
        return False

    def drop_fifo(self, rid):
        """Close the agent's write end of rank ``rid``'s FIFO (its reader then sees the end once
        the rank's processes closed theirs) and remove its name."""
        path, wfd = self.fifos.pop(rid, (None, None))
        if wfd is not None:
            try:
                os.close(wfd)
            except OSError:
                pass
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    # ------------------------------------------------------------ replies

    def read(self, agent, now):
        """Handle what the zygote said; notice its end."""
        try:
            data = os.read(self.proc.stdout.fileno(), 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.eof = True
            self.end(self._last_words("it ended"), agent)
            return
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                msg = json.loads(line.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(msg, dict):
                self.reply(msg, agent)

    def reply(self, msg, agent):
        if "exit" in msg:
            r = self.children.pop(msg.get("exit"), None)
            if r is not None:
                self.drop_fifo(r.id)
                agent.exited(r, int(msg.get("status", 1)))
            if self.state == "ended" and not self.children:
                self.close()
        elif self.state == "ended":
            return
        elif "ready" in msg:
            self.state = "ready"
            waiting, self.waiting = self.waiting, []
            for r, argv, env, cwd in waiting:
                self.fork(r, argv, env, cwd, agent)
        elif "pong" in msg:
            pong = msg["pong"] if isinstance(msg["pong"], dict) else {}
            if len(pong.get("threads") or ()) > 1:
                self.end("it has %d threads" % len(pong["threads"]), agent)
            elif pong.get("children"):
                self.end("%d process(es) of the last attempt still run under it" % len(pong["children"]), agent)
            else:
                self.state = "ready"
                self.reply({"ready": True}, agent)
        elif "unsafe" in msg:
            self.end(str(msg["unsafe"]), agent)
        elif self.asked:  # {"pid": N} or {"error": ...}: the answer to the oldest fork asked
            r, argv, env, cwd = self.asked.pop(0)
            pid = msg.get("pid")
            if isinstance(pid, int):
                self.children[pid] = r
                agent.spawned(r, pid)
            else:
                os.close(r.fd)
                r.fd = None
                self.drop_fifo(r.id)
                agent.note("zygote on %s could not fork a rank (%s); it starts as a plain process" % (agent.host, msg))
                agent.spawn(r, argv, env, cwd)

    def late(self, now, agent):
        """Give up on a zygote that has not finished importing within :data:`READY_LIMIT` s."""
        if self.state == "starting" and self.started_at is not None and now - self.started_at > READY_LIMIT:
            self.end("it did not finish importing within %d s" % READY_LIMIT, agent)

    def _last_words(self, why):
        try:
            with open(os.path.join(self.dir, "zygote.err"), "rb") as fh:
                lines = [x for x in fh.read()[-4096:].decode("utf-8", "replace").splitlines() if x.strip()]
        except OSError:
            lines = []
        return why + (": " + lines[-1] if lines else "")


def _zygote_setup():
    """In the zygote before exec: no blocked signals, and it dies with the agent."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    set_parent_death_signal(signal.SIGKILL)
