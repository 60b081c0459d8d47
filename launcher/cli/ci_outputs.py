"""``mslaunch run --summary-json FILE`` and ``--junit FILE``: the job's result for CI systems,
checked writable before anything starts and written when the job ends."""

from __future__ import annotations

from typing import Any, List, Optional

from launcher.errors import MsLaunchError

__all__ = ["check_ci_outputs", "write_ci_outputs"]


def write_ci_outputs(result: Any, summary_json: Optional[str], junit: Optional[str]) -> List[str]:
    """Write ``--summary-json`` and ``--junit``; the error line of each that could not be written."""
    from launcher.execution.runner import junit_xml
    from launcher.jobs import jobdir
    from launcher.jobs.files import write_atomic

    problems = []
    for flag, path, write in (
        # 0600 as every job file: both hold the tails of rank logs (a rank may print its environment)
        ("--summary-json", summary_json, lambda p: jobdir.write_json(p, result.to_json())),
        ("--junit", junit, lambda p: write_atomic(p, junit_xml(result))),
    ):
        if path:
            try:
                write(path)
            except MsLaunchError as exc:
                problems.append(f"mslaunch: error: {flag}: {exc}")
    return problems


def check_ci_outputs(summary_json: Optional[str], junit: Optional[str]) -> None:
    """--summary-json / --junit must be writable before anything starts (nothing is written here)."""
    from launcher.jobs.files import check_writable

    for flag, path in (("--summary-json", summary_json), ("--junit", junit)):
        if path is not None:
            check_writable(path, flag)
