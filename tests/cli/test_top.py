"""Seeing a running job as a person does: metrics.jsonl, `mslaunch top` (JSON, and live under tmux),
`status`, and the HTML report opened in headless Chromium.

The ranks are tests/scripts/metricprog.py (no MindSpore) printing real-format lines; every test
checks that every pid the job created is gone afterwards.  The reference trainer as top sees it
is checked by tests/integration/test_hang_mindspore.py (its job is killed and resumes, too).
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import time

import psutil
import pytest

from tests.harness.ci import require_tool
from tests.harness.cli import mslaunch_argv, run_cli, run_process
from tests.integration.test_multihost import cluster  # noqa: F401  (the namespace cluster fixture, emptied after each test)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
PROG = os.path.join(HERE, "scripts", "metricprog.py")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def make_job(tmp_path, **environ):
    """A job of metricprog ranks in ``tmp_path`` (its folder ``job``, its pids in ``pids``), run
    under ``os.environ`` with ``environ`` on top."""
    piddir = tmp_path / "pids"
    piddir.mkdir()
    env = dict(
        os.environ, **environ, PIDDIR=str(piddir), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    )

    class Job:
        dir = tmp_path / "job"
        environ = env

        def run_args(self, *args, extra=()):
            """The CLI's arguments of ``mslaunch run`` of this job."""
            return [
                "run",
                "--np",
                "2",
                "--master-port",
                "auto",
                "--log-dir",
                str(self.dir),
                "--grace",
                "2",
                *extra,
                PROG,
                *args,
            ]

        def cli(self, *args, timeout=60):
            """top / status / stop / report: in this process (they start nothing; see tests/harness/cli.py)."""
            return run_cli(*args, env=env, cwd=str(tmp_path), timeout=timeout)

        def run(self, *args, extra=(), timeout=120):
            return run_process(*self.run_args(*args, extra=extra), env=env, cwd=str(tmp_path), timeout=timeout)

        def top(self, *extra):
            r = self.cli("top", "--json", str(self.dir), *extra)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        def records(self):
            with open(self.dir / "metrics.jsonl") as fh:
                return [json.loads(line) for line in fh]

        def wait(self, cond, what, timeout=60.0):
            deadline = time.monotonic() + timeout
            while True:
                value = cond()
                if value:
                    return value
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.2)

    return Job()


def assert_nothing_left(job):
    """Every pid the job's processes wrote to its pid folder is gone (within 10 s)."""
    piddir = job.dir.parent / "pids"
    pids = []
    for name in os.listdir(piddir):
        pids += [int(x) for x in open(piddir / name).read().split()]
    deadline = time.monotonic() + 10
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if alive(p)] == [], "processes left running"


@pytest.fixture
def job(tmp_path):
    j = make_job(tmp_path)
    yield j
    assert_nothing_left(j)


@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory, _cpu_probe_cache):
    """One finished job shared by the tests that read it (metrics.jsonl, top, status, the report):
    2 ranks, 8 steps of 0.1 s, rank 1 a straggler (0.5 s more a step).  Its own MSLAUNCH_HOME, as
    each test's (tests/conftest.py)."""
    tmp = tmp_path_factory.mktemp("straggler")
    home = tmp / "mslaunch-home"
    home.mkdir()
    os.symlink(_cpu_probe_cache, home / "cpu-probe")
    j = make_job(tmp, MSLAUNCH_HOME=str(home))
    j.result = j.run("8", "0.1", "--straggler", "1", extra=("--tee", "none"))
    yield j
    assert_nothing_left(j)


@pytest.mark.cost(14, group="straggler_job")  # measured alone x2, with the shared job (module fixture)
def test_metrics_jsonl_holds_every_step_and_top_flags_the_straggler(straggler_job):
    job = straggler_job
    assert job.result.returncode == 0, job.result.stderr
    recs = job.records()
    for rank in (0, 1):
        steps = [x["global_step"] for x in recs if x["rank"] == rank and x["kind"] == "step"]
        assert steps == list(range(1, 9)), (rank, steps)
        losses = [x["loss"] for x in recs if x["rank"] == rank and x["kind"] == "step"]
        assert losses == pytest.approx([2.0 / s for s in range(1, 9)], rel=1e-6)
    snap = job.top()
    rows = {row["rank"]: row for row in snap["ranks"]}
    assert snap["state"] == "succeeded"
    assert [rows[0]["state"], rows[1]["state"]] == ["done", "done"]
    assert (rows[0]["step"], rows[0]["total_steps"], rows[1]["step"]) == (8, 8, 8)
    assert rows[0]["loss"] == pytest.approx(0.25) and rows[1]["loss"] == pytest.approx(0.25)
    # rank 1 sleeps 0.5 s more per step: its step time (TimeMonitor's line) is ~6x rank 0's
    assert rows[1]["straggler"] and not rows[0]["straggler"], rows
    assert (
        snap["totals"]["stragglers"] == [1]
        and snap["totals"]["slowest_rank"] == 1
        and snap["totals"]["fastest_rank"] == 0
    )
    assert rows[1]["step_time_ms"] > 3 * rows[0]["step_time_ms"]
    # samples/s: batch 32 (the MSLAUNCH_METRIC line) over the rank's step time; the total is their sum
    for row in rows.values():
        last = [x for x in recs if x["rank"] == row["rank"] and "samples_per_s" in x][
            -1
        ]  # TimeMonitor's line, at the end
        assert last["source"] == "timemonitor" and row["step_time_ms"] == last["step_time_ms"]
        assert row["samples_per_s"] == last["samples_per_s"] == pytest.approx(32000.0 / last["step_time_ms"], rel=1e-3)
    assert rows[1]["samples_per_s"] < rows[0]["samples_per_s"]
    assert snap["totals"]["samples_per_s"] == pytest.approx(
        rows[0]["samples_per_s"] + rows[1]["samples_per_s"], rel=1e-3
    )
    st = job.cli("status", str(job.dir))
    assert "  rank 0: step 8, loss 0.25\n" in st.stdout and "  rank 1: step 8, loss 0.25\n" in st.stdout, st.stdout
    progress = json.loads(job.cli("status", "--json", str(job.dir)).stdout)["progress"]
    assert progress == [
        {"rank": 0, "step": 8, "loss": 0.25, "epoch": 1},
        {"rank": 1, "step": 8, "loss": 0.25, "epoch": 1},
    ]


def test_a_silent_rank_is_flagged_while_the_job_runs_detached(job):
    r = job.run("200", "0.2", "--silent", "1", "--silent-for", "120", extra=("--detach",))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    try:

        def silent():
            snap = job.top("--silent-after", "3")
            return snap if snap["totals"]["silent"] == [1] else None

        snap = job.wait(silent, "rank 1 to be flagged silent")
        rows = {row["rank"]: row for row in snap["ranks"]}
        assert snap["state"] == "running"
        # silent: older than 3 s; the JSON rounds the age to the millisecond, so 3.0 can stand for 3.0004
        assert rows[1]["state"] == "silent" and rows[1]["silent"] and rows[1]["last_output_age"] >= 3
        assert rows[0]["state"] == "running" and not rows[0]["silent"] and rows[0]["last_output_age"] < 3
        assert rows[1]["step"] == 2 and rows[0]["step"] > 2
        # status counts the goodput of a running job so far: up to now, still running
        live = job.cli("status", "--json", job_id)
        assert live.returncode == 0, live.stderr
        so_far = json.loads(live.stdout)["goodput"]
        assert so_far["running"] and so_far["has_steps"] and so_far["productive_s"] > 0
        assert so_far["productive_s"] + sum(so_far["badput_s"].values()) == pytest.approx(so_far["elapsed_s"], abs=0.01)
    finally:
        stop = job.cli("stop", job_id)
    assert stop.returncode == 0, stop.stderr
    assert job.top()["state"] == "stopped"
    done = json.loads((job.dir / "summary.json").read_text())["goodput"]
    assert not done["running"] and done["badput_s"]["planned"] > 0  # the stop: from mslaunch's SIGTERM on


def test_nan_loss_is_an_event_in_metrics_top_and_the_report(job, tmp_path):
    r = job.run("6", "0.1", "--nan-at", "3", extra=("--tee", "none"))
    assert r.returncode == 1, r.stderr
    events = [x for x in job.records() if x.get("event")]
    assert [(x["rank"], x["event"], x["step"]) for x in events][:1] == [(0, "nonfinite_loss", 3)]
    snap = job.top()
    assert snap["state"] == "failed" and snap["ranks"][0]["nonfinite_loss"] and snap["ranks"][0]["state"] == "failed"
    out = tmp_path / "rep"
    rep = job.cli("report", str(job.dir), "-o", str(out))
    assert rep.returncode == 0, rep.stderr
    page = (out / "report.html").read_text()
    assert "rank 0: loss became nan at epoch 1 step 3" in page
    assert 'id="root-cause"' in page and "rank 0" in page


def _chromium():
    return require_tool("chromium", "chromium-browser", "google-chrome", package="chromium")


@pytest.mark.cost(8, group="straggler_job")  # measured alone x2
def test_report_renders_its_charts_in_headless_chromium(straggler_job, tmp_path):
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    browser = _chromium()
    job = straggler_job
    assert job.result.returncode == 0, job.result.stderr
    rep = job.cli("report", str(job.dir))
    assert rep.returncode == 0, rep.stderr
    html_path = rep.stdout.strip()
    assert html_path == str(job.dir / "report" / "report.html")
    for name in ("loss", "step_time", "throughput", "goodput", "timeline"):
        assert (job.dir / "report" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The page stands alone: copy it elsewhere, without the PNGs.
    lone = tmp_path / "lone" / "report.html"
    lone.parent.mkdir()
    shutil.copy(html_path, lone)
    base = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chrome'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",  # the page settles (images decoded) before the capture
        "--run-all-compositor-stages-before-draw",
    ]  # and is drawn whole (a loaded machine captured it half-painted)
    shot = tmp_path / "shot.png"
    # One load of the page: the screenshot, and its DOM once drawn on stdout.
    dom = subprocess.run(
        base + ["--window-size=1000,3400", f"--screenshot={shot}", "--dump-dom", lone.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert shot.exists(), dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    imgs = re.findall(
        r'<img id="plot-(\w+)" class="plot" alt="[^"]*"[^>]* src="data:image/png;base64,([A-Za-z0-9+/=]+)"', dom.stdout
    )
    assert [name for name, _ in imgs] == ["loss", "step_time", "throughput", "goodput", "timeline"], (
        dom.stdout[:500],
        dom.stderr[-2000:],
    )
    import matplotlib.image as mpimg
    import numpy as np

    for _, data in imgs:
        assert mpimg.imread(io.BytesIO(base64.b64decode(data)), format="png").shape[1] >= 700
    # The screenshot shows the plots: matplotlib's first two line colours (rank 0 blue, rank 1 orange) are on screen.
    # (Rank 1's line is drawn over rank 0's where they agree, as the losses of data-parallel ranks do: blue
    # may show in little more than the legends and where the step times part, 84 pixels in one run.)
    pixels = (mpimg.imread(str(shot))[:, :, :3] * 255).round().astype(int)
    for rgb in ((31, 119, 180), (255, 127, 14)):
        hits = np.all(np.abs(pixels - np.array(rgb)) <= 12, axis=2).sum()
        assert hits > 30, (rgb, hits)
    for caption in ("Loss vs step", "Step time per rank", "Throughput over time", "Where the time went", "Timeline"):
        assert f"<figcaption>{caption} (" in dom.stdout
    assert "<td>succeeded</td>" in dom.stdout


def _tmux():
    return require_tool("tmux", package="tmux")


@pytest.mark.cost(21)  # measured alone x2
def test_live_view_under_tmux_run_and_top(job, tmp_path):
    tmux = _tmux()
    sock = str(tmp_path / "tmux.sock")

    def t(*args):
        return subprocess.run([tmux, "-S", sock, *args], capture_output=True, text=True, timeout=30, env=job.environ)

    def pane(target):
        return t("capture-pane", "-p", "-t", target).stdout

    envs = " ".join(
        f"{k}={shlex_quote(v)}" for k, v in job.environ.items() if k in ("PIDDIR", "PYTHONPATH", "MSLAUNCH_HOME")
    )
    # Rank 0 is the straggler (0.75 s a step): the run pane follows it while it runs, and rank 1
    # (0.25 s a step) is done early; the job lasts STEPS x 0.75 s.
    steps = 12
    run_cmd = " ".join(shlex_quote(a) for a in mslaunch_argv(*job.run_args(str(steps), "0.25", "--straggler", "0")))
    try:
        assert (
            t(
                "new-session", "-d", "-s", "run", "-n", "main", "-x", "120", "-y", "30", "bash", "--norc", "--noprofile"
            ).returncode
            == 0
        )
        t("send-keys", "-t", "run:main", f"env {envs} {run_cmd}; echo RUN-EXIT=$?", "Enter")

        def step_of(text, rank):
            m = re.search(rf"^\s*{rank}\s+localhost\s+\S.*?\s(\d+)/{steps}\s", text, re.M)
            return int(m.group(1)) if m else None

        first = job.wait(
            lambda: (lambda p: (step_of(p, 0), p) if step_of(p, 0) else None)(pane("run:main")),
            "the live table in the run pane",
        )
        assert re.search(r"job \S+: running", first[1]) and "samples/s" in first[1] and "ms/step" in first[1], first[1]
        job.wait(lambda: (step_of(pane("run:main"), 0) or 0) > first[0], "the live table to update")
        # `mslaunch top` from another shell, on the same job.
        t("new-window", "-t", "run", "-n", "top", "bash", "--norc", "--noprofile")
        top_cmd = " ".join(shlex_quote(a) for a in mslaunch_argv("top", str(job.dir), "--interval", "0.5"))
        t("send-keys", "-t", "run:top", f"env {envs} {top_cmd}; echo TOP-EXIT=$?", "Enter")
        seen = job.wait(lambda: (lambda p: p if step_of(p, 1) else None)(pane("run:top")), "top's table")
        assert "straggler" in job.wait(
            lambda: (lambda p: p if "straggler" in p else None)(pane("run:top")), "rank 0 flagged as a straggler"
        )
        assert "localhost" in seen
        done = job.wait(
            lambda: (lambda p: p if "TOP-EXIT=0" in p else None)(pane("run:top")),
            "top to exit when the job ends",
            timeout=120,
        )
        assert re.search(r"job \S+: succeeded", done) and step_of(done, 0) == steps and step_of(done, 1) == steps, done
        end = job.wait(
            lambda: (lambda p: p if "RUN-EXIT=0" in p else None)(pane("run:main")), "the run to end", timeout=120
        )
        assert step_of(end, 0) == steps, end
    finally:
        t("kill-server")


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


@pytest.mark.netns
def test_top_over_ssh_on_the_namespace_cluster(tmp_path, cluster):  # noqa: F811  (pytest's fixture, imported above)
    """A job over the ssh launcher on 3 namespace hosts: metrics.jsonl and top see every remote rank."""
    from tests.integration.test_multihost import MJob, wait_nothing_left

    mj = MJob(tmp_path, cluster)
    r = mj.run("6", "0.1", "--straggler", "4", extra=("--tee", "none"), program=[PROG])
    assert r.returncode == 0, r.stderr
    snap = run_process("top", "--json", str(mj.dir), env=mj.env, timeout=60)
    assert snap.returncode == 0, snap.stderr
    data = json.loads(snap.stdout)
    hosts = [h.ip for h in cluster.hosts]
    assert [(row["rank"], row["host"], row["step"], row["state"]) for row in data["ranks"]] == [
        (k, hosts[k // 2], 6, "done") for k in range(6)
    ]
    assert data["totals"]["stragglers"] == [4]
    steps = sorted(
        (x["rank"], x["global_step"])
        for x in (json.loads(line) for line in open(mj.dir / "metrics.jsonl"))
        if x["kind"] == "step"
    )
    assert steps == [(k, s) for k in range(6) for s in range(1, 7)]
    assert wait_nothing_left(cluster) == {}


def test_a_restarted_job_top_follows_the_new_attempt_and_the_report_shows_the_restart(job, tmp_path):
    r = job.run("6", "0.2", "--fail-once", "1", extra=("--tee", "none", "--max-restarts", "1"))
    assert r.returncode == 0, r.stderr
    recs = job.records()
    first = sorted(x["global_step"] for x in recs if x["rank"] == 1 and x["attempt"] == 0 and x["kind"] == "step")
    again = sorted(x["global_step"] for x in recs if x["rank"] == 1 and x["attempt"] == 1 and x["kind"] == "step")
    assert first == [1, 2] and again == [1, 2, 3, 4, 5, 6]
    snap = job.top()
    assert [(row["step"], row["state"]) for row in snap["ranks"]] == [(6, "done"), (6, "done")]
    events = [json.loads(line) for line in open(job.dir / "events.jsonl")]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "job_start" and kinds[-1] == "job_end"
    assert kinds.index("failure") < kinds.index("teardown") < kinds.index("restart")
    assert [e["name"] for e in events if e["kind"] == "failure"] == ["rank 1"]
    assert kinds.count("started") == 6  # scheduler and 2 ranks, twice
    out = tmp_path / "rep"
    rep = job.cli("report", str(job.dir), "-o", str(out))
    assert rep.returncode == 0, rep.stderr
    page = (out / "report.html").read_text()
    timeline = re.search(r'<ol id="timeline">(.*?)</ol>', page, re.S).group(1)
    told = [k for k in re.findall(r'<li class="ev-(\w+)">', timeline) if k not in ("started", "exited", "steps")]
    assert told == ["job_start", "failure", "teardown", "restart", "job_end"]


@pytest.mark.mpi
def test_top_for_a_job_started_through_mpirun(job):
    require_tool("mpirun", package="openmpi-bin")
    r = job.run("5", "0.1", "--straggler", "1", extra=("--tee", "none", "--launcher", "mpirun"))
    assert r.returncode == 0, r.stderr
    snap = job.top()
    assert [(row["rank"], row["step"], row["state"], row["straggler"]) for row in snap["ranks"]] == [
        (0, 5, "done", False),
        (1, 5, "done", True),
    ]
    steps = sorted((x["rank"], x["global_step"]) for x in job.records() if x["kind"] == "step")
    assert steps == [(k, s) for k in range(2) for s in range(1, 6)]
