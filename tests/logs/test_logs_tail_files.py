"""`logs tail` on odd log files (a FIFO, a device, a directory, huge or binary logs): it returns,
shows what it can, and reads only the end of a file."""

from __future__ import annotations

import os
import sys

import pytest

from launcher.logs import follow as follower
from tests.harness.cli import run_cli, run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")


@pytest.mark.cost(3)  # measured in a make test run
def test_logs_tail_odd_log_files(tmp_path, monkeypatch):
    env = dict(os.environ, MSLAUNCH_HOME=str(tmp_path / "home"))
    job = tmp_path / "job"
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--quiet",
        "--log-dir",
        str(job),
        "--no-python",
        sys.executable,
        PROG,
        "ok",
        "0.05",
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    log0 = job / "worker_0.log"

    def huge_sparse(path):  # 2 GiB of holes, then two lines
        with open(path, "wb") as fh:
            fh.truncate(2 << 30)
            fh.seek(0, 2)
            fh.write(b"next to last\nlast line\n")

    # The tail reads at most MAX_TAIL bytes (16 MiB, under the 20 MiB line a log may hold); the cases
    # below hold the same reader to a 1 MiB bound, so that reading up to it costs milliseconds.
    assert follower.MAX_TAIL < 20 << 20
    tail = 1 << 20
    monkeypatch.setattr(follower, "MAX_TAIL", tail)

    def long_line(path):  # a line longer than is read (without a newline), then a line
        with open(path, "wb") as fh:
            fh.write(b"x" * (tail + (4 << 20)) + b"\nend\n")

    cases = [
        (os.mkfifo, []),  # would block a plain open()
        (lambda p: os.symlink("/dev/zero", p), []),  # endless
        (os.mkdir, []),
        (
            lambda p: p.write_bytes(b"\xff\xfe\x00bin\x00\n\x80ary\n"),
            ["[rank 0] \ufffd\ufffd\x00bin\x00", "[rank 0] \ufffdary"],
        ),
        (huge_sparse, ["[rank 0] last line"]),  # "next to last" ends a 2 GiB line: beyond what is read, not shown
        (long_line, ["[rank 0] end"]),
    ]
    for make, expected in cases:
        if log0.is_dir() and not log0.is_symlink():
            log0.rmdir()
        elif os.path.lexists(log0):
            log0.unlink()
        make(log0)
        for follow in ((), ("-f",)):
            t = run_cli("logs", "tail", str(job), "-n", "2", *follow, env=env)  # in this process: the job has ended
            assert t.returncode == 0 and "Traceback" not in t.stderr, t.stderr
            lines = t.stdout.splitlines()
            assert [x for x in lines if x.startswith("[rank 0]")] == expected, (make, lines[:4])
            assert "[rank 1] rank1 done" in lines  # the other ranks' logs are shown as usual
