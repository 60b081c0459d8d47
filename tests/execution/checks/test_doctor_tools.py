"""doctor's backend columns come from the registry: every backend's tool is a column, checked
only for the job's backend (as the mpirun column always was)."""

from __future__ import annotations

from launcher.execution.backend import ToolCheck, doctor_checks
from launcher.execution.checks.doctor import CHECKS, Check, DoctorJob, check_names, check_rows
from launcher.execution.mpirun.backend import MPIRUN_CHECK
from launcher.planning.inventory.model import Host

SRUN = ToolCheck("srun", "srun", "apt-get install slurm-client")


def _job(tools, columns):
    hosts = (Host("a", 1), Host("b", 1))
    return DoctorJob(
        hosts=hosts,
        python={"a": "/py", "b": "/py"},
        script={"a": None, "b": None},
        module=None,
        exe=None,
        cwd=None,
        master=None,
        hccn_path=None,
        tools=tools,
        tool_columns=columns,
    )


def test_the_registry_gives_the_mpirun_column():
    assert MPIRUN_CHECK in doctor_checks()


def test_tool_columns_checked_for_the_jobs_backend_only():
    job = _job((SRUN,), ("mpirun", "srun"))
    assert check_names(job) == CHECKS + ("mpirun", "srun")
    probe = {
        "time": 100.0,
        "elapsed": 0.0,
        "python": "3.11.7",
        "mindspore": "2.10.0",
        "srun": "22.05.8",
        "mpirun": "4.1.4",
    }
    rows = {
        r.host: r for r in check_rows(job, {"a": (probe, 100.0, 100.0), "b": "connection refused"}, {"srun": "22.05.9"})
    }
    assert rows["a"].check("mpirun") == Check("mpirun", None)
    assert rows["a"].check("srun") == Check("srun", False, "22.05.8 differs from 22.05.9 on this machine")
    assert [c.name for c in rows["b"].checks] == list(CHECKS) + ["mpirun", "srun"]
    assert rows["b"].check("srun") == Check("srun", None, "unreachable")


def test_a_missing_tool_says_how_to_install_it():
    job = _job((SRUN,), ())
    probe = {"time": 100.0, "elapsed": 0.0, "python": "3.11.7", "mindspore": "2.10.0", "srun": None}
    (row, _) = check_rows(job, {"a": (probe, 100.0, 100.0), "b": (probe, 100.0, 100.0)}, {})
    assert row.check("srun") == Check("srun", False, "not installed (apt-get install slurm-client)")
