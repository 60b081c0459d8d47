"""The exporter (launcher.logs.promexport): a job dir's records as Prometheus metrics, in the textfile
node_exporter reads and over HTTP, both parsed back with prometheus_client's own parser."""

from __future__ import annotations

import json
import os
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from launcher.logs.promexport import MetricsExporter, textfile_path
from launcher.logs.promodel import JobIdentity

ID = JobIdentity("job7", "local", "train.py", 2)


def append(path, *records):
    with open(path, "a") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")


def samples(text):
    """(name, labels without job_id) -> value; every sample's job_id is the job's."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = dict(s.labels)
            assert labels.pop("job_id") == "job7", s
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def test_the_textfile_is_replaced_whole_and_a_final_write_at_close_shows_the_jobs_end(tmp_path):
    job, tf = tmp_path / "job", tmp_path / "tf"
    job.mkdir()
    tf.mkdir()
    events, metrics = job / "events.jsonl", job / "metrics.jsonl"
    append(events, {"kind": "job_start", "job_id": "job7", "time": 100.0})
    append(events, *({"kind": "started", "name": f"rank {r}", "rank": r, "attempt": 0} for r in (0, 1)))
    append(metrics, {"kind": "step", "rank": 0, "attempt": 0, "time": 101.0, "global_step": 3, "loss": 0.5})
    exp = MetricsExporter(str(job), ID, causes=("oom",))
    path = exp.start_textfile(str(tf), interval=3600)  # the periodic refresh never comes: only writes asked for
    assert path == textfile_path(str(tf), "job7") == str(tf / "job7.prom")
    first = samples(open(path).read())
    assert first[("mslaunch_job_info", (("backend", "local"), ("node_rank", ""), ("script", "train.py")))] == 1
    assert first[("mslaunch_job_state", (("state", "running"),))] == 1
    assert first[("mslaunch_job_state", (("state", "succeeded"),))] == 0
    assert first[("mslaunch_ranks_running", ())] == 2
    assert first[("mslaunch_ranks_planned", ())] == 2
    assert first[("mslaunch_job_start_time_seconds", ())] == 100.0
    assert first[("mslaunch_rank_step", (("rank", "0"),))] == 3
    assert first[("mslaunch_rank_loss", (("rank", "0"),))] == 0.5
    assert first[("mslaunch_restarts_total", ())] == 0
    assert first[("mslaunch_failures_total", (("cause", "oom"),))] == 0
    assert first[("mslaunch_checkpoint_failures_total", ())] == 0
    append(events, {"kind": "ckpt_failed", "rank": 1, "attempt": 0, "why": "[Errno 28] No space left on device"})
    restart = {"kind": "restart", "attempt": 1, "cause": {"cause": {"kind": "oom"}}, "env_attempt": 1}
    append(events, restart, {"kind": "started", "name": "rank 0", "rank": 0, "attempt": 1})
    append(metrics, {"kind": "step", "rank": 0, "attempt": 1, "time": 103.0, "global_step": 4, "loss": 0.25})
    append(events, {"kind": "job_end", "status": "succeeded", "exit_code": 0, "cause": None})
    exp.close()
    last = samples(open(path).read())
    assert last[("mslaunch_job_state", (("state", "succeeded"),))] == 1
    assert last[("mslaunch_job_state", (("state", "running"),))] == 0
    assert (last[("mslaunch_restarts_total", ())], last[("mslaunch_attempt", ())]) == (1, 1)
    assert last[("mslaunch_failures_total", (("cause", "oom"),))] == 1
    assert last[("mslaunch_checkpoint_failures_total", ())] == 1  # the job trained on: no failure, no restart
    assert last[("mslaunch_rank_step", (("rank", "0"),))] == 4
    assert last[("mslaunch_ranks_running", ())] == 0
    assert os.listdir(tf) == ["job7.prom"]  # written to a temporary name and renamed: nothing else left


def test_metrics_are_served_on_a_free_loopback_port_until_close(tmp_path):
    exp = MetricsExporter(str(tmp_path), ID)
    url = exp.serve("127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert url == f"http://127.0.0.1:{port}/metrics" and port > 0
    with urllib.request.urlopen(url, timeout=10) as resp:
        got = samples(resp.read().decode())
    assert got[("mslaunch_job_state", (("state", "starting"),))] == 1  # no events yet
    exp.close()
    with pytest.raises(ConnectionRefusedError):  # nobody listens any more
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
