"""One agent per host on the namespace cluster (real sshd per host): N ranks of a host share one
SSH session and one agent; mslaunch's thread count does not grow with the ranks per host;
every rank's log holds its own output in order; one rank's failure on a host whose other ranks
still run tears the job down; an agent killed on a host makes the launcher report that host's
ranks lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Dict, List

import psutil
import pytest

from launcher.execution.ssh.remote_link import BOOTSTRAP
from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.faultkit import wait_for
from tests.harness.paths import TESTS

pytestmark = pytest.mark.netns

HERE = TESTS
PROG = os.path.join(HERE, "scripts", "rankprog.py")
SSHD = "/usr/sbin/sshd"


@pytest.fixture
def cluster(netns_cluster):
    c = netns_cluster
    assert wait_for(lambda: c.all_pids() == {}, 15), "a previous test left processes behind"
    yield c
    if not wait_for(lambda: c.all_pids() == {}, 20):
        left = c.all_pids()
        c.reset()
        pytest.fail(f"processes left in the namespaces: {left}")


def inventory(c, path, slots: int) -> str:
    lines = ["defaults:", f"  slots: {slots}", f'  ssh: {{user: root, port: 22, key: "{c.key_path}"}}', "hosts:"]
    lines += [f"  - host: {h.ip}" for h in c.hosts]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run_args(tmp_path, inv: str, *args: str, method=("--method", "dynamic"), extra=()) -> List[str]:
    """The CLI's arguments of ``mslaunch run`` on the cluster of inventory ``inv``."""
    return [
        "run",
        "--hosts",
        inv,
        "--master-port",
        "auto",
        "--log-dir",
        str(tmp_path / "job"),
        "--grace",
        "2",
        "--env",
        f"PIDDIR={tmp_path / 'pids'}",
        *method,
        *extra,
        *args,
    ]


def env_for(c) -> Dict[str, str]:
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    env.pop("PYTHONUNBUFFERED", None)
    return env


def session_children(c, host) -> List[psutil.Process]:
    """Processes in ``host``'s namespace whose parent is an sshd (login shells / agents)."""
    out = []
    for pid in c.pids_in(host):
        try:
            p = psutil.Process(pid)
            parent = p.parent()
            if parent is not None and parent.exe() == SSHD:
                out.append(p)
        except psutil.Error:
            pass
    return out


def described(left: Dict[str, List[int]]) -> Dict[str, List[str]]:
    """``all_pids()`` with each process's state, parent and command line (for a failure message)."""
    out: Dict[str, List[str]] = {}
    for host, pids in left.items():
        for pid in pids:
            try:
                p = psutil.Process(pid)
                parent = p.parent()
                out.setdefault(host, []).append(
                    f"{pid} {p.status()} parent={parent.name() if parent else None} {p.cmdline()!r:.120}"
                )
            except psutil.Error as exc:
                out.setdefault(host, []).append(f"{pid} gone ({type(exc).__name__})")
    return out


def started(tmp_path, n: int) -> bool:
    d = tmp_path / "pids"
    return d.is_dir() and len([f for f in os.listdir(d) if f.endswith(".pids")]) >= n


def hang_job(c, tmp_path, slots: int) -> subprocess.Popen:
    (tmp_path / "pids").mkdir(exist_ok=True)
    inv = inventory(c, tmp_path / f"inv{slots}.yaml", slots)
    return subprocess.Popen(
        mslaunch_argv(*run_args(tmp_path, inv, PROG, "hang")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(c),
        cwd=str(tmp_path),
    )


def stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)


def test_ranks_of_a_host_share_one_session_and_threads_do_not_grow_per_rank(cluster, tmp_path):
    c = cluster
    threads = {}
    for slots in (4, 1):
        work = tmp_path / f"s{slots}"
        work.mkdir()
        p = hang_job(c, work, slots)
        try:
            n = len(c.hosts) * slots + 1  # + the scheduler
            assert wait_for(lambda: started(work, n), 60), p.stderr
            for i in range(len(c.hosts)):
                agents = session_children(c, i)
                assert len(agents) == 1, [a.cmdline() for a in agents]  # one session, one agent per host
                assert agents[0].cmdline()[-1] == BOOTSTRAP
                ranks = agents[0].children()
                want = slots + (1 if i == 0 else 0)
                assert len(ranks) == want and all(r.cmdline()[-2:] == [PROG, "hang"] for r in ranks)
            threads[slots] = psutil.Process(p.pid).num_threads()
        finally:
            stop(p)
        assert p.returncode == 130
        left = c.all_pids()
        assert left == {}, described(left)  # at once: mslaunch waited for its agents to exit
    assert threads[4] == threads[1], threads  # 13 ranks vs 4 ranks: the same threads


def test_many_ranks_per_host_log_their_own_lines_in_order(cluster, tmp_path):
    c = cluster
    inv = inventory(c, tmp_path / "inv.yaml", 4)
    script = tmp_path / "lines.py"
    script.write_text(
        "import os, socket, sys, time\n"
        "if os.environ.get('MS_ROLE') == 'MS_SCHED':\n"
        "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    s.bind((os.environ['MS_SCHED_HOST'], int(os.environ['MS_SCHED_PORT']))); s.listen(64); time.sleep(60)\n"
        "r = os.environ['RANK_ID']\n"
        "for i in range(3000):\n"
        "    print('rank%s line %d' % (r, i), file=sys.stdout if i % 2 else sys.stderr, flush=True)\n"
    )
    (tmp_path / "pids").mkdir()
    r = run_process(*run_args(tmp_path, inv, str(script)), env=env_for(c), cwd=str(tmp_path), timeout=120)
    left = c.all_pids()  # the moment mslaunch exited (see test_no_agent_outlives_mslaunch)
    assert r.returncode == 0, r.stderr
    assert left == {}, described(left)
    for rank in range(4 * len(c.hosts)):
        lines = (tmp_path / "job" / f"worker_{rank}.log").read_text().splitlines()
        assert lines == [f"rank{rank} line {i}" for i in range(3000)], rank


def test_one_rank_fails_while_its_host_mates_run(cluster, tmp_path):
    c = cluster
    inv = inventory(c, tmp_path / "inv.yaml", 3)
    (tmp_path / "pids").mkdir()
    r = run_process(
        *run_args(tmp_path, inv, PROG, "fail", "1.0", "4", "6"), env=env_for(c), cwd=str(tmp_path), timeout=120
    )
    left = c.all_pids()  # the moment mslaunch exited (see test_no_agent_outlives_mslaunch)
    assert r.returncode == 6, r.stderr
    assert left == {}, described(left)
    s = json.loads((tmp_path / "job" / "summary.json").read_text())
    cause = s["root_cause"]
    assert (cause["rank"], cause["host"], cause["exit_code"]) == (4, c.hosts[1].ip, 6)
    assert cause["tail"][-1] == "RuntimeError: rank4 fails with 6"
    mates = {p["rank"]: p for p in s["processes"] if p["host"] == c.hosts[1].ip and p["rank"] is not None}
    assert sorted(mates) == [3, 4, 5]
    assert mates[3]["torn_down"] and mates[5]["torn_down"] and not mates[4]["torn_down"]


def test_killed_agent_makes_its_host_ranks_lost(cluster, tmp_path):
    c = cluster
    p = hang_job(c, tmp_path, 2)
    rank_trees: List[int] = []
    try:
        assert wait_for(lambda: started(tmp_path, 7), 60), p.stderr
        agents = session_children(c, 1)
        assert len(agents) == 1
        rank_trees = [q.pid for q in agents[0].children(recursive=True)]
        agents[0].send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            stop(p)
        # The ranks die with their agent (PR_SET_PDEATHSIG); their own children have no agent
        # left to end them: this test started them, so it ends them.
        for pid in rank_trees:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
    assert p.returncode == 255, err
    s = json.loads((tmp_path / "job" / "summary.json").read_text())
    cause = s["root_cause"]
    assert cause["host"] == c.hosts[1].ip and cause["rank"] in (2, 3)
    assert cause["reason"].startswith(
        f"the mslaunch agent on {c.hosts[1].ip} ended without an exit status (killed by a signal?)"
    )
    lost = [q for q in s["processes"] if q["host"] == c.hosts[1].ip]
    assert [q["exit_code"] for q in lost] == [255, 255]
    assert all(q["reason"] == cause["reason"] for q in lost)


def test_no_agent_outlives_mslaunch(cluster, tmp_path):
    """A rank SIGKILLed (exit 137), checked the moment mslaunch exited, not waited for: every host
    is empty (mslaunch waits for each agent's exit status before it closes the connections).  A job
    that succeeds and one whose rank fails are checked the same way by
    test_many_ranks_per_host_log_their_own_lines_in_order and test_one_rank_fails_while_its_host_mates_run."""
    c = cluster
    inv = inventory(c, tmp_path / "inv.yaml", 2)
    (tmp_path / "pids").mkdir()
    r = run_process(
        *run_args(tmp_path, inv, PROG, "sigkill", "0.3", "2", "6"), env=env_for(c), cwd=str(tmp_path), timeout=120
    )
    left = c.all_pids()
    assert r.returncode == 137, r.stderr
    assert left == {}, described(left)
