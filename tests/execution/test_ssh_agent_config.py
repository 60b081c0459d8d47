"""The launcher's side of the remote agent protocol: the typed config a rank's agent gets, the
first stdin line, and the protocol lines it sends back."""
import json

import pytest

from launcher.execution import remote_agent
from launcher.execution.ssh.agent import AgentConfig, agent_source, parse_message
from launcher.planning.plan import ProcPlan


def proc(env_dump=None):
    return ProcPlan(name="rank 1", role="worker", host="h2", rank=1, local_rank=1, node_rank=0, device_id=1,
                    argv=("python3", "train.py", "--lr", "0.1"), env=(("RANK_ID", "1"), ("A", "x y")), cwd="/j/job",
                    log="/j/job/worker_1.log", env_dump=env_dump)


@pytest.mark.parametrize("cwd,mkdir", [
    ("/j/job", True),
    ("/j/job/attempt_1/device1", True),
    ("/j/job2", False),  # a sibling whose name starts like the job dir is not under it
    ("/home/u/project", False),
])
def test_the_agent_creates_cwd_only_under_the_job_dir(cwd, mkdir):
    assert AgentConfig.for_rank(proc(), cwd, "/j/job", 8.0).mkdir is mkdir


def test_config_json_is_what_the_agent_reads():
    cfg = AgentConfig.for_rank(proc(env_dump="/j/job/device1/env1.log"), "/j/job/attempt_1/device1", "/j/job", 8.0)
    assert cfg.to_json() == {
        "argv": ["python3", "train.py", "--lr", "0.1"],
        "env": {"RANK_ID": "1", "A": "x y"},
        "cwd": "/j/job/attempt_1/device1",
        "mkdir": True,
        "env_dump": "/j/job/attempt_1/device1/env1.log",  # the dump goes to the attempt's rank dir
        "ping_timeout": 8.0,
        "heartbeat": 1.0,
        "host": "h2",
    }
    assert AgentConfig.for_rank(proc(), "/w", "/j/job", 3.0).to_json()["env_dump"] is None


def test_payload_is_one_json_line_with_the_agent_source():
    cfg = AgentConfig.for_rank(proc(), "/w", "/j/job", 8.0)
    data = cfg.payload()
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    first = json.loads(data)
    assert first == {"src": agent_source(), "cfg": cfg.to_json()}
    with open(remote_agent.__file__, encoding="utf-8") as fh:
        assert first["src"] == fh.read()


@pytest.mark.parametrize("line,parsed", [
    ("@@mslaunch started 4242", ("started", "4242")),
    ("@@mslaunch hb", ("hb", "")),
    ("@@mslaunch error cannot run 'x' on h2: no such file", ("error", "cannot run 'x' on h2: no such file")),
    ("@@mslaunch exit -9", ("exit", "-9")),
    ("@@mslaunchexit 0", None),
    ("Traceback (most recent call last):", None),
    ("", None),
])
def test_protocol_lines(line, parsed):
    assert parse_message(line) == parsed
