"""``mslaunch k8s gen --flavor indexed`` end to end: the generated pods, run as a kubelet would
(tests/harness/k8s_pods.py: one network namespace and address per pod, the pods' DNS names,
the container env with downward-API fields and JOB_COMPLETION_INDEX, $(VAR) expansion, the
working directory), form a MindSpore cluster and AllReduce across 3 pods x 2 ranks.

The command each pod runs is read from the YAML `k8s gen` wrote, never re-derived here.
Each case proves something different:

* pods started in reverse order (pod 2 first, waiting for pod 0's name to resolve) still form
  the cluster; every pod's log (its stdout) has its ranks' lines, prefixed;
* one pod failing (a rank exits 3 while every rank runs; a program without MindSpore) fails the
  Job, whose policy ends every other pod; nothing is left running in any pod;
* a scheduler name that never resolves ends the pod after --start-timeout with one line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys

import pytest

from tests.harness.cli import run_process
from tests.harness.k8s_pods import IndexedJobPods

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "local/mslaunch:test"


def image_env() -> dict:
    """The 'image's env: mslaunch and its Python on PATH (an image's ENV lines)."""
    env = {
        "PATH": os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
    }
    if os.environ.get("MSLAUNCH_HOME"):  # the test session's own mslaunch home (CPU probe cache)
        env["MSLAUNCH_HOME"] = os.environ["MSLAUNCH_HOME"]
    return env


def gen(workdir, *args: str) -> str:
    name = f"k8s{secrets.token_hex(3)}"
    r = run_process(
        "k8s",
        "gen",
        "--nodes",
        "3",
        "--per-host",
        "2",
        "--image",
        IMAGE,
        "--workdir",
        str(workdir),
        "--name",
        name,
        *args,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def app_dir(tmp_path, script_src: str, name: str):
    """The job's working dir in the 'image': the program under a relative name."""
    wd = tmp_path / "app"
    wd.mkdir()
    shutil.copy(script_src, wd / name)
    return wd


@pytest.mark.netns
@pytest.mark.mindspore
@pytest.mark.cost(23)  # measured in a make test run on a fresh clone
def test_reverse_start_order_forms_the_cluster(make_netns_cluster, tmp_path):
    """Pod 2 starts first and waits for pod 0's DNS name; then pod 1, then pod 0: the 6 ranks
    AllReduce 1+..+6 = 21 on every rank; each pod's stdout has its own ranks' result lines."""
    cluster = make_netns_cluster(3)
    wd = app_dir(tmp_path, os.path.join(ROOT, "launcher", "workloads", "allreduce_smoke.py"), "train.py")
    manifest = gen(
        wd,
        "--cpu-tune",
        "off",
        "--cluster_time_out",
        "180",
        "--start-timeout",
        "240",
        "--worker_log_name",
        "w_{hostname}",
        "train.py",
    )
    with IndexedJobPods(cluster, manifest, image_env(), str(tmp_path)) as job:
        job.start(2)
        assert job.wait_output(2, r"waiting for the scheduler's address k8s\w+-0\.k8s\w+ to resolve", 120), job.pods[
            2
        ].output()
        job.start(1)
        job.start(0)
        status = job.run(timeout=500)
        logs = {i: p.output() for i, p in job.pods.items()}
        assert status == "Complete", logs
        for i, pod in job.pods.items():
            assert pod.returncode == 0 and pod.leftovers == [], (i, logs[i][-3000:])
            for rank in (2 * i, 2 * i + 1):  # JOB_COMPLETION_INDEX i -> ranks 2i, 2i+1 (from $(JOB_COMPLETION_INDEX))
                assert re.search(rf"^\[rank {rank}\] mslaunch-allreduce rank={rank} sum=21\.0$", logs[i], re.M), (
                    i,
                    logs[i][-3000:],
                )
            other = [r for r in range(6) if r not in (2 * i, 2 * i + 1)]
            assert not any(f"mslaunch-allreduce rank={r} " in logs[i] for r in other), i
            assert pod.argv[:2] == ["mslaunch", "run"] and "--node_rank" in pod.argv
            assert pod.argv[pod.argv.index("--node_rank") + 1] == str(i)  # $(JOB_COMPLETION_INDEX) expanded
        # the scheduler ran in pod 0 only, on pod 0's address (MS_SCHED_HOST must be an IP)
        plans = sorted((wd / "mslaunch_logs").glob("*/plan.json"))
        assert len(plans) == 3
        docs = [json.load(open(p)) for p in plans]
        assert {proc["env"]["MS_SCHED_HOST"] for d in docs for proc in d["ranks"]} == {cluster.host(0).ip}
        assert [d.get("scheduler") is not None for d in sorted(docs, key=lambda d: d["ranks"][0]["rank"])] == [
            True,
            False,
            False,
        ]
        # each pod's host name is <job>-<index> (msrun's {hostname} in the worker log names)
        name = job.job_name
        assert sorted(os.path.basename(p["log"]) for d in docs for p in d["ranks"]) == [
            f"w_{name}-{r // 2}_{r}.log" for r in range(6)
        ]
    assert cluster.all_pids() == {}


#: A program of every pod's ranks: says it is up, then runs until it is stopped; rank FAIL_RANK,
#: once every worker of the job is up (files in the shared working dir), exits 3.  As pod 0's
#: scheduler process it listens on the scheduler's port (what the workers' launch waits for).
FAILING_PROG = """
import os, socket, sys, time
role, rank = os.environ.get("MS_ROLE"), os.environ.get("RANK_ID")
if role == "MS_SCHED":
    sock = socket.create_server((os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])))
elif role == "MS_WORKER":
    open(f"up_{rank}", "w").close()
    print(f"prog rank={rank} up", flush=True)
    if rank == os.environ["FAIL_RANK"]:
        while not all(os.path.exists(f"up_{r}") for r in range(6)):
            time.sleep(0.05)
        print(f"prog rank={rank} failing on purpose", flush=True)
        sys.exit(3)
time.sleep(600)
"""


@pytest.mark.netns
def test_one_failing_pod_ends_every_pod(make_netns_cluster, tmp_path):
    """Rank 3 (pod 1) exits 3 while every rank of every pod runs: pod 1 exits 3, the Job fails
    (podFailurePolicy FailJob) and the other pods are terminated, their mslaunch ending their
    ranks; nothing is left in any pod."""
    cluster = make_netns_cluster(3)
    wd = tmp_path / "app"
    wd.mkdir()
    (wd / "prog.py").write_text(FAILING_PROG)
    manifest = gen(wd, "--cpu-tune", "off", "--env", "FAIL_RANK=3", "prog.py")
    with IndexedJobPods(cluster, manifest, image_env(), str(tmp_path)) as job:
        for i in (0, 1, 2):
            job.start(i)
        status = job.run(timeout=500)
        logs = {i: p.output()[-3000:] for i, p in job.pods.items()}
        assert status == "Failed", logs
        assert job.pods[1].returncode == 3, logs
        assert "prog rank=3 failing on purpose" in logs[1]
        for i in (0, 2):  # ended by the Job's failure: SIGTERM, which their mslaunch passes to the ranks
            pod = job.pods[i]
            assert pod.terminated and pod.returncode != 0, (i, pod.terminated, pod.returncode, logs[i])
            assert all(f"prog rank={r} up" in logs[i] for r in (2 * i, 2 * i + 1)), logs[i]
        for i, pod in job.pods.items():
            assert pod.leftovers == [], (i, pod.leftovers)
    assert cluster.all_pids() == {}


@pytest.mark.netns
def test_scheduler_name_never_resolves(make_netns_cluster, tmp_path):
    """Only pod 1 exists: pod 0's name never resolves; pod 1 fails after --start-timeout with one
    line naming the address (exit 1), and nothing is left in the pod."""
    cluster = make_netns_cluster(3)
    wd = tmp_path / "app"
    wd.mkdir()
    (wd / "prog.py").write_text("print('never runs')\n")
    manifest = gen(wd, "--start-timeout", "2", "prog.py")
    with IndexedJobPods(cluster, manifest, image_env(), str(tmp_path)) as job:
        pod = job.start(1)
        pod.proc.wait(120)
        out = pod.output()
        errors = [ln for ln in out.splitlines() if "error" in ln]
        assert pod.proc.returncode == 1, out
        assert len(errors) == 1 and re.search(r"did not resolve within --start-timeout 2 s", errors[0]), out
        assert "Traceback" not in out
        job._reap(pod)
        assert pod.leftovers == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$(A)", "1"),
        ("x$(A)y$(B)", "x1y2"),
        ("$(NOPE)", "$(NOPE)"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$1"),
        ("$A", "$A"),
        ("$", "$"),
        ("$(A", "$(A"),
        ("a$$b", "a$b"),
        ("$()", "$()"),
    ],
)
def test_kubelet_expansion(text, expected):
    """The harness expands $(VAR) as Kubernetes documents it (a missing variable is left as is,
    $$ is an escaped $)."""
    from tests.harness.k8s_pods import expand

    assert expand(text, {"A": "1", "B": "2"}) == expected
