"""The host agent (``launcher/execution/ssh/remote_agent.py``) run as a local process, its stdin kept
open like an ssh channel: many ranks under one agent, literal env, exit codes and signals,
TERM/KILL per rank and per host, whole trees, the end of every rank on EOF or silence, output
ordered per rank, one rank's failure while others run."""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, List

import psutil
import pytest

from launcher.execution.ssh.agent import op_line
from launcher.execution.ssh.remote_link import BOOTSTRAP
from tests.harness.localagent import LocalAgent, gone


def _tree(pid: int, n: int, timeout: float = 10.0) -> List[int]:
    """``pid`` and its descendants once there are ``n`` of them in all."""
    deadline = time.monotonic() + timeout
    while True:
        tree = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
        if len(tree) >= n or time.monotonic() > deadline:
            return tree
        time.sleep(0.05)


def test_one_agent_runs_many_ranks_with_literal_env_and_reports_each_exit(tmp_path):
    evil = "$(touch pwned) ; `touch pwned2` 'q' \"dq\" a b"
    a = LocalAgent()
    try:
        for rid in range(4):
            a.start(
                rid,
                [
                    "sh",
                    "-c",
                    'printf "%s\\n" "$EVIL"; printf "%s\\n" "$@"; echo err >&2; exit "$CODE"',
                    "sh",
                    evil,
                    "two words",
                ],
                str(tmp_path),
                env={"EVIL": evil, "CODE": str(rid)},
            )
        a.wait_for(lambda: len(a.exits()) == 4)
        assert a.exits() == {0: 0, 1: 1, 2: 2, 3: 3}
        for rid in range(4):
            assert a.text(rid).splitlines() == [evil, evil, "two words", "err"]
            started = a.event("started", rid)
            assert isinstance(started["pid"], int)
            assert isinstance(a.event("exit", rid)["time"], float)
        assert a.events[0]["ev"] == "ready" and a.events[0]["pid"] == a.proc.pid
        # the agent's clock, so the launcher can put exit times from every host on one clock
        assert abs(a.events[0]["time"] - time.time()) < 60
        assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    finally:
        assert a.close() == 0


@pytest.mark.e2e
def test_heartbeats_carry_each_running_ranks_cpu_and_run_delay_seconds(tmp_path):
    """Every ``sched_every`` seconds a heartbeat has ``sched``: the running ranks' [agent time,
    cpu s, delay s], cumulative (the straggler watch); a sleeping rank's CPU stays near 0."""
    a = LocalAgent(heartbeat=0.2, sched_every=0.4)
    try:
        a.start(
            0, [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 60: pass"], str(tmp_path)
        )
        a.start(1, ["sleep", "60"], str(tmp_path))
        a.event("started", 0)

        def busy_beats() -> List[Dict[str, Any]]:
            got = [b["sched"] for b in a.beats if "0" in b.get("sched", {})]
            return got if len(got) >= 2 and got[-1]["0"][1] > 0.05 else []

        beats = a.wait_for(busy_beats)
        first, last = beats[0]["0"], beats[-1]["0"]
        assert last[0] > first[0] and last[1] >= first[1] and last[2] >= first[2]
        assert beats[-1]["1"][1] < 0.05  # sleep: almost no CPU
        # the cadence asked for (the agent's default is 2 s): a beat comes 0.2 s or more after the
        # last, so the second after a sample is 0.4 s or more later and has one; never sooner
        with a.cond:
            seen = [b for b in a.beats]
        marks = [i for i, b in enumerate(seen) if "sched" in b]
        assert len(marks) >= 2 and all(0 < j - i <= 2 for i, j in zip(marks, marks[1:])), [sorted(b) for b in seen]
        times = [seen[i]["time"] for i in marks]
        assert all(t - s >= 0.35 for s, t in zip(times, times[1:])), times
        a.write(op_line("kill", None))
        a.wait_for(lambda: len(a.exits()) == 2)
    finally:
        a.close()


@pytest.mark.e2e
def test_exit_codes_and_signals(tmp_path):
    a = LocalAgent()
    try:
        a.start(0, ["sh", "-c", "exit 3"], str(tmp_path))
        a.start(1, ["sh", "-c", "kill -9 $$"], str(tmp_path))
        a.wait_for(lambda: len(a.exits()) == 2)
        assert a.exits() == {0: 3, 1: -9}
    finally:
        a.close()


@pytest.mark.e2e
def test_output_of_many_ranks_stays_ordered_per_rank(tmp_path):
    """8 ranks write 2,000 numbered lines each as fast as they can, stdout and stderr mixed."""
    prog = (
        "import sys\n"
        "for i in range(2000):\n"
        "    (sys.stdout if i % 3 else sys.stderr).write('%s %d\\n' % (sys.argv[1], i)); (sys.stdout if i % 3 else "
        "sys.stderr).flush()\n"
    )
    a = LocalAgent()
    try:
        for rid in range(8):
            a.start(rid, [sys.executable, "-S", "-c", prog, f"r{rid}"], str(tmp_path))
        a.wait_for(lambda: len(a.exits()) == 8, 60)
        assert a.exits() == {rid: 0 for rid in range(8)}
        for rid in range(8):
            assert a.text(rid).splitlines() == [f"r{rid} {i}" for i in range(2000)]
    finally:
        a.close()


@pytest.mark.e2e
def test_one_rank_fails_while_the_others_run_on(tmp_path):
    a = LocalAgent()
    try:
        for rid in range(3):
            a.start(rid, ["sleep", "300"], str(tmp_path))
        a.start(3, ["sh", "-c", "echo bye; exit 5"], str(tmp_path))
        assert a.event("exit", 3)["rc"] == 5
        pids = [a.event("started", rid)["pid"] for rid in range(3)]
        assert all(psutil.Process(p).is_running() for p in pids) and set(a.exits()) == {3}
        assert a.text(3) == "bye\n"
        a.write(op_line("term", 1))  # one rank only
        assert a.event("exit", 1)["rc"] == -15
        assert set(a.exits()) == {1, 3} and gone([pids[1]]) == []
        a.write(op_line("kill", None))  # the host's every rank
        a.wait_for(lambda: len(a.exits()) == 4)
        assert a.exits() == {0: -9, 1: -15, 2: -9, 3: 5}
        assert gone(pids) == []
    finally:
        a.close()


@pytest.mark.e2e
def test_term_kill_and_whole_tree_of_one_rank(tmp_path):
    a = LocalAgent()
    try:
        a.start(0, ["sh", "-c", "trap '' TERM; sleep 300 & setsid sleep 301 & wait"], str(tmp_path))
        a.start(1, ["sleep", "302"], str(tmp_path))
        tree = _tree(a.event("started", 0)["pid"], 3)
        other = a.event("started", 1)["pid"]
        assert len(tree) == 3
        a.write(op_line("term", 0))  # to the group only; the shell ignores it, and its children inherit that
        time.sleep(0.3)  # an absence (nothing dies) has no event to wait on
        assert gone(tree, within=0) == tree
        a.write(op_line("kill", 0))
        assert a.event("exit", 0)["rc"] == -9
        assert gone(tree) == []
        assert psutil.Process(other).is_running() and 1 not in a.exits()
    finally:
        a.close()


def test_leftovers_of_an_exited_rank_are_killed_others_untouched(tmp_path):
    """The rank exits at once, leaving a child and a setsid'd grandchild behind."""
    a = LocalAgent()
    try:
        a.start(1, ["sleep", "303"], str(tmp_path))
        other = a.event("started", 1)["pid"]
        marker = tmp_path / "left"
        a.start(0, ["sh", "-c", f"sleep 300 & setsid sleep 301 & echo $! > {marker}; sleep 1.5; exit 4"], str(tmp_path))
        rank = a.event("started", 0)["pid"]
        left = _tree(rank, 3)
        assert a.event("exit", 0, timeout=30)["rc"] == 4
        assert gone(left) == []
        assert psutil.Process(other).is_running()
    finally:
        a.close()


@pytest.mark.e2e
def test_eof_ends_every_rank_and_its_tree(tmp_path):
    a = LocalAgent()
    trees = []
    for rid in range(3):
        a.start(rid, ["sh", "-c", "sleep 300 & setsid sleep 301 & wait"], str(tmp_path))
    for rid in range(3):
        trees += _tree(a.event("started", rid)["pid"], 3)
    assert len(trees) == 9
    assert a.close() == 0
    assert gone(trees) == []


def test_silence_ends_every_rank(tmp_path):
    a = LocalAgent(ping_timeout=1.0)
    try:
        a.start(0, ["sleep", "300"], str(tmp_path))
        a.start(1, ["sleep", "300"], str(tmp_path))
        pids = [a.event("started", rid)["pid"] for rid in range(2)]
        t0 = time.monotonic()
        for _ in range(4):  # pings keep it alive
            a.write(op_line("ping"))
            time.sleep(0.4)
        assert all(psutil.Process(p).is_running() for p in pids)
        a.proc.wait(timeout=15)
        assert a.proc.returncode == 0 and time.monotonic() - t0 >= 1.6
        assert gone(pids) == []
        a.wait_for(lambda: len(a.exits()) == 2)  # the reader may still be taking in the last frames
        assert a.exits() == {0: -15, 1: -15}  # reported on the way out
    finally:
        a.close()


def test_rank_that_cannot_start_fails_alone(tmp_path):
    a = LocalAgent()
    try:
        a.start(0, ["/no/such/prog"], str(tmp_path))
        a.start(1, ["true"], str(tmp_path / "missing"))
        a.start(2, ["true"], str(tmp_path))
        a.wait_for(lambda: len(a.exits()) == 3)
        assert a.exits() == {0: 127, 1: 127, 2: 0}
        assert (
            a.event("error", 0)["msg"]
            == "cannot run '/no/such/prog' on here: no such file; check the program path (or python: in the inventory)"
        )
        assert a.event("error", 1)["msg"].startswith(f"working directory {tmp_path}/missing does not exist on here")
    finally:
        a.close()


def test_agent_makes_cwd_and_dumps_env(tmp_path):
    """The env dump holds the rank's environment, a secret's value shown as <secret> (the rank
    itself gets it)."""
    cwd = tmp_path / "job" / "device3"
    a = LocalAgent()
    try:
        a.start(
            3,
            ["sh", "-c", 'pwd; printf "%s\\n" "$HF_TOKEN"'],
            str(cwd),
            env={"RANK_ID": "3", "X": "a b", "HF_TOKEN": "hf-secret-9"},
            mkdir=True,
            env_dump=str(cwd / "env3.log"),
            secrets=["HF_TOKEN"],
        )
        assert a.event("exit", 3)["rc"] == 0
        assert a.text(3).split() == [str(cwd), "hf-secret-9"]
        dump = (cwd / "env3.log").read_text().splitlines()
        assert "RANK_ID=3" in dump and "X=a b" in dump and "HF_TOKEN=<secret>" in dump
        assert "hf-secret-9" not in (cwd / "env3.log").read_text()
        assert oct((cwd / "env3.log").stat().st_mode & 0o777) == "0o600"
    finally:
        a.close()


def test_login_shell_noise_on_stdout_before_the_agent_is_skipped(tmp_path):
    """A login shell that prints to stdout before exec'ing the agent does not garble frames."""
    a = LocalAgent(
        argv=["sh", "-c", 'echo "welcome to the cluster"; exec "$0" -S -u -c "$1"', sys.executable, BOOTSTRAP]
    )
    try:
        a.start(0, ["echo", "hi"], str(tmp_path))
        assert a.event("exit", 0)["rc"] == 0
        assert a.text(0) == "hi\n" and a.head == b"welcome to the cluster\n"
        assert [e["ev"] for e in a.events] == ["ready", "started", "exit"]
    finally:
        a.close()
