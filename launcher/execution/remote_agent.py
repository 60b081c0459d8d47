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
MARK = "@@mslaunch"

#: Python code given to ``python -c``: read the config line, compile this module, run main.
BOOTSTRAP = (
    "import sys,json;c=json.loads(sys.stdin.buffer.readline().decode('utf-8'));"
    "g={'__name__':'mslaunch_agent'};exec(compile(c['src'],'mslaunch_agent','exec'),g);g['main'](c['cfg'])"
)


def main(cfg):  # type: ignore[no-untyped-def]  # (kept 3.6-compatible and annotation-free)
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    lock = threading.Lock()
    done = threading.Event()

    def send(text):  # type: ignore[no-untyped-def]
        data = ("%s %s\n" % (MARK, text)).encode("utf-8", "replace")
        with lock:
            try:
                while data:
                    n = os.write(2, data)
                    data = data[n:]
            except OSError:
                pass

    try:
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass

    argv = [str(a) for a in cfg["argv"]]
    cwd = cfg.get("cwd") or None
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in cfg.get("env", {}).items()})
    host = cfg.get("host", "this host")

    def fail(message):  # type: ignore[no-untyped-def]
        send("error " + message.replace("\n", " "))
        send("exit 127")
        os._exit(0)

    if cwd is not None:
        if cfg.get("mkdir"):
            try:
                os.makedirs(cwd, 0o700, exist_ok=True)
            except OSError as exc:
                fail("cannot create working directory %s on %s: %s" % (cwd, host, exc.strerror or exc))
        if not os.path.isdir(cwd):
            fail("working directory %s does not exist on %s; run from a folder that exists on every host" % (cwd, host))
    dump = cfg.get("env_dump")
    if dump:
        try:
            fd = os.open(dump, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join("%s=%s\n" % (k, v) for k, v in env.items()))
        except OSError as exc:
            fail("cannot write %s on %s: %s" % (dump, host, exc.strerror or exc))

    def child_setup():  # type: ignore[no-untyped-def]
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        try:
            import ctypes as ct

            ct.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the agent
        except Exception:
            pass

    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=1, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, preexec_fn=child_setup,
        )
    except FileNotFoundError:
        fail("cannot run %r on %s: no such file; check the program path (or python: in the inventory)" % (argv[0], host))
    except PermissionError:
        fail("cannot run %r on %s: permission denied (is it executable?)" % (argv[0], host))
    except OSError as exc:
        fail("cannot start %r on %s: %s" % (argv[0], host, exc.strerror or exc))
    send("started %d" % proc.pid)

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

    def signal_tree(sig):  # type: ignore[no-untyped-def]
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

    last = [time.monotonic()]
    eof = threading.Event()

    def reader():  # type: ignore[no-untyped-def]
        stdin = sys.stdin.buffer
        while True:
            try:
                line = stdin.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                eof.set()
                return
            last[0] = time.monotonic()
            word = line.strip()
            if word == b"TERM":  # the group only, as the local launcher does
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
            elif word == b"KILL":
                signal_tree(signal.SIGKILL)

    def heartbeat():  # type: ignore[no-untyped-def]
        while not done.wait(float(cfg.get("heartbeat", 1.0))):
            send("hb")

    for target in (reader, heartbeat):
        t = threading.Thread(target=target)
        t.daemon = True
        t.start()

    ping_timeout = float(cfg.get("ping_timeout", 8.0))
    lost = False
    rc = None
    while rc is None:
        try:
            rc = proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if rc is None and (eof.is_set() or time.monotonic() - last[0] > ping_timeout):
            lost = True  # the launcher or the link is gone: end the rank ourselves
            signal_tree(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                signal_tree(signal.SIGKILL)
                rc = proc.wait()
    # The rank is gone: end whatever it left behind, reap it (we are its subreaper).
    for _ in range(50):
        left = descendants()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if not left:
            break
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
    done.set()
    if lost:
        try:  # nobody may be reading: never block here
            import fcntl

            fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) | os.O_NONBLOCK)
        except Exception:
            pass
    send("exit %d" % rc)
    os._exit(0)  # not sys.exit: the stdin reader thread may be blocked in a read
