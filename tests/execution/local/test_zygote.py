"""The zygote launcher with tiny processes (no MindSpore needed; MindSpore end to end is in
``tests/integration/test_msrun_e2e.py``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import psutil
import pytest

from launcher.execution.local.zygote import ZygoteBackend, ZygoteProcess
from launcher.execution.local.zygote_pool import ZygotePool
from launcher.execution.process.spawn import LocalProcess
from launcher.planning.job.spec import ProcPlan
from tests.harness.cli import run_process
from tests.harness.paths import REPO

ROOT = REPO
RANKPROG = os.path.join(ROOT, "tests", "scripts", "rankprog.py")


def proc(name, argv, env=(), cwd="/"):
    return ProcPlan(
        name=name,
        role="worker",
        host="localhost",
        rank=0,
        local_rank=0,
        node_rank=0,
        device_id=0,
        argv=tuple(argv),
        env=tuple(env),
        cwd=cwd,
        log="",
    )


def test_forked_ranks_get_their_env_cwd_argv_log_and_exit_code(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import json, os, sys\nprint(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'x': os.environ.get('ZX'),"
        " 'name': __name__, 'path0': sys.path[0]}))\nsys.exit(int(sys.argv[1]))\n"
    )
    z = ZygoteBackend(preload=("json",))
    try:
        handles = [
            z.start(
                proc(f"rank {i}", [sys.executable, str(script), str(code)], [("ZX", str(i))], str(tmp_path)),
                str(tmp_path / f"{i}.log"),
                str(tmp_path),
            )
            for i, code in enumerate((0, 5))
        ]
        assert [h.wait() for h in handles] == [0, 5]
        for i, h in enumerate(handles):
            assert h.pid != z.process.pid
            got = json.loads((tmp_path / f"{i}.log").read_text())
            assert got == {
                "argv": [str(script), str((0, 5)[i])],
                "cwd": str(tmp_path),
                "x": str(i),
                "name": "__main__",
                "path0": str(tmp_path),
            }
        # -m MODULE; an uncaught exception is exit 1 with its traceback in the log
        mod = z.start(
            proc("rank 2", [sys.executable, "-m", "json.tool", "--nope"]), str(tmp_path / "m.log"), str(tmp_path)
        )
        assert mod.wait() == 2 and "usage" in (tmp_path / "m.log").read_text()
        (tmp_path / "boom.py").write_text("raise RuntimeError('boom')\n")
        boom = z.start(
            proc("rank 3", [sys.executable, str(tmp_path / "boom.py")]), str(tmp_path / "b.log"), str(tmp_path)
        )
        assert boom.wait() == 1 and "RuntimeError: boom" in (tmp_path / "b.log").read_text()
    finally:
        z.close()
    assert z.process.poll() is not None


def test_terminate_and_kill_end_the_whole_group(tmp_path):
    z = ZygoteBackend(preload=())
    piddir = tmp_path / "pids"
    piddir.mkdir()
    try:
        env = [("PIDDIR", str(piddir)), ("MSLAUNCH_NAME", "r0")]
        h = z.start(
            proc("rank 0", [sys.executable, RANKPROG, "stubborn"], env, str(tmp_path)),
            str(tmp_path / "r.log"),
            str(tmp_path),
        )
        deadline = time.monotonic() + 30
        log = tmp_path / "r.log"
        while (
            not (log.exists() and "started" in log.read_text() and list(piddir.iterdir()))
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert h.poll() is None
        assert os.getpgid(h.pid) == h.pid  # its own session/group
        h.terminate()  # stubborn: ignores SIGTERM
        assert h.poll() is None or h.poll() == -signal.SIGTERM
        h.kill()
        assert h.wait() in (-signal.SIGKILL, -signal.SIGTERM)
    finally:
        z.close()
    pids = [int(p) for f in piddir.iterdir() for p in f.read_text().split()]
    assert pids
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_non_python_argv_starts_as_a_subprocess(tmp_path):
    z = ZygoteBackend(preload=())
    try:
        h = z.start(proc("rank 0", ["/bin/sh", "-c", "echo plain; exit 4"]), str(tmp_path / "p.log"), str(tmp_path))
        assert h.wait() == 4 and (tmp_path / "p.log").read_text() == "plain\n"
        assert z.process is None  # no zygote was needed
    finally:
        z.close()


def test_cli_zygote_fail_fast(tmp_path):
    """``mslaunch run --zygote``: a failing forked rank fails the job with its exit code."""
    r = run_process(
        "run",
        "--np",
        "2",
        "--zygote",
        "--master-port",
        "auto",
        "--log-dir",
        str(tmp_path / "job"),
        "--grace",
        "1",
        RANKPROG,
        "fail",
        "0.3",
        "1",
        "7",
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, PIDDIR=str(tmp_path)),
    )
    assert r.returncode == 7, r.stderr
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert summary["root_cause"]["name"] == "rank 1" and summary["root_cause"]["exit_code"] == 7


def test_a_preload_whose_pool_stops_at_fork_is_forked_from(tmp_path):
    """numpy's OpenBLAS starts a worker pool at import; its atfork handler stops it, so the zygote
    is single-threaded at the fork and forks (the MindSpore preload's only extra thread)."""
    pytest.importorskip("numpy")
    script = tmp_path / "s.py"
    script.write_text("import os\nprint(len(os.listdir('/proc/self/task')))\n")
    z = ZygoteBackend(preload=("numpy",), preload_env={"OPENBLAS_NUM_THREADS": "2"})
    try:
        h = z.start(
            proc("rank 0", [sys.executable, str(script)], cwd=str(tmp_path)), str(tmp_path / "r.log"), str(tmp_path)
        )
        assert isinstance(h, ZygoteProcess) and h.wait() == 0
        assert len(z.ready_info["threads_after_import"]) == 2 and z.fallback is None
        assert (tmp_path / "r.log").read_text() == "1\n"  # the child starts single-threaded
    finally:
        z.close()


def test_a_preload_that_starts_a_thread_falls_back_to_plain_processes(tmp_path):
    """A module that starts a thread at import is not fork-safe: the zygote says so and exits;
    every rank starts as a plain process, and the note says why, once."""
    (tmp_path / "threaded.py").write_text(
        "import threading\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
    )
    script = tmp_path / "s.py"
    script.write_text("import os, sys\nprint(os.getppid() == int(sys.argv[1]))\n")
    notes = []
    z = ZygoteBackend(preload=("threaded",), preload_env={"PYTHONPATH": str(tmp_path)}, on_note=notes.append)
    try:
        handles = [
            z.start(
                proc(
                    f"rank {i}",
                    [sys.executable, str(script), str(os.getpid())],
                    [("PYTHONPATH", str(tmp_path))],
                    cwd=str(tmp_path),
                ),
                str(tmp_path / f"{i}.log"),
                str(tmp_path),
            )
            for i in (0, 1)
        ]
        assert all(isinstance(h, LocalProcess) and h.wait() == 0 for h in handles)
        assert [(tmp_path / f"{i}.log").read_text() for i in (0, 1)] == ["True\n", "True\n"]  # children of mslaunch
        assert len(notes) == 1 and "1 thread(s) besides the main one after importing threaded" in notes[0]
        assert notes[0].endswith("starting the ranks as plain processes") and z.fallback in notes[0]
        z.process.wait(timeout=30)  # the zygote exited by itself
    finally:
        z.close()


def test_cli_zygote_falls_back_when_the_interpreter_starts_a_thread(tmp_path):
    """``--zygote`` where every Python process starts a thread at start-up (a sitecustomize): the
    job runs on plain processes and succeeds; the header says how ranks start, a line the fallback."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import threading\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
    )
    env = dict(os.environ, PIDDIR=str(tmp_path), PYTHONPATH=os.pathsep.join([str(site), ROOT]))
    r = run_process(
        "run",
        "--np",
        "2",
        "--zygote",
        "--master-port",
        "auto",
        "--log-dir",
        str(tmp_path / "job"),
        "--tee",
        "none",
        RANKPROG,
        "ok",
        "0.1",
        timeout=180,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "mslaunch: start: Python ranks forked from one process that imported mindspore once" in r.stderr
    assert "mslaunch: zygote: 1 thread(s) besides the main one after" in r.stderr
    assert "starting the ranks as plain processes" in r.stderr
    for i in (0, 1):
        assert "started pid=" in (tmp_path / "job" / f"worker_{i}.log").read_text()


def test_fork_scheduler_runs_the_scheduler_module_instead_of_the_script(tmp_path, monkeypatch):
    """``fork_scheduler``: the scheduler is forked from the zygote and runs SCHEDULER_MODULE with
    its planned env; without it the scheduler is a plain process running its planned argv."""
    import launcher.execution.local.zygote as zygote_mod

    (tmp_path / "fake_sched.py").write_text("import os, sys\nprint('sched', os.environ['MS_ROLE'], sys.argv[1:])\n")
    script = tmp_path / "user.py"
    script.write_text("print('user script')\n")
    monkeypatch.setattr(zygote_mod, "SCHEDULER_MODULE", "fake_sched")
    sched = ProcPlan(
        name="scheduler",
        role="scheduler",
        host="localhost",
        rank=None,
        local_rank=None,
        node_rank=0,
        device_id=None,
        argv=(sys.executable, str(script)),
        env=(("MS_ROLE", "MS_SCHED"),),
        cwd=str(tmp_path),
        log="",
    )
    z = ZygoteBackend(preload=("json",), preload_env={"PYTHONPATH": str(tmp_path)}, fork_scheduler=True)
    plain = ZygoteBackend(preload=("json",))
    try:
        h = z.start(sched, str(tmp_path / "s.log"), str(tmp_path))
        assert isinstance(h, ZygoteProcess) and h.wait() == 0
        assert (tmp_path / "s.log").read_text() == "sched MS_SCHED []\n"
        h = plain.start(sched, str(tmp_path / "p.log"), str(tmp_path))
        assert isinstance(h, LocalProcess) and h.wait() == 0 and (tmp_path / "p.log").read_text() == "user script\n"
    finally:
        z.close()
        plain.close()


def test_a_forked_rank_runs_on_its_planned_cores(tmp_path):
    """``--bind-core True`` with the zygote: the child sets its planned affinity right after the fork."""
    core = sorted(os.sched_getaffinity(0))[-1]
    script = tmp_path / "s.py"
    script.write_text("import os\nprint(sorted(os.sched_getaffinity(0)))\n")
    p = ProcPlan(
        name="rank 0",
        role="worker",
        host="localhost",
        rank=0,
        local_rank=0,
        node_rank=0,
        device_id=0,
        argv=(sys.executable, str(script)),
        env=(),
        cwd=str(tmp_path),
        log="",
        cpus=(core,),
    )
    z = ZygoteBackend(preload=("json",))
    try:
        h = z.start(p, str(tmp_path / "r.log"), str(tmp_path))
        assert isinstance(h, ZygoteProcess) and h.wait() == 0
        assert (tmp_path / "r.log").read_text() == f"[{core}]\n"
    finally:
        z.close()


# ---------------------------------------------------------------- a zygote kept across attempts

STEP = "import os, sys, time\nprint(os.environ['ZX'], os.getppid(), flush=True)\ntime.sleep(float(sys.argv[1]))\n"


def _wait_line(path, limit=60):
    deadline = time.monotonic() + limit
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"no line in {path}"
        time.sleep(0.05)
    return path.read_text().split()


def _failed_attempt(pool, tmp_path, script, kill=True, **kw):
    """Attempt 0: one rank forked, then SIGKILLed (as teardown ends it), the backend closed; (backend, handle)."""
    a = ZygoteBackend(preload=("json",), warm=True, pool=pool, **kw)
    h = a.start(
        proc("rank 0", [sys.executable, str(script), "60"], [("ZX", "0")], str(tmp_path)),
        str(tmp_path / "a0.log"),
        str(tmp_path),
    )
    assert _wait_line(tmp_path / "a0.log") == ["0", str(a.process.pid)]
    # spared by the orphan reaper while it may serve a restart; without a pool, nothing is kept
    assert a.keeps() == ({a.process.pid} if pool is not None else set())
    if kill:
        h.kill()
        assert h.wait() == -signal.SIGKILL
    a.close()
    return a, h


def test_a_restart_forks_from_the_last_attempts_zygote_when_it_is_healthy(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(STEP)
    pool = ZygotePool()
    try:
        a, _ = _failed_attempt(pool, tmp_path, script)
        kept = a.process
        assert kept.poll() is None and pool.pids() == {kept.pid}  # waiting for the next attempt
        b = ZygoteBackend(preload=("json",), warm=True, pool=pool)
        assert b.reused and b.process is kept and pool.reused == 1 and pool.refused == []
        h = b.start(
            proc("rank 0", [sys.executable, str(script), "0"], [("ZX", "1")], str(tmp_path)),
            str(tmp_path / "a1.log"),
            str(tmp_path),
        )
        assert h.wait() == 0 and _wait_line(tmp_path / "a1.log") == ["1", str(kept.pid)]
        b.close()
    finally:
        pool.close()
    assert kept.poll() is not None and pool.pids() == set()


def test_without_a_pool_a_restart_imports_in_a_new_zygote(tmp_path):
    """``--cold-restarts`` (no pool): the last attempt's zygote ends with it; the next one is new."""
    script = tmp_path / "s.py"
    script.write_text(STEP)
    a, _ = _failed_attempt(None, tmp_path, script)
    assert a.process.wait(timeout=30) is not None  # ended with its attempt: nothing kept
    b = ZygoteBackend(preload=("json",), warm=True, pool=None)
    try:
        assert not b.reused and b.process.pid != a.process.pid
        h = b.start(
            proc("rank 0", [sys.executable, str(script), "0"], [("ZX", "1")], str(tmp_path)),
            str(tmp_path / "a1.log"),
            str(tmp_path),
        )
        assert h.wait() == 0 and _wait_line(tmp_path / "a1.log") == ["1", str(b.process.pid)]
    finally:
        b.close()


def test_a_kept_zygote_is_not_reused_when_it_is_not_fit(tmp_path):
    """Not reused (a new zygote imports; the old one ends): a process of the last attempt still
    runs under it; the new attempt's environment differs; it died."""
    script = tmp_path / "s.py"
    script.write_text(STEP)
    notes = []
    pool = ZygotePool(settle=0.5)
    try:
        a, left = _failed_attempt(pool, tmp_path, script, kill=False)
        try:
            b = ZygoteBackend(preload=("json",), warm=True, pool=pool, on_note=notes.append)
            assert not b.reused and b.process.pid != a.process.pid and a.process.poll() is not None
            assert pool.refused == ["1 process(es) of the last attempt still run under it"]
            assert notes == [
                "zygote: the last attempt's zygote is not reused (1 process(es) of the last attempt still run under "
                "it); a new one imports"
            ]
        finally:
            left.kill()
        ok = b.start(
            proc("rank 0", [sys.executable, str(script), "0"], [("ZX", "1")], str(tmp_path)),
            str(tmp_path / "b.log"),
            str(tmp_path),
        )
        assert ok.wait() == 0
        b.close()
        c = ZygoteBackend(preload=("json",), warm=True, pool=pool, preload_env={"OMP_NUM_THREADS": "3"})
        assert (
            not c.reused and pool.refused[-1] == "the new attempt's environment differs from the one it imported under"
        )
        c.close()
        d = ZygoteBackend(preload=("json",), warm=True, pool=pool, preload_env={"OMP_NUM_THREADS": "3"})
        assert d.reused  # the same environment (MSLAUNCH_* aside) again: fit
        os.kill(d.process.pid, signal.SIGKILL)
        d.process.wait()
        d.close()
        e = ZygoteBackend(
            preload=("json",), warm=True, pool=pool, preload_env={"OMP_NUM_THREADS": "3", "MSLAUNCH_ATTEMPT": "1"}
        )
        assert not e.reused and e.process.poll() is None
        e.close()
        f = ZygoteBackend(
            preload=("json",), warm=True, pool=pool, preload_env={"OMP_NUM_THREADS": "3", "MSLAUNCH_ATTEMPT": "2"}
        )
        assert f.reused  # only the attempt number differs
        f.close()
    finally:
        pool.close()
    assert pool.reused == 2 and len(pool.refused) == 2
