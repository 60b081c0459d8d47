"""How ``mslaunch run`` starts Python ranks: forked from a zygote, or plain processes.

The zygote (:mod:`launcher.execution.local.zygote`) is the default for MindSpore CPU jobs (the CPU
tuning's detection: a Python program that imports ``mindspore``, ``--method dynamic``, no other
device target, MindSpore in the ranks' interpreter) of the local launcher, when the ranks run
under mslaunch's own interpreter, and of the ssh launcher (one zygote per host, under the host's
interpreter: :mod:`launcher.execution.ssh.remote_zygote`; kept with the host's agent for a
restart unless ``--cold-restarts``, :func:`ssh_settings`).  ``--zygote`` asks for it on any job
of those launchers, ``--no-zygote`` turns it off.  Whatever the choice, the zygote falls back to
plain processes when its import is not fork-safe (said on the console when it happens).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from launcher.planning.job.kinds import Method
from launcher.planning.job.spec import JobSpec, Plan

if TYPE_CHECKING:
    from launcher.execution.ssh.settings import SSHSettings

FORKED = (
    "Python ranks forked from one process that imported mindspore once"
    " (the zygote; plain processes if that import is not fork-safe)"
)
FORKED_SSH = (
    "Python ranks forked from one process per host that imported mindspore once"
    " (each host's zygote, kept for a restart; plain processes if that import is not fork-safe)"
)


def _own_interpreter(plan: Plan) -> bool:
    me = os.path.realpath(sys.executable)
    return bool(plan.ranks) and all(p.argv and os.path.realpath(p.argv[0]) == me for p in plan.ranks)


def mindspore_cpu_job(spec: JobSpec, plan: Plan) -> bool:
    """The CLI's verdict that the ranks run MindSpore on CPU: the probe's for a job with a host here
    (``spec.cpu.mindspore_cpu``); for an ssh job on remote hosts only, whose interpreter mslaunch
    does not start, a candidate (``spec.cpu.remote_tune``: a Python program, the dynamic method,
    no other device named) whose program's source here imports ``mindspore``."""
    if spec.cpu.mindspore_cpu:
        return True
    if plan.launcher != "ssh" or not spec.cpu.remote_tune or not spec.program:
        return False
    from launcher.execution.checks.cpu import script_imports_mindspore

    path = _module_file(spec.program[0], spec.cwd) if spec.module else os.path.join(spec.cwd, spec.program[0])
    return path is not None and script_imports_mindspore(path) is True


def _module_file(name: str, cwd: str) -> Optional[str]:
    """The source file ``python -m name`` would run, found on this machine's path without importing
    anything (a package's ``__init__`` may do work): ``a/b.py`` or ``a/b/__main__.py``."""
    rel = name.replace(".", os.sep)
    for folder in [cwd] + [p for p in sys.path if p]:
        for candidate in (rel + ".py", os.path.join(rel, "__main__.py")):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                return path
    return None


def start_mode(plan: Plan, mindspore_cpu: bool, zygote: Optional[bool]) -> Tuple[bool, Optional[str]]:
    """Whether to use the zygote, and the header line that says how ranks start (None: say nothing).

    Args:
        plan: the job's plan.
        mindspore_cpu: the CLI's verdict that the ranks run MindSpore on CPU.
        zygote: ``--zygote`` (True), ``--no-zygote`` (False), neither (None).
    """
    if plan.launcher not in ("local", "ssh"):
        return False, ("--zygote applies to the local and ssh launchers only; not used" if zygote else None)
    forked = FORKED if plan.launcher == "local" else FORKED_SSH
    if zygote is False:
        return False, "one process per rank (--no-zygote)" if mindspore_cpu else None
    if zygote is True:
        return True, forked + " (--zygote)"
    if not (mindspore_cpu and plan.method == Method.DYNAMIC):
        return False, None
    if plan.launcher == "ssh":  # the hosts' interpreter: the agent forks only ranks of its zygote's
        return True, forked + "; --no-zygote: one process per rank"
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
    if not use_zygote or plan.scheduler is None or plan.method != Method.DYNAMIC or plan.launcher != "local":
        return False, None  # a remote host has no mslaunch to run init() alone: its zygote forks the script
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


def ssh_settings(
    ssh: "SSHSettings",
    spec: JobSpec,
    plan: Plan,
    start: StartMode,
    on_note: Callable[[str], None],
    look_every: Optional[float] = None,
) -> "SSHSettings":
    """The ssh launcher's settings for this job: the console's notes; with the zygote, what each
    host's zygote imports; unless ``--cold-restarts``, the pool that keeps each host's agent (and
    zygote) for a restart, with the spare hosts to start them on when the job starts; with
    ``look_every`` (the straggler watch's seconds between looks), how often each host's agent
    samples its ranks' scheduler figures (:func:`~launcher.execution.ssh.settings.sample_every`)."""
    from launcher.execution.ssh.settings import sample_every

    if look_every is not None:
        ssh = replace(ssh, sample_every=sample_every(look_every))
    if plan.launcher != "ssh":
        return replace(ssh, on_note=on_note)
    from launcher.execution.local.zygote import PRELOAD
    from launcher.execution.ssh.pool import AgentPool
    from launcher.planning.build import program_argv
    from launcher.planning.spares import spare_hosts

    keep = AgentPool() if start.keep_zygote else None
    spares = set(spare_hosts(spec, plan)) if keep is not None and not spec.no_python else set()
    standby = tuple((h, program_argv(spec, h)[0]) for h in spec.inventory.hosts if h.name in spares)
    return replace(ssh, on_note=on_note, zygote=PRELOAD if start.zygote else (), keep=keep, standby=standby)
