"""Bad ``mslaunch run`` options, one or more per run option: the table that drives the
submit-time check tests of ``mslaunch sbatch`` (``--dry-run`` in tests/cli/test_sbatch.py, real
submissions in tests/integration/test_slurm_sbatch.py).

Every option of ``run`` must have a bad case here or be listed in :data:`NOT_VALIDATED` with the
reason (``test_every_run_option_has_a_bad_case`` reads the options from the run command): a
new run option, or a new validation, comes with its case.

A case is ``(id, options, needle, real)``: ``options`` go between ``--np 1`` and ``prog.py``;
``needle`` is in the one-line error of both ``mslaunch run`` and ``mslaunch sbatch``; ``real``:
``mslaunch run --dry-run`` does not make the check (it writes nothing), a real run does.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

Case = Tuple[str, List[str], str, bool]

BAD_RUN_OPTIONS: List[Case] = [
    ("unknown-option", ["--bogus", "3"], "--bogus", False),
    ("np-zero", ["--np", "0"], "--np must be at least 1", False),
    ("np-not-int", ["--np", "abc"], "'--np'", False),
    ("per-host-zero", ["--per-host", "0"], "must be at least 1, got 0", False),
    ("method", ["--method", "nonsense"], "unknown method 'nonsense'", False),
    ("ranktable-no-ips", ["--method", "ranktable"], "device IPs", False),
    (
        "hccn-dir",
        ["--method", "ranktable", "--hccn-dir", "/nonexistent-hccn"],
        "no such folder /nonexistent-hccn",
        False,
    ),
    ("hccn", ["--method", "ranktable", "--hccn", "bad"], "expected HOST=PATH", False),
    ("launcher", ["--launcher", "nonsense"], "--launcher", False),
    ("hosts", ["--hosts", "node[1-"], "--hosts", False),
    ("host-list", ["-H", "node[1-"], "missing ']'", False),
    ("include", ["--include", "a:x"], "must be integers", False),
    ("exclude", ["--exclude", "@"], "empty host", False),
    ("master-port-range", ["--master-port", "70000"], "--master-port must be 1..65535", False),
    ("master-port-text", ["--master-port", "x"], "--master-port must be a port number", False),
    ("cluster-time-out", ["--cluster-time-out", "x"], "'--cluster-time-out'", False),
    ("env", ["--env", "NOEQUALS"], "NOEQUALS", False),
    ("env-file", ["--env-file", "no-such.env"], "no such env file", False),
    ("secret-env", ["--secret-env", "MSLAUNCH_TEST_UNSET_SECRET"], "is set nowhere", False),
    ("secret-env-name", ["--secret-env", "1BAD"], "invalid variable name", False),
    ("secret-env-file", ["--secret-env-file", "no-such.json"], "no such secret env file", False),
    ("secret-pattern", ["--secret-pattern", " "], "an empty pattern matches nothing", False),
    ("module", ["-m", "a/b.py"], "not a module name", False),
    ("no-python", ["--no-python"], "no program 'prog.py'", False),
    ("log-dir", ["--log-dir", ""], "--log-dir must not be empty", False),
    ("job-id", ["--job-id", "../x"], "bad job id", False),
    ("ssh-config", ["--ssh-config", "/nonexistent-ssh-config"], "no such ssh config file", False),
    ("ssh-start-timeout", ["--ssh-start-timeout", "0"], "--ssh-start-timeout must be > 0", False),
    ("ssh-connect-timeout", ["--ssh-connect-timeout", "x"], "'--ssh-connect-timeout'", False),
    ("cpu-tune", ["--cpu-tune", "bogus"], "unknown --cpu-tune", False),
    ("bind-core", ["--bind-core", "bogus"], "--bind", False),
    ("node-rank", ["--node-rank", "x"], "--node_rank must be an integer or 'auto'", False),
    ("join", ["--join", "maybe"], "--join", False),
    ("bind-numa", ["--bind-numa", "bogus"], "expected True, False, a JSON dict", False),
    ("sim-level", ["--sim-level", "7"], "--sim_level must be 0, 1, 2 or 3", False),
    ("sim-rank-id", ["--sim-rank-id", "1"], "--sim_rank_id needs --sim_level", False),
    ("rank-table-file", ["--rank-table-file", "/nonexistent-rt.json"], "no such rank table", False),
    ("worker-log-name", ["--worker-log-name", "a/b"], "must be a file name prefix", False),
    ("tail-worker-log", ["--tail-worker-log", "x"], "--tail_worker_log", False),
    ("grace", ["--grace", "-1"], "--grace must be >= 0", False),
    ("timeout", ["--timeout", "x"], "'--timeout'", False),
    ("start-timeout", ["--start-timeout", "x"], "'--start-timeout'", False),
    ("max-restarts", ["--max-restarts", "-1"], "--max-restarts must be >= 0", False),
    ("tee", ["--tee", "bad"], "unknown --tee mode 'bad'", False),
    ("preflight", ["--preflight", "bogus"], "unknown --preflight mode 'bogus'", False),
    (
        "device_checks",
        ["--preflight", "warn", "--device-checks", "maybe"],
        "unknown --device-checks 'maybe'; use one of off, try, require",
        False,
    ),
    (
        "health-threshold",
        ["--preflight", "warn", "--health-threshold", "0"],
        "--health-threshold must be between 0",
        False,
    ),
    ("hang-timeout", ["--hang-timeout", "soon"], "expected auto, off or a number of seconds", False),
    ("first-step-timeout", ["--first-step-timeout", "-3"], "must be a positive number of seconds", False),
    ("stopped-timeout", ["--stopped-timeout", "soon"], "--stopped-timeout 'soon'", False),
    ("restart-delay", ["--restart-delay", "-1"], "--restart-delay must be >= 0", False),
    ("host-failures", ["--host-failures", "-1"], "--host-failures must be >= 0", False),
    ("min-hosts", ["--min-hosts", "0"], "--min-hosts must be >= 1", False),
    ("rejoin-after", ["--rejoin-after", "soon"], "--rejoin-after 'soon': expected seconds >= 0, or off", False),
    ("straggler", ["--straggler", "loud"], "--straggler 'loud': expected off, warn or replace", False),
    ("summary-json", ["--summary-json", "/nonexistent-dir/s.json"], "--summary-json", True),
    ("metrics-port", ["--metrics-port", "70000"], "--metrics-port: '70000' is not a port", False),
    ("metrics-addr", ["--metrics-addr", "0.0.0.0"], "serves nothing without --metrics-port", False),
    ("metrics-textfile", ["--metrics-textfile", "/nonexistent-dir"], "--metrics-textfile: /nonexistent-dir", True),
    ("junit", ["--junit", "/nonexistent-dir/j.xml"], "--junit", True),
]

#: run options without a check of their own (any value is taken; a bad one fails only where it is
#: used), or that mslaunch sbatch handles itself (tested in test_sbatch.py).
NOT_VALIDATED: Dict[str, str] = {
    "dry_run": "a flag; sbatch's own --dry-run",
    "as_json": "a flag; mslaunch sbatch refuses --json",
    "detach": "a flag; mslaunch sbatch refuses --detach",
    "quiet": "a flag",
    "sched_wait": "a flag",
    "zygote": "a flag",
    "cold_restarts": "a flag",
    "grow_at_checkpoint": "a flag",
    "compile_cache": "a flag",
    "no_secret_patterns": "a flag",
    "minimal_scheduler": "a flag (--script-scheduler)",
    "ssh_accept_new": "a flag",
    "mpi_hostfile": "a flag",
    "oversubscribe": "a flag",
    "master_addr": "any address; a wrong one fails when the workers dial it",
    "python": "any interpreter path; it runs on the nodes",
    "mpi_arg": "passed to mpirun as is",
    "nic": "passed to mpirun as is",
    "program": "SCRIPT: tests of the program check",
}


def case_ids() -> List[str]:
    return [case[0] for case in BAD_RUN_OPTIONS]
