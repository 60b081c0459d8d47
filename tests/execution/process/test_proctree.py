"""Process states from /proc on real processes: a process stopped by a signal, as the supervisor
(local ranks) and the ssh backend's host agent (remote ranks) see it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from launcher.execution.process.handle import ReportedProcess
from launcher.execution.process.proctree import SchedCounter, is_stopped, task_schedstat, tcp_send_queued
from launcher.execution.process.spawn import kill_tree
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import ProcPlan
from tests.harness.faultkit import wait_for


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


def test_a_stopped_process_is_seen_until_it_is_continued_and_a_gone_one_is_not(tmp_path):
    odd = tmp_path / "a) T (b"  # a name with parentheses and a T: the state follows the last ')'
    shutil.copy(sys.executable, odd)
    proc = subprocess.Popen([str(odd), "-c", "import time; time.sleep(60)"])
    try:
        assert wait_for(lambda: _state(proc.pid) == "S", 10)
        assert not is_stopped(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        assert wait_for(lambda: is_stopped(proc.pid), 10)
        os.kill(proc.pid, signal.SIGCONT)
        assert wait_for(lambda: not is_stopped(proc.pid), 10)
    finally:
        proc.kill()
        proc.wait()
    assert not is_stopped(proc.pid) and not is_stopped(None)


def test_kill_tree_sigterm_reaches_a_stopped_process_at_once():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        assert wait_for(lambda: is_stopped(proc.pid), 10)
        kill_tree(proc.pid, proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM  # not held until a SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class _Handle(ReportedProcess):
    def __init__(self, pid: int, rank: int, host: str = "localhost") -> None:
        self.plan = ProcPlan(f"rank {rank}", Role.WORKER, host, rank, 0, 0, None, ("x",), (), "/", "/dev/null")
        self.host, self.log_path, self.started, self.pid = host, "/dev/null", time.time(), pid

    def terminate(self) -> None:
        pass

    def kill(self) -> None:
        pass


def test_a_local_ranks_handle_counts_the_seconds_it_has_been_seen_stopped():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        h = _Handle(proc.pid, 1)
        assert h.stopped_for(100.0) is None
        os.kill(proc.pid, signal.SIGSTOP)
        assert wait_for(lambda: is_stopped(proc.pid), 10)
        assert h.stopped_for(101.0) == 0.0 and h.stopped_for(103.5) == 2.5
        assert _Handle(proc.pid, 1, host="10.9.9.9").stopped_for(104.0) is None  # another host: not known here
        os.kill(proc.pid, signal.SIGCONT)
        assert wait_for(lambda: not is_stopped(proc.pid), 10)
        assert h.stopped_for(104.0) is None and h.stopped_since is None  # continued: counting starts again
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.e2e
def test_a_trees_cpu_and_run_delay_seconds_only_grow_while_its_children_come_and_go():
    """A parent that runs a busy child for a moment, again and again: the tree's cumulative CPU
    counts each child while it lived and never goes back when one ends."""
    child = "import time\\nt = time.time()\\nwhile time.time() - t < 0.3: pass"
    script = f"import subprocess, sys\nwhile True:\n    subprocess.run([sys.executable, '-c', '{child}'])\n"
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        c = SchedCounter()
        seen = [c.read(proc.pid)]
        assert wait_for(lambda: seen.append(c.read(proc.pid)) or seen[-1][0] > 0.5, 60)
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(seen, seen[1:]))
        assert set(task_schedstat(proc.pid)) == {proc.pid}
        t, cpu, delay, queued, link = c.sample(proc.pid)
        assert cpu >= seen[-1][0] - 0.001 and delay >= seen[-1][1] - 0.001 and t > 0  # rounded to ms
        assert (queued, link) == (0, 0.0)  # no socket: nothing queued, no connection busy (sock_diag answers)
    finally:
        proc.kill()
        proc.wait()
    assert c.read(proc.pid) is None and task_schedstat(proc.pid) == {}


def test_a_local_ranks_handle_reads_its_trees_figures():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        h = _Handle(proc.pid, 1)
        figs = h.sched_figures()
        assert figs is not None and len(figs) == 5 and figs[3] == 0 and figs[4] == 0.0  # no socket
        assert _Handle(proc.pid, 1, host="10.9.9.9").sched_figures() is None  # another host: its agent tells
    finally:
        proc.kill()
        proc.wait()


def test_the_bytes_waiting_in_a_processs_tcp_send_queues():
    """Connections whose peer does not read: what was sent waits in the sender's queues, summed over
    every socket of the process, however many sockets the namespace has (a read of
    ``/proc/net/tcp`` gives about a page: 27 sockets; this table holds 80 and more)."""
    import socket

    n = 40
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(n + 8)
    code = (
        f"import fcntl, socket, struct, termios, time\nsocks = []\nfor _ in range({n}):\n"
        f"    s = socket.socket()\n    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)\n"
        f"    s.connect(('127.0.0.1', {srv.getsockname()[1]}))\n    s.setblocking(False)\n"
        "    try:\n        while True: s.send(b'x' * 65536)\n    except BlockingIOError:\n        pass\n"
        "    socks.append(s)\n"
        # what each socket's own queue holds (SIOCOUTQ: sent, not yet acknowledged), once it no longer moves
        "def queues():\n"
        "    return [struct.unpack('i', fcntl.ioctl(s, termios.TIOCOUTQ, b'\\0' * 4))[0] for s in socks]\n"
        "last = None\nwhile queues() != last:\n    last = queues()\n    time.sleep(0.2)\n"
        "print('full', sum(last), min(last), flush=True)\ntime.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    conns = []
    try:
        for _ in range(n):
            conns.append(srv.accept()[0])
        assert child.stdout is not None
        word, total, least = child.stdout.readline().split()
        assert word == b"full" and int(least) > 0  # every one of the n sockets holds bytes
        # (how many a socket holds is the kernel's choice under its memory pressure: the sockets' own
        # counts are the reference) the socket table is read at most once a second per namespace: a
        # read just before (another test's) may not hold these connections yet
        queued = wait_for(lambda: tcp_send_queued([child.pid]) == int(total), 10)
        assert queued, (tcp_send_queued([child.pid]), int(total))
        assert tcp_send_queued([os.getpid()]) == 0  # what it received waits in this side's receive queues
    finally:
        for c in conns:
            c.close()
        child.kill()
        child.wait()
        srv.close()


def test_the_seconds_a_processs_busiest_connection_had_data_in_flight():
    """The kernel's busy time (sock_diag's ``tcpi_busy_time``): a connection whose peer does not
    read is busy all the time, one whose peer reads everything is not; the figure is the busiest
    connection's, cumulative over samples, so its growth over a span is the busiest's share of it."""
    import socket

    from launcher.execution.process.proctree import tcp_busy_times

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    code = (
        "import socket, sys, time\n"
        f"a = socket.create_connection(('127.0.0.1', {srv.getsockname()[1]}))\n"
        f"b = socket.create_connection(('127.0.0.1', {srv.getsockname()[1]}))\n"
        "a.setblocking(False)\n"
        "try:\n    while True: a.send(b'x' * 65536)\nexcept BlockingIOError:\n    pass\n"
        "b.sendall(b'y' * 1000)\nprint('sent', flush=True)\ntime.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    peers = []
    try:
        peers = [srv.accept()[0], srv.accept()[0]]
        assert child.stdout is not None and child.stdout.readline() == "sent\n"
        c = SchedCounter()
        first = c.sample(child.pid)
        assert first is not None
        got = [first]
        assert wait_for(lambda: got.append(c.sample(child.pid)) or got[-1][0] - first[0] >= 2.0, 30)
        last = got[-1]
        share = (last[4] - first[4]) / (last[0] - first[0])
        assert 0.8 <= share <= 1.05, (first, last)  # the unread connection: busy the whole span
        # the connection whose peer reads: idle once what it sent was acknowledged
        peers[1].recv(4096)
        busy = tcp_busy_times(child.pid)
        assert busy is not None and len([v for v in busy.values() if v > 0]) >= 1
        assert tcp_busy_times(2**22 + 7) is None  # no such process
    finally:
        child.kill()
        child.wait()
        for p in peers:
            p.close()
        srv.close()
