"""The launcher's side of the host agent protocol: the typed config of a rank's start request,
the bootstrap payload, request lines, and the frame decoder."""

import json

import pytest

from launcher.execution.probes import host_cores
from launcher.execution.process import fastjoin, proctree
from launcher.execution.ssh import remote_agent, remote_link, remote_start, remote_zygote
from launcher.execution.ssh.agent import AgentConfig, FrameReader, agent_source, bootstrap_payload, op_line, split_lines
from launcher.execution.ssh.remote_link import HEADER
from launcher.planning.job.spec import ProcPlan


def proc(env_dump=None):
    return ProcPlan(
        name="rank 1",
        role="worker",
        host="h2",
        rank=1,
        local_rank=1,
        node_rank=0,
        device_id=1,
        argv=("python3", "train.py", "--lr", "0.1"),
        env=(("RANK_ID", "1"), ("A", "x y")),
        cwd="/j/job",
        log="/j/job/worker_1.log",
        env_dump=env_dump,
    )


@pytest.mark.parametrize(
    "cwd,mkdir",
    [
        ("/j/job", True),
        ("/j/job/attempt_1/device1", True),
        ("/j/job2", False),  # a sibling whose name starts like the job dir is not under it
        ("/home/u/project", False),
    ],
)
def test_the_agent_creates_cwd_only_under_the_job_dir(cwd, mkdir):
    assert AgentConfig.for_rank(proc(), cwd, "/j/job").mkdir is mkdir


def test_start_request_is_one_json_line_with_the_rank_config():
    cfg = AgentConfig.for_rank(proc(env_dump="/j/job/device1/env1.log"), "/j/job/attempt_1/device1", "/j/job")
    assert cfg.to_json() == {
        "argv": ["python3", "train.py", "--lr", "0.1"],
        "env": {"RANK_ID": "1", "A": "x y"},
        "cwd": "/j/job/attempt_1/device1",
        "mkdir": True,
        "env_dump": "/j/job/attempt_1/device1/env1.log",  # the dump goes to the attempt's rank dir
        "secrets": [],
    }
    line = cfg.start_op(7)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"op": "start", "id": 7, "cfg": cfg.to_json()}
    assert AgentConfig.for_rank(proc(), "/w", "/j/job").to_json()["env_dump"] is None
    # a secret's value travels in this request only (the ssh channel); its name tells the dump
    secret = AgentConfig.for_rank(proc(), "/w", "/j/job", frozenset({"A", "NOT_HERE"})).to_json()
    assert secret["env"]["A"] == "x y" and secret["secrets"] == ["A"]


def test_requests():
    assert json.loads(op_line("ping")) == {"op": "ping"}
    assert json.loads(op_line("term", 3)) == {"op": "term", "id": 3}
    assert json.loads(op_line("kill", None)) == {"op": "kill", "id": None}


def test_bootstrap_payload_is_a_length_line_then_the_source_and_settings():
    data = bootstrap_payload("h2", 8.0, 1.0)
    head, body = data.split(b"\n", 1)
    assert int(head) == len(body)
    first = json.loads(body)
    assert first == {"src": agent_source(), "cfg": {"host": "h2", "ping_timeout": 8.0, "heartbeat": 1.0}}
    sources = []
    for module in (proctree, host_cores, remote_link, fastjoin, remote_zygote, remote_start, remote_agent):
        with open(module.__file__, encoding="utf-8") as fh:
            sources.append(fh.read())
    assert first["src"] == "\n\n".join(sources)
    # the straggler watch's cadence, when the launcher asks for one
    cfg = json.loads(bootstrap_payload("h2", 8.0, 1.0, 0.75).split(b"\n", 1)[1])["cfg"]
    assert cfg == {"host": "h2", "ping_timeout": 8.0, "heartbeat": 1.0, "sched_every": 0.75}


def test_a_host_samples_twice_per_look_of_the_straggler_watch_within_bounds():
    from launcher.execution.ssh.settings import SAMPLE_EVERY, sample_every
    from launcher.planning.health.stragglers import StragglerPolicy

    assert [sample_every(StragglerPolicy.parse(f"warn:{w}").every) for w in (3, 6, 10, 30)] == [0.5, 0.5, 5 / 6, 2.0]
    assert sample_every(100.0) == SAMPLE_EVERY == 2.0 and sample_every(0.1) == 0.5


def test_the_agent_source_runs_without_the_launcher_package(tmp_path):
    """Sent to a host, the source must define everything itself (no ``launcher`` there)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['launcher'] = None\n"  # as on a host without mslaunch
        "g = {'__name__': 'mslaunch_agent'}\n"
        "exec(compile(sys.stdin.read(), 'mslaunch_agent', 'exec'), g)\n"
        "print(sorted(n for n in ('main', 'proc_table', 'tree_below', 'poll_fds', 'Outbox', 'Agent') if "
        "callable(g.get(n))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], input=agent_source(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['Agent',", "'Outbox',", "'main',", "'poll_fds',", "'proc_table',", "'tree_below']"]


def test_the_zygote_source_runs_without_the_launcher_package(tmp_path):
    """A host's zygote (``python -c <source> MODULE...``) defines what it uses itself: run with no
    ``launcher`` package and a cheap preload, it says it is ready, forks a child that runs a
    script into its log, and reports that child's exit status."""
    import subprocess
    import sys

    from launcher.execution.ssh.agent import zygote_source

    script, log = tmp_path / "s.py", tmp_path / "log"
    script.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\nsys.exit(7)\n")
    code = (
        "import sys; sys.modules['launcher'] = None\nexec(compile(" + repr(zygote_source()) + ", '<zygote>', 'exec'))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert "ready" in json.loads(proc.stdout.readline()), proc.stderr
        request = {"argv": [str(script), "a b"], "env": {}, "cwd": str(tmp_path), "log": str(log), "cpus": None}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        pid = json.loads(proc.stdout.readline())["pid"]
        assert json.loads(proc.stdout.readline()) == {"exit": pid, "status": 7}
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert log.read_text() == '["a b"]\n'


def test_frames_decode_across_any_split():
    stream = (
        HEADER.pack(b"M", 0, 14)
        + b'{"ev":"ready"}'
        + HEADER.pack(b"O", 5, 6)
        + b"a\nb\nc\n"
        + HEADER.pack(b"O", 5, 0)
        + HEADER.pack(b"M", 5, 3)
        + b"{x}"
        + HEADER.pack(b"M", 5, 23)
        + b'{"ev":"exit","rc":-9}  '
    )
    want = [
        ("M", 0, {"ev": "ready"}),
        ("O", 5, b"a\nb\nc\n"),
        ("O", 5, b""),
        ("M", 5, {"ev": "garbled"}),
        ("M", 5, {"ev": "exit", "rc": -9}),
    ]
    for step in (1, 2, 7, 9, 10, len(stream)):
        reader = FrameReader()
        got = []
        for i in range(0, len(stream), step):
            got += list(reader.feed(stream[i : i + step]))
        assert got == want, step
        assert reader.pending == 0


def test_split_lines_keeps_the_incomplete_rest():
    assert split_lines(b"one\ntwo\nthr") == (["one", "two"], b"thr")
    assert split_lines(b"") == ([], b"")


def test_exit_times_of_a_host_whose_clock_is_off_land_on_the_launchers_clock():
    """A host whose clock runs 100 s behind: its agent's exit times are moved onto this
    machine's clock by the least offset its time-stamped messages showed."""
    import time
    from types import SimpleNamespace

    from launcher.execution.ssh.hostagent import HostAgent, LogFiles

    agent = HostAgent(SimpleNamespace(name="h1"), "python3", None, LogFiles())  # type: ignore[arg-type]
    assert agent.local_time(1000.0) == 1000.0  # nothing heard yet: as the agent says
    now = time.time()
    agent._message(0, {"ev": "ready", "pid": 7, "time": now - 100.0})
    agent._message(0, {"ev": "hb", "time": now - 100.0 - 5.0})  # a late heartbeat: larger offset, ignored
    agent._message(0, {"ev": "hb"})  # an agent that sends no time: nothing changes
    assert agent.clock_offset is not None and 100.0 <= agent.clock_offset < 100.0 + 5
    assert abs(agent.local_time(now - 100.0 - 1.0) - (now - 1.0)) < 5
    assert agent.local_time("soon") is None


@pytest.mark.parametrize(
    "header", [HEADER.pack(b"X", 0, 3), HEADER.pack(b"O", 1, 0xFFFFFFF0)], ids=["unknown kind", "huge length"]
)
def test_a_stream_that_is_not_frames_is_an_error_not_a_huge_buffer(header):
    from launcher.execution.ssh.agent import FrameError

    reader = FrameReader()
    assert list(reader.feed(HEADER.pack(b"M", 0, 2) + b"{}")) == [("M", 0, {})]
    with pytest.raises(FrameError):
        list(reader.feed(header + b"abc"))


def test_a_garbled_agent_stream_ends_the_hosts_ranks_with_a_hint_and_closes_the_session():
    from types import SimpleNamespace

    from launcher.execution.ssh.hostagent import HostAgent, LogFiles
    from launcher.execution.ssh.remote_link import MAGIC

    agent = HostAgent(SimpleNamespace(name="h1"), "python3", None, LogFiles())  # type: ignore[arg-type]
    ended = []
    agent.handles[0] = SimpleNamespace(finish=lambda rc, reason=None: ended.append((rc, reason)))  # type: ignore[assignment]
    closed = []
    agent.chan = SimpleNamespace(close=lambda: closed.append(True))  # type: ignore[assignment]
    agent._stdout(MAGIC + HEADER.pack(b"M", 0, 2) + b"{}" + b"Welcome to h1! Last login: ...\n" * 4)
    assert len(ended) == 1 and ended[0][0] == 255
    assert "output from h1 is garbled" in ended[0][1] and "stdout after login" in ended[0][1]
    assert closed == [True] and agent.state == "ended"


def test_a_heartbeats_figures_reach_each_ranks_handle():
    """``sched`` of a heartbeat: each rank's [agent time, cpu s, delay s, send queued, busiest link s]
    becomes its handle's :meth:`sched_figures`; a heartbeat without it (between samples) changes
    nothing; an older agent's shorter list gets 0 bytes queued and an unknown (-1) busiest link."""
    from types import SimpleNamespace

    from launcher.execution.ssh.hostagent import HostAgent, LogFiles, SshProcess
    from launcher.planning.job.kinds import Role
    from launcher.planning.job.spec import ProcPlan

    agent = HostAgent(SimpleNamespace(name="h1"), "python3", None, LogFiles())  # type: ignore[arg-type]
    plans = [ProcPlan(f"rank {r}", Role.WORKER, "h1", r, 0, 0, None, ("x",), (), "/", "/dev/null") for r in (0, 1)]
    h0, h1 = (SshProcess(p, agent, r, "/dev/null") for r, p in enumerate(plans))
    agent.handles.update({0: h0, 1: h1})
    agent._message(0, {"ev": "hb", "stopped": [], "sched": {"0": [12.5, 3.25, 0.5, 4096, 1.5]}})
    assert h0.sched_figures() == (12.5, 3.25, 0.5, 4096.0, 1.5) and h1.sched_figures() is None
    agent._message(0, {"ev": "hb", "stopped": []})
    assert h0.sched_figures() == (12.5, 3.25, 0.5, 4096.0, 1.5)
    agent._message(0, {"ev": "hb", "stopped": [], "sched": {"1": [1.0, 2.0, 3.0]}})  # no send queues: 0
    assert h1.sched_figures() == (1.0, 2.0, 3.0, 0.0, -1.0)
    agent._message(0, {"ev": "hb", "stopped": [], "sched": {"1": [1.0, 2.0, 3.0, 7]}})
    assert h1.sched_figures() == (1.0, 2.0, 3.0, 7.0, -1.0)
    for bad in ([1.0, 2.0], [1, 2, 3, 4, 5, 6], ["a", 2, 3], None, "1 2 3"):  # kept: the last good one
        agent._message(0, {"ev": "hb", "stopped": [], "sched": {"1": bad}})
        assert h1.sched_figures() == (1.0, 2.0, 3.0, 7.0, -1.0), bad
