"""``mslaunch stop`` and the job readers (launcher/cli/jobs.py) against what they must not trust (issue 45)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.harness.cli import run_cli

#: Locks DIR/job.lock as a job's mslaunch does (lockf), optionally writes DIR/job.json naming
#: PID (0: its own) started at STARTED (0: now), says "locked", then answers each line of stdin
#: with "pong" until stdin ends.  It keeps SIGTERM's default action: signalled, it is gone.
_HOLDER = r"""
import fcntl, json, os, sys, time
d, pid, started = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
fd = os.open(os.path.join(d, "job.lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
if pid >= 0:
    with open(os.path.join(d, "job.json"), "w") as fh:
        json.dump({"job_id": "held", "pid": pid or os.getpid(), "started": started or time.time()}, fh)
print("locked", flush=True)
for line in sys.stdin:
    print("pong", flush=True)
"""


class Holder:
    """A process holding ``job_dir``'s lock (see :data:`_HOLDER`); ended by the test that starts it."""

    def __init__(self, job_dir, pid: int, started: float = 0.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(job_dir), str(pid), str(started)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "locked\n"

    def answers(self) -> bool:
        """Whether it still runs: a ping is answered (a process SIGTERMed meanwhile cannot answer)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write("ping\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return False
        return self.proc.stdout.readline() == "pong\n"

    def end(self) -> None:
        self.proc.kill()  # only the process this test started, by its pid
        self.proc.communicate(timeout=30)


@pytest.fixture
def job_dir(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    (d / "plan.json").write_text(json.dumps({"job_id": "held", "world_size": 1}))
    return d


@pytest.mark.parametrize(
    "case, pid, started, needle",
    [
        ("job.json names another pid", 4242, 0.0, "but job.json names pid 4242"),
        ("the holder reused the pid", 0, 1000.0, "started after job.json was written (a reused pid)"),
        ("no job.json", -1, 0.0, "job.json does not exist yet"),
    ],
)
def test_stop_never_signals_a_process_that_is_not_the_jobs_mslaunch(case, pid, started, needle, job_dir) -> None:
    holder = Holder(job_dir, pid, started)
    try:
        stop = run_cli("stop", "--wait", "0.3", str(job_dir))
        assert holder.answers(), f"{case}: the holder was signalled"
        assert stop.returncode == 1, (case, stop.stdout, stop.stderr)
        err = stop.stderr.strip()
        assert len(err.splitlines()) == 1 and err.startswith("mslaunch: error: job held: "), err
        assert f"pid {holder.proc.pid} " in err and needle in err and err.endswith("; not signalled"), err
        assert "python" in err and "Traceback" not in err, err  # says what the holder is
    finally:
        holder.end()


def test_stop_signals_the_process_job_json_names(job_dir) -> None:
    holder = Holder(job_dir, 0)  # job.json names the holder itself, written after it started
    try:
        stop = run_cli("stop", "--wait", "30", str(job_dir))
        assert stop.returncode == 0 and stop.stdout == "stopped job held\n", stop.stderr
        assert holder.proc.wait(timeout=30) == -15  # SIGTERM
    finally:
        holder.end()
