"""Each failure cause produced for real by ``mslaunch run`` (local backend, real processes, no
MindSpore): the cause in summary.json (``root_cause.cause`` and each attempt's), on the console's
last lines, in ``mslaunch status`` and in the JUnit output; the restart rule for a cause a restart
cannot fix; nothing left running.

The failing programs are ``tests/scripts/causes/`` (run as ranks by ``as_rank.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET

import psutil
import pytest

from tests.harness.cli import run_cli, run_process
from tests.harness.paths import TESTS

HERE = TESTS
CAUSES = os.path.join(HERE, "scripts", "causes")
AS_RANK = os.path.join(CAUSES, "as_rank.py")
CGROUP_V1 = "/sys/fs/cgroup/memory"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Job:
    """One ``mslaunch run`` of a failure program, its job dir and the pids its processes recorded."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.dir = tmp_path / "job"
        self.pids = tmp_path / "pids"
        self.pids.mkdir()
        self.env = dict(os.environ, PIDDIR=str(self.pids))
        self.junit = tmp_path / "junit.xml"

    def run(self, program: str, *args: str, extra=(), env=None, timeout: float = 90):
        argv = [
            "run",
            "--np",
            "1",
            "--master-port",
            "auto",
            "--log-dir",
            str(self.dir),
            "--grace",
            "2",
            "--tee",
            "none",
            "--junit",
            str(self.junit),
            *extra,
            "--no-python",
            sys.executable,
            AS_RANK,
            os.path.join(CAUSES, program),
            *args,
        ]
        return run_process(*argv, env=dict(self.env, **(env or {})), cwd=str(self.tmp), timeout=timeout)

    def summary(self):
        return json.loads((self.dir / "summary.json").read_text())

    def recorded(self):
        out = []
        for name in os.listdir(self.pids):
            out += [int(x) for x in (self.pids / name).read_text().split()]
        return out

    def assert_all_gone(self) -> None:
        pids = self.recorded()
        assert pids, "the job recorded its pids"
        assert [p for p in pids if alive(p)] == [], "processes left running"

    def kill_left(self) -> None:
        for pid in self.recorded() if self.pids.exists() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    j.kill_left()


def check_everywhere(job: Job, r, kind: str, *evidence: str):
    """The cause of ``kind`` whose evidence has every piece of ``evidence`` is in summary.json (the
    job's and each attempt's), the console's last lines, ``mslaunch status`` and the JUnit failure of
    the root cause's process; returns it."""
    s = job.summary()
    rc = s["root_cause"]
    assert rc["name"] == "rank 0", rc
    cause = rc["cause"]
    assert cause["kind"] == kind, cause
    for piece in evidence:
        assert piece in cause["evidence"], (piece, cause)
    assert cause["hint"]
    assert [a["root_cause"]["cause"] for a in s["attempt_results"]][-1] == cause
    lines = r.stderr.rstrip("\n").splitlines()
    assert lines[-3:] == [
        f"mslaunch: cause: {kind}: {cause['evidence']}",
        f"mslaunch: hint: {cause['hint']}",
        f"mslaunch: exit code {s['exit_code']}; summary: {job.dir}/summary.json",
    ], lines[-6:]
    status = run_cli("status", str(job.dir), env=job.env)
    assert f"  cause: {kind}: {cause['evidence']}\n  hint: {cause['hint']}\n" in status.stdout, status.stdout
    cases = {c.get("name"): c for c in ET.parse(job.junit).getroot()}
    assert (
        cases["rank 0"].find("failure").get("message").endswith(f"{kind}: {cause['evidence']} (hint: {cause['hint']})")
    )
    job.assert_all_gone()
    return cause


def test_python_exception_names_type_message_and_the_users_frame(job, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import json\n\n\ndef load_config(text):\n    return json.loads(text)['lr']\n\n\nload_config('{\"batch\": "
        "32}')\n"
    )
    r = job.run(str(script))
    assert r.returncode == 1, r.stderr
    cause = check_everywhere(job, r, "python_exception", "KeyError: 'lr'", f"{script}:5")
    assert f"{script}:5" in cause["hint"]


def test_missing_module_names_the_module_and_host(job):
    r = job.run("missing_module.py")
    assert r.returncode == 1, r.stderr
    cause = check_everywhere(job, r, "missing_module", "No module named 'mslaunch_no_such_module'", "localhost")
    assert "mslaunch_no_such_module" in cause["hint"] and "--python" in cause["hint"]


def test_missing_file_names_the_path(job, tmp_path):
    path = str(tmp_path / "ckpt" / "resnet50-3_100.ckpt")
    r = job.run("missing_file.py", path)
    assert r.returncode == 1, r.stderr
    cause = check_everywhere(job, r, "missing_file", "FileNotFoundError", path)
    assert path in cause["hint"]


def test_native_crash_names_the_signal_and_the_faulthandler_dump(job):
    r = job.run("segfault.py")
    assert r.returncode == 128 + signal.SIGSEGV, r.stderr
    cause = check_everywhere(job, r, "native_crash", "SIGSEGV", "Segmentation fault")
    assert "segfault.py" in cause["evidence"], cause  # the frame faulthandler printed


def test_disk_full_names_the_writer(job, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        path = str(mnt / "ckpt_1.ckpt")
        r = job.run("disk_full.py", path)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    assert r.returncode == 1, r.stderr
    # Python's write error names no file: the evidence is the user's frame that wrote it
    cause = check_everywhere(
        job, r, "disk_full", "OSError: [Errno 28] No space left on device", "disk_full.py:10 (save_checkpoint)"
    )
    assert cause["hint"].startswith("free space on localhost"), cause


@pytest.fixture
def memory_cgroup():
    """A cgroup v1 memory cgroup limited to 48 MiB (removed afterwards)."""
    if os.geteuid() != 0 or not os.path.isdir(CGROUP_V1):
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    folder = os.path.join(CGROUP_V1, f"mslaunch-test-{uuid.uuid4().hex[:10]}")
    os.mkdir(folder)
    try:
        with open(os.path.join(folder, "memory.limit_in_bytes"), "w") as fh:
            fh.write(str(48 << 20))
        for knob in ("memory.memsw.limit_in_bytes", "memory.swappiness"):  # no swap: the limit is reached, not avoided
            try:
                with open(os.path.join(folder, knob), "w") as fh:
                    fh.write(str(48 << 20) if "memsw" in knob else "0")
            except OSError:
                pass
        yield folder
    finally:
        deadline = time.monotonic() + 10
        while True:  # an exited task leaves its cgroup as its last reference drops
            try:
                os.rmdir(folder)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def test_oom_kill_under_a_cgroup_limit_names_the_kill_and_the_limit(job, memory_cgroup):
    """The rank moves itself into the limited cgroup after its start: the kernel's OOM line names
    that cgroup (so the kernel log must be readable here)."""
    if subprocess.run(["dmesg"], capture_output=True, check=False).returncode != 0:
        pytest.skip("the kernel log (dmesg) is not readable here")
    r = job.run("oom.py", "400", "8", env={"CAUSE_CGROUP": memory_cgroup})
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    rank = int((job.pids / "rank0.pids").read_text().split()[0])
    cause = check_everywhere(job, r, "oom", "killed by SIGKILL", "limit 48.0 MiB", "the cgroup's oom_kill count is 1")
    assert f"kernel: Memory cgroup out of memory: Killed process {rank} (" in cause["evidence"], cause
    assert "fewer ranks per host" in cause["hint"]


def test_the_same_exception_twice_stops_the_restarts_without_steps(job, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def step(batch):\n    raise ValueError(f'bad batch size {batch}')\n\n\nstep(0)\n")
    r = job.run(str(script), extra=("--max-restarts", "3"))
    assert r.returncode == 1, r.stderr
    s = job.summary()
    assert s["attempts"] == 2, s["message"]
    cause = s["root_cause"]["cause"]
    line = (
        f"attempts 0 and 1 failed the same way (python_exception: {cause['evidence']}), which a restart cannot fix: "
        "not restarting"
    )
    assert s["restarts_stopped"] == line
    assert [a["root_cause"]["cause"] for a in s["attempt_results"]] == [cause, cause]
    assert f"{script}:2" in cause["evidence"]
    assert f"mslaunch: {line}\n" in r.stderr
    assert f"attempt 0 failed with python_exception: {cause['evidence']}\n" in r.stderr  # the restart's line
    check_everywhere(job, r, "python_exception", "ValueError: bad batch size 0")
