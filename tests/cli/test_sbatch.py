"""``mslaunch sbatch --dry-run``: the batch script (no Slurm needed), and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.cli.sbatch import render_script
from tests.cli.bad_run_options import BAD_RUN_OPTIONS, NOT_VALIDATED, case_ids
from tests.harness.cli import run_cli, run_process


def test_render_script_whole_text() -> None:
    text = render_script(
        job_id="j1",
        job_dir="/jobs/j 1",
        cwd="/work",
        python="/py",
        directives=["--nodes=3", "--requeue"],
        run_args=["--np", "6", "train.py", "--lr", "0.1"],
        requeue=True,
        environ_conf=None,
    )
    assert text == (
        "#!/bin/bash\n"
        "#SBATCH --nodes=3\n"
        "#SBATCH --requeue\n"
        "# Written by 'mslaunch sbatch': runs the job inside the allocation with --launcher slurm.\n"
        "set -u\n"
        "cd /work\n"
        "K=${SLURM_RESTART_COUNT:-0}\n"
        "if [ \"$K\" -gt 0 ]; then LOG_DIR='/jobs/j 1'/attempt_$K; else LOG_DIR='/jobs/j 1'; fi\n"
        '/py -m launcher run --launcher slurm --job-id j1 --log-dir "$LOG_DIR" --tee none --np 6 train.py --lr 0.1 &\n'
        "pid=$!\n"
        "trap 'kill -USR1 $pid 2>/dev/null' USR1\n"
        "trap 'kill -TERM $pid 2>/dev/null' TERM INT\n"
        "while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done\n"
        '/py -m launcher.execution.slurm.requeue "$LOG_DIR/summary.json"\n'
        "exit $rc\n"
    )


@pytest.mark.parametrize(
    "summary, restarts, count, expected",
    [
        ({"status": "preempted"}, "0", 0, True),  # SIGUSR1 warning, or a preemption that signalled the steps
        ({"status": "preempted"}, "", 0, True),  # Slurm could not be asked: requeue (the run asked for it)
        ({"status": "preempted"}, "2", 1, False),  # Slurm requeues it already (scontrol requeue, REQUEUE mode)
        ({"status": "preempted"}, "1", 1, True),  # a requeued run preempted again
        ({"status": "stopped"}, "0", 0, False),
        ({"status": "failed", "message": "preempted"}, "0", 0, False),
        (None, "0", 0, False),  # no summary (mslaunch was killed)
    ],
)
def test_the_script_requeues_a_preempted_run_once(summary, restarts, count, expected) -> None:
    from launcher.execution.slurm.requeue import should_requeue

    assert should_requeue(summary, {"Restarts": restarts} if restarts else {}, count) is expected


def test_requeue_step_outside_slurm_does_nothing(tmp_path) -> None:
    (tmp_path / "summary.json").write_text('{"status": "preempted"}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    res = subprocess.run(
        [sys.executable, "-m", "launcher.execution.slurm.requeue", str(tmp_path / "summary.json")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert (res.returncode, res.stdout) == (1, "")


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return run_process("sbatch", *args, timeout=60, cwd=str(tmp_path), env=env)


def test_dry_run_prints_the_script_and_writes_nothing(tmp_path) -> None:
    (tmp_path / "train.py").write_text("")
    res = _run(
        tmp_path,
        "-N",
        "3",
        "--ntasks-per-node",
        "2",
        "--signal",
        "USR1@90",
        "--requeue",
        "--sbatch-arg=--qos=high",
        "--dry-run",
        "--job-id",
        "abc",
        "--np",
        "6",
        "train.py",
        "--epochs",
        "2",
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    job_dir = os.path.join(str(tmp_path), "mslaunch_logs", "abc")
    assert lines[:9] == [
        "#!/bin/bash",
        "#SBATCH --job-name=mslaunch-abc",
        f"#SBATCH --output={job_dir}/slurm.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --signal=B:USR1@90",
        "#SBATCH --requeue",
        "#SBATCH --qos=high",
    ]
    run_line = next(line for line in lines if " -m launcher run " in line)
    assert run_line.endswith('--job-id abc --log-dir "$LOG_DIR" --tee none --np 6 train.py --epochs 2 &')
    assert not os.path.exists(os.path.join(str(tmp_path), "mslaunch_logs"))


def test_bad_input_is_one_line(tmp_path) -> None:
    for args, needle in (
        (["--signal", "KILL@5", "x.py"], "--signal"),
        (["--dry-run", "--launcher", "ssh", "x.py"], "--launcher"),
        (["--dry-run", "--np", "2"], "SCRIPT"),
    ):
        res = _run(tmp_path, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr and "Traceback" not in res.stderr, (
            res.stderr
        )


def test_module_and_its_arguments_go_to_run(tmp_path) -> None:
    res = _run(tmp_path, "--dry-run", "--job-id", "m1", "--np", "2", "-m", "pkg.train", "--log-dir", "x", "--lr", "1")
    assert res.returncode == 0, res.stderr
    run_line = next(line for line in res.stdout.splitlines() if " -m launcher run " in line)
    # --log-dir after the module belongs to the module ('--' keeps it so for run)
    assert run_line.endswith('--job-id m1 --log-dir "$LOG_DIR" --tee none --np 2 -m pkg.train -- --log-dir x --lr 1 &')


def test_flags_of_run_take_no_value(tmp_path) -> None:
    """Which run options take no value is read from the run command: flags (ssh ones and
    ``--x/--no-x`` pairs included) never swallow the script that follows them."""
    (tmp_path / "train.py").write_text("")
    res = _run(
        tmp_path,
        "--dry-run",
        "--job-id",
        "f1",
        "--np",
        "2",
        "--no-sched-wait",
        "--ssh-accept-new",
        "--quiet",
        "train.py",
        "--epochs",
        "1",
    )
    assert res.returncode == 0, res.stderr
    run_line = next(line for line in res.stdout.splitlines() if " -m launcher run " in line)
    assert run_line.endswith("--tee none --np 2 --no-sched-wait --ssh-accept-new --quiet train.py --epochs 1 &"), (
        run_line
    )


# ---------------------------------------------------------------- submit-time checks (issue 27)


def _main(monkeypatch, capsys, tmp_path, *args: str):
    """``mslaunch ARGS`` in this process, outside any Slurm allocation: ``(exit code, stdout, stderr)``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    r = run_cli(*args, env=env, cwd=str(tmp_path))
    return r.returncode, r.stdout, r.stderr


def _refused(code: int, out: str, err: str, needle: str) -> None:
    assert code == 2, (code, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("mslaunch: error: "), err
    assert needle in err and "Traceback" not in err, err


def _run_options(command):
    return {p.name: list(p.opts) + list(p.secondary_opts) for p in command.params}


def test_every_run_option_has_a_bad_case() -> None:
    """New run options (and so new run validations) must join the table of bad cases."""
    import typer

    from launcher.cli.app import _register, app

    _register()
    run = typer.main.get_command(app).commands["run"]
    covered = set()
    for _id, options, _needle, _real in BAD_RUN_OPTIONS:
        for name, opts in _run_options(run).items():
            if any(o.split("=")[0] in opts for o in options if o.startswith("-")):
                covered.add(name)
    missing = set(_run_options(run)) - covered - set(NOT_VALIDATED)
    assert not missing, f"run options without a bad case in tests/cli/bad_run_options.py: {sorted(missing)}"
    assert not covered & set(NOT_VALIDATED), covered & set(NOT_VALIDATED)


@pytest.mark.parametrize("case", BAD_RUN_OPTIONS, ids=case_ids())
def test_every_run_validation_error_is_refused_by_sbatch(case, monkeypatch, capsys, tmp_path) -> None:
    """``run`` refuses the case (so it is a run validation), and ``sbatch --dry-run`` refuses it
    at submit time the same way: one line, exit 2, nothing printed or written."""
    _id, options, needle, real = case
    (tmp_path / "prog.py").write_text("")
    code, out, err = _main(
        monkeypatch,
        capsys,
        tmp_path,
        "run",
        *(() if real else ("--dry-run",)),
        "--np",
        "1",
        "--cpu-tune",
        "off",
        *options,
        "prog.py",
    )
    assert code == 2 and needle in " ".join(err.split()), err  # (run's parser's usage errors are typer's box)
    code, out, err = _main(monkeypatch, capsys, tmp_path, "sbatch", "--dry-run", "--np", "1", *options, "prog.py")
    _refused(code, out, err, needle)
    assert out == ""
    assert sorted(os.listdir(tmp_path)) == ["prog.py"]


def _script(monkeypatch, capsys, tmp_path, *args: str) -> str:
    (tmp_path / "prog.py").write_text("")
    before = sorted(os.listdir(tmp_path))
    code, out, err = _main(monkeypatch, capsys, tmp_path, "sbatch", "--dry-run", "--job-id", "j1", *args)
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == before  # nothing written
    return out


def _shape_lines(script: str):
    keys = ("#SBATCH --nodes", "#SBATCH --ntasks", "#SBATCH --ntasks-per-node")
    return [line for line in script.splitlines() if line.split("=")[0] in keys]


@pytest.mark.parametrize(
    "args, lines",
    [
        (["--np", "16", "--per-host", "8"], ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8"]),
        (["--np", "4", "--per-host", "2"], ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2"]),
        (["--np", "4"], ["#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=4"]),
        (["-N", "2", "--np", "4"], ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2"]),
        (["--ntasks-per-node", "4", "--np", "8"], ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4"]),
        (["-N", "3", "--ntasks-per-node", "2", "--np", "6"], ["#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=2"]),
        (["--ntasks", "6", "--np", "6"], ["#SBATCH --ntasks=6"]),
        (["-N", "2"], ["#SBATCH --nodes=2"]),
    ],
)
def test_derived_sbatch_lines(args, lines, monkeypatch, capsys, tmp_path) -> None:
    assert _shape_lines(_script(monkeypatch, capsys, tmp_path, *args, "prog.py")) == lines


def test_options_in_either_order_make_the_same_script(monkeypatch, capsys, tmp_path) -> None:
    """sbatch's options are sbatch's wherever they stand before SCRIPT, run's are run's."""
    one = _script(
        monkeypatch,
        capsys,
        tmp_path,
        "-N",
        "1",
        "--job-name",
        "X",
        "--np",
        "1",
        "--grace",
        "2",
        "prog.py",
        "--job-name",
        "Y",
    )
    two = _script(
        monkeypatch, capsys, tmp_path, "--np", "1", "--job-name", "X", "--grace=2", "-N1", "prog.py", "--job-name", "Y"
    )
    assert "#SBATCH --job-name=X" in one.splitlines()
    run_line = next(line for line in one.splitlines() if " -m launcher run " in line)
    assert run_line.endswith("--tee none --np 1 --grace 2 prog.py --job-name Y &"), (
        run_line
    )  # after SCRIPT: the program's
    assert two.replace("--grace=2", "--grace 2") == one


def test_dry_run_and_help_anywhere_before_script_are_sbatchs(monkeypatch, capsys, tmp_path) -> None:
    # without Slurm here, a submission would fail: --dry-run after run options must not submit
    out = _script(monkeypatch, capsys, tmp_path, "--np", "1", "--grace", "1", "--dry-run", "prog.py")
    assert out.startswith("#!/bin/bash\n") and "--dry-run" not in out
    code, out, _err = _main(monkeypatch, capsys, tmp_path, "sbatch", "--np", "1", "--help")
    assert code == 0 and "Usage: mslaunch sbatch [OPTIONS] SCRIPT [ARGS]..." in " ".join(out.split()), out
    code, out, _err = _main(monkeypatch, capsys, tmp_path, "sbatch", "--help")
    assert code == 0 and "--ntasks-per-node" in out


def test_shared_option_names_are_the_documented_ones() -> None:
    """Names both commands have take sbatch's meaning; docs/slurm.md lists each of them."""
    import typer

    from launcher.cli.app import _register, app
    from launcher.cli.sbatch_args import option_names, shared_names

    _register()
    group = typer.main.get_command(app)
    shared = shared_names(
        option_names(group.commands["sbatch"], ("-h", "--help")), option_names(group.commands["run"], ("-h", "--help"))
    )
    assert shared == ["--dry-run", "--help", "-h"]
    doc = open(
        os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "slurm.md")
    ).read()
    table = [line for line in doc.splitlines() if line.startswith("| `")]
    for name in shared + [
        "--job-id",
        "--log-dir",
        "--job-name",
        "-n",
        "-m",
        "-e",
        "-H",
        "-q",
        "-d",
        "--launcher",
        "--json",
        "--tee",
    ]:
        assert any(f"`{name}`" in row.split("|")[1] for row in table), name


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--np", "1", "--launcher", "ssh", "prog.py"], "--launcher: is set by mslaunch sbatch"),
        (["--np", "1", "-d", "prog.py"], "-d: is set by mslaunch sbatch"),
        (["--np", "1", "--json", "prog.py"], "--json goes with 'mslaunch run --dry-run'"),
        (["--np", "1", "--join", "False", "prog.py"], "--join False would end the batch job"),
        (
            ["--np", "1", "--sbatch-arg=--nodes=2", "prog.py"],
            "give -N/--ntasks/--ntasks-per-node as mslaunch sbatch options",
        ),
        (["--np", "1", "--sbatch-arg", "-n4", "prog.py"], "give -N/--ntasks/--ntasks-per-node"),
        (["--np", "1", "--grace"], "--grace: needs a value"),
        (["--np", "1", "--exclusive=yes", "prog.py"], "--exclusive: takes no value"),
        (["--np", "1", "--job-name", "X"], "missing SCRIPT"),
        (["-N", "2-x", "--np", "1", "prog.py"], "expected a node count N or MIN-MAX"),
        (
            ["--np", "1", "--per-host", "4", "--ntasks-per-node", "2", "prog.py"],
            "--per-host 4 is more than the --ntasks-per-node 2",
        ),
    ],
)
def test_sbatchs_own_refusals(args, needle, monkeypatch, capsys, tmp_path) -> None:
    (tmp_path / "prog.py").write_text("")
    code, out, err = _main(monkeypatch, capsys, tmp_path, "sbatch", "--dry-run", *args)
    _refused(code, out, err, needle)
    assert sorted(os.listdir(tmp_path)) == ["prog.py"]


def test_checks_that_need_real_node_names_are_left_to_the_allocation(monkeypatch, capsys, tmp_path) -> None:
    (tmp_path / "hccn").mkdir()
    (tmp_path / "hccn" / "gpu7.conf").write_text("address_0=192.1.1.1\naddress_1=192.1.1.2\n")
    out = _script(
        monkeypatch, capsys, tmp_path, "-N", "2", "--np", "4", "-H", "gpu[7-8]", "--include", "gpu7@gpu8", "prog.py"
    )
    assert "-H 'gpu[7-8]' --include gpu7@gpu8 prog.py &" in out
    _script(monkeypatch, capsys, tmp_path, "--np", "2", "--method", "ranktable", "--hccn-dir", "hccn", "prog.py")
    _script(
        monkeypatch, capsys, tmp_path, "--np", "2", "--method", "ranktable", "--hccn", "gpu7=hccn/gpu7.conf", "prog.py"
    )


def test_a_refused_submission_leaves_no_script_behind(monkeypatch, capsys, tmp_path) -> None:
    """sbatch (a stand-in on PATH) refuses the job: no job dir, no mslaunch_logs/ left."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2\nexit 1\n"
    )
    (bindir / "sbatch").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text("")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    code, out, err = _main(monkeypatch, capsys, work, "sbatch", "-p", "nope", "--np", "1", "prog.py")
    assert code == 1 and "Invalid partition name" in err and out == "", err
    assert sorted(os.listdir(work)) == ["prog.py"]


def test_a_submitted_jobs_script_and_records_are_0600_under_umask_022(monkeypatch, capsys, tmp_path) -> None:
    """sbatch.sh and sbatch.json hold mslaunch's argv (--env values): 0600 (the script was 0700;
    sbatch reads it, nothing runs it), the job dir 0700, the registry entry 0600.  A secret's
    value is in none of them: it is in secrets.json (0600), which the script's run reads."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bindir / "sbatch").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text("")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("MSLAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CRED", "cred-from-env")
    old = os.umask(0o022)
    try:
        code, out, err = _main(
            monkeypatch,
            capsys,
            work,
            "sbatch",
            "--log-dir",
            "job",
            "--np",
            "1",
            "--env",
            "PLAIN=plain_x",
            "-eHF_TOKEN=hf_x",
            "--secret-env",
            "CRED",
            "prog.py",
        )
    finally:
        os.umask(old)
    assert code == 0, err
    job = work / "job"
    script, record = (job / "sbatch.sh").read_text(), (job / "sbatch.json").read_text()
    assert "PLAIN=plain_x" in script and "PLAIN=plain_x" in record
    assert f"--secret-env-file {job / 'secrets.json'}" in script and "--secret-env CRED" in script
    assert not any(v in t for v in ("hf_x", "cred-from-env") for t in (script, record)), (script, record)
    assert "HF_TOKEN=<secret>" in record
    assert json.loads((job / "secrets.json").read_text()) == {"HF_TOKEN": "hf_x", "CRED": "cred-from-env"}
    modes = {
        p.name: oct(p.stat().st_mode & 0o777) for p in [job, *job.iterdir(), *(tmp_path / "home" / "jobs").iterdir()]
    }
    assert set(modes.values()) == {"0o600", "0o700"} and modes.pop("job") == "0o700", modes
    assert sorted(modes) == sorted(
        ["sbatch.sh", "sbatch.json", "secrets.json", *os.listdir(tmp_path / "home" / "jobs")]
    )
    assert set(modes.values()) == {"0o600"}, modes
    for entry in (tmp_path / "home" / "jobs").iterdir():
        assert "hf_x" not in entry.read_text()


def test_the_script_of_a_job_with_secrets_removes_them_at_its_end_unless_it_may_be_requeued() -> None:
    base = dict(job_id="j", job_dir="/j", cwd="/w", python="/py", directives=[], run_args=["p.py"])
    assert "rm -f /j/secrets.json\nexit $rc" in render_script(**base, requeue=False, secrets_file="/j/secrets.json")
    assert "rm -f" not in render_script(**base, requeue=True, secrets_file="/j/secrets.json")
    assert "rm -f" not in render_script(**base, requeue=False)


def test_the_scripts_run_has_no_env_value_on_its_command_line_and_gets_them_back(tmp_path) -> None:
    """The run the script starts shows ``NAME=<hidden>``; its hidden arguments travel in its
    environment and :func:`restore_argv` (what ``python -m launcher`` does first) gives the
    command line the user asked for, whatever the values hold."""
    import json
    import shlex
    import subprocess

    from launcher.cli.hiddenenv import HIDDEN_ENV_VAR, restore_argv

    values = ["A=plain", "B=x y 'q' \"d\" $(touch pwned) `id` \n, := -x é", "C="]
    run_args = ["--np", "2"] + [x for v in values for x in ("--env", v)] + ["--env=D=d=1", "p.py", "--env", "E=arg"]
    script = render_script(
        job_id="j",
        job_dir="/j",
        cwd="/w",
        python="/py",
        directives=[],
        run_args=run_args,
        requeue=False,
        env_assignments=values + ["D=d=1"],
    )
    line = next(ln for ln in script.splitlines() if " -m launcher run " in ln)
    shown = line[line.index("/py -m launcher") :]
    assert "plain" not in shown and "pwned" not in shown and "d=1" not in shown
    assert "A=<hidden>" in shown and "--env=D=<hidden>" in shown and "E=arg" in shown  # the program's own stay
    # what the shell hands the run: its argv and the variable (a real sh evaluates the line)
    probe = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('%s')]))" % HIDDEN_ENV_VAR
    text = line.replace("/py -m launcher", shlex.quote(sys.executable) + " -c " + shlex.quote(probe) + " m")
    text = text.replace(" &", "")
    out = subprocess.run(["sh", "-c", "LOG_DIR=/j\n" + text], capture_output=True, text=True, check=True).stdout
    argv, hidden = json.loads(out)
    env = {HIDDEN_ENV_VAR: hidden}
    restored = restore_argv(["mslaunch", *argv[1:]], env)
    assert restored[1:] == [
        "run",
        "--launcher",
        "slurm",
        "--job-id",
        "j",
        "--log-dir",
        "/j",
        "--tee",
        "none",
        *run_args,
    ]
    assert env == {}  # taken out of the environment: no rank inherits it


# ---------------------------------------------------------------- #SBATCH values (issue 45)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--job-name", "a\ntouch x"], "--job-name"),
        (["--log-dir", "logs\ntouch x"], "--log-dir"),
        (["-p", "gpu\rx"], "--partition"),
        (["--account", "a\nb"], "--account"),
        (["--time", "1:00\n#"], "--time"),
        (["--gres", "gpu:1\nrm -rf x"], "--gres"),
        (["--sbatch-arg=--qos=high\rx"], "--sbatch-arg"),
    ],
)
def test_a_value_that_would_break_a_sbatch_line_is_refused(args, field, monkeypatch, capsys, tmp_path) -> None:
    (tmp_path / "prog.py").write_text("")
    code, out, err = _main(monkeypatch, capsys, tmp_path, "sbatch", "--dry-run", *args, "--np", "1", "prog.py")
    _refused(code, out, err, f"mslaunch: error: {field}: ")
    assert out == "" and sorted(os.listdir(tmp_path)) == ["prog.py"]


def test_values_with_blanks_quotes_and_hashes_are_quoted_for_sbatch(monkeypatch, capsys, tmp_path) -> None:
    from tests.planning.backends.test_sbatch import _sbatch_arguments

    out = _script(
        monkeypatch,
        capsys,
        tmp_path,
        "--job-name",
        'my "big" job #1',
        "--log-dir",
        "my logs/run 1",
        "-p",
        "gpu",
        "--sbatch-arg=--comment=two words # and a hash",
        "--np",
        "1",
        "prog.py",
    )
    lines = [line for line in out.splitlines() if line.startswith("#SBATCH ")]
    read = [arg for line in lines for arg in _sbatch_arguments(line)]
    assert read[:2] == ['--job-name=my "big" job #1', f"--output={tmp_path}/my logs/run 1/slurm.out"]
    assert "#SBATCH --partition=gpu" in lines  # a plain value is written as it is
    assert "--comment=two words # and a hash" in read
    assert len(read) == len(lines)  # one argument per line: nothing split, nothing cut at a '#'
