"""Slow hosts found while the job runs over ssh: 3 ranks of the computing stand-in
``tests/scripts/dploop.py`` (each step also sends 1 MiB to the barrier, its gradients), one per
namespace host, in one job: mid-job host 2 is put under a CPU quota
(:func:`tests.harness.hostfaults.throttle_cpu`: its sshd's group, so what starts there later; the
rank already running there is moved into the group by its pid); the host's agent sends the rank's
scheduler figures with its heartbeats, and the straggler event names rank 1 with that host, then
clears it once the quota is gone.  Then host 3's link is shaped to 8 Mbit/s
(:func:`tests.harness.hostfaults.shape_link`): rank 2's TCP send queue stays full, and it is named
for its link."""

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
    shape_link,
    throttle_cpu,
    throttle_pids,
    unshape_link,
    unthrottle,
)
from tests.integration.test_multihost import cluster, cluster_yaml, need_mpirun, wait_nothing_left  # noqa: F401  (fixtures)


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
@pytest.mark.cost(25)
def test_a_host_under_a_cpu_quota_then_a_shaped_link_are_named_over_ssh(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c = cluster
    j = _Dploop(c, tmp_path, 3, "--straggler", "warn:6", payload=1 << 20)
    try:
        j.slow_rank_1_until_named()
        j.unslow()
        _until("rank 1 cleared", lambda: [e for e in j.stragglers() if e["cleared"]])
        j.shape(True)
        _until("rank 2 named", lambda: [e for e in j.stragglers() if e["by"] == "link" and not e["cleared"]])
        j.shape(False)
        err = j.finish()
    finally:
        j.close()
    seen = j.stragglers()
    assert [(e["rank"], e["by"], e["cleared"]) for e in seen][:3] == [
        (1, "cpu", False),
        (1, "cpu", True),
        (2, "link", False),
    ], seen
    cpu, cleared, link = seen[:3]
    ip1, ip2 = c.hosts[1].ip, c.hosts[2].ip
    assert (cpu["rank"], cpu["host"], cpu["cleared"]) == (1, ip1, False), cpu
    assert cpu["evidence"].startswith(f"rank 1 on {ip1} waited for CPU "), cpu
    assert (cleared["rank"], cleared["cleared"]) == (1, True), cleared
    assert (link["rank"], link["host"], link["cleared"], link["by"]) == (2, ip2, False, "link"), link
    assert link["evidence"].startswith(f"rank 2 on {ip2} kept ") and "TCP send queues" in link["evidence"], link
    assert j.proc.returncode == 0, err
    with open(os.path.join(j.job, "summary.json")) as fh:
        rows = json.load(fh)["stragglers"]
    assert [(s["rank"], s["host"], s["by"]) for s in rows][:2] == [(1, ip1, "cpu"), (2, ip2, "link")], rows
    assert wait_nothing_left(c) == {}


@pytest.mark.netns
@pytest.mark.cost(20)
def test_replace_leaves_the_slow_host_out_at_once_for_the_spare(cluster, tmp_path):  # noqa: F811  (pytest's fixture, imported above)
    """``--straggler replace``: 2 ranks on hosts 1-2, host 3 spare; host 2 under a CPU quota: rank
    1 is named, the attempt ends ``planned`` (the ranks told so, then torn down), and the next runs
    rank 1 on host 3 at once, with ``--max-restarts 0`` (a planned restart is not one)."""
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    c = cluster
    j = _Dploop(c, tmp_path, 2, "--grace", "3", "--straggler", "replace:6")
    try:
        _until("20 steps", lambda: j.steps() >= 20)
        j.slow_rank_1()
        _until("attempt 1 stepping", lambda: j.steps(1) >= 5)
        j.unslow()
        err = j.finish()
    finally:
        j.close()
    assert j.proc.returncode == 0, err
    job = j.job
    ip = [h.ip for h in c.hosts]
    evs = _events(job)
    named = next(e for e in evs if e["kind"] == "straggler")
    assert (named["rank"], named["host"]) == (1, ip[1]), named
    kinds = [e["kind"] for e in evs]
    assert (
        kinds.index("straggler")
        < kinds.index("planned_restart")
        < kinds.index("host_excluded")
        < kinds.index("restart")
    )
    excluded = next(e for e in evs if e["kind"] == "host_excluded")
    assert excluded["host"] == ip[1] and excluded["reason"] == f"straggler: {named['evidence']}", excluded
    assert "planned restart: leaving out " + ip[1] in err, err
    with open(os.path.join(job, "summary.json")) as fh:
        s = json.load(fh)
    first, second = s["attempt_results"]
    assert (first["status"], first["leave_out"][0]["host"]) == ("planned", ip[1])
    with open(os.path.join(job, "stopping")) as fh:
        assert fh.read() == "planned\n"  # what the ranks were told: save, no fault
    assert sorted(p["host"] for p in second["processes"] if p["rank"] is not None) == [ip[0], ip[2]]
    assert s["stragglers"][0]["replaced"] is True
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
