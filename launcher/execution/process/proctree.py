"""Processes from /proc: the process table, a process's tree, start times, signals that never
raise, and the two prctl settings a supervising process needs (child subreaper, parent-death
signal), and a process tree's scheduler figures (:class:`SchedCounter`).  Shared by the watchdog
(:mod:`launcher.execution.process.watchdog`), the ssh backend's remote agent
(:mod:`launcher.execution.ssh.remote_agent`) and the stack dumps (:mod:`launcher.execution.process.stackdump`).

The remote agent and the stack dump also run on other hosts, sent there as source text with this
module's source in front of theirs (:func:`launcher.execution.probes.program_source`): so, like
them, this module uses the standard library only, runs on Python >= 3.6, imports nothing from
``launcher`` and has no annotations.
"""

import os
import time

__all__ = [
    "become_subreaper",
    "below",
    "children_of",
    "is_stopped",
    "kill_quietly",
    "killpg_quietly",
    "parent_map",
    "proc_table",
    "SchedCounter",
    "task_schedstat",
    "tcp_send_queued",
    "set_parent_death_signal",
    "starttime",
    "tree_below",
]


def proc_table():
    """``{pid: (ppid, pgid, sid)}`` of every process, from /proc."""
    out = {}  # type: dict[int, tuple[int, int, int]]
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


def parent_map(table=None):
    """``{pid: ppid}`` of every process (of ``table``, else of a fresh :func:`proc_table`)."""
    if table is None:
        table = proc_table()
    return {pid: row[0] for pid, row in table.items()}


def starttime(pid):
    """The process's start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``),
    as text; with the pid it names one process for the life of the machine.  None if gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def children_of(pid):
    """Child pids of ``pid`` from ``/proc/<pid>/task/*/children`` ([] when it is gone), or None
    where the kernel lacks that file."""
    out = []  # type: list[int]
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


def tree_below(pid):
    """Descendants of ``pid``, breadth first, walked from its children files (cheap: no scan of
    every process), or None where the kernel lacks them."""
    out, frontier, seen = [], [pid], {pid}
    while frontier:
        nxt = []
        for p in frontier:
            kids = children_of(p)
            if kids is None:
                return None
            for k in kids:
                if k not in seen:
                    seen.add(k)
                    nxt.append(k)
        out.extend(nxt)
        frontier = nxt
    return out


def below(table, roots):
    """Pids descending from any of ``roots`` in ``table`` (``{pid: (ppid, ...)}`` or
    ``{pid: ppid}``), breadth first, roots excluded."""
    children = {}  # type: dict[int, list[int]]
    for pid, row in table.items():
        ppid = row[0] if isinstance(row, tuple) else row
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


def is_stopped(pid):
    """True while process ``pid`` is stopped by a signal: state ``T`` in ``/proc/<pid>/stat``
    (SIGSTOP, a terminal's SIGTSTP, SIGTTIN/SIGTTOU). Not a traced stop (``t``: a debugger or
    py-spy holding it for a moment); False once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except (OSError, TypeError):
        return False
    rest = data[data.rfind(b")") + 1 :].split()  # the name, in parentheses, may hold anything
    return bool(rest) and rest[0] == b"T"


def kill_quietly(pid, sig):
    """``os.kill`` that never raises (the process may be gone, or not ours)."""
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def killpg_quietly(pgid, sig):
    """``os.killpg`` that never raises."""
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def _prctl(option, value):
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except Exception:  # not Linux, no libc: the setting is not available
        return False


def become_subreaper():
    """Make orphaned descendants re-parent to this process instead of init (Linux
    ``PR_SET_CHILD_SUBREAPER``); False where that is not available."""
    return _prctl(36, 1)


def set_parent_death_signal(sig):
    """Ask the kernel to send ``sig`` to this process when its parent dies (``PR_SET_PDEATHSIG``)."""
    return _prctl(1, int(sig))


def task_schedstat(pid):
    """``{tid: (cpu_ns, run_delay_ns)}`` of every thread of process ``pid`` from
    ``/proc/<pid>/task/<tid>/schedstat`` (time on a CPU; time runnable but waiting for one, which
    includes time throttled by a CFS quota); {} when it is gone."""
    out = {}  # type: dict[int, tuple[int, int]]
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid), "rb") as fh:
                f = fh.read().split()
            out[int(tid)] = (int(f[0]), int(f[1]))
        except (OSError, ValueError, IndexError):
            pass
    return out


#: the send queues of a network namespace's sockets, read at most once a second:
#: ``{(netns inode, "tcp" or "tcp6"): (monotonic time, {socket inode: bytes queued})}``
_NET_QUEUES = {}  # type: dict[tuple[int, str], tuple[float, dict[str, int]]]


def _net_queues(pid, name):
    """``{socket inode: tx_queue bytes}`` of the non-empty send queues of ``/proc/<pid>/net/<name>``.

    The kernel walks its socket hash table to answer (milliseconds on a large machine, however
    few sockets there are), so the file is read at most once a second per network namespace
    (every rank of a host shares it), to its end: a ``read`` returns about a page (some 27
    sockets) whatever it asks for, so one read alone would miss every later socket."""
    try:
        key = (os.stat("/proc/%d/ns/net" % pid).st_ino, name)
    except OSError:
        key = (pid, name)
    now = time.monotonic()
    got = _NET_QUEUES.get(key)
    if got is not None and now - got[0] < 1.0:
        return got[1]
    queues = {}  # type: dict[str, int]
    chunks = []
    try:
        with open("/proc/%d/net/%s" % (pid, name), "rb", buffering=0) as fh:
            while True:  # until the end: each read gives about a page
                data = fh.read(1 << 16)
                if not data:
                    break
                chunks.append(data)
    except OSError:
        return queues
    for line in b"".join(chunks).decode("ascii", "replace").splitlines()[1:]:
        f = line.split()
        if len(f) > 9:
            queued = int(f[4].split(":")[0], 16)
            if queued:
                queues[f[9]] = queued
    if len(_NET_QUEUES) > 64:
        _NET_QUEUES.clear()
    _NET_QUEUES[key] = (now, queues)
    return queues


def tcp_send_queued(pids):
    """Bytes waiting in the TCP send queues (sent but not yet acknowledged, or not yet sent) of
    every socket the processes ``pids`` hold: ``tx_queue`` of ``/proc/<pid>/net/tcp`` and
    ``tcp6`` (the first pid's network namespace; read at most once a second, see
    :func:`_net_queues`), joined with the socket inodes of ``/proc/<pid>/fd``. A rank behind a slow
    link keeps its send queues full."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    total = 0
    for name in ("tcp", "tcp6") if inodes and pids else ():
        queues = _net_queues(pids[0], name)
        total += sum(queues.get(i, 0) for i in inodes)
    return total


class SchedCounter(object):
    """Cumulative CPU and run-delay seconds of a process tree (the process, its descendants, all
    their threads), summed from ``/proc`` on each :meth:`read`.

    The kernel's figures live per thread and vanish with it; the counter adds each thread's
    growth since it was last seen, so its totals never go back when threads or children end (what
    a thread did since the last read before it ended is lost: reading every few seconds keeps
    that small).  Cost: one ``schedstat`` read per thread of the tree.
    """

    def __init__(self):
        self.seen = {}  # (pid, tid) -> (cpu_ns, delay_ns) at the last read
        self.cpu_ns = 0
        self.delay_ns = 0
        self.pids = []  # the tree at the last read

    def read(self, pid):
        """``(cpu_s, delay_s)`` of ``pid``'s tree, cumulative since the first read (None if it is gone)."""
        pids = self.pids = [pid] + (tree_below(pid) or [])
        now = {}
        for p in pids:
            for tid, figs in task_schedstat(p).items():
                now[(p, tid)] = figs
        if not now:
            return None
        for key, (cpu, delay) in now.items():
            old_cpu, old_delay = self.seen.get(key, (0, 0))
            if cpu < old_cpu or delay < old_delay:  # a new thread under a reused id
                old_cpu, old_delay = 0, 0
            self.cpu_ns += cpu - old_cpu
            self.delay_ns += delay - old_delay
        self.seen = now
        return (self.cpu_ns / 1e9, self.delay_ns / 1e9)

    def sample(self, pid):
        """``[monotonic time, cpu_s, delay_s, send_queued_bytes]``: :meth:`read`, rounded to ms, and
        :func:`tcp_send_queued` of the tree now (None if it is gone)."""
        got = self.read(pid)
        if got is None:
            return None
        return [round(time.monotonic(), 3), round(got[0], 3), round(got[1], 3), tcp_send_queued(self.pids)]
