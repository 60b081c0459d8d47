"""The mpirun rank wrapper's threads (templates/mslaunch-rank.sh, set_threads): its cgroup quota
reading agrees with the Python probe's (launcher/execution/probes/host_cores.py) on the same
cgroup trees, and the wrapper, run for real by sh with OpenMPI's variables, gives each rank its
share of the cores by the rule of launcher/planning/cpu/hostcores.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from launcher.execution.probes.host_cores import cgroup_quota
from launcher.planning.cpu.hostcores import thread_shares
from tests.harness.paths import REPO

ROOT = REPO
WRAPPER = os.path.join(ROOT, "templates", "mslaunch-rank.sh")


def _function(name: str) -> str:
    with open(WRAPPER, encoding="utf-8") as f:
        text = f.read()
    start = text.index(f"\n{name}() {{") + 1
    return text[start : text.index("\n}\n", start) + 3]


def _tree(tmp, files):
    for rel, text in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


CASES = {
    "v1 nested, the parent tighter": (
        "30 25 0:26 / {m}/cpu rw - cgroup cgroup rw,cpu,cpuacct\n31 25 0:27 / {m}/cpuset rw - cgroup cgroup "
        "rw,cpuset\n",
        "5:cpu,cpuacct:/job/step\n4:cpuset:/job\n",
        {
            "cpu/job/cpu.cfs_quota_us": "150000",
            "cpu/job/cpu.cfs_period_us": "100000",
            "cpu/job/step/cpu.cfs_quota_us": "-1",
            "cpu/job/step/cpu.cfs_period_us": "100000",
        },
    ),
    "v1 namespaced root": (
        "30 25 0:26 /kube/pod {m}/cpu rw - cgroup cgroup rw,cpuacct,cpu\n",
        "5:cpuacct,cpu:/kube/pod/c1\n",
        {"cpu/c1/cpu.cfs_quota_us": "50000", "cpu/c1/cpu.cfs_period_us": "100000"},
    ),
    "v2": (
        "40 25 0:30 / {m}/v2 rw - cgroup2 cgroup2 rw\n",
        "0::/a/b\n",
        {"v2/a/cpu.max": "250000 100000", "v2/a/b/cpu.max": "max 100000", "v2/cpu.max": "max"},
    ),
    "none": (
        "40 25 0:30 / {m}/v2 rw - cgroup2 cgroup2 rw\n30 25 0:26 / {m}/cpuset rw - cgroup cgroup rw,cpuset\n",
        "0::/a\n4:cpuset:/a\n",
        {"v2/a/cpu.max": "max 100000"},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_wrappers_quota_reading_agrees_with_the_python_probe(case, tmp_path):
    mountinfo, cgroup, files = CASES[case]
    mountinfo = mountinfo.format(m=tmp_path)
    _tree(tmp_path, files)
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(cgroup)
    quota, source = cgroup_quota(mountinfo, cgroup)
    out = subprocess.run(
        [
            "sh",
            "-c",
            _function("cgroup_quota") + 'cgroup_quota "$1" "$2"',
            "sh",
            str(tmp_path / "mountinfo"),
            str(tmp_path / "cgroup"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == ("" if quota is None else f"{quota:g} {source}")
    assert (quota is None) == (case == "none")


def _run_rank(tmp_path, local: int, k: int, taskset=None, extra_env=None):
    """Run the wrapper as OpenMPI would for local rank ``local`` of ``k`` on a remote host."""
    env = {k_: v for k_, v in os.environ.items() if k_ not in ("OMP_NUM_THREADS", "MSLAUNCH_CPU_THREADS")}
    env.update(
        OMPI_COMM_WORLD_RANK=str(local),
        MSLAUNCH_CTX_BASE="0",
        MSLAUNCH_ROLE="worker",
        MSLAUNCH_FIRST_RANK="0",
        MSLAUNCH_DEVICES=",".join(str(i) for i in range(k)),
        MSLAUNCH_LOG_DIR=str(tmp_path),
        MSLAUNCH_LOG_NAME="worker_{rank}.log",
        MSLAUNCH_METHOD="mpi",
        MSLAUNCH_THREADS="OMP_NUM_THREADS,MSLAUNCH_CPU_THREADS",
        MSLAUNCH_HOST="h9",
    )
    env.update(extra_env or {})
    prog = [
        sys.executable,
        "-c",
        "import os; print('OMP=%s MS=%s' % (os.environ.get('OMP_NUM_THREADS'), "
        "os.environ.get('MSLAUNCH_CPU_THREADS')))",
    ]
    argv = ["sh", WRAPPER, *prog] if taskset is None else ["taskset", "-c", taskset, "sh", WRAPPER, *prog]
    subprocess.run(argv, env=env, check=True, timeout=60)
    return (tmp_path / f"worker_{local}.log").read_text()


@pytest.mark.e2e
def test_each_rank_gets_its_share_of_the_hosts_cores_and_rank_0_says_so(tmp_path):
    cpus = len(os.sched_getaffinity(0))
    quota, _ = cgroup_quota(open("/proc/self/mountinfo").read(), open("/proc/self/cgroup").read())
    usable = max(1, min(cpus, int(quota + 1e-9))) if quota else cpus
    k = usable + 1  # one rank more than the cores: 1 thread each, and the warning
    logs = [_run_rank(tmp_path, i, k) for i in range(k)]
    assert all(log.splitlines()[-1] == "OMP=1 MS=1" for log in logs)
    assert f"mslaunch: warning: h9: {k} ranks on {usable} usable core(s): several ranks share each core" in logs[0]
    assert "mslaunch:" not in logs[1]
    record = json.loads((tmp_path / "host-threads" / "h9.json").read_text())
    assert record["usable"] == usable and record["ranks"] == k and record["warning"].startswith(f"h9: {k} ranks")
    one = _run_rank(tmp_path, 0, 1)
    assert one.splitlines()[-1] == f"OMP={usable} MS={usable}" == f"OMP={thread_shares(usable, 1)[0]} MS={usable}"
    assert (
        f"mslaunch: cpu: h9: threads per rank {usable} (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 1 rank(s) on {usable} "
        "usable core(s)" in one
    )
    assert "warning" not in one


@pytest.mark.e2e
def test_the_hosts_own_value_wins_and_a_binding_caps_the_share(tmp_path):
    log = _run_rank(tmp_path, 0, 1, extra_env={"OMP_NUM_THREADS": "7"})
    assert log.splitlines()[-1].startswith("OMP=7 MS=")
    if shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs taskset and 2 CPUs")
    first = min(os.sched_getaffinity(0))
    log = _run_rank(tmp_path, 0, 1, taskset=str(first))  # bound to one CPU, its parent (mpirun's daemon) is not
    assert log.splitlines()[-1] == "OMP=1 MS=1" and f"(rank 0 bound by mpirun to CPUs {first})" in log


HOSTILE = {  # M: the file the item would create; no blanks (the wrapper splits the list at them)
    "command substitution": "x-$(touch${IFS}M)",
    "backticks": "x-`touch${IFS}M`",
    "semicolon": 'x-}"];touch${IFS}M;:"${x',
    "newline": "\nx-$(touch${IFS}M)\n",
    "bare substitution": "$(touch${IFS}M)",
    "glob": "*",
}


def _rank0_env(tmp_path, drop=(), **extra):
    """The environment mpirun and the planner give the wrapper for worker rank 0 on host h9
    (log in ``tmp_path``), without ``drop``'s variables, with ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(
        OMPI_COMM_WORLD_RANK="0",
        MSLAUNCH_CTX_BASE="0",
        MSLAUNCH_ROLE="worker",
        MSLAUNCH_FIRST_RANK="0",
        MSLAUNCH_DEVICES="0",
        MSLAUNCH_LOG_DIR=str(tmp_path),
        MSLAUNCH_LOG_NAME="worker_{rank}.log",
        MSLAUNCH_METHOD="mpi",
        MSLAUNCH_HOST="h9",
        **extra,
    )
    return env


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_threads_list_runs_nothing_and_valid_names_still_export(case, tmp_path, monkeypatch):
    """MSLAUNCH_THREADS can be set with --env: only variable names reach the wrapper's eval."""
    mark = tmp_path / "pwned"
    (tmp_path / "OMP_FROM_GLOB").write_text("")  # a '*' must not expand to the folder's file names
    monkeypatch.chdir(tmp_path)
    env = _rank0_env(
        tmp_path,
        drop=("OMP_NUM_THREADS", "MSLAUNCH_CPU_THREADS"),
        MSLAUNCH_THREADS="OMP_NUM_THREADS," + HOSTILE[case].replace("M", str(mark)) + ",MSLAUNCH_CPU_THREADS",
    )
    prog = [
        sys.executable,
        "-c",
        "import os; print('OMP=%s MS=%s GLOB=%s' % (os.environ.get('OMP_NUM_THREADS'), "
        "os.environ.get('MSLAUNCH_CPU_THREADS'), os.environ.get('OMP_FROM_GLOB')))",
    ]
    done = subprocess.run(["sh", WRAPPER, *prog], env=env, capture_output=True, text=True, timeout=60)
    assert not mark.exists()
    assert done.returncode == 0, done.stderr
    last = (tmp_path / "worker_0.log").read_text().splitlines()[-1]
    omp, ms, glob = (word.split("=", 1)[1] for word in last.split())
    assert omp == ms and int(omp) >= 1 and glob == "None"  # both valid names exported with the rank's share
    skipped = [line for line in done.stderr.splitlines() if "MSLAUNCH_THREADS: skipped" in line]
    assert len(skipped) == 1 and skipped[0].startswith("mslaunch: warning: h9: ")


@pytest.mark.e2e
def test_the_wrapper_writes_the_ranks_log_0600_whatever_mpiruns_umask(tmp_path):
    """A rank may print its environment (--env values): its log is created 0600 under umask 022,
    as the local and ssh backends' are, and the scheduler's folder 0700."""
    env = _rank0_env(tmp_path, drop=("MSLAUNCH_THREADS",), HF_TOKEN="hf_secret")
    prog = [sys.executable, "-c", "import os; print(os.environ['HF_TOKEN'])"]

    def wrapped() -> "subprocess.CompletedProcess[str]":  # the wrapper under umask 022
        return subprocess.run(
            ["sh", WRAPPER, *prog],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(tmp_path),
            preexec_fn=lambda: os.umask(0o022),
        )

    done = wrapped()
    assert done.returncode == 0, done.stderr
    log = tmp_path / "worker_0.log"
    assert "hf_secret" in log.read_text()
    assert oct(os.stat(log).st_mode & 0o777) == "0o600"
    sched_log = tmp_path / "sched" / "scheduler.log"
    env.update(MSLAUNCH_ROLE="scheduler", MSLAUNCH_LOG=str(sched_log))
    done = wrapped()
    assert done.returncode == 0, done.stderr
    assert "hf_secret" in sched_log.read_text()
    assert (oct(os.stat(sched_log).st_mode & 0o777), oct(os.stat(sched_log.parent).st_mode & 0o777)) == (
        "0o600",
        "0o700",
    )
