"""How ``mslaunch run`` starts local Python ranks: forked from the zygote, or plain processes.

The zygote (:mod:`launcher.execution.local.zygote`) is the default for MindSpore CPU jobs (the CPU
tuning's detection: a Python program that imports ``mindspore``, ``--method dynamic``, no other
device target, MindSpore in the ranks' interpreter) of the local launcher, when the ranks run
under mslaunch's own interpreter.  ``--zygote`` asks for it on any job of the local launcher,
``--no-zygote`` turns it off.  Whatever the choice, the zygote falls back to plain processes
when its import is not fork-safe (said on the console when it happens).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional, Tuple

from launcher.planning.job.kinds import Method
from launcher.planning.job.spec import Plan

FORKED = (
    "Python ranks forked from one process that imported mindspore once"
    " (the zygote; plain processes if that import is not fork-safe)"
)


def _own_interpreter(plan: Plan) -> bool:
    me = os.path.realpath(sys.executable)
    return bool(plan.ranks) and all(p.argv and os.path.realpath(p.argv[0]) == me for p in plan.ranks)


def start_mode(plan: Plan, mindspore_cpu: bool, zygote: Optional[bool]) -> Tuple[bool, Optional[str]]:
    """Whether to use the zygote, and the header line that says how ranks start (None: say nothing).

    Args:
        plan: the job's plan.
        mindspore_cpu: the CLI's verdict that the ranks run MindSpore on CPU.
        zygote: ``--zygote`` (True), ``--no-zygote`` (False), neither (None).
    """
    if plan.launcher != "local":
        return False, ("--zygote applies to the local launcher only; not used" if zygote else None)
    if zygote is False:
        return False, "one process per rank (--no-zygote)" if mindspore_cpu else None
    if zygote is True:
        return True, FORKED + " (--zygote)"
    if not (mindspore_cpu and plan.method == Method.DYNAMIC):
        return False, None
    if not _own_interpreter(plan):
        return False, "one process per rank (the ranks' interpreter is not mslaunch's, so the zygote cannot fork them)"
    return True, FORKED + "; --no-zygote: one process per rank"


def scheduler_mode(
    plan: Plan, use_zygote: bool, mindspore_cpu: bool, minimal: Optional[bool]
) -> Tuple[bool, Optional[str]]:
    """Whether the zygote forks the dynamic cluster's scheduler running MindSpore's ``init()``
    alone (:mod:`launcher.workloads.scheduler`), and what the header says about it.

    The default with the zygote on a MindSpore CPU job; ``--script-scheduler`` (``minimal``
    False) runs the user's script as the scheduler, as msrun does; ``--minimal-scheduler`` asks
    for it with ``--zygote`` on any job.  Never without the zygote or a scheduler.
    """
    if not use_zygote or plan.scheduler is None or plan.method != Method.DYNAMIC:
        return False, None
    if minimal is False:
        return False, "the scheduler runs your script (--script-scheduler)"
    if minimal is None and not mindspore_cpu:
        return False, None
    return True, "the scheduler runs MindSpore's init() alone, forked too (--script-scheduler: your script, as msrun)"


@dataclass(frozen=True)
class StartMode:
    """How ``mslaunch run`` starts local Python ranks (:func:`choose`).

    Attributes:
        zygote: fork the ranks from the zygote (the local launcher's ``LocalSettings.zygote``).
        fork_scheduler: the zygote forks the scheduler running MindSpore's ``init()`` alone.
        note: the header line that says so, or None (say nothing).
        keep_zygote: a restart forks from the last attempt's zygote when it is healthy (off: ``--cold-restarts``).
    """

    zygote: bool
    fork_scheduler: bool
    note: Optional[str]
    keep_zygote: bool = True


def choose(plan: Plan, mindspore_cpu: bool, zygote: Optional[bool], minimal: Optional[bool]) -> StartMode:
    """:func:`start_mode`, then :func:`scheduler_mode`, as one value; their notes joined by ``; ``.

    Args:
        plan: the job's plan.
        mindspore_cpu: the CLI's verdict that the ranks run MindSpore on CPU.
        zygote: ``--zygote`` (True), ``--no-zygote`` (False), neither (None).
        minimal: ``--minimal-scheduler`` (True), ``--script-scheduler`` (False), neither (None).
    """
    use_zygote, start_note = start_mode(plan, mindspore_cpu, zygote)
    fork_scheduler, sched_note = scheduler_mode(plan, use_zygote, mindspore_cpu, minimal)
    return StartMode(use_zygote, fork_scheduler, "; ".join(n for n in (start_note, sched_note) if n) or None)
