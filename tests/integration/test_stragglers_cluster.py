"""Slow hosts found while the job runs over ssh and through mpirun, one rank per namespace host.

* ``--straggler replace`` with the reference trainer (real MindSpore): host 2 put under a CPU
  quota mid-job (:func:`tests.harness.hostfaults.throttle_cpu`: its sshd's group, so what starts
  there later; the rank already running there is moved into the group by its pid); the host's
  agent sends the rank's scheduler figures with its heartbeats, rank 1 is named with its host, and
  the job goes on on the spare from the step where it stopped, with no step lost.
* The computing stand-in ``tests/scripts/dploop.py`` (each step also sends 1 MiB to the barrier,
  its gradients): host 3's link shaped to 8 Mbit/s (:func:`tests.harness.hostfaults.shape_link`):
  rank 2's TCP send queue stays full, and it is named for its link; and the CPU quota through
  mpirun, where a sampler beside each rank writes its figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.execution.supervision.test_stragglerwatch import DPLOOP, _events, _steps, _until
from tests.harness.cli import mslaunch_argv
from tests.harness.faultstream import job_mark, rank_pids
from tests.harness.hostfaults import (
    CPU_ROOT,
    cgroup_v1_cpu,
    host_faults,
    shape_link,
    throttle_cpu,
    throttle_pids,
    unshape_link,
    unthrottle,
)
from tests.integration.test_multihost import cluster, cluster_yaml, need_mpirun, wait_nothing_left  # noqa: F401  (fixtures)

#: the trainer's steps in the replace test: a few before the quota, a few slow, the rest on the spare
TRAINER_STEPS = 24


def _stat(pid):
    """(parent pid, start time in clock ticks since boot) of a process on this machine (every
    namespace host shares its pid namespace)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19])


def _ticks_now():
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK")


class _Dploop:
    """A job of ``tests/scripts/dploop.py`` on the cluster, one rank per host, and the faults put on
    its hosts (host 2's CPU, host 3's link), all undone by :meth:`close`."""

    def __init__(self, c, tmp_path, np: int, *flags: str, payload: int = 0) -> None:
        self.c, self.mark = c, job_mark(tmp_path)
        self.job, self.stop = str(tmp_path / "job"), str(tmp_path / "stop")
        argv = mslaunch_argv(
            "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", str(np), "--master-port",
            "auto", "--log-dir", self.job, "--tee", "none", *flags, "--env", f"FAULT_STREAM_MARK={self.mark}",
            "--no-python", sys.executable, DPLOOP, "150000", self.stop, "100000", *([str(payload)] if payload else []),
        )  # fmt: skip
        env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.throttled = self.shaped = False

    def steps(self, attempt: int = 0) -> int:
        return _steps(os.path.join(self.job, f"attempt_{attempt}" if attempt else "", "worker_0.log"))

    def stragglers(self):
        return [e for e in _events(self.job) if e["kind"] == "straggler"]

    def slow_rank_1(self) -> None:
        """Host 2 under a 3 % CPU quota: its sshd's group, and attempt 0's rank 1 moved in by its pid."""
        group = throttle_cpu(self.c, 1, quota_us=3000)
        self.throttled = True
        throttle_pids(os.path.relpath(group, CPU_ROOT), [rank_pids(self.mark)[("0", 1)]], quota_us=3000)

    def slow_rank_1_until_named(self) -> None:
        """After 20 healthy steps that name nobody, :meth:`slow_rank_1`, then wait until a rank is named."""
        _until("20 steps", lambda: self.steps() >= 20)
        assert self.stragglers() == []
        self.slow_rank_1()
        _until("rank 1 named", self.stragglers)

    def unslow(self) -> None:
        unthrottle(self.c, 1)
        self.throttled = False

    def shape(self, on: bool) -> None:
        (shape_link if on else unshape_link)(self.c, 2)
        self.shaped = on

    def finish(self) -> str:
        """Tell the job to end; its stderr once it did."""
        with open(self.stop, "w"):
            pass
        return self.proc.communicate(timeout=120)[1]

    def close(self) -> None:
        if self.throttled:
            self.unslow()
        if self.shaped:
            self.shape(False)
        with open(self.stop, "w"):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.netns
@pytest.mark.cost(20)
def test_a_host_whose_link_is_shaped_is_named_for_its_link_over_ssh(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    """Host 3's link shaped to 8 Mbit/s once the ranks step: rank 2's TCP send queues stay full and
    it is named for its link (its CPU share says nothing: it waits on the link, not for a CPU).
    (A host under a CPU quota over ssh: the trainer's test below; named, then cleared: the local
    test in tests/execution/supervision/test_stragglerwatch.py.)"""
    c = cluster
    j = _Dploop(c, tmp_path, 3, "--straggler", "warn:6", payload=1 << 20)
    try:
        _until("20 steps", lambda: j.steps() >= 20)
        assert j.stragglers() == []
        j.shape(True)
        _until("rank 2 named", lambda: [e for e in j.stragglers() if e["by"] == "link" and not e["cleared"]])
        j.shape(False)
        err = j.finish()
    finally:
        j.close()
    link = j.stragglers()[0]
    ip2 = c.hosts[2].ip
    assert (link["rank"], link["host"], link["cleared"], link["by"]) == (2, ip2, False, "link"), link
    assert link["evidence"].startswith(f"rank 2 on {ip2} kept ") and "TCP send queues" in link["evidence"], link
    assert j.proc.returncode == 0, err
    with open(os.path.join(j.job, "summary.json")) as fh:
        rows = json.load(fh)["stragglers"]
    assert [(s["rank"], s["host"], s["by"]) for s in rows][:1] == [(2, ip2, "link")], rows
    # the host's agent measured the kernel's busy time too: the shaped link was never idle
    assert rows[0]["link_busy"] >= 0.8 and "its busiest connection sending" in rows[0]["evidence"], rows
    assert wait_nothing_left(c) == {}


@pytest.mark.netns
@pytest.mark.mindspore
@pytest.mark.cost(40)  # 29-32 s alone; 43-49 s beside four busy loops on the 2 cores (its hosts favored)
def test_replace_leaves_the_slow_host_out_for_the_spare_at_the_trainers_next_step_with_no_step_lost(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    """``--straggler replace`` with real MindSpore: the reference trainer (ResNet-8 on 16x16, data parallel,
    24 steps: under the quota they leave the watch time to name the slow host before the end)
    on hosts 1-2, host 3 spare, checkpoints only on SIGTERM (``--ckpt-every`` past the end); host 2
    under a CPU quota once the ranks step: rank 1 is named, the attempt ends ``planned`` (the ranks
    told so: they save at their step's end), and the next attempt runs rank 1 on host 3 at once,
    with ``--max-restarts 0`` (a planned restart is not one), resuming at the step the first
    stopped at, to the end of the job."""
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c, mark = cluster, job_mark(tmp_path)
    data, job = tmp_path / "data", tmp_path / "job"
    subprocess.run(
        [sys.executable, "-m", "launcher.workloads.cifar10_synth", str(data), "--train", "400", "--test", "16"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    argv = mslaunch_argv(
        "run", "--hosts", cluster_yaml(c, tmp_path / "inv.yaml", slots=1), "--np", "2", "--master-port", "auto",
        "--log-dir", str(job), "--tee", "none", "--grace", "60", "--max-restarts", "0", "--straggler", "replace:4",
        "--env", f"FAULT_STREAM_MARK={mark}", "--env", "GLOG_v=3",
        "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet8", "--data-path", str(data),
        "--image-size", "16", "--batch-size", "4", "--steps-per-epoch", str(TRAINER_STEPS), "--epochs", "1",
        "--workers", "1", "--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-every", "1000",
    )  # fmt: skip
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    # the hosts favored (their sshd's groups get a high CPU weight): the ranks compute as on cores
    # of their own, so the quota'd rank stands out beside the suite's other work (without, the fast
    # rank waited for CPU 66-80 % of its time beside busy loops, and the watch took longer)
    with host_faults(c, favored=(0, 1, 2)):
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
        )
        throttled = False
        try:
            _until("2 steps", lambda: _steps(str(job / "worker_0.log")) >= 2 or proc.poll() is not None, 240)
            group = throttle_cpu(c, 1, quota_us=10000)  # 10 %: a step of the slow job takes seconds, not minutes
            throttled = True
            pids = rank_pids(mark, str(job))
            throttle_pids(os.path.relpath(group, CPU_ROOT), [pids[("0", 1)]], quota_us=10000)
            throttled_at, zygote = _ticks_now(), _stat(pids[("0", 0)])[0]
            _until(
                "attempt 1 stepping", lambda: _steps(str(job / "attempt_1" / "worker_0.log")) or proc.poll() is not None
            )
            # the restart forked its ranks from warm zygotes: host 1's, kept with its agent from attempt 0,
            # and the spare's, started (with its agent) when the job started, before any fault
            pids = rank_pids(mark, str(job))
            forked = {r: _stat(pids[("1", r)])[0] for r in (0, 1)}
            assert forked[0] == zygote
            assert _stat(forked[1])[1] < throttled_at
            unthrottle(c, 1)
            throttled = False
            _, err = proc.communicate(timeout=240)
        finally:
            if throttled:
                unthrottle(c, 1)
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    ip = [h.ip for h in c.hosts]
    evs = _events(str(job))
    named = next(e for e in evs if e["kind"] == "straggler")
    assert (named["rank"], named["host"], named["by"]) == (1, ip[1], "cpu"), named
    kinds = [e["kind"] for e in evs]
    assert (
        kinds.index("straggler")
        < kinds.index("planned_restart")
        < kinds.index("host_excluded")
        < kinds.index("restart")
    )
    excluded = next(e for e in evs if e["kind"] == "host_excluded")
    assert excluded["host"] == ip[1] and excluded["reason"] == f"straggler: {named['evidence']}", excluded
    assert "planned restart: leaving out " + ip[1] in err, err[-3000:]
    s = json.loads((job / "summary.json").read_text())
    first, second = s["attempt_results"]
    assert (first["status"], first["leave_out"][0]["host"], second["status"]) == ("planned", ip[1], "succeeded")
    assert (job / "stopping").read_text() == "planned\n"  # what the ranks were told: save, no fault
    assert sorted(p["host"] for p in second["processes"] if p["rank"] is not None) == [ip[0], ip[2]]
    assert s["stragglers"][0]["replaced"] is True
    # no step lost: both ranks saved at the step the attempt stopped at, and the spare resumed there
    stopped_at = first["best_step"]
    for rank in (0, 1):
        assert "preempted: checkpoint saved in " in (job / f"worker_{rank}.log").read_text(errors="replace")
        log = (job / "attempt_1" / f"worker_{rank}.log").read_text(errors="replace")
        assert f"(global step {stopped_at}); continuing at epoch 1 step {stopped_at + 1}" in log, log[-2000:]
    assert (second["resumed_from_step"], second["steps_lost"], second["best_step"]) == (stopped_at, 0, TRAINER_STEPS)
    assert 2 <= stopped_at < TRAINER_STEPS, first
    assert wait_nothing_left(c) == {}


@pytest.mark.netns
@pytest.mark.mpi
@pytest.mark.cost(20)
def test_a_host_under_a_cpu_quota_is_named_through_mpirun(cluster, tmp_path, need_mpirun):  # noqa: F811  (pytest's fixtures, imported above)
    """The same slow host with ``--launcher mpirun``: mslaunch starts no agent there; each rank's
    wrapper starts a sampler beside it (``rank-figures/``), and the watch names rank 1 with its host
    from those figures."""
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c = cluster
    j = _Dploop(c, tmp_path, 2, "--launcher", "mpirun", "--nic", str(c.subnet), "--straggler", "warn:6")
    try:
        j.slow_rank_1_until_named()
        j.unslow()
        err = j.finish()
    finally:
        j.close()
    named = j.stragglers()[0]
    ip1 = c.hosts[1].ip
    assert (named["rank"], named["host"], named["by"], named["cleared"]) == (1, ip1, "cpu", False), named
    assert named["evidence"].startswith(f"rank 1 on {ip1} waited for CPU "), named
    assert sorted(os.listdir(os.path.join(j.job, "rank-figures"))) == ["rank0", "rank1"]
    assert j.proc.returncode == 0, err
    assert wait_nothing_left(c) == {}
