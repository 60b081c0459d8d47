"""The grammar of ``mslaunch sbatch [OPTIONS] SCRIPT [ARGS]``: whose option is which.

Before SCRIPT, options come in any order; each is sbatch's or ``mslaunch run``'s by its name,
read from the two commands themselves (so a new option of either is known here without a list
to keep in step).  A name both commands have (``--dry-run``, ``-h``/``--help``) is sbatch's.
A name neither has is refused.  ``-m MODULE`` stands in SCRIPT's place: what follows it is the
module's.  ``--`` ends the options.  After SCRIPT everything is the program's.

Of the run options, sbatch takes ``--job-id`` and ``--log-dir`` itself (the job id and job dir
of every run of the job) and refuses those it sets (:data:`SET_BY_SBATCH`) or that have no
meaning in a batch job (:data:`NOT_IN_BATCH`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from launcher.errors import PlanError

#: run options sbatch sets itself.
SET_BY_SBATCH = ("--launcher", "--detach", "-d")
#: run options without a meaning in a batch job, and why.
NOT_IN_BATCH = {
    "--json": "--json goes with 'mslaunch run --dry-run'; 'mslaunch sbatch --dry-run' prints the batch script"
}
_JOB_ID = ("--job-id",)
_LOG_DIR = ("--log-dir", "--log_dir")
_MODULE = ("-m", "--module")


def option_names(command: Any, help_names: Tuple[str, ...] = ()) -> Dict[str, bool]:
    """Option name -> whether it takes a value, for a typer/click command's options (read by
    their attributes); ``help_names`` are added as flags (click adds the help option itself)."""
    names: Dict[str, bool] = {name: False for name in help_names}
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", None) != "option":
            continue
        takes = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
        for name in list(param.opts) + list(param.secondary_opts):
            names[name] = takes
    return names


def shared_names(sbatch: Mapping[str, bool], run: Mapping[str, bool]) -> List[str]:
    """The option names both commands have (sbatch's in ``mslaunch sbatch``), sorted."""
    return sorted(set(sbatch) & set(run))


@dataclass
class SplitArgs:
    """``mslaunch sbatch``'s arguments, split.

    Attributes:
        sbatch: sbatch's options (with their values), in order, for its own parser.
        run: run options for the batch script's ``mslaunch run`` (without ``--job-id``,
            ``--log-dir`` and ``-m``), in order.
        module: ``-m MODULE``, or None.
        program: SCRIPT and ARGS (ARGS only with ``-m``).
        job_id: ``--job-id``, or None.
        log_dir: ``--log-dir``, or None.
    """

    sbatch: List[str] = field(default_factory=list)
    run: List[str] = field(default_factory=list)
    module: Optional[str] = None
    program: List[str] = field(default_factory=list)
    job_id: Optional[str] = None
    log_dir: Optional[str] = None

    def run_argv(self) -> List[str]:
        """The run options, ``-m MODULE --`` if any, and the program: the tail of the script's
        ``mslaunch run`` (``--`` keeps the module's arguments the module's)."""
        return self.run + (["-m", self.module, "--"] if self.module is not None else []) + self.program


def _one_option(args: List[str], i: int, names: Mapping[str, bool]) -> Tuple[str, Optional[str], List[str], int]:
    """The option at ``args[i]``: ``(name, value or None, its tokens, next index)``.

    Raises:
        PlanError: unknown, a value missing, or a value given to a flag.
    """
    arg = args[i]
    if arg.startswith("--"):
        name, eq, attached = arg.partition("=")
        value: Optional[str] = attached if eq else None
    else:
        name, value = arg[:2], (arg[2:] or None)
    if name not in names:
        raise PlanError(
            "no such option (neither mslaunch sbatch's nor mslaunch run's); "
            f"give another sbatch option as --sbatch-arg={name}=VALUE",
            field=name,
        )
    if not names[name]:
        if value is not None:
            raise PlanError("takes no value" if arg.startswith("--") else f"no such option {arg!r}", field=name)
        return name, None, [arg], i + 1
    if value is not None:
        return name, value, [arg], i + 1
    if i + 1 >= len(args):
        raise PlanError("needs a value", field=name)
    return name, args[i + 1], [arg, args[i + 1]], i + 2


def split_args(args: List[str], sbatch: Mapping[str, bool], run: Mapping[str, bool]) -> SplitArgs:
    """Split ``mslaunch sbatch``'s arguments (module doc).

    Args:
        args: the arguments after ``sbatch``.
        sbatch: sbatch's option names (:func:`option_names`).
        run: run's option names.

    Raises:
        PlanError: an unknown option, a run option sbatch sets or refuses, no SCRIPT.
    """
    names = dict(run)
    names.update(sbatch)  # a shared name is sbatch's
    out = SplitArgs()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.program = list(args[i + 1 :])
            break
        if not arg.startswith("-") or arg == "-":
            out.program = list(args[i:])
            break
        name, value, tokens, i = _one_option(args, i, names)
        if name in sbatch:
            out.sbatch += tokens
        elif name in _JOB_ID:
            out.job_id = value
        elif name in _LOG_DIR:
            out.log_dir = value
        elif name in SET_BY_SBATCH:
            raise PlanError(
                "is set by mslaunch sbatch (the job runs with --launcher slurm in the allocation); drop it", field=name
            )
        elif name in NOT_IN_BATCH:
            raise PlanError(NOT_IN_BATCH[name], field=name)
        elif name in _MODULE:
            out.module = value
            out.program = list(args[i:])
            break
        else:
            out.run += tokens
    if out.module is None and not out.program:
        raise PlanError(
            "missing SCRIPT: mslaunch sbatch [OPTIONS] SCRIPT [ARGS] (sbatch's and mslaunch run's options, any order)",
            field="SCRIPT",
        )
    return out
