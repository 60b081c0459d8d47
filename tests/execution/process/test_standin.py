"""The base of mpirun's and srun's handles: one local process standing for many ranks (real tiny
processes; only the ones these tests start are signalled)."""

from __future__ import annotations

import signal
import sys
from typing import Dict, List, Optional

import pytest

from launcher.execution.process import standin
from launcher.execution.process.standin import StandInProcess, launcher_plan, read_json_record, start_standin


class Stand(StandInProcess):
    """A stand-in that records each ask for its lost hosts."""

    def __init__(self, base, answer: Optional[Dict[str, str]] = None) -> None:
        super().__init__(base)
        self.asked: List[int] = []
        self.ended_elsewhere = 0
        self.answer = answer if answer is not None else {"h2": "h2 gone"}

    def read_lost(self, rc: int) -> Dict[str, str]:
        self.asked.append(rc)
        return self.answer

    def end_elsewhere(self) -> None:
        self.ended_elsewhere += 1


def _start(tmp_path, code: str, **kw) -> Stand:
    log = str(tmp_path / "stand.log")
    plan = launcher_plan("stand", [sys.executable, "-c", code], str(tmp_path), log)
    return Stand(start_standin(plan, log, str(tmp_path)), **kw)


@pytest.fixture
def started():
    procs: List[Stand] = []
    yield procs
    for p in procs:  # nothing is left behind, whatever a test asserted
        if p.popen.poll() is None:
            p.popen.kill()
        p.popen.wait()


def test_the_plan_is_the_launchers_on_this_machine(tmp_path) -> None:
    plan = launcher_plan("srun", ["srun", "x"], "/w", "/w/srun.log", env=(("A", "1"),))
    assert (plan.name, plan.role, plan.host, plan.rank, plan.local_rank, plan.node_rank, plan.device_id) == (
        "srun",
        "launcher",
        "localhost",
        None,
        None,
        None,
        None,
    )
    assert (plan.argv, plan.env, plan.cwd, plan.log) == (("srun", "x"), (("A", "1"),), "/w", "/w/srun.log")


def test_without_a_watchdog_it_gets_sigterm_if_mslaunch_dies(tmp_path, monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(
        standin, "start_local", lambda plan, log, **kw: seen.update(kw, plan=plan, log=log) or "started"
    )
    plan = launcher_plan("mpirun", ["mpirun"], "/w", "/w/mpirun.log")
    assert start_standin(plan, "/w/mpirun.log", "/c") == "started"
    assert seen == {"plan": plan, "log": "/w/mpirun.log", "cwd": "/c", "pdeathsig": signal.SIGTERM, "watchdog": None}


def test_a_failure_by_itself_reads_the_lost_hosts_once(tmp_path, started) -> None:
    p = _start(tmp_path, "raise SystemExit(3)")
    started.append(p)
    assert p.wait() == 3 and p.asked == [3]
    assert p.wait() == 3 and p.lost(3) == {"h2": "h2 gone"} and p.asked == [3]
    p.terminate()  # a teardown after the read keeps what was read
    assert p.lost(3) == {"h2": "h2 gone"} and p.asked == [3]


def test_an_empty_answer_is_kept_too(tmp_path, started) -> None:
    p = _start(tmp_path, "raise SystemExit(1)", answer={})
    started.append(p)
    assert p.wait() == 1 and p.lost(1) == {} and p.asked == [1]


def test_a_success_reads_nothing(tmp_path, started) -> None:
    p = _start(tmp_path, "pass")
    started.append(p)
    assert p.wait() == 0 and p.asked == [] and p.lost(0) == {} and p.lost(None) == {}
    assert p.asked == []


def test_a_stop_asked_by_mslaunch_reads_nothing(tmp_path, started) -> None:
    p = _start(tmp_path, "import time; time.sleep(60)")
    started.append(p)
    p.terminate()  # the default: SIGTERM to its group
    assert p.wait() == -signal.SIGTERM and p.asked == [] and p.lost(-signal.SIGTERM) == {}
    assert p.ended_elsewhere == 0


def test_kill_ends_it_elsewhere_first_and_reads_nothing(tmp_path, started) -> None:
    p = _start(tmp_path, "import time; time.sleep(60)")
    started.append(p)
    p.kill()
    assert p.wait() == -signal.SIGKILL and p.ended_elsewhere == 1 and p.asked == []


def test_own_result(tmp_path, started) -> None:
    p = _start(tmp_path, "raise SystemExit(2)")
    started.append(p)
    rc = p.wait()
    p.log_path = str(tmp_path / "scheduler.log")  # it may stand as another process: its own log stays
    own = p.own_result(rc, 9.0)
    assert (own.name, own.rank, own.host, own.returncode, own.started, own.ended, own.log, own.pid, own.reason) == (
        "stand",
        None,
        "localhost",
        2,
        p.started,
        9.0,
        str(tmp_path / "stand.log"),
        p.pid,
        None,
    )
    assert own.failed and not own.torn_down
    named = p.own_result(None, None, "srun (scheduler)", reason="why")
    assert (named.name, named.returncode, named.ended, named.reason) == ("srun (scheduler)", None, None, "why")


def test_read_json_record(tmp_path) -> None:
    path = tmp_path / "r.json"
    assert read_json_record(str(path)) is None  # missing
    path.write_text('{"returncode": 0')
    assert read_json_record(str(path)) is None  # cut short
    path.write_bytes(b"\xff\xfe")
    assert read_json_record(str(path)) is None  # not text
    path.write_text("[1, 2]")
    assert read_json_record(str(path)) is None  # not an object
    assert read_json_record(str(tmp_path)) is None  # a folder
    path.write_text('{"host": "h1", "returncode": 255}')
    assert read_json_record(str(path)) == {"host": "h1", "returncode": 255}
