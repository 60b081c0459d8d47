"""The default start path (ranks forked from the zygote) against ``--no-zygote``, as a user runs
``mslaunch run`` with real MindSpore 2.10 jobs: what the program saves at its end, its random
numbers, its exit order, finding and stopping its ranks, and the collective cluster's end.

The execution-level differential suite (every case both ways, one zygote) is
``tests/execution/local/test_zygote_conformance.py``; the reliability counts are
``bench/bench_reliability.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from tests.harness.cli import run_cli, run_process
from tests.harness.hostfaults import favored_children
from tests.harness.mindspore import crashed_after_leaving
from tests.integration.test_e2e_mindspore import assert_no_pids_left

pytestmark = pytest.mark.mindspore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DP = os.path.join(ROOT, "tests", "scripts", "dp_train.py")
BIN = os.path.dirname(sys.executable)

FAITHFUL = r"""
import atexit, json, os, random, sys, threading, time
import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.communication import get_rank, init

ms.set_device("CPU")
atexit.register(print, "atexit registered before init()", flush=True)
init()
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
rank = get_rank()
out = os.environ["OUT"]
atexit.register(print, "atexit registered after init()", flush=True)
print(json.dumps({"numpy": float(np.random.rand()), "random": random.random(),
                  "mindspore": float(ms.ops.rand(1).asnumpy()[0])}), flush=True)
print("LD_PRELOAD:", os.environ.get("LD_PRELOAD"), flush=True)
net = nn.Dense(2048, 2048)  # 4 M parameters: a 16 MB checkpoint, written by a background thread
ms.save_checkpoint(net, os.path.join(out, f"net_{rank}.ckpt"), async_save=True)


def late():
    time.sleep(1.0)
    with open(os.path.join(out, f"thread_{rank}.txt"), "w") as f:
        f.write("written after the main code returned\n")
    print("thread done", flush=True)


threading.Thread(target=late).start()
print("main code done", flush=True)
"""


def once_more_after_a_cleanup_crash(job, name):
    """``job(name)`` runs a job and gives (its result, its log folder).  When MindSpore's cleanup
    killed a rank after it had left the cluster (:func:`tests.harness.mindspore.crashed_after_leaving`:
    everything the program does had happened), the job runs once more as ``<name>-again``, and this
    says why.  Returns the run that counts and its name."""
    r, log_dir = job(name)
    why = crashed_after_leaving(str(log_dir)) if r.returncode else None
    if not why:
        return r, name
    print(f"{name}: {why}; the job again")
    assert_no_pids_left(str(log_dir))
    return job(f"{name}-again")[0], f"{name}-again"


def own_lines(log):
    """The lines the program printed (MindSpore's own log lines left out), random values masked."""
    lines = [ln for ln in log.splitlines() if not re.match(r"\[(INFO|WARNING|ERROR|DEBUG)\]", ln) and ln.strip()]
    return [re.sub(r'": [0-9.e-]+', '": <n>', ln) for ln in lines]


@pytest.mark.cost(50)
def test_the_default_keeps_what_the_program_leaves_at_its_end_as_no_zygote_does(tmp_path):
    """One 2-rank job each way: under both every rank writes its asynchronous checkpoint (and it
    loads), its non-daemon thread finishes after the main code, atexit handlers registered
    before and after init() run, in python's order; the ranks draw different random numbers;
    every worker finalizes with the scheduler, which reports none of them timed out.  The default's
    zygote has the fastjoin shim (launcher.execution.process.fastjoin), its ranks never see it.
    A job one of whose ranks MindSpore's cleanup killed after it had left the cluster runs once
    more (tests/harness/mindspore.py's ``crashed_after_leaving``)."""
    import mindspore as ms

    (tmp_path / "faithful.py").write_text(FAITHFUL)
    seen = {}
    # its processes get the CPU first: near its time alone beside the suite's other work
    with favored_children() as favored:
        for mode, flags in (("default", []), ("no-zygote", ["--no-zygote"])):

            def job(name):
                (tmp_path / name).mkdir()
                log_dir = tmp_path / f"logs-{name}"
                r = run_process(
                    "run",
                    "--np",
                    "2",
                    "--master-port",
                    "auto",
                    "--log-dir",
                    str(log_dir),
                    "--env",
                    f"OUT={tmp_path / name}",
                    *flags,
                    "faithful.py",
                    cwd=tmp_path,
                    timeout=300,
                    preexec_fn=favored,
                )
                return r, log_dir

            r, name = once_more_after_a_cleanup_crash(job, mode)
            out, log_dir = tmp_path / name, tmp_path / f"logs-{name}"
            assert r.returncode == 0, (mode, r.stderr[-3000:])
            assert ("forked from one process that imported mindspore once" in r.stderr) == (mode == "default"), r.stderr
            assert "mslaunch: zygote:" not in r.stderr  # no fallback
            assert_no_pids_left(str(log_dir))
            assert sorted(os.listdir(out)) == ["net_0.ckpt", "net_1.ckpt", "thread_0.txt", "thread_1.txt"], mode
            for rank in (0, 1):
                params = ms.load_checkpoint(str(out / f"net_{rank}.ckpt"))
                assert sorted(params) == ["bias", "weight"] and params["weight"].shape == (2048, 2048), mode
            logs = [(log_dir / f"worker_{rank}.log").read_text() for rank in (0, 1)]
            seen[mode] = [own_lines(text) for text in logs]
            draws = [json.loads(next(ln for ln in text.splitlines() if ln.startswith('{"numpy"'))) for text in logs]
            for key in ("numpy", "random", "mindspore"):
                assert draws[0][key] != draws[1][key], (mode, key, draws)
            sched = (log_dir / "scheduler.log").read_text()
            assert "timed out node" not in sched and "has unregistered" in sched, mode
    assert seen["default"] == seen["no-zygote"]
    assert seen["default"][0] == [
        '{"numpy": <n>, "random": <n>, "mindspore": <n>}',
        "LD_PRELOAD: None",  # the zygote's fastjoin shim is not in a rank's environment
        "main code done",
        "thread done",
        "atexit registered after init()",
        "atexit registered before init()",
    ]


TERM = r"""
import os, signal, sys, time
import mindspore as ms
from mindspore.communication import get_rank, init

ms.set_device("CPU")
init()
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)


def on_term(signum, frame):
    with open(os.path.join(os.environ["OUT"], f"saved_{get_rank()}.txt"), "w") as f:
        f.write("saved on SIGTERM\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(300)
"""


@pytest.mark.cost(30)
def test_ranks_of_a_running_default_job_can_be_found_and_stopped(tmp_path):
    """``status --json`` of a running job lists every rank's host, pid and state; each pid's
    command line is the script's as a plain process shows it (``pgrep -f`` finds it); ``stop``
    runs the program's SIGTERM handler in every rank and nothing is left."""
    (tmp_path / "term.py").write_text(TERM)
    out = tmp_path / "out"
    out.mkdir()
    home = tmp_path / "home"
    env = dict(os.environ, MSLAUNCH_HOME=str(home))
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--detach",
        "--job-id",
        "findme",
        "--env",
        f"OUT={out}",
        "term.py",
        "--epochs",
        "3",
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    job_dir = tmp_path / "mslaunch_logs" / "findme"
    try:
        deadline = time.monotonic() + 120
        while not all(
            (job_dir / f"worker_{i}.log").exists() and "ready" in (job_dir / f"worker_{i}.log").read_text()
            for i in (0, 1)
        ):
            assert time.monotonic() < deadline, "ranks did not get ready"
            time.sleep(0.2)
        st = run_cli("status", "findme", "--json", cwd=str(tmp_path), env=env)
        assert st.returncode == 0, st.stderr
        procs = {p["name"]: p for p in json.loads(st.stdout)["processes"]}
        assert {"rank 0", "rank 1"} <= set(procs)
        script = str(tmp_path / "term.py")
        for name in ("rank 0", "rank 1"):
            p = procs[name]
            assert p["host"] == "localhost" and p["state"] == "running" and p["attempt"] == 0
            assert " ".join(psutil.Process(p["pid"]).cmdline()).split() == [sys.executable, script, "--epochs", "3"]
        found = subprocess.run(["pgrep", "-f", f"{script} --epochs 3"], capture_output=True, text=True).stdout.split()
        assert {procs["rank 0"]["pid"], procs["rank 1"]["pid"]} <= {int(x) for x in found}
        text = run_cli("status", "findme", cwd=str(tmp_path), env=env).stdout
        assert re.search(rf"rank 0 +localhost +pid {procs['rank 0']['pid']} +running", text), text
    finally:
        stop = run_process("stop", "findme", cwd=tmp_path, env=env, timeout=300)
    assert stop.returncode == 0, stop.stderr
    assert sorted(os.listdir(out)) == ["saved_0.txt", "saved_1.txt"]
    summary = assert_no_pids_left(str(job_dir))
    assert summary["status"] == "stopped"


@pytest.mark.cost(30)
def test_an_8_worker_data_parallel_job_with_msruns_flags_ends_cleanly(tmp_path):
    """The job shape that failed at its end (8 workers on this machine's cores, gradient
    AllReduce, msrun's own flags) under the default: every worker trains to its last step,
    finalizes with the scheduler (8 unregistrations, no timed-out node), exit 0.  How often it
    ends so (100 runs each way) is bench/bench_reliability.py's: one run here guards the shape
    (run once more when MindSpore's cleanup killed a rank after it had left the cluster:
    tests/harness/mindspore.py's ``crashed_after_leaving``)."""
    env = dict(os.environ, EPOCHS="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))

    def job(name):
        log_dir = tmp_path / name
        r = run_process(
            "run",
            "--worker_num=8",
            "--local_worker_num=8",
            "--master_port=auto",
            "--join=True",
            "--cluster_time_out=300",
            f"--log_dir={log_dir}",
            DP,
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
        return r, log_dir

    r, name = once_more_after_a_cleanup_crash(job, "run")
    log_dir = tmp_path / name
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in range(8):
        assert re.search(
            rf"^dp rank={rank} size=8 steps=4 loss=", (log_dir / f"worker_{rank}.log").read_text(), re.M
        ), rank
    sched = (log_dir / "scheduler.log").read_text()
    assert sched.count("has unregistered") == 8 and "timed out node" not in sched, sched[-2000:]
    assert_no_pids_left(str(log_dir))
