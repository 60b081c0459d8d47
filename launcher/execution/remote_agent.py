"""The remote agent: runs one rank on a remote host under the ssh launcher.

This file is sent as source text to the remote host (mslaunch need not be installed there) and
runs under the host's Python (``python:`` in the inventory, else ``python3``), started by
:mod:`launcher.execution.ssh` as::

    exec <python> -S -u -c '<BOOTSTRAP>'

It must therefore stay self-contained: standard library only, Python >= 3.6, no imports from
``launcher``.  :data:`BOOTSTRAP` reads the first line of stdin, a JSON object
``{"src": <this file>, "cfg": {...}}``, and calls :func:`main` with ``cfg``:

    argv       the rank's argv (a list; never given to a shell)
    env        variables set on top of the login environment (a dict, taken literally)
    cwd        working directory
    mkdir      create ``cwd`` first (``mkdir -p``)
    env_dump   write the rank's full environment as ``K=V`` lines here (ranktable method), or null
    ping_timeout  seconds without a line on stdin after which the rank is ended (link lost)
    heartbeat  seconds between heartbeats on stderr

Protocol (the channel's stdout carries the rank's stdout *and* stderr, untouched; the agent's
own stderr carries only protocol lines, each starting with :data:`MARK`)::

    local -> agent (stdin):  "ping" | "TERM" | "KILL", one per line; EOF = the launcher is gone
    agent -> local (stderr): "@@mslaunch started <pid>"
                             "@@mslaunch hb"                 every ``heartbeat`` s
                             "@@mslaunch error <message>"    the rank could not be started
                             "@@mslaunch exit <returncode>"  last line; negative = killed by signal

State machine::

    starting --Popen ok--> running --rank exits--> reaping --> "exit rc", agent exits 0
    starting --Popen fails--> "error ...", "exit 127"
    running --TERM--> SIGTERM to the rank's process group (the launcher sends KILL after its grace)
    running --KILL--> SIGKILL to the group and every descendant
    running --stdin EOF, or no line for ping_timeout s--> SIGTERM, 2 s, SIGKILL (the remote side
             cleans itself up when the link or mslaunch is gone)

The rank runs in its own session (``start_new_session``), so its process group is its pid; the
agent is a child subreaper (Linux), so whatever the rank leaves behind is re-parented to the agent
and killed when the rank exits.  Nothing here runs a shell.
"""
import os
import signal
import subprocess
import sys
import threading
import time

MARK = "@@mslaunch"

#: Python code given to ``python -c``: read the config line, compile this module, run main.
BOOTSTRAP = (
    "import sys,json;c=json.loads(sys.stdin.buffer.readline().decode('utf-8'));"
    "g={'__name__':'mslaunch_agent'};exec(compile(c['src'],'mslaunch_agent','exec'),g);g['main'](c['cfg'])"
)

_SEND_LOCK = threading.Lock()


def main(cfg):  # type: ignore[no-untyped-def]  # (kept 3.6-compatible and annotation-free)
    """Run one rank as ``cfg`` says, speak the protocol, and exit the process (never returns)."""
    become_subreaper()
    env = rank_env(cfg)
    host = cfg.get("host", "this host")
    cwd = prepare_cwd(cfg, host)
    write_env_dump(cfg.get("env_dump"), env, host)
    proc = start_rank([str(a) for a in cfg["argv"]], cwd, env, host)
    send("started %d" % proc.pid)
    link = Link(proc)
    link.start(float(cfg.get("heartbeat", 1.0)))
    rc, lost = wait_rank(proc, link, float(cfg.get("ping_timeout", 8.0)))
    reap_leftovers(proc)
    link.done.set()
    if lost:
        never_block_on_stderr()
    send("exit %d" % rc)
    os._exit(0)  # not sys.exit: the stdin reader thread may be blocked in a read


def send(text):  # type: ignore[no-untyped-def]
    """Write one protocol line (``MARK text``) to stderr, whole, from any thread."""
    data = ("%s %s\n" % (MARK, text)).encode("utf-8", "replace")
    with _SEND_LOCK:
        try:
            while data:
                n = os.write(2, data)
                data = data[n:]
        except OSError:
            pass


def fail(message):  # type: ignore[no-untyped-def]
    """The rank cannot be started: say why, report exit 127, and end the agent."""
    send("error " + message.replace("\n", " "))
    send("exit 127")
    os._exit(0)


def become_subreaper():  # type: ignore[no-untyped-def]
    """Orphans of the rank are re-parented to the agent (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
    except Exception:
        pass


def rank_env(cfg):  # type: ignore[no-untyped-def]
    """The login environment with ``cfg["env"]`` on top (values taken literally)."""
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in cfg.get("env", {}).items()})
    return env


def prepare_cwd(cfg, host):  # type: ignore[no-untyped-def]
    """The rank's working directory (created when ``cfg["mkdir"]``), or None; fails if missing."""
    cwd = cfg.get("cwd") or None
    if cwd is None:
        return None
    if cfg.get("mkdir"):
        try:
            os.makedirs(cwd, 0o700, exist_ok=True)
        except OSError as exc:
            fail("cannot create working directory %s on %s: %s" % (cwd, host, exc.strerror or exc))
    if not os.path.isdir(cwd):
        fail("working directory %s does not exist on %s; run from a folder that exists on every host" % (cwd, host))
    return cwd


def write_env_dump(path, env, host):  # type: ignore[no-untyped-def]
    """Write ``env`` as ``K=V`` lines to ``path`` (0600), if a path is given; fails if it cannot."""
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join("%s=%s\n" % (k, v) for k, v in env.items()))
    except OSError as exc:
        fail("cannot write %s on %s: %s" % (path, host, exc.strerror or exc))


def _child_setup():  # type: ignore[no-untyped-def]
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the agent
    except Exception:
        pass


def start_rank(argv, cwd, env, host):  # type: ignore[no-untyped-def]
    """Start the rank in its own session, stdout+stderr on our stdout; fails if it cannot start."""
    try:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=1, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, preexec_fn=_child_setup,
        )
    except FileNotFoundError:
        fail("cannot run %r on %s: no such file; check the program path (or python: in the inventory)" % (argv[0], host))
    except PermissionError:
        fail("cannot run %r on %s: permission denied (is it executable?)" % (argv[0], host))
    except OSError as exc:
        fail("cannot start %r on %s: %s" % (argv[0], host, exc.strerror or exc))


def descendants():  # type: ignore[no-untyped-def]
    """Pids below the agent (its children, theirs, ...), from /proc."""
    me = os.getpid()
    parent = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                parent[int(name)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    out, frontier = [], [me]
    while frontier:
        nxt = [p for p, pp in parent.items() if pp in frontier and p != me]
        out.extend(nxt)
        frontier = nxt
    return out


def signal_tree(proc, sig):  # type: ignore[no-untyped-def]
    """``sig`` to the rank's process group and every descendant of the agent."""
    found = descendants()
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass
    for pid in found:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


class Link(object):
    """The launcher's side of the channel: control lines on stdin, heartbeats on stderr.

    ``last`` is when a line last arrived, ``eof`` is set when stdin closes, ``done`` stops the
    heartbeats.
    """

    def __init__(self, proc):  # type: ignore[no-untyped-def]
        self.proc = proc
        self.last = time.monotonic()
        self.eof = threading.Event()
        self.done = threading.Event()

    def start(self, heartbeat):  # type: ignore[no-untyped-def]
        for target, args in ((self._read, ()), (self._beat, (heartbeat,))):
            t = threading.Thread(target=target, args=args)
            t.daemon = True
            t.start()

    def _read(self):  # type: ignore[no-untyped-def]
        stdin = sys.stdin.buffer
        while True:
            try:
                line = stdin.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                self.eof.set()
                return
            self.last = time.monotonic()
            word = line.strip()
            if word == b"TERM":  # the group only, as the local launcher does
                try:
                    os.killpg(self.proc.pid, signal.SIGTERM)
                except OSError:
                    pass
            elif word == b"KILL":
                signal_tree(self.proc, signal.SIGKILL)

    def _beat(self, interval):  # type: ignore[no-untyped-def]
        while not self.done.wait(interval):
            send("hb")

    def silent_for(self, seconds):  # type: ignore[no-untyped-def]
        """The launcher closed stdin or said nothing for ``seconds``."""
        return self.eof.is_set() or time.monotonic() - self.last > seconds


def wait_rank(proc, link, ping_timeout):  # type: ignore[no-untyped-def]
    """Wait for the rank; if the launcher goes silent, end it (SIGTERM, 2 s, SIGKILL).

    Returns ``(returncode, lost)``.
    """
    while True:
        try:
            return proc.wait(timeout=0.2), False
        except subprocess.TimeoutExpired:
            pass
        if link.silent_for(ping_timeout):  # the launcher or the link is gone: end the rank ourselves
            signal_tree(proc, signal.SIGTERM)
            try:
                return proc.wait(timeout=2.0), True
            except subprocess.TimeoutExpired:
                signal_tree(proc, signal.SIGKILL)
                return proc.wait(), True


def reap_leftovers(proc):  # type: ignore[no-untyped-def]
    """The rank is gone: kill whatever it left behind and reap it (we are its subreaper)."""
    for _ in range(50):
        left = descendants()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)


def never_block_on_stderr():  # type: ignore[no-untyped-def]
    """Nobody may be reading our stderr any more: make writes to it non-blocking."""
    try:
        import fcntl

        fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) | os.O_NONBLOCK)
    except Exception:
        pass
