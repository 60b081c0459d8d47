"""The cause of an attempt's first failure as the supervisor judges it: the host records of a local
rank (its memory cgroup at the start, the kernel's OOM lines and the counters after a SIGKILL),
the lost host, the root cause's JSON."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from launcher.execution.results import ProcResult, RootCause
from launcher.execution.supervision.diagnose import HostRecorder, RootTail, cgroup_folder, judge_cause
from launcher.logs.causes import Cause
from launcher.logs.hangreport import HangKind, HangRank, HangReport
from launcher.logs.stacks import Culprit


def _files(folder, oom_kill, limit=48 << 20, peak=47 << 20):
    os.makedirs(folder, exist_ok=True)
    for name, text in (
        ("memory.oom_control", f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n"),
        ("memory.limit_in_bytes", f"{limit}\n"),
        ("memory.max_usage_in_bytes", f"{peak}\n"),
    ):
        with open(os.path.join(folder, name), "w") as fh:
            fh.write(text)


def _proc(pid, returncode=-9, **kw):
    return ProcResult("rank 0", 0, "localhost", returncode, 0.0, 1.0, "/j/worker_0.log", pid=pid, **kw)


def _own_cgroup_folder(root):
    """This test's own pid's memory cgroup folder under ``root`` (as HostRecorder finds it)."""
    from launcher.logs.hostmem import memory_cgroup

    with open(f"/proc/{os.getpid()}/cgroup") as fh:
        return memory_cgroup(fh.read(), str(root))


def test_a_sigkill_in_the_cgroup_it_started_in_counts_from_the_start(tmp_path):
    folder = _own_cgroup_folder(tmp_path)
    _files(folder, 2)
    seen = []
    rec = HostRecorder(root=str(tmp_path), kernel_log=lambda since: seen.append(since) or (), clock=lambda: 100.0)
    rec.started(os.getpid(), local=True)
    _files(folder, 3)
    records = rec.records(os.getpid(), -signal.SIGKILL)
    assert seen == [98.0]  # the kernel log since the start (with 2 s of slack)
    assert (
        "oom_kill 2" in records.cgroup_before["memory.oom_control"]
        and "oom_kill 3" in records.cgroup["memory.oom_control"]
    )
    cause = judge_cause(_proc(os.getpid()), ("allocated 40 MB",), records=records)
    assert cause.kind == "oom"
    assert (
        cause.evidence
        == "killed by SIGKILL; the cgroup's oom_kill count went from 2 to 3; peak memory 47.0 MiB (cgroup); limit 48.0 "
        "MiB"
    )


def test_the_cgroup_the_kernel_names_is_read_when_the_rank_moved(tmp_path):
    _files(_own_cgroup_folder(tmp_path), 0)
    moved = tmp_path / "memory" / "job7"
    _files(str(moved), 1, limit=64 << 20)
    kernel = (
        "[  100.5] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "[  100.5] memory: usage 65536kB, limit 65536kB, failcnt 88",
        f"[  100.5] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job7,task_memcg=/job7,task=python3,pid={os.getpid()},uid=0",  # noqa: E501 - kept whole: a literal line as the program sees it
        f"[  100.5] Memory cgroup out of memory: Killed process {os.getpid()} (python3) total-vm:82116kB, "
        "anon-rss:65280kB, file-rss:0kB",
    )
    rec = HostRecorder(root=str(tmp_path), kernel_log=lambda since: kernel, clock=lambda: 99.0)
    rec.started(os.getpid(), local=True)
    records = rec.records(os.getpid(), 128 + signal.SIGKILL)  # a shell's 137 counts too
    assert records.cgroup_before == {}  # the count before is of another cgroup: not compared
    cause = judge_cause(_proc(os.getpid(), returncode=137), (), records=records)
    assert cause.kind == "oom"
    assert cause.evidence.startswith(
        f"killed by SIGKILL; kernel: Memory cgroup out of memory: Killed process {os.getpid()} (python3), "
        "anon-rss:65280kB; the cgroup's oom_kill count is 1"
    )
    assert cause.evidence.endswith("limit 64.0 MiB")


def test_no_records_for_remote_ranks_other_signals_or_exits():
    calls = []
    rec = HostRecorder(root="/nonexistent", kernel_log=lambda since: calls.append(since) or (), clock=lambda: 1.0)
    rec.started(os.getpid(), local=False)  # remote: nothing noted
    assert rec.records(os.getpid(), -9).kernel == () and calls == []
    rec.started(os.getpid(), local=True)
    assert (
        rec.records(os.getpid(), -signal.SIGSEGV).cgroup == {}
        and rec.records(os.getpid(), 1).kernel == ()
        and calls == []
    )
    rec.started(None, local=True)  # never raises
    cause = judge_cause(_proc(4242), ("step 3",))
    assert cause.kind == "unknown"
    assert "no host records from localhost" in cause.hint


def test_a_process_gone_before_it_was_noted_has_no_cgroup(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    rec = HostRecorder(root=str(tmp_path), kernel_log=lambda since: (), clock=lambda: 1.0)
    rec.started(child.pid, local=True)
    assert rec.records(child.pid, -9).cgroup == {}


def test_cgroup_folder_v1_then_v2(tmp_path):
    assert cgroup_folder("/job", str(tmp_path)) == str(tmp_path / "job")
    (tmp_path / "memory").mkdir()
    assert cgroup_folder("/a/b", str(tmp_path)) == str(tmp_path / "memory" / "a" / "b")


def test_a_lost_host_and_the_root_causes_json():
    lost = ProcResult(
        "rank 3",
        3,
        "h3",
        None,
        0.0,
        1.0,
        "/j/worker_3.log",
        reason="connection to h3 lost (closed)",
        host_lost="connection to h3 lost (closed)",
    )
    assert (
        lost.lost == "connection to h3 lost (closed)"
        and lost.to_json()["host_lost"] == "connection to h3 lost (closed)"
    )
    assert (
        ProcResult("rank 3", 3, "h3", None, 0.0, 1.0, "/l", reason="connection to h3 lost").lost is None
    )  # words, not the backend's event
    assert "host_lost" not in ProcResult("rank 3", 3, "h3", 1, 0.0, 1.0, "/l").to_json()
    assert (
        ProcResult("rank 3", 3, "h3", None, 0.0, 1.0, "/l", torn_down=True, reason="lost", host_lost="lost").lost
        is None
    )
    cause = judge_cause(lost, ("Traceback (most recent call last):", "ValueError: x"))
    assert (cause.kind, cause.evidence) == ("lost_host", "rank 3 on h3: connection to h3 lost (closed)")
    rc = RootCause(lost, ("a",), cause)
    assert rc.to_json()["cause"] == cause.to_json() and Cause.from_json(rc.to_json()["cause"]) == cause
    assert RootCause(lost, ()).to_json()["cause"] is None


def test_a_hung_attempts_culprit_gets_the_hang_cause(tmp_path):
    from launcher.execution.supervision.hangwatch import culprit_cause

    log = tmp_path / "worker_1.log"
    log.write_text("".join(f"line {i}\n" for i in range(500)))
    procs = [
        ProcResult("rank 0", 0, "h1", -15, 0.0, 1.0, "/l0", torn_down=True),
        ProcResult("rank 1", 1, "h2", -15, 0.0, 1.0, str(log), torn_down=True),
    ]
    hang = HangReport(
        HangKind.NO_PROGRESS,
        limit_s=60.0,
        derived="--hang-timeout",
        idle_s=61.0,
        stacks_dir="/j/stacks",
        culprit=Culprit(1, "its main thread is in train.py:40 (load), not in a collective"),
        ranks=(HangRank(0, "h1"), HangRank(1, "h2")),
    )
    rc = culprit_cause(hang, procs)
    assert rc.name == "rank 1" and rc.tail == tuple(f"line {i}" for i in range(480, 500))
    assert rc.cause.kind == "hang"
    assert "likely culprit rank 1 on h2" in rc.cause.evidence and "/j/stacks" in rc.cause.hint
    assert culprit_cause(HangReport(HangKind.NO_PROGRESS, ranks=hang.ranks), procs) is None  # no rank stands out
    assert RootTail(("a", "b", "c")).shown(2) == ("b", "c")


def test_a_collective_timeout_without_culprit_goes_to_the_rank_that_timed_out(tmp_path):
    from launcher.execution.supervision.hangwatch import culprit_cause
    from launcher.logs.hangreport import TimedOut

    log = tmp_path / "worker_0.log"
    log.write_text(
        "step 3\n[ERROR] DISTRIBUTED(1,7f,python):2026-11-26-07:40:11.512.003 [ring.cc:88] Wait] Ring AllReduce wait "
        "receiving failed\n"
    )
    procs = [
        ProcResult("rank 0", 0, "h1", 1, 0.0, 1.0, str(log)),
        ProcResult("rank 1", 1, "h2", -15, 0.0, 1.0, "/l1", torn_down=True),
    ]
    hang = HangReport(
        HangKind.COLLECTIVE_TIMEOUT,
        stacks_dir="/j/stacks",
        timed_out=TimedOut(0, "Ring AllReduce wait receiving failed"),
        ranks=(HangRank(0, "h1"), HangRank(1, "h2")),
    )
    rc = culprit_cause(hang, procs)
    assert (rc.name, rc.reason) == ("rank 0", "its collective timed out; no rank stands out")
    assert rc.cause.kind == "collective_timeout"
    assert (
        rc.cause.evidence.startswith("rank 0's collective timed out waiting for the others")
        and "no rank stands out" in rc.cause.evidence
    )
    assert "compare the ranks' stacks in /j/stacks" in rc.cause.hint
