"""Process helpers of the remote agent (:mod:`launcher.execution.ssh.remote_agent`): the process
table from /proc, a rank's tree, signals that never raise, ``poll`` without ``select``'s limit.

Sent to the remote host as source text before the agent's own (see
:func:`launcher.execution.ssh.agent.agent_source`), so the same rules hold: standard library
only, Python >= 3.6, no imports from ``launcher``, no annotations.
"""
import os
import select
import signal


def become_subreaper():  # type: ignore[no-untyped-def]
    """Orphans of the ranks are re-parented to the agent (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
    except Exception:
        pass


def _child_setup():  # type: ignore[no-untyped-def]
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the agent
    except Exception:
        pass


def proc_table():  # type: ignore[no-untyped-def]
    """``{pid: (ppid, pgid, sid)}`` of every process, from /proc."""
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                f = fh.read().rsplit(b")", 1)[1].split()
            out[int(name)] = (int(f[1]), int(f[2]), int(f[3]))
        except (OSError, ValueError, IndexError):
            pass
    return out


def children_of(pid):  # type: ignore[no-untyped-def]
    """Child pids of ``pid`` from ``/proc/<pid>/task/*/children``, or None where the kernel
    lacks that file."""
    out = []
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            pass
    return out


def tree_below(pid):  # type: ignore[no-untyped-def]
    """Descendants of ``pid`` walked from its children files (cheap: no scan of every
    process), or None where the kernel lacks them."""
    out, frontier = [], [pid]
    while frontier:
        nxt = []
        for p in frontier:
            kids = children_of(p)
            if kids is None:
                return None
            nxt.extend(kids)
        out.extend(nxt)
        frontier = nxt
    return out


def below(table, roots):  # type: ignore[no-untyped-def]
    """Pids descending from any of ``roots`` in ``table`` (roots excluded)."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, frontier = [], list(roots)
    seen = set(roots)
    while frontier:
        nxt = []
        for p in frontier:
            for c in children.get(p, ()):
                if c not in seen:
                    seen.add(c)
                    nxt.append(c)
        out.extend(nxt)
        frontier = nxt
    return out


def _kill(pid, sig):  # type: ignore[no-untyped-def]
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _killpg(pgid, sig):  # type: ignore[no-untyped-def]
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def _poll(rlist, wlist, timeout):  # type: ignore[no-untyped-def]
    """``select`` without its 1024-descriptor limit: (readable, writable) sets of fds."""
    poller = select.poll()
    for fd in rlist:
        poller.register(fd, select.POLLIN)
    for fd in wlist:
        poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(timeout * 1000.0)
    except (OSError, ValueError):
        return set(), set()
    readable, writable = set(), set()
    for fd, ev in events:
        if fd in wlist:
            writable.add(fd)
        if ev & (select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLNVAL) and fd in rlist:
            readable.add(fd)
    return readable, writable


def _nonblock(fd):  # type: ignore[no-untyped-def]
    import fcntl

    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def _noop(signum, frame):  # type: ignore[no-untyped-def]
    pass
