"""Each rank's scheduler figures in the job dir (launcher/execution/process/rankfigures.py): the
file's one line, written whole; a sampler on a real process that ends once the process is gone;
and mpirun's rank wrapper (templates/mslaunch-rank.sh, run for real by sh) starting one beside a
worker and leaving nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from launcher.execution.process.rankfigures import main, path_of, read, sample_until_gone, write
from tests.execution.probes.test_rank_wrapper_threads import _rank0_env
from tests.harness.paths import REPO

WRAPPER = os.path.join(REPO, "templates", "mslaunch-rank.sh")


def test_the_line_is_read_back_and_a_bad_or_missing_file_is_none(tmp_path):
    path = path_of(str(tmp_path), 3)
    assert path == str(tmp_path / "rank-figures" / "rank3")
    assert read(str(tmp_path), 3) is None
    os.makedirs(os.path.dirname(path))
    write(path, [12.5, 3.25, 0.5, 4096, 0.75])
    assert read(str(tmp_path), 3) == (12.5, 3.25, 0.5, 4096.0, 0.75)
    write(path, [12.5, 3.25, 0.5, 4096])  # an older sampler's: the busiest link unknown
    assert read(str(tmp_path), 3) == (12.5, 3.25, 0.5, 4096.0, -1.0)
    assert os.listdir(os.path.dirname(path)) == ["rank3"]  # no temporary name left
    assert os.stat(path).st_mode & 0o777 == 0o600
    for bad in (
        "",
        "[1, 2, 3]\n",
        '["a", 1, 2, 3]\n',
        "{}\n",
        "[1, 2, 3, null]\n",
        "[1, 2, 3, 4, 5, 6]\n",
        "not json\n",
    ):
        with open(path, "w") as fh:
            fh.write(bad)
        assert read(str(tmp_path), 3) is None, bad
    assert main(["x", "y"]) == 2


def _burn_then_sleep() -> "subprocess.Popen[bytes]":
    return subprocess.Popen(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 30"])


def test_the_sampler_writes_growing_figures_and_ends_with_the_process(tmp_path):
    child = _burn_then_sleep()
    path = str(tmp_path / "rank-figures" / "rank0")
    sampler = threading.Thread(target=sample_until_gone, args=(child.pid, path, 0.05))
    sampler.start()
    try:
        deadline = time.monotonic() + 30
        first = None
        while time.monotonic() < deadline:
            got = read(str(tmp_path), 0)
            if got is not None and first is None:
                first = got
            if first is not None and got is not None and got[0] > first[0] and got[1] > 0:
                break
            time.sleep(0.05)
        assert first is not None and got is not None and got[0] > first[0] and got[1] >= first[1] and got[1] > 0, (
            first,
            got,
        )  # the first sample may come before the process ran at all
    finally:
        child.kill()
        child.wait()
    sampler.join(timeout=30)
    assert not sampler.is_alive()


def _children(pid: int):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


@pytest.mark.e2e
def test_mpiruns_wrapper_samples_a_worker_and_leaves_nothing(tmp_path):
    """What the wrapper starts beside rank 0 writes its figures to <log dir>/rank-figures/rank0 while
    it runs; once the rank exits, the wrapper exits with its code and no sampler is left."""
    env = _rank0_env(tmp_path, MSLAUNCH_SAMPLER=sys.executable, A_SECRET="s3cr3t-value")
    stop = tmp_path / "stop"
    prog = ["sh", "-c", f'while [ ! -e "{stop}" ]; do sleep 0.1; done; exit 3']
    wrapper = subprocess.Popen(["sh", WRAPPER, *prog], env=env, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline and len({s[0] for s in seen}) < 2:
            got = read(str(tmp_path), 0)
            if got is not None:
                seen.append(got)
            time.sleep(0.2)
        assert len({s[0] for s in seen}) >= 2, seen  # sampled again and again
        below = _children(wrapper.pid)
        assert len(below) == 2  # the rank and its sampler
        environs = {p: open(f"/proc/{p}/environ", "rb").read() for p in below}
        sampler = [p for p, e in environs.items() if b"A_SECRET=" not in e]
        assert len(sampler) == 1, environs  # the rank has the job's variables, the sampler not one of them
        names = [v.split(b"=", 1)[0] for v in environs[sampler[0]].split(b"\0") if v]
        assert not [n for n in names if n.startswith(b"MSLAUNCH_") or n == b"RANK_ID"], names
        stop.touch()
        assert wrapper.wait(timeout=60) == 3
    finally:
        stop.touch()
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in below):
        time.sleep(0.05)
    assert not [p for p in below if os.path.exists(f"/proc/{p}")]
    assert not os.path.exists(tmp_path / "rank-figures" / "scheduler")
