"""Multi-host jobs on a real cluster: 3 network namespaces, each with its own sshd (see
``tests/netns_cluster.py``).  mslaunch runs in the root namespace, the "launching machine".

Every test asserts that nothing it started is left in any namespace afterwards.  Ranks are the
stand-in ``tests/scripts/rankprog.py`` (or ``sh``), except for one MindSpore AllReduce over ssh and
one through mpirun.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from typing import Dict, List

import pytest

from launcher.execution.checks.cpu import cache_path, read_cached
from tests.harness.ci import skip_or_fail
from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.netns_cluster import NamespaceCluster

pytestmark = pytest.mark.netns

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")


def netns_inode(c: NamespaceCluster, host) -> int:
    return os.stat(f"/run/netns/{c.host(host).netns}").st_ino


def wait_nothing_left(c: NamespaceCluster, within: float = 10.0) -> Dict[str, List[int]]:
    deadline = time.monotonic() + within
    while True:
        left = c.all_pids()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.fixture
def cluster(netns_cluster):
    """The shared cluster; afterwards every namespace must be empty (else it is reset and the test fails)."""
    c = netns_cluster
    assert c.all_pids() == {}, "a previous test left processes behind"
    yield c
    left = wait_nothing_left(c, 15.0)
    if left:
        c.reset()
        pytest.fail(f"processes left in the namespaces: {left}")


class MJob:
    """One ``mslaunch run`` against the cluster, from ``tmp_path``."""

    def __init__(self, tmp_path, c: NamespaceCluster) -> None:
        self.c = c
        self.tmp = tmp_path
        self.dir = tmp_path / "job"
        self.pids = tmp_path / "pids"
        self.pids.mkdir()
        self.env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
        self.env.pop("PYTHONUNBUFFERED", None)

    def args(self, *args, hosts=None, extra=(), program=None):
        """The CLI's arguments of ``mslaunch run`` of this job on the cluster."""
        return [
            "run",
            "--hosts",
            hosts or self.c.inventory_yaml,
            "--master-port",
            "auto",
            "--log-dir",
            str(self.dir),
            "--grace",
            "2",
            "--env",
            f"PIDDIR={self.pids}",
            *extra,
            *(program or [PROG]),
            *args,
        ]

    def run(self, *args, timeout=120, **kw):
        return run_process(*self.args(*args, **kw), env=self.env, cwd=str(self.tmp), timeout=timeout)

    def popen(self, *args, **kw):
        return subprocess.Popen(
            mslaunch_argv(*self.args(*args, **kw)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=str(self.tmp),
        )

    def summary(self):
        return json.loads((self.dir / "summary.json").read_text())

    def log(self, name: str) -> str:
        return (self.dir / name).read_text(errors="replace")

    def wait_started(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len([f for f in os.listdir(self.pids) if f.endswith(".pids")]) < n:
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.05)


@pytest.fixture
def job(tmp_path, cluster):
    return MJob(tmp_path, cluster)


def started_netns(text: str) -> int:
    m = re.search(r"started pid=\d+ netns=(\d+)", text)
    assert m, text
    return int(m.group(1))


def cluster_yaml(c: NamespaceCluster, path, slots: int = 2, extra: str = "", per_host=None) -> str:
    """A YAML inventory of the cluster; ``per_host(i)`` adds lines to host i's entry."""
    lines = ["defaults:", f"  slots: {slots}", f'  ssh: {{user: root, port: 22, key: "{c.key_path}"}}', extra, "hosts:"]
    for i, h in enumerate(c.hosts):
        lines.append(f"  - host: {h.ip}")
        if per_host is not None:
            lines += [f"    {line}" for line in per_host(i)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# ------------------------------------------------------------------------------------ success


def test_ranks_run_on_their_hosts_with_env_cwd_and_logs(job):
    c = job.c
    r = job.run("env")
    assert r.returncode == 0, r.stderr
    s = job.summary()
    assert s["status"] == "succeeded"
    plan = json.loads((job.dir / "plan.json").read_text())
    assert plan["launcher"] == "ssh" and plan["master_addr"] == c.hosts[0].ip
    hosts = [h.ip for h in c.hosts]
    assert [p["host"] for p in s["processes"]] == [hosts[0]] + [hosts[i // 2] for i in range(6)]
    assert started_netns(job.log("scheduler.log")) == netns_inode(c, 0)
    for rank in range(6):
        text = job.log(f"worker_{rank}.log")
        assert started_netns(text) == netns_inode(c, rank // 2), f"rank {rank} ran on the wrong host"
        lines = text.splitlines()
        assert f"RANK_ID={rank}" in lines and f"MS_SCHED_HOST={hosts[0]}" in lines and f"cwd={job.tmp}" in lines
        assert s["processes"][rank + 1]["pid"] is not None
    # the private key appears nowhere: job files, console
    key_body = "".join(open(c.key_path).read().splitlines()[1:-1])
    assert len(key_body) > 100
    for root, _, files in os.walk(job.dir):
        for name in files:
            assert key_body[:40] not in open(os.path.join(root, name), errors="replace").read(), name
    assert key_body[:40] not in r.stdout + r.stderr
    assert wait_nothing_left(c) == {}


def test_detached_job_logs_tail_follows_remote_ranks(job):
    r = run_process(*job.args("ok", "1.5", extra=("--detach",)), env=job.env, cwd=str(job.tmp), timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    tail = run_process("logs", "tail", job_id, "-f", env=job.env, cwd=str(job.tmp), timeout=60)
    assert tail.returncode == 0, tail.stderr
    for rank in range(6):
        assert f"[rank {rank}] rank{rank} done" in tail.stdout.splitlines()
    assert job.summary()["status"] == "succeeded"
    assert wait_nothing_left(job.c) == {}


# ------------------------------------------------------------------------------------ faults


def test_rank_on_host2_exits_3_tears_down_every_host(job):
    c = job.c
    r = job.run("fail", "1.0", "3", "3")
    assert r.returncode == 3, r.stderr
    s = job.summary()
    cause = s["root_cause"]
    assert (cause["name"], cause["rank"], cause["host"], cause["exit_code"]) == ("rank 3", 3, c.hosts[1].ip, 3)
    assert cause["tail"][-1] == "RuntimeError: rank3 fails with 3"
    assert f"root cause: rank 3 on {c.hosts[1].ip}: exit code 3" in r.stderr
    assert all(p["torn_down"] for p in s["processes"] if p["name"] != "rank 3")
    assert wait_nothing_left(c, 5.0) == {}


def test_link_cut_to_host3_tears_down_and_names_it(job):
    c = job.c
    p = job.popen("hang")
    try:
        job.wait_started(7)
        t0 = time.monotonic()
        c.cut_link(2)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 255, err
        cause = job.summary()["root_cause"]
        assert cause["host"] == c.hosts[2].ip and cause["rank"] in (4, 5)
        assert cause["reason"].startswith(f"connection to {c.hosts[2].ip} lost")
        assert cause["cause"]["kind"] == "lost_host"
        assert cause["cause"]["evidence"].startswith(
            f"rank {cause['rank']} on {c.hosts[2].ip}: connection to {c.hosts[2].ip} lost"
        )
        assert f"failed: connection to {c.hosts[2].ip} lost" in err
        assert 4.0 < took < 20.0
        assert wait_nothing_left(c, 20.0) == {}  # host 3 cleaned itself up behind the cut
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        c.restore_link(2)


def test_sigint_tears_down_every_host(job):
    p = job.popen("hang")
    job.wait_started(7)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert job.summary()["status"] == "stopped"
    assert wait_nothing_left(job.c, 10.0) == {}


def test_mslaunch_killed_leaves_nothing_on_any_host(job):
    p = job.popen("hang")
    job.wait_started(7)
    p.kill()
    p.wait(timeout=10)
    assert wait_nothing_left(job.c, 15.0) == {}  # agents see their stdin close and end their ranks


def test_unreachable_host_is_named_and_nothing_starts(job):
    c = job.c
    c.stop_sshd(2)
    try:
        r = job.run("ok")
        assert r.returncode == 1
        assert (
            f"cannot connect to 1 of 3 host(s): {c.hosts[2].ip}: connection refused by {c.hosts[2].ip}:22 (is sshd "
            "running there?)" in r.stderr
        )
        assert os.listdir(job.pids) == []
        assert job.summary()["status"] == "failed" and job.summary()["exit_code"] == 1
    finally:
        c.start_sshd(2)


def test_missing_python_on_a_host_is_a_clear_failure(job, tmp_path):
    c = job.c
    inv = cluster_yaml(c, tmp_path / "nopy.yaml", per_host=lambda i: ["python: /no/such/python3"] if i == 2 else [])
    r = job.run("hang", hosts=inv)
    assert r.returncode == 127, r.stderr
    cause = job.summary()["root_cause"]
    assert cause["host"] == c.hosts[2].ip and cause["rank"] in (4, 5)
    assert cause["reason"].startswith(f"the mslaunch agent on {c.hosts[2].ip} exited with status 127: ")
    assert "/no/such/python3" in cause["reason"]
    assert (cause["cause"]["kind"], cause["cause"]["hint"]) == (
        "missing_file",
        f"/no/such/python3 is not on {c.hosts[2].ip}: install that Python there, or set --python to one that is",
    )
    assert wait_nothing_left(c) == {}


# ------------------------------------------------------------------------------------ security


def test_shell_metacharacters_in_env_args_and_paths_arrive_literally(job):
    c = job.c
    marker = f"/tmp/mslaunch-pwned-{uuid.uuid4().hex}"
    evil = f"$(touch {marker}1); `touch {marker}2`; 'single' \"double\" two  spaces \\ $HOME"
    rel = f"mslaunch-pwned-{uuid.uuid4().hex}"  # paths cannot hold '/': these would land in a shell's cwd
    folder = job.tmp / f"we ird;$(touch {rel}3)'q\"dir"
    folder.mkdir()
    script = folder / f"r ank;$(touch {rel}4).py"
    shutil.copy(PROG, script)
    env = dict(job.env)
    proc = run_process(
        "run",
        "--hosts",
        c.inventory_yaml,
        "--master-port",
        "auto",
        "--log-dir",
        str(job.dir),
        "--env",
        f"PIDDIR={job.pids}",
        "--env",
        f"EVIL={evil}",
        str(script),
        "env",
        "0",
        "0",
        "0",
        evil,
        "a;b",
        "c d",
        env=env,
        cwd=str(folder),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for rank in range(6):
        lines = job.log(f"worker_{rank}.log").splitlines()
        assert f"EVIL={evil}" in lines
        assert f"cwd={folder}" in lines
        assert "argv=" + json.dumps(["env", "0", "0", "0", evil, "a;b", "c d"]) in lines
    for i in (1, 2):
        assert not os.path.exists(f"{marker}{i}")
    for where in (job.tmp, folder, os.path.expanduser("~"), "/"):
        assert not [n for n in os.listdir(where) if n.startswith(rel)], where
    assert wait_nothing_left(c) == {}


def test_unknown_host_key_is_refused_unless_accept_new(job, tmp_path):
    c = job.c
    known = tmp_path / "fresh_known_hosts"
    config = tmp_path / "ssh_config"
    config.write_text(open(c.ssh_config).read().replace(c.known_hosts, str(known)))
    r = job.run("ok", "0.1", extra=("--ssh-config", str(config)))
    assert r.returncode == 1
    for h in c.hosts:
        assert f"host key for {h.ip} is not known (ssh-ed25519 SHA256:" in r.stderr
    assert f"(ssh-keyscan {c.hosts[0].ip} >> {known}) or pass --ssh-accept-new" in r.stderr
    assert "Traceback" not in r.stderr and not known.exists() and os.listdir(job.pids) == []
    assert job.summary()["status"] == "failed" and "is not known" in job.summary()["message"]
    shutil.rmtree(job.dir)  # the refused run left its job dir (with a failed summary.json)
    r = job.run("ok", "0.1", extra=("--ssh-config", str(config), "--ssh-accept-new"))
    assert r.returncode == 0, r.stderr
    recorded = sorted(known.read_text().splitlines())
    expected = sorted(
        f"{h.ip} {line.split()[1]} {line.split()[2]}"
        for h, line in zip(c.hosts, open(c.known_hosts).read().splitlines())
    )
    assert recorded == expected  # the hosts' real keys, once each
    shutil.rmtree(job.dir)
    r = job.run("ok", "0.1", extra=("--ssh-config", str(config)))  # now known: no flag needed
    assert r.returncode == 0, r.stderr
    assert wait_nothing_left(c) == {}


# ------------------------------------------------------------------------------------ methods


def test_rank_table_job_finds_its_table_on_every_host(job, tmp_path):
    c = job.c
    inv = cluster_yaml(
        c,
        tmp_path / "rt.yaml",
        slots=8,
        per_host=lambda i: ["device_ips: {" + ", ".join(f"{d}: 192.0.2.{i * 8 + d + 1}" for d in range(8)) + "}"],
    )
    program = [
        "--no-python",
        "/bin/sh",
        "-c",
        'echo "table $(cksum < "$RANK_TABLE_FILE") cwd $(pwd) netns $(stat -L -c %i /proc/self/ns/net)"',
    ]
    r = job.run(hosts=inv, extra=("--method", "ranktable"), program=program)
    assert r.returncode == 0, r.stderr
    table = job.dir / "rank_table.json"
    want = subprocess.run(["cksum"], stdin=open(table), capture_output=True, text=True).stdout.strip()
    servers = json.loads(table.read_text())["server_list"]
    assert [s["server_id"] for s in servers] == [h.ip for h in c.hosts]
    for rank in range(24):
        line = job.log(f"worker_{rank}.log").strip()
        assert line == f"table {want} cwd {job.dir}/device{rank} netns {netns_inode(c, rank // 8)}"
        dump = (job.dir / f"device{rank}" / f"env{rank}.log").read_text().splitlines()
        assert f"RANK_ID={rank}" in dump and f"RANK_TABLE_FILE={table}" in dump
    assert wait_nothing_left(c) == {}


@pytest.fixture
def need_mpirun():
    if shutil.which("mpirun") is None:
        skip_or_fail(
            "mpirun not installed (apt-get install openmpi-bin)",
            "mpirun is missing in CI (make test installs openmpi-bin)",
        )


@pytest.mark.mpi
def test_mpirun_across_hosts_with_hostfile_and_per_host_env(job, tmp_path, need_mpirun):
    c = job.c
    inv = cluster_yaml(c, tmp_path / "mpi.yaml", per_host=lambda i: [f"env: {{HOST_TAG: \"h{i + 1} $(x) 'q'\"}}"])
    r = job.run(
        "env", hosts=inv, extra=("--launcher", "mpirun", "--method", "mpi", "--mpi-hostfile", "--nic", str(c.subnet))
    )
    assert r.returncode == 0, r.stderr + job.log("mpirun.log")
    plan = json.loads((job.dir / "plan.json").read_text())
    argv = plan["mpirun"]
    assert argv[argv.index("--hostfile") + 1] == str(job.dir / "hostfile")
    assert (
        argv[argv.index("plm_rsh_agent") + 1] == f"ssh -F {c.ssh_config} -p 22 -i {c.key_path} -l root -o BatchMode=yes"
    )
    assert (job.dir / "hostfile").read_text() == "".join(f"{h.ip} slots=2\n" for h in c.hosts)
    for rank in range(6):
        text = job.log(f"worker_{rank}.log")
        assert started_netns(text) == netns_inode(c, rank // 2)
        lines = text.splitlines()
        assert f"HOST_TAG=h{rank // 2 + 1} $(x) 'q'" in lines and f"RANK_ID={rank}" in lines
    assert wait_nothing_left(c) == {}


# ------------------------------------------------------------------------------------ doctor


def doctor(job, *args, hosts=None):
    r = run_process(
        "doctor", "--json", "--hosts", hosts or job.c.inventory_yaml, *args, env=job.env, cwd=str(job.tmp), timeout=300
    )
    return r, (json.loads(r.stdout) if r.stdout.startswith("{") else None)


@pytest.mark.cost(20)  # measured alone (8-10 s), x2
def test_doctor_all_good(job):
    c = job.c
    # host 1's CPU probe, run over its SSH connection; hosts 2 and 3 are namespaces of this machine
    # (the same CPU, interpreter and MindSpore: the same cache key), so they take that result from
    # the cache under their own names, as hosts probed before do: a probe costs about 8 CPU-seconds
    one = job.tmp / "host1.yaml"
    cluster_yaml(c, one)
    host1 = f"  - host: {c.hosts[0].ip}\n"
    one.write_text("".join(x for x in one.read_text().splitlines(True) if "- host:" not in x or x == host1))
    r, out = doctor(job, "-m", "launcher.workloads.allreduce_smoke", hosts=str(one))
    assert r.returncode == 0, r.stdout + r.stderr
    (probe,) = [h["cpu"] for h in out["hosts"]]
    assert probe["probed"] and probe["variants"][0]["kernels"]["conv"]["impl"], probe
    cached = probe["note"].rpartition("cached in ")[2]
    hit, home = read_cached(cached), os.path.dirname(os.path.dirname(cached))
    assert hit is not None and cached == cache_path(home, c.hosts[0].ip, hit.key), probe["note"]
    for h in c.hosts[1:]:
        shutil.copyfile(cached, cache_path(home, h.ip, hit.key))
    r, out = doctor(job, "-m", "launcher.workloads.allreduce_smoke")
    assert r.returncode == 0, r.stdout + r.stderr
    assert out["ok"] and [h["host"] for h in out["hosts"]] == [h.ip for h in job.c.hosts]
    first = out["hosts"][0]["checks"]
    assert {k: v["ok"] for k, v in first.items()} == {
        "ssh": True,
        "python": True,
        "mindspore": True,
        "workload": True,
        "master port": True,
        "clock": True,
        "hccn.conf": None,
        "mpirun": None,
    }
    # a MindSpore program: every host's CPU probe, from the cache where its key matches
    assert all(h["cpu"]["probed"] and h["cpu"]["variants"][0]["kernels"]["conv"]["impl"] for h in out["hosts"]), out[
        "hosts"
    ]
    assert [h["cpu"]["cached"] for h in out["hosts"]] == [True] * 3, out["hosts"]
    table = run_process("doctor", "--hosts", job.c.inventory_yaml, PROG, env=job.env, cwd=str(job.tmp), timeout=120)
    assert table.returncode == 0 and "all 3 host(s) ok" in table.stdout and "✓" in table.stdout


def test_doctor_reports_no_sshd_other_python_and_busy_port(job, tmp_path):
    c = job.c
    inv = cluster_yaml(c, tmp_path / "doc.yaml", per_host=lambda i: ["python: /usr/bin/python3"] if i == 1 else [])
    port = 20000 + os.getpid() % 20000
    listener = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            c.hosts[0].netns,
            sys.executable,
            "-c",
            f"import socket,time;s=socket.socket();s.bind(('0.0.0.0',{port}));s.listen();print('up',flush=True);time.sleep(120)",  # noqa: E501 - kept whole: a literal line as the program sees it
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    c.stop_sshd(2)
    try:
        assert listener.stdout.readline().strip() == "up"
        r, out = doctor(job, "--master-port", str(port), PROG, hosts=inv)
        assert r.returncode == 1, r.stdout + r.stderr
        h1, h2, h3 = (h["checks"] for h in out["hosts"])
        assert h1["master port"]["ok"] is False and f"{port} in use on {c.hosts[0].ip}" in h1["master port"]["detail"]
        assert h1["python"]["ok"] and h3["python"]["ok"] is None
        assert h2["python"]["ok"] is False and re.fullmatch(
            r"3\.\d+\.\d+ differs from 3\.\d+\.\d+ \(.*\)", h2["python"]["detail"]
        )
        assert h3["ssh"] == {
            "ok": False,
            "detail": f"connection refused by {c.hosts[2].ip}:22 (is sshd running there?)",
        }
        assert [h["ok"] for h in out["hosts"]] == [False, False, False]
    finally:
        c.start_sshd(2)
        listener.kill()
        listener.wait()


# ------------------------------------------------------------------------------------ ranktable gen --collect


def test_ranktable_gen_collects_hccn_conf_over_ssh(make_netns_cluster, tmp_path):
    # 'ip netns exec' (which starts each sshd) bind-mounts /etc/netns/<netns>/F over an existing
    # /etc/F: an empty placeholder of our own in /etc, a different file in each host.
    prefix = f"mslc{os.getpid() % 100000}"
    name = f"mslaunch-test-hccn-{os.getpid()}.conf"
    placeholder = os.path.join("/etc", name)
    made = []
    netns_etc = "/etc/netns"
    own_etc = not os.path.exists(netns_etc)
    try:
        open(placeholder, "x").close()
        for i in (1, 2):
            folder = f"/etc/netns/{prefix}h{i}"
            os.makedirs(folder)
            made.append(folder)
            with open(os.path.join(folder, name), "w") as fh:
                fh.write("".join(f"address_{d}=192.0.2.{i * 10 + d}\nnetmask_{d}=255.255.255.0\n" for d in range(8)))
        c = make_netns_cluster(2, prefix=prefix)
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h.ip} slots=8\n" for h in c.hosts))
        base = ("ranktable", "gen", "--hosts", str(hostfile), "--ssh-config", c.ssh_config)
        r = run_process(*base, "--collect", "--hccn-path", placeholder, timeout=60)
        assert r.returncode == 0, r.stderr
        table = json.loads(r.stdout)
        assert [[d["device_ip"] for d in s["device"]] for s in table["server_list"]] == [
            [f"192.0.2.{i * 10 + d}" for d in range(8)] for i in (1, 2)
        ]
        r = run_process(*base, "--collect", "--hccn-path", "/etc/no-such-hccn.conf", timeout=60)
        assert r.returncode == 1
        assert "cannot collect /etc/no-such-hccn.conf from 2 of 2 host(s)" in r.stderr
        assert f"/etc/no-such-hccn.conf does not exist on {c.hosts[0].ip}" in r.stderr
        assert c.all_pids() == {}
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        if os.path.exists(placeholder):
            os.unlink(placeholder)
        if own_etc and os.path.isdir(netns_etc) and not os.listdir(netns_etc):
            os.rmdir(netns_etc)


# ------------------------------------------------------------------------------------ MindSpore


def allreduce_sums(job, n: int) -> Dict[int, float]:
    out = {}
    for rank in range(n):
        m = re.search(r"^mslaunch-allreduce rank=(\d+) sum=([\d.]+)$", job.log(f"worker_{rank}.log"), re.M)
        assert m and int(m.group(1)) == rank, job.log(f"worker_{rank}.log")[-2000:]
        out[rank] = float(m.group(2))
    return out


@pytest.mark.mindspore
@pytest.mark.mpi
@pytest.mark.cost(42)  # measured alone (14-30 s, 21 s typical), x2
def test_allreduce_through_mpirun_across_hosts(job, tmp_path, need_mpirun):
    """MindSpore's AllReduce with the ranks mpirun started on the three hosts: one worker on each
    of the first two, two on the third (one app context of two processes, each its own rank and
    MindSpore node id).  Two ranks on every host, each with its own RANK_ID on its own host
    through mpirun, is test_mpirun_across_hosts_with_hostfile_and_per_host_env's (stand-in ranks)."""
    c = job.c
    inv = cluster_yaml(c, tmp_path / "mpi-ms.yaml", slots=1, per_host=lambda i: ["slots: 2"] if i == 2 else [])
    r = job.run(
        hosts=inv,
        extra=("--launcher", "mpirun", "--nic", str(c.subnet)),
        program=["-m", "launcher.workloads.allreduce_smoke"],
        timeout=300,
    )
    assert r.returncode == 0, r.stderr + job.log("mpirun.log")[-3000:]
    assert allreduce_sums(job, 4) == {rank: 10.0 for rank in range(4)}
    hosts = [h.ip for h in c.hosts]  # the scheduler on the first host, then the workers on theirs
    assert [p["host"] for p in job.summary()["processes"]] == [hosts[0], hosts[0], hosts[1], hosts[2], hosts[2]]
    argv = json.loads((job.dir / "plan.json").read_text())["mpirun"]
    assert argv.count(":") == 3  # the scheduler's context, then one per host
    assert wait_nothing_left(c) == {}


@pytest.mark.mindspore
@pytest.mark.cost(26)  # measured alone (12-15 s), x2
def test_check_passes_on_the_namespace_cluster(job):
    c = job.c
    r = run_process(
        "check",
        "--hosts",
        c.inventory_yaml,
        "--per-host",
        "1",
        "--master-port",
        "auto",
        "--log-dir",
        str(job.dir),
        env=job.env,
        cwd=str(job.tmp),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    hosts = ",".join(h.ip for h in c.hosts)
    assert r.stdout.splitlines()[0] == f"✓ 3 ranks on {hosts} (dynamic, ssh): AllGather gave [0,1,2] on every rank"
    s = job.summary()  # the scheduler runs on the first host, which the ranks are told of
    assert s["processes"][0]["name"] == "scheduler" and s["processes"][0]["host"] == c.hosts[0].ip
    assert json.loads((job.dir / "plan.json").read_text())["master_addr"] == c.hosts[0].ip
    assert wait_nothing_left(c) == {}
