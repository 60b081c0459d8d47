"""Heartbeats between mslaunch and the Slurm task shims (launcher.execution.slurm.beat): real
sockets on loopback, both sides in this process; short timeouts stand for the real ones."""

from __future__ import annotations

import json
import signal
import socket
import threading

from launcher.execution.slurm.beat import BeatListener, shim_beat
from tests.harness.faultkit import wait_or_fail

TOKEN = "t0k3n"


def _listener(silent_after: float = 0.6):
    seen = []
    lis = BeatListener("127.0.0.1", TOKEN, lambda node, how: seen.append((node, how)), silent_after, interval=0.1)
    return lis, seen


def _shim(lis, node, done, lost, timeout=5.0, token=TOKEN):
    t = threading.Thread(
        target=shim_beat, args=(lis.address, token, node, "rank_0", lambda: lost.append(node), done, timeout, 0.1)
    )
    t.start()
    return t


def _cut_off(lis, node, key="rank_0"):
    """A link that says hello, then nothing (no FIN either, as on a cut link)."""
    sock = socket.create_connection(lis.address)
    sock.sendall((json.dumps({"node": node, "key": key, "token": TOKEN}) + "\n").encode())
    return sock


def test_a_silent_node_is_named_once_and_a_shim_that_ends_is_not():
    lis, seen = _listener()
    done_a, done_b, lost = threading.Event(), threading.Event(), []
    try:
        a, b = _shim(lis, "node1", done_a, lost), _shim(lis, "node2", done_b, lost)
        wait_or_fail(lambda: lis.nodes() == {"node1": 1, "node2": 1}, 10, "both shims said hello")
        done_a.set()  # node1's rank ended: its shim closes the link
        a.join(5)
        wait_or_fail(lambda: lis.nodes() == {"node2": 1}, 10, "node1's link closed")
        # node3 is cut off: it said hello, then nothing more (no FIN either, as on a cut link)
        cut = _cut_off(lis, "node3", "rank_2")
        wait_or_fail(lambda: seen, 10, "node3 named silent")
        late = _cut_off(lis, "node4")  # named after node3 stayed silent longer still: node3 once
        wait_or_fail(lambda: len(seen) == 2, 10, "node4 named silent")
        late.close()
        assert [n for n, _ in seen] == ["node3", "node4"]
        assert seen[0][1].startswith("no heartbeat from node node3 for ") and "rank_2" in seen[0][1]
        assert lis.silent == dict(seen) and lost == []
        cut.close()
    finally:
        done_a.set()
        done_b.set()
        b.join(5)
        lis.close()
    assert lost == []  # mslaunch closed the link: the shim ended without ending its rank


def test_a_link_without_the_token_is_closed_and_never_judged():
    lis, seen = _listener(silent_after=0.3)
    done, lost = threading.Event(), []
    try:
        t = _shim(lis, "intruder", done, lost, token="wrong")
        t.join(5)  # the listener closed it: the shim returns
        assert not t.is_alive() and lis.nodes() == {}
        raw = socket.create_connection(lis.address)  # never says hello: closed, never judged
        raw.settimeout(10)
        assert raw.recv(16) == b""
        assert seen == [] and lis.nodes() == {}
        raw.close()
    finally:
        done.set()
        lis.close()
    assert lost == []


def test_a_shim_that_hears_nothing_from_mslaunch_ends_its_rank_and_one_that_cannot_connect_does_not():
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(1)
    done, lost = threading.Event(), []
    t = threading.Thread(
        target=shim_beat, args=(mute.getsockname(), TOKEN, "node1", "rank_0", lambda: lost.append(1), done, 0.5, 0.1)
    )
    t.start()
    conn, _ = mute.accept()
    try:
        t.join(10)
        assert not t.is_alive() and lost == [1]
        assert json.loads(conn.recv(4096).split(b"\n")[0]) == {"node": "node1", "key": "rank_0", "token": TOKEN}
    finally:
        conn.close()
        mute.close()
    done2, lost2 = threading.Event(), []  # nothing listens on port 1 of loopback
    shim_beat(("127.0.0.1", 1), TOKEN, "node1", "rank_0", lambda: lost2.append(1), done2, 0.5, 0.1, 0.5)
    assert lost2 == []


def test_the_backend_listens_on_its_address_towards_the_nodes_unless_turned_off(monkeypatch):
    from launcher.execution.slurm import backend as sb
    from launcher.execution.slurm import nodes

    monkeypatch.setattr(nodes, "node_addrs", lambda names, timeout=30.0: {n: "127.0.0.1" for n in names})
    b = sb.SlurmBackend.__new__(sb.SlurmBackend)
    b.beats, b._silent, b._steps, b.on_note = None, {}, [], None
    monkeypatch.setenv(sb.HEARTBEAT_VAR, "off")
    assert b._listen(["node1"]) is None and b.beats is None
    monkeypatch.delenv(sb.HEARTBEAT_VAR)
    beat = b._listen(["node1", "node2"])
    try:
        assert beat == {"addr": ["127.0.0.1", b.beats.address[1]], "token": b.beats.token}
        assert len(beat["token"]) == 32
    finally:
        b.beats.close()


def test_a_signal_reaches_the_shims_of_the_keys_asked_and_none_on_a_silent_node():
    lis, seen = _listener(silent_after=0.6)
    done, got = threading.Event(), []
    threads = []
    try:
        for node, key in (("node1", "rank_0"), ("node1", "scheduler"), ("node2", "rank_1")):
            t = threading.Thread(
                target=shim_beat,
                args=(lis.address, TOKEN, node, key, lambda: None, done, 5.0, 0.1),
                kwargs={"on_signal": lambda signum, key=key: got.append((key, signum))},
            )
            t.start()
            threads.append(t)
        wait_or_fail(lambda: lis.nodes() == {"node1": 2, "node2": 1}, 10, "three shims said hello")
        assert lis.send({"rank_0", "rank_1"}, b"T") == {"rank_0", "rank_1"}
        wait_or_fail(lambda: len(got) == 2, 10, "both shims got SIGTERM")
        assert sorted(got) == [("rank_0", signal.SIGTERM), ("rank_1", signal.SIGTERM)]
        cut = _cut_off(lis, "node3", "rank_2")
        wait_or_fail(lambda: seen, 10, "node3 named silent")
        assert lis.send({"rank_2", "scheduler"}, b"K") == {"scheduler"}  # none on the silent node
        wait_or_fail(lambda: len(got) == 3, 10, "the scheduler's shim got SIGKILL")
        assert got[2] == ("scheduler", signal.SIGKILL)
        cut.close()
    finally:
        done.set()
        for t in threads:
            t.join(5)
        lis.close()
