"""A real Prometheus server scrapes a running mslaunch job, and the Grafana dashboard's queries answer.

One module fixture runs one job and one Prometheus for every test here (they run on one worker,
in order: the cost group).  The job is tests/scripts/metricprog.py (no MindSpore): two ranks
printing step lines, rank 1 failing once at step 3, so the job restarts once and then runs until
the last test stops it.  It serves ``/metrics`` on a free loopback port (``--metrics-port 0``,
read back from ``job.json``) and writes ``--metrics-textfile``.  Prometheus (Debian's
``prometheus``) runs on loopback with a temporary config (scrape every second) and storage, is
started and killed by its pid; every pid of the job and the server is gone afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.parse
import urllib.request

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.cli import mslaunch_argv
from tests.harness.faultkit import wait_for, wait_or_fail
from tests.harness.paths import REPO

PROG = os.path.join(REPO, "tests", "scripts", "metricprog.py")
DASHBOARD = os.path.join(REPO, "docs", "grafana", "mslaunch.json")

pytestmark = [pytest.mark.e2e, pytest.mark.needs("prometheus")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Scrape:
    """The job and the Prometheus scraping it."""

    def __init__(self, tmp) -> None:
        self.tmp = tmp
        self.job_dir = tmp / "job"
        self.textfile_dir = tmp / "tf"
        self.textfile_dir.mkdir()
        self.piddir = tmp / "pids"
        self.piddir.mkdir()
        env = dict(
            os.environ,
            MSLAUNCH_HOME=str(tmp / "home"),
            PIDDIR=str(self.piddir),
            PYTHONPATH=os.pathsep.join(
                [REPO, os.path.join(REPO, "tests", "scripts"), os.environ.get("PYTHONPATH", "")]
            ),
        )
        argv = mslaunch_argv(
            "run",
            "--np",
            "2",
            "--master-port",
            "auto",
            "--log-dir",
            str(self.job_dir),
            "--tee",
            "none",
            "--max-restarts",
            "1",
            "--grace",
            "2",
            "--metrics-port",
            "0",
            "--metrics-textfile",
            str(self.textfile_dir),
            PROG,
            "100000",
            "0.2",
            "--fail-once",
            "1",
        )
        self.log = open(tmp / "mslaunch.out", "wb")
        self.job = subprocess.Popen(argv, env=env, cwd=str(tmp), stdout=self.log, stderr=subprocess.STDOUT)
        self.prom = None
        self.job_id = ""
        self.metrics_url = ""

    def start_prometheus(self) -> None:
        record = wait_or_fail(self._job_record, 60, "job.json with metrics_url")
        self.job_id, self.metrics_url = record["job_id"], record["metrics_url"]
        target = urllib.parse.urlsplit(self.metrics_url).netloc
        (self.tmp / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: mslaunch\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.api = f"http://127.0.0.1:{_free_port()}"
        self.prom_log = open(self.tmp / "prometheus.log", "wb")
        self.prom = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.tmp / 'tsdb'}",
                f"--web.listen-address={self.api[len('http://') :]}",
                "--log.level=warn",
            ],
            stdout=self.prom_log,
            stderr=subprocess.STDOUT,
            cwd=str(self.tmp),
        )
        wait_or_fail(self._ready, 60, "Prometheus ready")

    def _job_record(self):
        try:
            with open(self.job_dir / "job.json") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            assert self.job.poll() is None, (self.tmp / "mslaunch.out").read_text()
            return None
        return record if record.get("metrics_url") else None

    def _ready(self) -> bool:
        assert self.prom.poll() is None, (self.tmp / "prometheus.log").read_text()
        try:
            with urllib.request.urlopen(self.api + "/-/ready", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    def query(self, promql: str):
        """The result vector of an instant query (``/api/v1/query``)."""
        url = self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, promql: str):
        """The one number an instant query gives, or None while it gives none."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def job_pids(self):
        return [int(p.read_text().split()[0]) for p in self.piddir.glob("*.pids")]

    def stop_job(self) -> int:
        """SIGTERM to the mslaunch this fixture started; its exit code."""
        if self.job.poll() is None:
            self.job.send_signal(signal.SIGTERM)
        return self.job.wait(timeout=60)

    def close(self) -> None:
        try:
            self.stop_job()
        finally:
            if self.prom is not None:
                self.prom.kill()
                self.prom.wait(timeout=30)
            self.log.close()


@pytest.fixture(scope="module")
def scrape(tmp_path_factory):
    s = Scrape(tmp_path_factory.mktemp("prom"))
    try:
        s.start_prometheus()
        yield s
    finally:
        s.close()
    assert not _alive(s.job.pid) and not _alive(s.prom.pid)
    assert wait_for(lambda: not [p for p in s.job_pids() if _alive(p)], 20), s.job_pids()


@pytest.mark.cost(8, group="prometheus")
def test_prometheus_scrapes_the_running_jobs_steps_and_its_restart(scrape):
    j = f'job_id="{scrape.job_id}"'
    # the restarted attempt's ranks step on past the step where rank 1 failed, while the job runs
    wait_or_fail(lambda: scrape.value(f"mslaunch_attempt{{{j}}}") == 1, 60, "attempt 1 scraped")
    wait_or_fail(lambda: (scrape.value(f"min(mslaunch_rank_step{{{j}}})") or 0) >= 4, 60, "steps of attempt 1")
    assert scrape.value(f"mslaunch_restarts_total{{{j}}}") == 1
    assert scrape.value(f"sum(mslaunch_failures_total{{{j}}})") == 1
    assert scrape.value(f'mslaunch_job_state{{{j},state="running"}}') == 1
    assert scrape.value(f"mslaunch_ranks_running{{{j}}}") == 2
    assert scrape.value(f"mslaunch_ranks_planned{{{j}}}") == 2
    info = scrape.query(f"mslaunch_job_info{{{j}}}")
    assert [(r["metric"]["backend"], r["metric"]["script"], r["value"][1]) for r in info] == [
        ("local", "metricprog.py", "1")
    ]
    steps = {r["metric"]["rank"]: float(r["value"][1]) for r in scrape.query(f"mslaunch_rank_step{{{j}}}")}
    assert sorted(steps) == ["0", "1"] and min(steps.values()) >= 4
    # the goodput account so far: a restart costs badput, the steps since count as productive
    assert scrape.value(f"mslaunch_job_productive_seconds{{{j}}}") > 0
    assert scrape.value(f'mslaunch_job_badput_seconds{{{j},kind="restart"}}') > 0
    left = scrape.value(  # one query, one scrape: the parts add up to the elapsed time
        f"mslaunch_job_elapsed_seconds{{{j}}} - mslaunch_job_productive_seconds{{{j}}}"
        f" - on(job_id) sum by (job_id) (mslaunch_job_badput_seconds{{{j}}})"
    )
    assert left == pytest.approx(0, abs=0.01)
    assert 0 < scrape.value(f"mslaunch_job_goodput_ratio{{{j}}}") < 1
    assert scrape.job.poll() is None  # all of it from the running job
    assert scrape.metrics_url.startswith("http://127.0.0.1:")  # loopback by default


@pytest.mark.cost(3, group="prometheus")
def test_every_dashboard_panel_query_returns_data_for_the_running_job(scrape):
    with open(DASHBOARD) as fh:
        dashboard = json.load(fh)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10 and all("$job_id" in e for e in exprs)
    queries = [e.replace("$job_id", scrape.job_id) for e in exprs]

    def empty():
        return [q for q in queries if not scrape.query(q)]

    wait_for(lambda: not empty(), 60)
    assert empty() == [], "panels without data"
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "job_id")
    assert variable["definition"] == "label_values(mslaunch_job_info, job_id)"
    assert scrape.query("count(mslaunch_job_info)")[0]["value"][1] == "1"


@pytest.mark.cost(3, group="prometheus")
def test_the_textfile_is_rewritten_while_the_job_runs_and_a_last_time_when_it_stops(scrape):
    path = scrape.textfile_dir / f"{scrape.job_id}.prom"

    def values():
        out = {}
        for fam in text_string_to_metric_families(path.read_text()):
            for s in fam.samples:
                assert s.labels["job_id"] == scrape.job_id
                out[(s.name, s.labels.get("state") or s.labels.get("rank") or s.labels.get("cause"))] = s.value
        return out

    running = wait_or_fail(
        lambda: (v := values()).get(("mslaunch_restarts_total", None)) == 1 and v, 30, "the textfile's restart"
    )
    assert running[("mslaunch_job_state", "running")] == 1
    assert running[("mslaunch_rank_step", "0")] >= 1
    assert scrape.stop_job() == 143  # stopped by SIGTERM
    final = values()
    assert final[("mslaunch_job_state", "stopped")] == 1 and final[("mslaunch_job_state", "running")] == 0
    assert (final[("mslaunch_restarts_total", None)], final[("mslaunch_ranks_running", None)]) == (1, 0)
    assert os.listdir(scrape.textfile_dir) == [path.name]
