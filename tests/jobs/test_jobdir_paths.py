"""Where `mslaunch run` writes: --log-dir (modes, non-empty dirs, the job's lock), --job-id,
--summary-json / --junit.  Bad values get a one-line error before anything starts."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest

from tests.harness.cli import mslaunch_argv, run_cli, run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")


class Env:
    """A fresh MSLAUNCH_HOME, a pid dir the stand-in ranks record themselves in, a work dir."""

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.home = tmp_path / "home"
        self.pids = tmp_path / "pids"
        self.pids.mkdir()
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.environ = dict(os.environ, MSLAUNCH_HOME=str(self.home), PIDDIR=str(self.pids))

    def args(self, *opts, mode=("ok", "0.05"), quiet=True):
        """The CLI's arguments of ``mslaunch run`` of the stand-in rank."""
        return [
            "run",
            "--np",
            "1",
            "--master-port",
            "auto",
            "--grace",
            "2",
            *(("--quiet",) if quiet else ()),
            *opts,
            "--no-python",
            sys.executable,
            PROG,
            *mode,
        ]

    def run(self, *opts, mode=("ok", "0.05"), cwd=None):
        return run_process(*self.args(*opts, mode=mode), env=self.environ, cwd=str(cwd or self.work), timeout=120)

    def refused(self, *opts, cwd=None):
        """A run that is refused before it starts: in this process (tests/harness/cli.py)."""
        return run_cli(*self.args(*opts), env=self.environ, cwd=str(cwd or self.work))

    def popen(self, *opts, mode=("ok", "0.05"), cwd=None, quiet=True):
        return subprocess.Popen(
            mslaunch_argv(*self.args(*opts, mode=mode, quiet=quiet)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.environ,
            cwd=str(cwd or self.work),
        )

    def cli(self, *args):
        """status / stop / logs tail of a job folder: in this process (they start nothing)."""
        return run_cli(*args, env=self.environ)

    def started(self):
        return sorted(n for n in os.listdir(self.pids) if n.endswith(".pids"))

    def wait_started(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while len(self.started()) < n:
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.05)

    def registry(self):
        folder = self.home / "jobs"
        return sorted(os.listdir(folder)) if folder.exists() else []

    def assert_gone(self):
        pids = [int(x) for n in self.started() for x in open(os.path.join(self.pids, n)).read().split()]
        deadline = time.monotonic() + 30
        while True:
            left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert left == [], f"left running: {left}"


def one_line_error(r, rc, fragment):
    assert r.returncode == rc, (r.returncode, r.stderr)
    assert r.stderr.startswith("mslaunch: error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert fragment in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def snapshot(path):
    """Mode and entries of a directory (or the file's mode)."""
    st = os.stat(path)
    return (stat.S_IMODE(st.st_mode), sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else None)


def test_job_id_is_validated(tmp_path):
    e = Env(tmp_path)
    deep = e.work / "a" / "b"
    deep.mkdir(parents=True)
    bad = [
        "../../x",
        "..",
        ".",
        ".hidden",
        "a/b",
        "/abs",
        "",
        "x" * 129,
        "a b",
        "tab\there",
        "-rf",
        "a..b",
        "naïve",
        "semi;colon",
        "new\nline",
    ]
    for job_id in bad:
        r = e.refused("--job-id", job_id, cwd=deep)
        one_line_error(r, 2, "--job-id: ")
    assert e.started() == [] and e.registry() == []
    assert sorted(os.listdir(deep)) == [] and sorted(os.listdir(e.work)) == ["a"] and not (tmp_path / "x").exists()
    ok = e.run("--job-id", "Run_1.ok-" + "x" * 119, cwd=deep)  # 128 characters: the longest accepted
    assert ok.returncode == 0, ok.stderr
    assert e.registry() == ["Run_1.ok-" + "x" * 119 + ".json"]
    assert os.listdir(deep / "mslaunch_logs") == ["Run_1.ok-" + "x" * 119]
    e.assert_gone()


def test_existing_log_dir_is_made_private(tmp_path):
    """An existing --log-dir of this user's is made 0700, with one line on stderr when its mode
    changed.  It used to keep its mode; but the job's files hold the --env / --env-file values
    (plan.json, job.json's argv, rank logs) and a cluster's hosts are shared with other teams, so a
    group- or world-listable job directory (a sticky /tmp-like 1777, a 0755 made by mkdir under
    umask 022) would let them see at least the job's names and open any file that is not 0600.
    (A directory mslaunch creates is private from the start, and one that is not empty is refused
    before its mode is touched: test_every_file_of_a_job_and_of_its_report_is_private_under_umask_022
    and test_log_dir_that_is_not_empty_is_refused.)"""
    e = Env(tmp_path)
    cases = []
    for mode in (0o1777, 0o700):  # world-writable and sticky, already private
        d = tmp_path / f"dir{mode:o}"
        d.mkdir()
        os.chmod(d, mode)
        cases.append((["--log-dir", str(d)], d, mode, e.work))
    cwd = tmp_path / "cwd"  # group- and world-readable, as mkdir makes it under umask 022
    cwd.mkdir()
    os.chmod(cwd, 0o755)
    cases.append((["--log-dir", "."], cwd, 0o755, cwd))
    for opts, d, mode, run_cwd in cases:
        r = e.run(*opts, cwd=run_cwd)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, (d, oct(os.stat(d).st_mode))
        said = [line for line in r.stderr.splitlines() if "changed to 0700" in line]
        if mode == 0o700:
            assert said == [], r.stderr
        else:
            assert said == [
                f"mslaunch: {d}: mode {mode:04o} changed to 0700 (only you may read the job's files: "
                "they may hold --env values)"
            ], r.stderr
        assert sorted(os.listdir(d)) == [
            "events.jsonl",
            "job.json",
            "plan.json",
            "scheduler.log",
            "summary.json",
            "worker_0.log",
        ]
    e.assert_gone()


def test_a_log_dir_another_user_owns_is_refused(tmp_path):
    """Its owner could read the job's files (and mslaunch may not change its mode): refused in one
    line naming the directory and its owner, nothing written, its mode kept."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory another user owns")
    e = Env(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    os.chown(theirs, 65534, 65534)
    for detach in ((), ("--detach",)):
        r = e.run("--log-dir", str(theirs), *detach)
        one_line_error(r, 2, f"{theirs}: is owned by uid 65534, not you (uid 0)")
        assert "choose a --log-dir of your own" in r.stderr
        assert snapshot(theirs) == (0o777, [])
    assert e.started() == [] and e.registry() == []


def not_private(root):
    """Every folder below ``root`` (itself too) that is not 0700 and every regular file that is not
    0600, as ``(path, mode)``; mslaunch writes no other kind of entry."""
    bad = []
    for folder, _dirs, files in os.walk(root):
        mode = stat.S_IMODE(os.stat(folder).st_mode)
        if mode != 0o700:
            bad.append((folder, oct(mode)))
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o600:
                bad.append((os.path.join(folder, name), oct(st.st_mode)))
    return bad


def test_every_file_of_a_job_and_of_its_report_is_private_under_umask_022(tmp_path):
    """A real 2-rank run whose workers print their environment, with --env and --env-file secrets,
    under umask 022: every file of the job directory (plan.json, job.json, rank logs, events...),
    the registry entry, --summary-json / --junit and ``mslaunch report``'s output are 0600, every
    folder 0700 (rank logs and the report were 0644 and the report folder 0755); the job directory
    is new, below folders that do not exist yet, and mslaunch creates it 0700."""
    e = Env(tmp_path)
    (e.work / "secrets.env").write_text("FILE_SECRET=from-the-env-file\n")
    job_dir, out = e.work / "new" / "deeper" / "job", e.work / "ci"
    out.mkdir()

    def umask_022():
        os.umask(0o022)

    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--quiet",
        "--no-secret-patterns",  # values not marked secret: written, so the modes must protect them
        "--env",
        "CLI_SECRET=from-the-cli",
        "--env-file",
        "secrets.env",
        "--log-dir",
        str(job_dir),
        "--summary-json",
        str(out / "summary.json"),
        "--junit",
        str(out / "junit.xml"),
        "--no-python",
        sys.executable,
        PROG,
        "env",
        env=e.environ,
        cwd=str(e.work),
        timeout=120,
        preexec_fn=umask_022,
    )
    assert r.returncode == 0, r.stderr
    # the secrets are where the modes must protect them
    assert "from-the-env-file" in (job_dir / "plan.json").read_text()
    for log in ("worker_0.log", "worker_1.log"):
        text = (job_dir / log).read_text()
        assert "CLI_SECRET=from-the-cli" in text and "FILE_SECRET=from-the-env-file" in text, log
    assert "CLI_SECRET=from-the-cli" in (job_dir / "job.json").read_text()
    (entry,) = e.registry()
    assert "CLI_SECRET=from-the-cli" in (e.home / "jobs" / entry).read_text()
    assert not_private(job_dir) == []
    assert not_private(e.home / "jobs") == []
    assert [(n, oct(stat.S_IMODE(os.stat(out / n).st_mode))) for n in sorted(os.listdir(out))] == [
        ("junit.xml", "0o600"),
        ("summary.json", "0o600"),
    ]
    pytest.importorskip("matplotlib")
    saved = os.umask(0o022)  # the report starts nothing: in this process, under the same umask
    try:
        rep = run_cli("report", "--log-dir", str(job_dir), env=e.environ)
    finally:
        os.umask(saved)
    assert rep.returncode == 0, rep.stderr
    assert sorted(os.listdir(job_dir / "report")) == [
        "goodput.png",
        "loss.png",
        "report.html",
        "step_time.png",
        "throughput.png",
        "timeline.png",
    ]
    assert not_private(job_dir) == []
    e.assert_gone()


def test_log_dir_that_is_not_empty_is_refused(tmp_path):
    e = Env(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    os.chmod(user, 0o1777)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "train.py").write_text("")
    finished = tmp_path / "finished"
    assert e.run("--log-dir", str(finished)).returncode == 0
    os.chmod(finished, 0o755)
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    e.assert_gone()
    first = e.started()
    cases = [
        (["--log-dir", str(user)], user, "is not empty (1 entries: notes.txt)"),
        (["--log-dir", "."], cwd, "is not empty (1 entries: train.py)"),
        (["--log-dir", str(a_file)], a_file, "exists and is not a directory"),
        (["--log-dir", str(a_file / "sub")], a_file, "cannot create the job directory's parent"),
    ]
    for opts, path, fragment in cases:
        before = snapshot(path)
        r = e.run(*opts, cwd=cwd)  # refused by the job's start (the folder is claimed there)
        one_line_error(r, 2, fragment)
        assert snapshot(path) == before, path
    assert e.started() == first and len(e.registry()) == 1  # only the finished job

    # a job dir whose job did not finish (no summary.json) is refused and left as it is
    unfinished = finished
    os.unlink(unfinished / "summary.json")
    before = snapshot(unfinished)
    one_line_error(e.run("--log-dir", str(unfinished), cwd=cwd), 2, "holds a job that did not finish")
    assert snapshot(unfinished) == before


def test_log_dir_of_a_finished_job_is_reused_and_keeps_one_previous_job(tmp_path):
    """msrun users re-run with the same --log_dir: the finished job moves to .previous/; the directory
    is made 0700 again (its files hold --env values), with one line saying so."""
    e = Env(tmp_path)
    d = tmp_path / "msrun_log"
    ids = []
    for k in range(3):
        r = e.run("--log-dir", str(d), "--job-id", f"again{k}")
        assert r.returncode == 0, r.stderr
        assert ("mode 0755 changed to 0700" in r.stderr) == (k == 1), r.stderr
        ids.append(f"again{k}")
        if k == 0:
            os.chmod(d, 0o755)
        with open(d / "summary.json") as fh:
            assert json.load(fh)["job_id"] == ids[-1]
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert sorted(os.listdir(d)) == [
        ".previous",
        "events.jsonl",
        "job.json",
        "plan.json",
        "scheduler.log",
        "summary.json",
        "worker_0.log",
    ]
    with open(d / ".previous" / "summary.json") as fh:
        assert json.load(fh)["job_id"] == "again1"  # one previous job kept; the one before it is gone
    e.assert_gone()


def test_log_dir_lock_refuses_a_second_run(tmp_path):
    e = Env(tmp_path)
    # someone holds the lock of an (otherwise empty) job dir: the run is refused, nothing starts
    held = tmp_path / "held"
    held.mkdir()
    fd = os.open(held / "job.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = e.run("--log-dir", str(held))
        one_line_error(r, 1, f"{held}: another mslaunch (pid {os.getpid()}) is running a job in this directory")
    finally:
        os.close(fd)
    assert sorted(os.listdir(held)) == ["job.lock"] and e.started() == [] and e.registry() == []

    # two runs started together on one --log-dir: exactly one runs (until stopped), the other is refused, every time
    for k in range(3):
        d = tmp_path / f"race{k}"
        procs = [e.popen("--log-dir", str(d), "--job-id", f"race{k}-{i}", mode=("hang",)) for i in range(2)]
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "neither run ended"
            time.sleep(0.05)
        loser = [p for p in procs if p.poll() is not None][0]
        winner = [p for p in procs if p is not loser][0]
        _, err = loser.communicate()
        assert loser.returncode == 1 and len(err.splitlines()) == 1 and f"{d}: another mslaunch (pid " in err, err
        log = d / "worker_0.log"
        while not (log.exists() and "rank0 started" in log.read_text()):  # the winner's rank runs
            assert winner.poll() is None and time.monotonic() < deadline, "the winner's rank did not start"
            time.sleep(0.05)
        winner.send_signal(signal.SIGTERM)
        winner.communicate(timeout=120)
        assert winner.returncode == 143
        summary = json.loads((d / "summary.json").read_text())
        assert summary["status"] == "stopped" and len(summary["processes"]) == 2  # one job's scheduler + rank
        e.assert_gone()


def test_lost_job_is_never_signalled(tmp_path):
    """A job whose mslaunch was SIGKILLed is `lost`; `stop` refuses it even when its recorded pid is alive again."""
    e = Env(tmp_path)
    d = tmp_path / "job"
    p = e.popen("--log-dir", str(d), "--job-id", "victim", mode=("hang",))
    e.wait_started(2)
    st = e.cli("status", "victim")
    assert st.returncode == 0 and st.stdout.startswith("job victim: running\n"), st.stdout
    p.kill()
    p.communicate(timeout=60)
    e.assert_gone()
    tail = e.cli("logs", "tail", "-f", "victim")  # returns: nobody runs the job any more
    assert tail.returncode == 0 and "[rank 0] rank0 started" in tail.stdout, tail.stderr
    # the recorded pid now belongs to an unrelated live process (pid reuse)
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        job = json.loads((d / "job.json").read_text())
        job["pid"] = bystander.pid
        (d / "job.json").write_text(json.dumps(job))
        for ref in ("victim", str(d)):
            st = e.cli("status", ref)
            assert st.returncode == 1 and st.stdout.startswith("job victim: lost\n"), st.stdout
            stop = e.cli("stop", ref)
            one_line_error(stop, 1, "job victim is not running (state: lost)")
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_ci_outputs_checked_before_start(tmp_path):
    e = Env(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    existing = tmp_path / "existing"
    existing.mkdir()
    cases = [
        (
            "--summary-json",
            str(tmp_path / "missing" / "s.json"),
            f"--summary-json {tmp_path / 'missing' / 's.json'}: folder {tmp_path / 'missing'} does not exist",
        ),
        ("--junit", str(tmp_path / "missing" / "deeper" / "j.xml"), "does not exist; create it first"),
        ("--summary-json", str(existing), f"--summary-json {existing}: is a directory"),
        ("--junit", str(existing) + "/", "is a directory"),
        ("--junit", str(a_file / "j.xml"), f"{a_file} is not a folder"),
        ("--summary-json", "", "--summary-json: needs a file name"),
    ]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        os.chmod(ro, 0o555)
        cases.append(("--junit", str(ro / "j.xml"), "is not writable"))
    for flag, path, fragment in cases:
        for detach in ((), ("--detach",)):
            d = tmp_path / "job"
            r = e.refused("--log-dir", str(d), flag, path, *detach)
            one_line_error(r, 2, fragment)
            assert not d.exists()
    assert (
        e.started() == [] and e.registry() == [] and sorted(os.listdir(existing)) == [] and a_file.read_text() == "x\n"
    )
    assert not (tmp_path / "missing").exists()


def test_ci_output_lost_at_the_end_keeps_exit_code_and_table(tmp_path):
    e = Env(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    keep = tmp_path / "keep"
    keep.mkdir()
    d = tmp_path / "job"
    p = e.popen(
        "--log-dir",
        str(d),
        "--summary-json",
        str(out / "s.json"),
        "--junit",
        str(keep / "j.xml"),
        mode=("hang",),
        quiet=False,
    )
    e.wait_started(2)
    os.rmdir(out)  # the folder vanishes while the job runs
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err  # the job's exit code (stopped by SIGTERM), not the write failure's
    errors = [line for line in err.splitlines() if line.startswith("mslaunch: error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"mslaunch: error: --summary-json: {out / 's.json'}: cannot write: folder {out} does not exist"
    )
    assert "stopped" in err and "rank 0" in err  # the result table
    assert json.loads((d / "summary.json").read_text())["status"] == "stopped"
    assert (keep / "j.xml").read_text().startswith('<?xml version="1.0" encoding="UTF-8"?>')
    e.assert_gone()
