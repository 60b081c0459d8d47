"""One real restarted job (stand-in ranks, no MindSpore) told three ways that must agree: the
goodput in ``summary.json``, in ``status`` (text and ``--json``) and in the report; and the report
as a person sees it in headless Chromium: every attempt's loss with the restart marked and the
steps trained again drawn apart, the badput as a bar, the timeline in words.

The job: tests/scripts/metricprog.py on 2 ranks, checkpoints every 3 steps; rank 1 fails once at
step 6, so attempt 1 resumes after step 3 and trains steps 4 to 5 (or more) again.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess

import psutil
import pytest

from launcher.logs.goodput import KINDS, Goodput, account, goodput_line
from tests.harness.ci import require_tool
from tests.harness.cli import run_cli, run_process

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
ROOT = os.path.dirname(HERE)
PROG = os.path.join(HERE, "scripts", "metricprog.py")

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Job:
    def __init__(self, folder):
        self.folder = folder
        self.dir = folder / "job"
        (folder / "pids").mkdir()
        self.env = dict(
            os.environ,
            PIDDIR=str(folder / "pids"),
            MSLAUNCH_HOME=str(folder / "home"),
            PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )

    def cli(self, *args):
        return run_cli(*args, env=self.env, cwd=str(self.folder))

    def events(self):
        return [json.loads(line) for line in open(self.dir / "events.jsonl")]

    def records(self):
        return [json.loads(line) for line in open(self.dir / "metrics.jsonl")]


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    job = Job(tmp_path_factory.mktemp("restarted"))
    run = ["run", "--np", "2", "--master-port", "auto", "--log-dir", str(job.dir), "--grace", "2"]
    run += ["--tee", "none", "--max-restarts", "1", PROG, "10", "0.15", "--fail-once", "1", "--fail-at", "6"]
    run += ["--ckpt-dir", str(job.folder / "ckpt"), "--ckpt-every", "3"]
    job.result = run_process(*run, env=job.env, cwd=str(job.folder))
    pids = [e["pid"] for e in job.events() if e["kind"] == "started" and e.get("pid")]
    job.left = [p for p in pids if _alive(p)]
    return job


@pytest.mark.cost(6, group="restarted_job")
def test_summary_status_and_report_agree_on_the_goodput_of_a_restarted_job(restarted):
    job = restarted
    assert job.result.returncode == 0, job.result.stderr
    assert job.left == []  # every process the job started is gone
    summary = json.loads((job.dir / "summary.json").read_text())
    assert [(a["status"], a.get("resumed_from_step")) for a in summary["attempt_results"]] == [
        ("failed", None),
        ("succeeded", 3),
    ]
    got = summary["goodput"]
    assert list(got["badput_s"]) == list(KINDS)
    assert got["productive_s"] + sum(got["badput_s"].values()) == pytest.approx(got["elapsed_s"], abs=0.01)
    # The job started before its first step, and restarted before attempt 1's first step.
    assert got["badput_s"]["startup"] > 0 and got["badput_s"]["restart"] > 0 and got["productive_s"] > 0
    assert not got["running"] and got["has_steps"]
    # Counting again from the job's files gives the summary's figures (the report counts so).
    assert account(job.events(), job.records()).to_json() == got
    status = job.cli("status", "--json", str(job.dir))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["goodput"] == got
    text = job.cli("status", str(job.dir))
    line = goodput_line(Goodput.from_json(got))
    assert f"  {line}\n" in text.stdout and line.startswith("goodput ")
    rep = job.cli("report", str(job.dir), "-o", str(job.folder / "rep"))
    assert rep.returncode == 0, rep.stderr
    page = (job.folder / "rep" / "report.html").read_text()
    assert f"<tr><th>goodput</th><td>{line}</td></tr>" in page


def _pixels(png: bytes):
    import matplotlib.image as mpimg

    return (mpimg.imread(io.BytesIO(png), format="png")[:, :, :3] * 255).round().astype(int)


def _count(pixels, rgb, tol=6):
    import numpy as np

    return int(np.all(np.abs(pixels - np.array(rgb)) <= tol, axis=2).sum())


MAGENTA = (204, 0, 204)  # charts.RESTART_COLOUR
PINK_BAND = (252, 229, 239)  # charts.COLOURS["retrain"] at alpha 0.35 on white
GREEN, GREY, ORANGE = (44, 160, 44), (127, 127, 127), (255, 127, 14)  # productive, startup, restart


@pytest.mark.cost(10, group="restarted_job")
def test_the_report_tells_the_restart_in_headless_chromium(restarted, tmp_path):
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    browser = require_tool("chromium", "chromium-browser", "google-chrome", package="chromium")
    job = restarted
    rep = job.cli("report", str(job.dir), "-o", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    shot = tmp_path / "shot.png"
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chrome'}",
            "--virtual-time-budget=10000",
            "--run-all-compositor-stages-before-draw",
            "--window-size=1000,5200",
            f"--screenshot={shot}",
            "--dump-dom",
            (tmp_path / "rep" / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert shot.exists(), dom.stderr[-2000:]
    html = dom.stdout
    # The timeline in words: who failed where, what mslaunch did, where attempt 1 resumed.
    timeline = re.search(r'<ol id="timeline">(.*?)</ol>', html, re.S).group(1)
    said = [re.sub(r"<[^>]+>", "", li).strip() for li in re.findall(r"<li[^>]*>(.*?)</li>", timeline, re.S)]
    sentences = [re.sub(r"^[+-]\d+\.\d\d s\s+", "", s) for s in said]
    best = max(r["global_step"] for r in job.records() if r.get("kind") == "step" and r["attempt"] == 0)
    for want in (
        "Attempt 0 started scheduler on localhost, rank 0 on localhost and rank 1 on localhost.",
        "rank 1 on localhost ended: exit code 3.",
        "mslaunch saw rank 1 on localhost fail (exit code 3): attempt 0 stops at once (fail fast).",
        f"Attempt 0 logged its last step, step {best}.",
        "Attempt 1 logged its first step, step 4: it resumed after step 3, so steps 4 to "
        f"{best} are trained again (rank ",
        "The job ended: succeeded (exit code 0).",
    ):
        assert any(s.startswith(want) for s in sentences), (want, sentences)
    assert any(
        s.startswith("mslaunch restarted the job as attempt 1 after rank 1 on localhost failed") for s in sentences
    )
    assert not any("{" in s for s in sentences)  # words, no JSON
    # What each chart drew: 2 ranks x (attempt 0, attempt 1 again, attempt 1 new) loss lines; one restart.
    attrs = dict(
        (name, (int(lines), int(restarts)))
        for name, lines, restarts in re.findall(
            r'<img id="plot-(\w+)" class="plot" alt="[^"]*" data-lines="(\d+)" data-restarts="(\d+)"', html
        )
    )
    assert attrs["loss"] == (6, 1) and attrs["throughput"][1] == 1 and attrs["timeline"][1] == 1
    kinds = [k for k in KINDS if round(json.loads((job.dir / "summary.json").read_text())["goodput"]["badput_s"][k], 3)]
    assert attrs["goodput"][0] == 1 + len(kinds)  # productive and each kind of badput it had
    images = dict(re.findall(r'<img id="plot-(\w+)"[^>]* src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html))
    loss = _pixels(base64.b64decode(images["loss"]))
    assert _count(loss, MAGENTA) > 50 and _count(loss, PINK_BAND, tol=3) > 500  # the restart, the steps again
    bar = _pixels(base64.b64decode(images["goodput"]))
    for rgb in (GREEN, GREY, ORANGE):
        assert _count(bar, rgb, tol=3) > 100, rgb
    # On screen: the restart markers and the badput bar are drawn.
    screen = _pixels(shot.read_bytes())
    assert _count(screen, MAGENTA) > 150 and _count(screen, GREEN, tol=3) > 100 and _count(screen, ORANGE, tol=3) > 100
