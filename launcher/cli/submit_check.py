"""``mslaunch sbatch``'s submit-time check: the batch script's ``mslaunch run`` line, run now.

The run options of the script are parsed by the ``run`` command's own parser and handed to
its own code (:func:`launcher.cli.run.run_cmd`), which plans the job as it would inside the
allocation -- but against a stand-in of it (:mod:`launcher.planning.backends.sbatch`) -- checks
the program, and returns where it would start anything.  Every error the run would give in the
allocation is so given at submit time: one line, exit 2, before anything is written.

The stand-in reaches ``run_cmd`` through its click context's ``meta`` (:func:`stand_in`),
the one value ``run`` reads that no command line sets.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import typer

from launcher.errors import MsLaunchError, PlanError
from launcher.planning.job.kinds import Method

_KEY = "mslaunch.sbatch.stand_in"
#: the usage errors of typer's parser (typer's click: vendored in recent typers, the click package before)
_USAGE_ERROR: Any = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)  # whichever click typer uses


def stand_in(ctx: Any) -> Optional[Mapping[str, str]]:
    """The stand-in allocation's environ when the ``run`` of ``ctx`` is being checked for
    ``mslaunch sbatch``, else None (a real run)."""
    return ctx.meta.get(_KEY) if ctx is not None else None


def submit_environ(slurm_vars: Mapping[str, str], environ: Mapping[str, str]) -> Dict[str, str]:
    """What the run would see in the allocation: this environment (``sbatch --export=ALL``)
    without its own ``SLURM_*`` (a submission from inside another allocation), plus ``slurm_vars``."""
    out = {k: v for k, v in environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    out.update(slurm_vars)
    return out


def parse_run(parent: Any, run_argv: List[str]) -> Any:
    """``mslaunch run RUN_ARGV`` parsed by the ``run`` command's own parser: its click context.

    Args:
        parent: the ``sbatch`` command's click context.
        run_argv: the arguments after ``run``.

    Raises:
        PlanError: the parser's usage error, as one line.
    """
    root = parent.find_root()
    run = root.command.get_command(root, "run")
    try:
        return run.make_context("run", list(run_argv), parent=parent)
    except _USAGE_ERROR as exc:
        raise PlanError(" ".join(exc.format_message().split())) from None


def check_run(ctx: Any, environ: Mapping[str, str]) -> None:
    """Run the ``run`` command of ``ctx`` (:func:`parse_run`) up to where it would start anything,
    against the stand-in allocation ``environ`` (:func:`submit_environ`).

    Raises:
        MsLaunchError: exit code 2, the run's own message.
    """
    ctx.meta[_KEY] = dict(environ)
    try:
        with ctx:
            ctx.invoke(ctx.command.callback, **ctx.params)
    except _USAGE_ERROR as exc:
        raise PlanError(" ".join(exc.format_message().split())) from None
    except MsLaunchError as exc:
        exc.exit_code = 2  # bad input of the job, whatever the run would have exited with
        raise
    finally:
        ctx.meta.pop(_KEY, None)


def stand_in_options(opts: Any) -> Any:
    """The run options (a :class:`~launcher.cli.options.JobOptions`) as checked against the
    stand-in: ``--hccn HOST=PATH`` names a real node, so each pair's form and file are checked
    here and the pairs dropped (the stand-in nodes have placeholder device IPs instead).

    Raises:
        PlanError / RankTableError: a malformed pair or hccn.conf; the ranktable method with no
            source of device IPs (the allocation's nodes have none of their own).
    """
    from dataclasses import replace

    if opts.method != Method.RANKTABLE or opts.rank_table_file:
        return opts  # the run reads no hccn.conf then
    if not opts.hccn and not opts.hccn_dir:
        raise PlanError(
            "the ranktable method needs device IPs: pass --hccn-dir, --hccn HOST=PATH or --rank-table-file",
            field="--method",
        )
    from launcher.cli.spec import hccn_pair
    from launcher.planning.ranktable.hccn import read_hccn_conf

    for text in opts.hccn:
        read_hccn_conf(hccn_pair(text)[1])
    return replace(opts, hccn=())
