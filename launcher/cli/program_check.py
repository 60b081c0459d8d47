"""The job's program must be there before anything starts (``mslaunch run``, ``mslaunch sbatch``).

Checked on this machine, relative to the directory the ranks start in (the job's cwd: where
mslaunch runs, and where ``mslaunch sbatch``'s batch script ``cd``'s to):

- ``SCRIPT`` (run by Python): a readable file, or a directory with a ``__main__.py`` (what
  ``python PATH`` runs);
- ``-m MODULE``: a module need not be a file (an installed package, a ``PYTHONPATH`` entry, the
  ranks' own interpreter): only its name is checked, dotted identifiers (as ``python -m``
  and torchrun take it); importing it is left to the ranks;
- ``--no-python PROGRAM``: with a ``/``, a path to an executable file; else a name found on the
  ranks' ``PATH`` (``--env PATH=...`` or the inherited one), as ``execvp`` finds it.

msrun and torchrun check none of this: each rank fails on its own after the job started; here
the error is one line before anything is started, written or submitted.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Mapping, Optional

from launcher.errors import PlanError
from launcher.planning.job.spec import JobSpec

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FORMS = "give SCRIPT as a path from here (or -m MODULE, or --no-python PROGRAM)"


def _path_of(spec: JobSpec, environ: Mapping[str, str]) -> Optional[str]:
    """The ranks' PATH: the last ``--env PATH=``, else an env file's, else the inherited one."""
    for key, value in reversed(spec.env):
        if key == "PATH":
            return value
    for _path, pairs in reversed(spec.env_files):
        for key, value in reversed(pairs):
            if key == "PATH":
                return value
    return environ.get("PATH")


def check_program(spec: JobSpec, environ: Mapping[str, str]) -> None:
    """Refuse a job whose program is missing (see the module doc).

    Args:
        spec: the job; ``spec.program[0]`` is SCRIPT, MODULE or PROGRAM, ``spec.cwd`` the
            ranks' directory.
        environ: the launching environment (its ``PATH``).

    Raises:
        PlanError: ``field="SCRIPT"`` (``-m`` for a module), one line saying what to do.
    """
    if not spec.program:
        return
    name = spec.program[0]
    if spec.module:
        if not _MODULE_RE.match(name):
            raise PlanError(
                f"{name!r} is not a module name (dotted identifiers, e.g. pkg.train); to run a file, drop -m",
                field="-m",
            )
        return
    path = os.path.join(spec.cwd, name)
    if spec.no_python:
        if "/" not in name:
            if shutil.which(name, path=_path_of(spec, environ) or os.defpath) is None:
                raise PlanError(
                    f"no program {name!r} on the ranks' PATH; give its path (./{name}) or set --env PATH=...",
                    field="SCRIPT",
                )
            return
        if not os.path.isfile(path):
            raise PlanError(f"no such file {name!r} (in {spec.cwd}); {_FORMS}", field="SCRIPT")
        if not os.access(path, os.X_OK):
            raise PlanError(
                f"{name!r} is not executable; chmod +x it, or run it under Python (drop --no-python)", field="SCRIPT"
            )
        return
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "__main__.py")):
            raise PlanError(f"{name!r} is a directory without __main__.py; {_FORMS}", field="SCRIPT")
        return
    if not os.path.isfile(path):
        raise PlanError(f"no such file {name!r} (in {spec.cwd}); {_FORMS}", field="SCRIPT")
    if not os.access(path, os.R_OK):
        raise PlanError(f"{name!r} is not readable (permission denied)", field="SCRIPT")
