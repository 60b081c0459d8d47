"""Processes from /proc: the process table, a process's tree, start times, signals that never
raise, and the two prctl settings a supervising process needs (child subreaper, parent-death
signal), a process tree's scheduler figures (:class:`SchedCounter`) and its threads' policy set
back to the default (:func:`restore_normal`).  Shared by the watchdog
(:mod:`launcher.execution.process.watchdog`), the ssh backend's remote agent
(:mod:`launcher.execution.ssh.remote_agent`) and the stack dumps (:mod:`launcher.execution.process.stackdump`).

The remote agent and the stack dump also run on other hosts, sent there as source text with this
module's source in front of theirs (:func:`launcher.execution.probes.program_source`): so, like
them, this module uses the standard library only, runs on Python >= 3.6, imports nothing from
``launcher`` and has no annotations.
"""

import os
import socket
import struct
import time

__all__ = [
    "JOINED",
    "batch_start_wanted",
    "become_subreaper",
    "below",
    "children_of",
    "is_stopped",
    "kill_quietly",
    "killpg_quietly",
    "parent_map",
    "proc_table",
    "restore_normal",
    "SchedCounter",
    "task_schedstat",
    "tcp_busy_times",
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


def _socket_inodes(pids):
    """The socket inodes (as text) the processes ``pids`` hold, from ``/proc/<pid>/fd``."""
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
    return inodes


def tcp_send_queued(pids, inodes=None):
    """Bytes waiting in the TCP send queues (sent but not yet acknowledged, or not yet sent) of
    every socket the processes ``pids`` hold: ``tx_queue`` of ``/proc/<pid>/net/tcp`` and
    ``tcp6`` (the first pid's network namespace; read at most once a second, see
    :func:`_net_queues`), joined with the socket inodes of ``/proc/<pid>/fd`` (``inodes``, when
    the caller has them). A rank behind a slow link keeps its send queues full."""
    if inodes is None:
        inodes = _socket_inodes(pids)
    total = 0
    for name in ("tcp", "tcp6") if inodes and pids else ():
        queues = _net_queues(pids[0], name)
        total += sum(queues.get(i, 0) for i in inodes)
    return total


#: netlink's sock_diag, as ``ss -ti`` asks it: every TCP socket of this network namespace with its
#: ``struct tcp_info`` (linux/inet_diag.h, linux/tcp.h)
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_INET_DIAG_INFO = 2
#: ``tcpi_busy_time`` in ``struct tcp_info``: microseconds the connection had data not yet
#: acknowledged (Linux >= 4.10; the time limited by the receiver's window or the send buffer included)
_BUSY_OFFSET = 168
#: ``{(netns inode, family): (monotonic time, {socket inode: busy microseconds})}``: the ranks of a
#: host sampled in one round share one dump (a figure read later is at most this many seconds old)
_BUSY_FRESH = 0.25
_BUSY = {}  # type: dict[tuple[int, int], tuple[float, dict[str, int] | None]]


def _diag_busy(family):
    """``{socket inode: tcpi_busy_time}`` of this namespace's TCP sockets of ``family``; None when
    sock_diag cannot be asked (no netlink, an old kernel)."""
    req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 1 << (_INET_DIAG_INFO - 1), 0, 0xFFFFFFFF) + bytes(48)
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, 0x301, 1, 0) + req  # REQUEST | DUMP
    out = {}  # type: dict[str, int]
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    try:
        sock.settimeout(1.0)
        sock.sendto(msg, (0, 0))
        while True:
            data = sock.recv(1 << 17)
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if length < 16 or kind in (_NLMSG_DONE, _NLMSG_ERROR):
                    return out if kind == _NLMSG_DONE else (out or None)
                end, at = off + length, off + 16 + 72  # struct inet_diag_msg is 72 bytes, then attributes
                inode = str(struct.unpack_from("=I", data, off + 16 + 68)[0])
                while at + 4 <= end:
                    alen, atype = struct.unpack_from("=HH", data, at)
                    if alen < 4:
                        break
                    if atype == _INET_DIAG_INFO and alen - 4 >= _BUSY_OFFSET + 8:
                        out[inode] = struct.unpack_from("=Q", data, at + 4 + _BUSY_OFFSET)[0]
                    at += (alen + 3) & ~3
                off += (length + 3) & ~3
            if not data:
                return out
    except (OSError, struct.error):
        return None
    finally:
        sock.close()


def tcp_busy_times(pid):
    """``{socket inode: microseconds busy}`` of every TCP socket of ``pid``'s network namespace
    (``tcpi_busy_time``, the time each connection had data in flight), asked at most every
    :data:`_BUSY_FRESH` s per namespace; None when they cannot be had: sock_diag answers for the asking process's own
    namespace only, so a process in another one has none."""
    try:
        ns = os.stat("/proc/%d/ns/net" % pid).st_ino
        if ns != os.stat("/proc/self/ns/net").st_ino:
            return None
    except OSError:
        return None
    now = time.monotonic()
    merged = None  # type: dict[str, int] | None
    for family in (socket.AF_INET, socket.AF_INET6):  # a family the kernel does not answer for (IPv6 off) has none
        got = _BUSY.get((ns, family))
        if got is None or now - got[0] >= _BUSY_FRESH:
            if len(_BUSY) > 64:
                _BUSY.clear()
            got = _BUSY[(ns, family)] = (now, _diag_busy(family))
        if got[1] is not None:
            merged = dict(merged or {}, **got[1])
    return merged


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
        self.busy_seen = {}  # socket inode -> its tcpi_busy_time (us) at the last sample
        self.busy_us = 0  # the busiest connection's busy time, summed over the samples

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

    def busiest_link(self, inodes):
        """Cumulative seconds of the tree's busiest TCP connection: at each call, the most any one
        of its sockets (``inodes``) was busy (:func:`tcp_busy_times`) since the call before, added
        up; -1.0 when the busy times cannot be had.  Over a window, its growth divided by the
        window is the share of the time the rank's busiest connection had data in flight."""
        busy = tcp_busy_times(self.pids[0]) if self.pids else None
        if busy is None:
            return -1.0
        now = dict((i, busy[i]) for i in inodes if i in busy)
        grew = 0
        for inode, us in now.items():
            old = self.busy_seen.get(inode)
            grew = max(grew, us - old if old is not None and us >= old else 0)
        self.busy_seen = now
        self.busy_us += grew
        return self.busy_us / 1e6

    def sample(self, pid):
        """``[monotonic time, cpu_s, delay_s, send_queued_bytes, busiest_link_s]``: :meth:`read`,
        rounded to ms, :func:`tcp_send_queued` of the tree now and :meth:`busiest_link` (None if
        it is gone)."""
        got = self.read(pid)
        if got is None:
            return None
        inodes = _socket_inodes(self.pids)
        return [
            round(time.monotonic(), 3),
            round(got[0], 3),
            round(got[1], 3),
            tcp_send_queued(self.pids, inodes),
            round(self.busiest_link(inodes), 3),
        ]


#: The line a MindSpore worker logs (at its default ``GLOG_v``) at the end of ``init()``, once the
#: collective library has connected the workers: a worker that started under ``SCHED_BATCH`` gets
#: the normal policy back when its output shows it (:mod:`launcher.execution.local.joinsched`
#: says why; the ssh agent does the same on the hosts, :mod:`launcher.execution.ssh.remote_zygote`).
JOINED = b"Create collective communication group"


def batch_start_wanted(env):
    """A worker of MindSpore's dynamic cluster (``env``), while this process runs under the
    default policy: it joins the cluster under ``SCHED_BATCH``."""
    return (
        env.get("MS_ROLE") == "MS_WORKER" and hasattr(os, "SCHED_BATCH") and os.sched_getscheduler(0) == os.SCHED_OTHER
    )


def restore_normal(pid):
    """Every ``SCHED_BATCH`` thread of ``pid`` and of the processes it started (they inherited
    the policy during the start-up) back to ``SCHED_OTHER``; how many were changed (see
    :mod:`launcher.execution.local.joinsched`).

    Passes over ``/proc/<pid>/task`` (and the descendants') until one changes nothing (a thread
    cloned from a batch thread during a pass is batch too; the next pass catches it)."""
    changed = 0
    for _ in range(20):
        this_pass = 0
        tids = []
        for p in [pid] + list(tree_below(pid) or []):
            try:
                tids += [int(t) for t in os.listdir("/proc/%d/task" % p)]
            except OSError:
                continue
        if not tids:
            return changed
        for tid in tids:
            try:
                if os.sched_getscheduler(tid) == os.SCHED_BATCH:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                    this_pass += 1
            except OSError:
                continue  # the thread ended
        changed += this_pass
        if not this_pass:
            break
    return changed
