"""The ssh agent's zygote (``launcher/execution/ssh/remote_zygote.py``), with the agent run as a local
process: ranks forked from one process per host with their own environment, output and exit; the
zygote kept for a later request that asks for the same and replaced for another; the fallback to
plain processes (and the note that says it) when the import is not fork-safe; kill, term and the
agent's end reaching forked ranks, their children and the zygote."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

import psutil
import pytest

from launcher.execution.ssh.agent import op_line, zygote_op
from tests.harness.localagent import LocalAgent, gone

PY = sys.executable

#: A rank's program: prints its argv, one variable and its parent's pid, exits with argv[1].
RANK = (
    "import json, os, sys\n"
    "print(json.dumps([sys.argv[1:], os.environ.get('X'), os.getppid()]))\n"
    "sys.exit(int(sys.argv[1]))\n"
)


def _script(tmp_path: Path, text: str = RANK, name: str = "rank.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _zygotes(agent: LocalAgent) -> List[int]:
    """The agent's children that are not ranks it started: its zygotes."""
    with agent.cond:
        ranks = {e["pid"] for e in agent.events if e.get("ev") == "started"}
    return [c.pid for c in psutil.Process(agent.proc.pid).children() if c.pid not in ranks]


def _preload_module(tmp_path: Path, name: str, source: str) -> Dict[str, str]:
    """A module ``name`` in ``tmp_path`` for a zygote to preload; the environment that finds it
    (the zygote's and the ranks': their ``PYTHON*`` variables must be the same)."""
    _script(tmp_path, source, f"{name}.py")
    return {"PYTHONPATH": str(tmp_path)}


def _printed(agent: LocalAgent, rid: int) -> list:
    agent.event("exit", rid)
    return json.loads(agent.text(rid).strip().splitlines()[-1])


def _op(env: Optional[Dict[str, str]] = None, preload: tuple = ("json",)) -> bytes:
    return zygote_op(PY, preload, env or {})


def test_ranks_are_forked_from_the_hosts_zygote_with_their_own_argv_env_output_and_exit(tmp_path):
    script = _script(tmp_path)
    a = LocalAgent()
    try:
        a.write(_op({"AT_IMPORT": "1"}))
        a.start(1, [PY, script, "3", "x y"], str(tmp_path), {"X": "one"}, zygote=True)
        a.start(2, [PY, script, "0"], str(tmp_path), {"X": "two"}, zygote=True)
        a.start(3, [PY, script, "0"], str(tmp_path), {"X": "plain"})  # not asked: a plain process
        a.start(4, [PY, "-u", script, "0"], str(tmp_path), {"X": "flag"}, zygote=True)  # python flags: plain
        got = {rid: _printed(a, rid) for rid in (1, 2, 3, 4)}
        (zygote,) = _zygotes(a)
        assert got[1] == [["3", "x y"], "one", zygote]
        assert got[2] == [["0"], "two", zygote]
        assert got[3] == [["0"], "plain", a.proc.pid]
        assert got[4] == [["0"], "flag", a.proc.pid]
        assert a.exits() == {1: 3, 2: 0, 3: 0, 4: 0}
        started = {e["id"]: e["pid"] for e in a.events if e.get("ev") == "started"}
        assert set(started) == {1, 2, 3, 4}
    finally:
        assert a.close() == 0
    assert gone(list(started.values()) + [zygote]) == []


def test_a_later_request_for_the_same_keeps_the_zygote_and_another_environment_replaces_it(tmp_path):
    script = _script(tmp_path)
    a = LocalAgent()
    try:
        a.write(_op({"V": "1", "MSLAUNCH_ATTEMPT": "0"}))
        a.start(1, [PY, script, "0"], str(tmp_path), zygote=True)
        first = _printed(a, 1)[2]
        # the next attempt: only the launcher's own variables differ (no import reads them): kept
        a.write(_op({"V": "1", "MSLAUNCH_ATTEMPT": "1"}))
        a.start(2, [PY, script, "0"], str(tmp_path), zygote=True)
        assert _printed(a, 2)[2] == first
        # another value of a variable the import may read: a new zygote imports under it
        a.write(_op({"V": "2"}))
        a.start(3, [PY, script, "0"], str(tmp_path), zygote=True)
        second = _printed(a, 3)[2]
        assert second not in (first, a.proc.pid)
        assert gone([first]) == []
        # no preload: no zygote from now on
        a.write(_op(preload=()))
        a.start(4, [PY, script, "0"], str(tmp_path), zygote=True)
        assert _printed(a, 4)[2] == a.proc.pid
        assert gone([second]) == []
    finally:
        assert a.close() == 0


def test_an_import_that_is_not_fork_safe_starts_the_ranks_as_plain_processes_and_says_so(tmp_path):
    thread = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    env = _preload_module(tmp_path, "thready", thread)
    script = _script(tmp_path)
    a = LocalAgent()
    try:
        a.write(zygote_op(PY, ["thready"], env))
        a.start(1, [PY, script, "5"], str(tmp_path), env, zygote=True)
        a.start(2, [PY, script, "0"], str(tmp_path), env, zygote=True)
        assert _printed(a, 1)[2] == a.proc.pid and _printed(a, 2)[2] == a.proc.pid
        assert a.exits() == {1: 5, 2: 0}
        notes = [e["msg"] for e in a.events if e.get("ev") == "note"]
        assert len(notes) == 1 and "thread(s) besides the main one" in notes[0] and "plain processes" in notes[0]
        a.wait_for(lambda: not _zygotes(a))  # it forks no more, so it ends
    finally:
        assert a.close() == 0


def test_kill_and_term_reach_forked_ranks_and_their_children_and_the_agents_end_ends_the_zygote(tmp_path):
    script = _script(
        tmp_path,
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('up', flush=True)\ntime.sleep(60)\n",
        "tree.py",
    )
    a = LocalAgent()
    pids: List[int] = []
    try:
        a.write(_op())
        for rid in (1, 2, 3):
            a.start(rid, [PY, script], str(tmp_path), zygote=True)
        a.wait_for(lambda: all(a.text(r).startswith("up") for r in (1, 2, 3)))
        (zygote,) = _zygotes(a)
        trees = {r: psutil.Process(a.event("started", r)["pid"]) for r in (1, 2, 3)}
        trees_pids = {r: [p.pid] + [c.pid for c in p.children(recursive=True)] for r, p in trees.items()}
        assert all(len(t) == 2 for t in trees_pids.values())
        a.write(op_line("kill", 1))
        assert a.event("exit", 1)["rc"] == -9
        assert gone(trees_pids[1]) == []
        a.write(op_line("term", 2))
        assert a.event("exit", 2)["rc"] == -15
        pids = trees_pids[3] + [zygote]
    finally:
        assert a.close() == 0
    assert a.exits()[3] in (-15, -9)
    assert gone(pids) == []


def test_a_rank_ended_while_the_zygote_still_imports_never_starts(tmp_path):
    env = _preload_module(tmp_path, "slow_import", "import time\ntime.sleep(3)\n")
    script = _script(tmp_path)
    a = LocalAgent()
    try:
        a.write(zygote_op(PY, ["slow_import"], env))
        a.start(1, [PY, script, "0"], str(tmp_path), env, zygote=True)
        a.write(op_line("term", 1))
        assert a.event("exit", 1)["rc"] == -15
        a.start(2, [PY, script, "0"], str(tmp_path), env, zygote=True)  # forked once it is ready
        assert _printed(a, 2)[2] in _zygotes(a)
        assert not any(e.get("ev") == "started" and e.get("id") == 1 for e in a.events)
    finally:
        assert a.close() == 0


#: A rank: its policy at its start; once ``argv[1]`` exists, MindSpore's end-of-init line; then
#: its policy once it is not ``SCHED_BATCH`` any more (or after 30 s).
JOINER = (
    "import os, sys, time\n"
    "print('start', os.sched_getscheduler(0), flush=True)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.01)\n"
    "print('[WARNING] ME(1,python):2026 [collective] Create collective communication group: world', flush=True)\n"
    "end = time.monotonic() + 30\n"
    "while os.sched_getscheduler(0) == os.SCHED_BATCH and time.monotonic() < end:\n"
    "    time.sleep(0.01)\n"
    "print('after', os.sched_getscheduler(0), flush=True)\n"
)


@pytest.mark.skipif(
    not hasattr(os, "SCHED_BATCH") or os.sched_getscheduler(0) != os.SCHED_OTHER,
    reason="Linux scheduling policies, under the default one",
)
def test_a_dynamic_clusters_worker_joins_it_under_sched_batch_and_gets_the_normal_policy_once_it_said_so(tmp_path):
    """The register race of MindSpore's TCP client (launcher/execution/local/joinsched.py) is
    lost on remote hosts too: a worker forked there starts as a batch task until its output
    shows it joined; the scheduler and plain ranks start under the default policy."""
    script = _script(tmp_path, JOINER, "joiner.py")
    go = {rid: tmp_path / f"go{rid}" for rid in (1, 2, 3)}
    a = LocalAgent()
    try:
        a.write(_op())
        a.start(1, [PY, script, str(go[1])], str(tmp_path), {"MS_ROLE": "MS_WORKER"}, zygote=True)
        a.start(2, [PY, script, str(go[2])], str(tmp_path), {"MS_ROLE": "MS_SCHED"}, zygote=True)
        a.start(3, [PY, script, str(go[3])], str(tmp_path), {"MS_ROLE": "MS_WORKER"})  # plain: not forked
        a.wait_for(lambda: all(a.text(rid).startswith("start") for rid in (1, 2, 3)))
        with a.cond:
            worker = [e["pid"] for e in a.events if e.get("ev") == "started" and e["id"] == 1][0]
        assert os.sched_getscheduler(worker) == os.SCHED_BATCH  # still joining: the agent waits for the line
        for path in go.values():
            path.write_text("")
        for rid in (1, 2, 3):
            a.event("exit", rid)
        first_last = {rid: (a.text(rid).splitlines()[0], a.text(rid).splitlines()[-1]) for rid in (1, 2, 3)}
        assert first_last[1] == (f"start {os.SCHED_BATCH}", f"after {os.SCHED_OTHER}")
        assert first_last[2] == first_last[3] == (f"start {os.SCHED_OTHER}", f"after {os.SCHED_OTHER}")
        assert a.exits() == {1: 0, 2: 0, 3: 0}
    finally:
        assert a.close() == 0


def test_the_line_a_remote_worker_is_watched_for_is_the_local_watchs(monkeypatch):
    from launcher.execution.local.joinsched import JOINED_MARKERS
    from launcher.execution.ssh import remote_zygote as rz

    assert rz.JOINED == JOINED_MARKERS[0]
    track = rz.JoinTrack(now=100.0)
    assert not track.joined(b"...Create collective comm")  # split across two reads
    assert track.joined(b"unication group: mccl_world_group\n")
    assert not rz.JoinTrack(now=100.0).joined(b"Cluster is successfully initialized.")
    assert not track.expired(100.0 + rz.JOIN_LIMIT) and track.expired(100.1 + rz.JOIN_LIMIT)
    monkeypatch.setattr(rz.os, "sched_getscheduler", lambda pid: rz.os.SCHED_OTHER)
    assert rz.batch_start_wanted({"MS_ROLE": "MS_WORKER"})
    assert not rz.batch_start_wanted({"MS_ROLE": "MS_SCHED"}) and not rz.batch_start_wanted({})
    monkeypatch.setattr(rz.os, "sched_getscheduler", lambda pid: rz.os.SCHED_BATCH)
    assert not rz.batch_start_wanted({"MS_ROLE": "MS_WORKER"})  # mslaunch itself a batch task: as it is
