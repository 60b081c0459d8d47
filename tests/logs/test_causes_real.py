"""Each cause produced for real: the programs of tests/scripts/causes/ run as plain processes and
their own output, exit status and (for the OOM kill) the host's kernel and cgroup records are
classified.  The OOM test needs root and a cgroup v1 memory controller (it makes a cgroup with a
64 MiB limit and removes it afterwards)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from launcher.logs.causerules import Failure
from launcher.logs.causes import classify
from launcher.logs.hostmem import HostRecords, read_cgroup_files

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "causes")
MEMCG = "/sys/fs/cgroup/memory"


def run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, **kw)


def classify_run(script: str, *args: str, host: str = "node2"):
    proc = run([sys.executable, os.path.join(SCRIPTS, script), *args], cwd=SCRIPTS)
    return proc, classify(Failure("rank 0", host, proc.returncode, tuple(proc.stdout.splitlines()), "rank_0.log"))


@pytest.mark.parametrize(
    "script,kind,evidence,hint",
    [
        (
            "exc_chained.py",
            "python_exception",
            "KeyError: 'batch_size' at ",
            "exc_chained.py:14 (load_config): fix it there",
        ),
        (
            "missing_module.py",
            "missing_module",
            "No module named 'mslaunch_no_such_module'",
            "install mslaunch_no_such_module on node2",
        ),
        (
            "missing_file.py",
            "missing_file",
            "No such file or directory: '/ckpt/resnet50-3_100.ckpt'",
            "make /ckpt/resnet50-3_100.ckpt exist on node2",
        ),
        ("address_in_use.py", "address_in_use", "[Errno 98] Address already in use", "--master-port auto"),
        ("segfault.py", "native_crash", "SIGSEGV; Fatal Python error: Segmentation fault", "not the script"),
        ("abort.py", "native_crash", "SIGABRT", "not the script"),
        ("disk_full.py", "disk_full", "[Errno 28] No space left on device at ", "free space on node2"),
    ],
)
def test_a_real_failure_is_classified(script, kind, evidence, hint):
    proc, cause = classify_run(script)
    assert proc.returncode != 0
    assert cause.kind == kind, (cause, proc.stdout)
    assert evidence in cause.evidence and hint in cause.hint


@pytest.mark.e2e
def test_the_same_real_failure_twice_is_the_same_cause_a_restart_cannot_fix():
    from launcher.logs.causes import same_unfixable

    _, a = classify_run("exc_chained.py")
    _, b = classify_run("exc_chained.py")
    _, other = classify_run("missing_file.py", "/ckpt/other.ckpt")
    assert same_unfixable(a, b) and not same_unfixable(a, other)


def _kernel_lines() -> list:
    proc = run(["dmesg"])
    return proc.stdout.splitlines() if proc.returncode == 0 else []


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(os.path.join(MEMCG, "memory.limit_in_bytes")),
    reason="needs root and a cgroup v1 memory controller",
)
@pytest.mark.e2e
def test_a_real_oom_kill_under_a_cgroup_limit():
    group = os.path.join(MEMCG, f"mslaunch-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, "memory.limit_in_bytes"), "w") as fh:
            fh.write(str(64 << 20))
        before = read_cgroup_files(group)
        # The shell joins the cgroup, then execs python: the pid the kernel names is the shell's.
        shell = f'echo $$ > {group}/cgroup.procs && exec "$0" "$@"'
        proc = subprocess.Popen(
            ["sh", "-c", shell, sys.executable, os.path.join(SCRIPTS, "oom.py"), "1024", "16"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out, _ = proc.communicate(timeout=60)
        after = read_cgroup_files(group)
        records = HostRecords(tuple(_kernel_lines()), after, before)
        failure = Failure(
            "rank 0", "node2", proc.returncode, tuple(out.splitlines()), "rank_0.log", records=records, pids=(proc.pid,)
        )
        cause = classify(failure)
        assert proc.returncode == -9, out
        assert cause.kind == "oom", cause
        assert (
            f"Killed process {proc.pid} (python" in cause.evidence
            or "oom_kill count went from 0 to 1" in cause.evidence
        )
        assert "limit 64.0 MiB" in cause.evidence and "fewer ranks per host" in cause.hint
        bare = classify(Failure("rank 0", "node2", proc.returncode, tuple(out.splitlines()), "rank_0.log"))
        assert bare.kind == "unknown"  # SIGKILL without the host's records is not called an OOM
    finally:
        os.rmdir(group)
