"""The long-job flags on the command line: passed through sbatch, bad values refused before anything starts."""

from __future__ import annotations

import pytest

from tests.harness.cli import run_cli  # refusals and dry runs: in this process


def test_sbatch_passes_the_long_job_flags_to_run(tmp_path):
    (tmp_path / "train.py").write_text("print('train')\n")  # sbatch checks that the program is there
    r = run_cli(
        "sbatch",
        "--dry-run",
        "-N",
        "1",
        "--hang-timeout",
        "10",
        "--first-step-timeout",
        "600",
        "--stopped-timeout",
        "off",
        "--max-restarts",
        "2",
        "--restart-delay",
        "10",
        "train.py",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if " -m launcher run " in x)
    assert (
        "--hang-timeout 10 --first-step-timeout 600 --stopped-timeout off --max-restarts 2 --restart-delay 10 train.py"
        in line
    )


@pytest.mark.parametrize(
    "flags,field",
    [
        (("--restart-delay", "-1"), "--restart-delay"),
        (("--first-step-timeout", "0"), "--first-step-timeout"),
        (("--hang-timeout", "-5"), "--hang-timeout"),
        (("--stopped-timeout", "-1"), "--stopped-timeout"),
        (("--straggler", "loud"), "--straggler"),
        (("--straggler", "warn:1"), "--straggler"),
        (("--straggler", "replace:x"), "--straggler"),
    ],
)
def test_bad_values_are_refused_with_one_line(tmp_path, flags, field):
    r = run_cli("run", "--np", "1", "--log-dir", str(tmp_path / "job"), *flags, "x.py", cwd=tmp_path)
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "job").exists()
