"""Corrupted job dirs and registry entries: `ps`, `status`, `logs tail`, `logs ls`, `stop` never
traceback; a bad job is shown as `corrupt` with its reason and affects only itself.

One real job (cheap stand-in ranks, no MindSpore) is run once; each test copies it into a fresh
`$MSLAUNCH_HOME` as one good job and, per value of its class, one damaged copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Callable, Dict, Tuple

import pytest

from tests.harness.cli import run_cli, run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")
GOOD = "good-job"


def cli(home: str, *args: str, cwd: str = None) -> subprocess.CompletedProcess:
    """``mslaunch ARGS`` with ``home`` as MSLAUNCH_HOME (in this process: these commands only read)."""
    return run_cli(*args, env=dict(os.environ, MSLAUNCH_HOME=home, COLUMNS="2000"), cwd=cwd)


def no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    """A finished job dir made by a real `mslaunch run` (1 rank + the scheduler)."""
    work = tmp_path_factory.mktemp("template")
    piddir = work / "pids"
    piddir.mkdir()
    env = dict(os.environ, MSLAUNCH_HOME=str(work / "home"), PIDDIR=str(piddir))
    r = run_process(
        "run",
        "--np",
        "1",
        "--master-port",
        "auto",
        "--quiet",
        "--job-id",
        "tmpl",
        "--log-dir",
        str(work / "job"),
        "--no-python",
        sys.executable,
        PROG,
        "ok",
        "0.05",
        env=env,
        cwd=str(work),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(work / "job")) == [
        "events.jsonl",
        "job.json",
        "plan.json",
        "scheduler.log",
        "summary.json",
        "worker_0.log",
    ]
    return str(work / "job")


def install(template: str, home: str, root: str, job_id: str) -> str:
    """Copy the template job as ``job_id`` (its files and registry entry rewritten); returns its dir."""
    dest = os.path.join(root, job_id)
    shutil.copytree(template, dest)
    for name in ("plan.json", "job.json", "summary.json"):
        path = os.path.join(dest, name)
        # as if planned in dest: its logs too (a job's logs are read only inside its own directory)
        data = json.loads(open(path).read().replace(json.dumps(template)[1:-1], json.dumps(dest)[1:-1]))
        data["job_id"] = job_id
        data["job_dir"] = dest
        open(path, "w").write(json.dumps(data))
    record = json.loads(open(os.path.join(dest, "job.json")).read())
    record.pop("state")
    os.makedirs(os.path.join(home, "jobs"), exist_ok=True)
    open(os.path.join(home, "jobs", f"{job_id}.json"), "w").write(json.dumps(record))
    return dest


def write(path: str, data: bytes) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "wb") as fh:
        fh.write(data)


Damage = Callable[[str, str], None]  # (job dir, registry entry path)


def check_isolation(template: str, tmp_path, cases: Dict[str, Tuple[Damage, str]], has_dir: bool = True) -> None:
    """Install a good job and one damaged job per case; every command copes, each bad job alone is corrupt.

    Args:
        cases: job id -> (function damaging that job, a fragment its reason must contain).
        has_dir: whether the damaged jobs still have a job directory (then `logs tail` shows its logs).
    """
    home, root = str(tmp_path / "home"), str(tmp_path / "jobs")
    os.makedirs(root)
    install(template, home, root, GOOD)
    for job_id, (damage, _) in cases.items():
        jdir = install(template, home, root, job_id)
        damage(jdir, os.path.join(home, "jobs", f"{job_id}.json"))

    ps = cli(home, "ps", "--all")
    no_traceback(ps)
    assert ps.returncode == 0, ps.stderr
    rows = {line.split("│")[1].strip(): line for line in ps.stdout.splitlines() if line.startswith("│")}
    assert "succeeded" in rows[GOOD]
    for job_id, (_, reason) in cases.items():
        assert "corrupt" in rows[job_id] and reason in rows[job_id], (job_id, rows.get(job_id))

    good_tail = cli(home, "logs", "tail", GOOD)
    assert good_tail.returncode == 0 and "[rank 0] rank0 done" in good_tail.stdout.splitlines(), good_tail.stderr
    good_status = cli(home, "status", GOOD)
    assert good_status.returncode == 0 and good_status.stdout.startswith(f"job {GOOD}: succeeded\n"), good_status.stdout

    # (`status --json` and `logs ls` share their reading with `status` and `logs tail`: checked for the first cases
    # only)
    first = list(cases)[:3]
    commands = [
        (job_id, cmd) for job_id in cases for cmd in (("status", job_id), ("logs", "tail", job_id), ("stop", job_id))
    ]
    commands += [(job_id, cmd) for job_id in first for cmd in (("status", job_id, "--json"), ("logs", "ls", job_id))]
    results = {c: cli(home, *c[1]) for c in commands}
    for job_id, (_, reason) in cases.items():
        st = results[(job_id, ("status", job_id))]
        no_traceback(st)
        assert st.returncode == 1, (job_id, st.stdout, st.stderr)
        assert st.stdout.startswith(f"job {job_id}: corrupt\n") and reason in st.stdout, (job_id, st.stdout)

        if job_id in first:
            sj = results[(job_id, ("status", job_id, "--json"))]
            data = json.loads(sj.stdout)
            assert sj.returncode == 1 and data["status"] == "corrupt" and reason in data["problem"], (job_id, sj.stdout)
            ls = results[(job_id, ("logs", "ls", job_id))]
            no_traceback(ls)
            assert ls.returncode == (0 if has_dir else 1), (job_id, ls.stderr)
            assert ("worker_0.log" in ls.stdout) == has_dir, ls.stdout

        tail = results[(job_id, ("logs", "tail", job_id))]
        no_traceback(tail)
        if has_dir:  # the logs are still shown, with one warning line
            assert tail.returncode == 0, (job_id, tail.stderr)
            assert (
                tail.stderr.startswith(f"mslaunch: warning: job {job_id} is corrupt: ")
                and len(tail.stderr.splitlines()) == 1
            )
            assert "[rank 0] rank0 done" in tail.stdout.splitlines()
        else:
            assert tail.returncode == 1 and tail.stdout == "", (job_id, tail.stdout)
            assert (
                tail.stderr.startswith(f"mslaunch: error: job {job_id} is corrupt: ")
                and len(tail.stderr.splitlines()) == 1
            ), tail.stderr

        stop = results[(job_id, ("stop", job_id))]
        no_traceback(stop)
        assert stop.returncode == 1, (job_id, stop.stdout, stop.stderr)
        assert (
            stop.stderr.startswith(f"mslaunch: error: job {job_id} is not running (state: corrupt: ")
            and len(stop.stderr.splitlines()) == 1
        )


def content(name: str, data: bytes) -> Damage:
    return lambda jdir, reg: write(os.path.join(jdir, name), data)


def fields(name: str, **changes) -> Damage:
    def damage(jdir: str, reg: str) -> None:
        path = os.path.join(jdir, name)
        obj = json.loads(open(path).read())
        for key, value in changes.items():
            if value is KeyError:
                del obj[key]
            else:
                obj[key] = value
        write(path, json.dumps(obj).encode())

    return damage


def test_summary_json_content(template, tmp_path):
    check_isolation(
        template,
        tmp_path,
        {
            "s-list": (content("summary.json", b"[1,2,3]"), "summary.json: holds a JSON array, not an object"),
            "s-string": (content("summary.json", b'"done"'), "holds a JSON string"),
            "s-empty": (content("summary.json", b""), "summary.json: empty file"),
            "s-truncated": (content("summary.json", b'{"status": "succ'), "summary.json: not valid JSON"),
            "s-binary": (content("summary.json", b"\xff\xfe\x00\x01{"), "summary.json: not UTF-8 text"),
            "s-deep": (content("summary.json", b"[" * 200000), "summary.json: not"),
            "s-nan": (content("summary.json", b'{"status": "failed", "exit_code": NaN}'), "NaN is not a JSON number"),
            "s-status": (fields("summary.json", status=5), "summary.json: status: must be a status word"),
            "s-exit": (fields("summary.json", exit_code="x"), "summary.json: exit_code: must be a whole number"),
            "s-cause": (fields("summary.json", root_cause="oops"), "summary.json: root_cause: must be an object"),
            "s-tail": (
                fields("summary.json", status="failed", root_cause={"name": "rank 0", "tail": [1, 2]}),
                "root_cause: must be an object whose 'tail'",
            ),
            "s-hugeint": (
                content("summary.json", b'{"status": "failed", "exit_code": ' + b"9" * 5000 + b"}"),
                "summary.json: not usable JSON",
            ),
        },
    )


def test_plan_and_job_json_fields(template, tmp_path):
    check_isolation(
        template,
        tmp_path,
        {
            "p-many": (
                fields("plan.json", world_size="many"),
                "plan.json: world_size: must be a whole number >= 0, got 'many'",
            ),
            "p-negative": (fields("plan.json", world_size=-1), "world_size: must be a whole number >= 0"),
            "p-bool": (fields("plan.json", world_size=True), "world_size: must be a whole number >= 0"),
            "p-float": (fields("plan.json", world_size=1.5), "world_size: must be a whole number >= 0"),
            "p-missing": (fields("plan.json", world_size=KeyError), "plan.json: world_size: missing"),
            "p-null": (content("plan.json", b"null"), "plan.json: holds a JSON null"),
            "j-pid": (fields("job.json", pid="x"), "job.json: pid: must be a process id"),
            "j-hugepid": (fields("job.json", pid=10**30), "job.json: pid: must be a process id"),
            "j-started": (fields("job.json", started="yesterday"), "job.json: started: must be a time"),
            "j-escape": (fields("job.json", job_id="../../x"), "job.json: job_id: must be a valid job id"),
            "j-other": (fields("job.json", job_id="someone-else"), "job_id 'someone-else' is not the registry's"),
        },
    )


def test_job_files_not_regular(template, tmp_path):
    big = lambda jdir, reg: os.truncate(os.path.join(jdir, "summary.json"), 65 * 1024 * 1024)  # noqa: E731 (sparse)

    def replace(name: str, make: Callable[[str], None]) -> Damage:
        def damage(jdir: str, reg: str) -> None:
            os.unlink(os.path.join(jdir, name))
            make(os.path.join(jdir, name))

        return damage

    def no_files(jdir: str, reg: str) -> None:
        for name in ("plan.json", "job.json", "summary.json"):
            os.unlink(os.path.join(jdir, name))

    check_isolation(
        template,
        tmp_path,
        {
            "f-dir": (replace("summary.json", os.mkdir), "summary.json: is not a regular file"),
            "f-passwd": (
                replace("summary.json", lambda p: os.symlink("/etc/passwd", p)),
                "summary.json: is a symbolic link",
            ),
            "f-zero": (replace("plan.json", lambda p: os.symlink("/dev/zero", p)), "plan.json: is a symbolic link"),
            "f-fifo": (
                replace("summary.json", os.mkfifo),
                "summary.json: is not a regular file",
            ),  # would block a plain open()
            "f-huge": (big, "summary.json: is 68157440 bytes, larger than"),
            "f-none": (no_files, "holds no job files"),
        },
    )


def test_registry_entries(template, tmp_path):
    def entry(data: bytes) -> Damage:
        return lambda jdir, reg: write(reg, data)

    def record(**changes) -> Damage:
        def damage(jdir: str, reg: str) -> None:
            obj = json.loads(open(reg).read())
            obj.update(changes)
            write(reg, json.dumps(obj).encode())

        return damage

    def link_to_good(jdir: str, reg: str) -> None:
        os.unlink(reg)
        os.symlink(os.path.join(os.path.dirname(reg), f"{GOOD}.json"), reg)

    def as_dir(jdir: str, reg: str) -> None:
        os.unlink(reg)
        os.mkdir(reg)

    nowhere = str(tmp_path / "nowhere")
    a_file = str(tmp_path / "a-file")
    open(a_file, "w").write("not a job\n")
    check_isolation(
        template,
        tmp_path,
        {
            "r-nowhere": (record(job_dir=nowhere), f"{nowhere}: the job directory does not exist"),
            "r-file": (record(job_dir=a_file), f"{a_file}: is not a directory"),
            "r-relative": (record(job_dir="relative/dir"), "job_dir: must be an absolute path"),
            "r-garbage": (entry(b"\x00\x01garbage"), "not valid JSON"),
            "r-list": (entry(b"[]"), "holds a JSON array, not an object"),
            "r-renamed": (record(job_id="not-my-name"), "job_id: names job 'not-my-name'"),
            "r-escape": (record(job_id="../../etc/x"), "job_id: must be a valid job id"),
            "r-symlink": (link_to_good, "is a symbolic link"),
            "r-dir": (as_dir, "is not a regular file"),
        },
        has_dir=False,
    )


def test_registry_entry_pointing_at_another_jobs_dir(template, tmp_path):
    """Two entries naming one dir: the one the dir does not belong to is corrupt, the other is fine."""
    home, root = str(tmp_path / "home"), str(tmp_path / "jobs")
    os.makedirs(root)
    good = install(template, home, root, GOOD)
    install(template, home, root, "intruder")
    reg = os.path.join(home, "jobs", "intruder.json")
    obj = json.loads(open(reg).read())
    obj["job_dir"] = good
    open(reg, "w").write(json.dumps(obj))
    st = cli(home, "status", "intruder")
    assert (
        st.returncode == 1
        and "corrupt" in st.stdout
        and f"job_id '{GOOD}' is not the registry's 'intruder'" in st.stdout
    )
    assert cli(home, "status", GOOD).returncode == 0


def test_registry_folder_unusable(tmp_path):
    """$MSLAUNCH_HOME/jobs is not a directory: `run` refuses before writing or starting anything;
    the job commands say why."""
    for make in (lambda p: p.write_text("x\n"), lambda p: os.symlink("/nonexistent/jobs", p)):
        home = tmp_path / f"home{len(os.listdir(tmp_path))}"
        home.mkdir()
        make(home / "jobs")
        job = tmp_path / "job"
        r = run_process(
            "run",
            "--np",
            "1",
            "--master-port",
            "auto",
            "--log-dir",
            str(job),
            "--no-python",
            "false",
            env=dict(os.environ, MSLAUNCH_HOME=str(home)),
            timeout=60,
        )
        assert r.returncode == 2 and r.stderr.startswith(
            f"mslaunch: error: {home / 'jobs'}: cannot create the job registry: "
        )
        assert len(r.stderr.splitlines()) == 1 and not job.exists(), r.stderr
        for args in (("ps",), ("status",), ("logs", "tail"), ("stop", "x")):
            c = cli(str(home), *args)
            assert c.returncode == 2 and c.stdout == "", (args, c.stdout)
            assert (
                c.stderr.startswith(f"mslaunch: error: {home / 'jobs'}: cannot read the job registry: ")
                and len(c.stderr.splitlines()) == 1
            ), (args, c.stderr)
