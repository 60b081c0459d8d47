"""OpenMPI artefacts: hostfiles and the exact ``mpirun`` argv (pure).

mslaunch runs one *app context* per host (``--host h --np n`` each, joined by ``:``), plus one for
the scheduler under the dynamic method, and the per-rank wrapper (``templates/mslaunch-rank.sh``)
turns ``OMPI_COMM_WORLD_RANK`` into mslaunch's rank, device id and log file.

No value of the ranks' environment is on mpirun's command line (``/proc/PID/cmdline`` is readable
by every user of the host): each value travels in mpirun's own environment under a *carrier*
name (:func:`carrier`: ``MSLAUNCH_V_<NAME>`` when every context that has ``NAME`` has the same
value, ``MSLAUNCH_V<ctx>_<NAME>`` for one context's own value), which a bare ``-x CARRIER`` in the
context forwards (OpenMPI reads the value from its own environment); the context's
``MSLAUNCH_VARS`` lists the names, and the wrapper sets each ``NAME`` from its carrier and unsets
every carrier before the program starts.  Only mslaunch's own wrapper settings (``MSLAUNCH_ROLE``,
the context's first MPI rank, ranks, devices, log paths: :func:`context_env`'s keywords) are
written ``-x K=V``.  A program argument ``:`` (mpirun's context separator) is written as
:data:`COLON_STAND_IN` and its index given in ``MSLAUNCH_COLONS``; the wrapper puts the ``:`` back.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import PlanError
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.job import layout
from launcher.planning.job.kinds import ArtefactKind, Method, Role
from launcher.planning.job.mpirun_options import MpiOptions

if TYPE_CHECKING:
    from launcher.planning.cpu.hostcores import HostThreads
    from launcher.planning.job.spec import Plan, ProcPlan

#: A generated ssh config for OpenMPI's rsh agent, in the job dir (per-host ssh settings).
SSH_CONFIG_NAME = "ssh_config"


def render_hostfile(inventory: Inventory) -> str:
    """``host slots=N [max_slots=M]`` lines, one per host, in inventory order."""
    lines = []
    for h in inventory.hosts:
        line = f"{h.name} slots={h.slots}"
        if h.max_slots is not None:
            line += f" max_slots={h.max_slots}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class MpiContext:
    """One app context of an MPMD mpirun: ``np`` processes on ``host``; ``env``: the wrapper's
    settings (written ``-x K=V``), ``carried``: the processes' own variables (never on the
    command line: :func:`carriers`)."""

    host: str
    np: int
    env: Tuple[Tuple[str, str], ...]
    argv: Tuple[str, ...]
    carried: Tuple[Tuple[str, str], ...] = ()


#: What a program argument ``:`` is written as on mpirun's command line (the wrapper puts it back).
COLON_STAND_IN = "mslaunch-colon"


def carrier(name: str, ctx: Optional[str] = None) -> str:
    """The carrier of variable ``name``: shared by every context (``ctx`` None), or context ``ctx``'s own."""
    return f"MSLAUNCH_V{'' if ctx is None else ctx}_{name}"


def carriers(contexts: Sequence[MpiContext]) -> Tuple[List[List[str]], Dict[str, str]]:
    """Per context the carriers its ``-x`` forwards, and mpirun's environment holding them (pure).

    A name whose value is the same in every context that has it gets one shared carrier; one whose
    value differs gets a carrier per context (tagged with its ``MSLAUNCH_CTX_BASE``, else its index).
    """
    values: Dict[str, set] = {}
    for ctx in contexts:
        for key, value in ctx.carried:
            values.setdefault(key, set()).add(value)
    per_ctx: List[List[str]] = []
    env: Dict[str, str] = {}
    for i, ctx in enumerate(contexts):
        mine = []
        tag = dict(ctx.env).get("MSLAUNCH_CTX_BASE", str(i))
        for key, value in ctx.carried:
            name = carrier(key, None if len(values[key]) == 1 else tag)
            env[name] = value
            mine.append(name)
        per_ctx.append(mine)
    return per_ctx, env


def host_slot_list(counts: Sequence[Tuple[str, int]]) -> str:
    """``h1:2,h2:2`` for ``-H`` (hosts in first-use order, counts summed)."""
    merged: Dict[str, int] = {}
    for host, n in counts:
        merged[host] = merged.get(host, 0) + n
    return ",".join(f"{h}:{n}" for h, n in merged.items())


def mpirun_argv(contexts: Sequence[MpiContext], options: MpiOptions) -> Tuple[str, ...]:
    """The full mpirun argv for ``contexts`` (its environment: :func:`mpirun_launch`).

    Global options come first (``-H`` or ``--hostfile``, ``--allow-run-as-root``,
    ``--oversubscribe``, MCA settings, passthrough), then each context as
    ``-np N --host H -x K=V ... -x MSLAUNCH_VARS=names -x CARRIER ... argv`` separated by ``:``.
    """
    return mpirun_launch(contexts, options)[0]


def mpirun_launch(contexts: Sequence[MpiContext], options: MpiOptions) -> Tuple[Tuple[str, ...], Dict[str, str]]:
    """mpirun's argv for ``contexts`` and the variables to add to its environment (the carriers)."""
    per_ctx, carried_env = carriers(contexts)
    argv: List[str] = [options.mpirun]
    if options.hostfile is not None:
        argv += ["--hostfile", options.hostfile]
    else:
        argv += ["-H", host_slot_list([(c.host, c.np) for c in contexts])]
    if options.allow_run_as_root:
        argv.append("--allow-run-as-root")
    if options.oversubscribe:
        argv.append("--oversubscribe")
    if options.nic is not None:
        argv += ["--mca", "btl_tcp_if_include", options.nic, "--mca", "oob_tcp_if_include", options.nic]
    if options.rsh_agent is not None:
        # Remote hosts.  Every ssh starts on this machine (no tree spawn), so the ssh config and
        # keys need not exist elsewhere; each host's ssh stays attached, so a daemon that dies
        # fails the job instead of hanging it; and OpenMPI 4.1's daemons do not map the hwloc
        # topology into shared memory (rtc_hwloc_vmhole none), which segfaults them at random
        # ("hwloc_shmem_topology_write") when the chosen hole collides with their stack.
        argv += [
            "--mca",
            "plm_rsh_agent",
            options.rsh_agent,
            "--mca",
            "plm_rsh_no_tree_spawn",
            "1",
            "--mca",
            "rtc_hwloc_vmhole",
            "none",
            "--leave-session-attached",
        ]
    if (
        not any(a.split("=", 1)[0] in USER_BINDING for a in options.extra)
        and "hwloc_base_binding_policy" not in options.extra
    ):
        # OpenMPI 4.1 binds each process to a core when it starts two or fewer, to a socket when
        # more: a rank would then run its threads on one core. mslaunch sizes each rank's threads
        # from its host's usable cores instead (the rank wrapper), as the Slurm backend does with
        # --cpu-bind=none; a binding the user asks for (--mpi-arg) is left alone and caps them.
        argv += ["--bind-to", "none"]
    argv += list(options.extra)
    # A context's --host names the host's slots over all contexts: contexts that share a host
    # (the scheduler's and the first host's ranks) then fit side by side.
    totals: Dict[str, int] = {}
    for ctx in contexts:
        totals[ctx.host] = totals.get(ctx.host, 0) + ctx.np
    for i, ctx in enumerate(contexts):
        if i:
            argv.append(":")
        argv += ["-np", str(ctx.np), "--host", f"{ctx.host}:{totals[ctx.host]}"]
        for key, value in ctx.env:
            argv += ["-x", f"{key}={value}"]
        if ctx.carried:
            argv += ["-x", "MSLAUNCH_VARS=" + ",".join(k for k, _ in ctx.carried)]
        for name in per_ctx[i]:
            argv += ["-x", name]
        argv += list(ctx.argv)
    return tuple(argv), carried_env


#: mpirun options by which a user chooses the ranks' binding (then mslaunch adds no ``--bind-to``).
USER_BINDING = (
    "--bind-to",
    "-bind-to",
    "--map-by",
    "-map-by",
    "--cpu-set",
    "-cpu-set",
    "--cpu-list",
    "-cpu-list",
    "--rankfile",
    "-rankfile",
    "-rf",
)


def context_env(**wrapper: str) -> Tuple[Tuple[str, str], ...]:
    """The wrapper's ``MSLAUNCH_*`` settings of one context (its ``-x K=V`` pairs: mslaunch's own
    layout, never a value of the processes' environment)."""
    return tuple((f"MSLAUNCH_{key.upper()}", value) for key, value in wrapper.items())


def make_context(
    host: str, np: int, base: Mapping[str, str], argv: Sequence[str], wrapper: Mapping[str, str]
) -> MpiContext:
    """One context: the wrapper's settings on the command line, ``base`` (the processes' own
    variables, less those the settings name) carried, each ``:`` of ``argv`` (the program's)
    written as :data:`COLON_STAND_IN` with its index in ``MSLAUNCH_COLONS``."""
    colons = [str(i) for i, a in enumerate(argv) if a == ":"]
    if colons:
        wrapper = dict(wrapper, colons=",".join(colons))
    settings = context_env(**wrapper)
    named = {k for k, _ in settings}
    carried = tuple((k, v) for k, v in base.items() if k not in named)
    shown = tuple(COLON_STAND_IN if a == ":" else a for a in argv)
    return MpiContext(host=host, np=np, env=settings, argv=shown, carried=carried)


#: An ssh config argument written as it is; any other goes in double quotes (:func:`ssh_config_arg`).
_SSH_PLAIN = re.compile(r"[A-Za-z0-9_./:@%+,~-]+")


def ssh_config_arg(value: str, field: str) -> str:
    """``value`` as one argument of an ssh config line that OpenSSH reads back whole.

    OpenSSH splits a config line at blanks and ``=`` outside double quotes, and takes a ``#`` after
    a blank as a comment; it reads a double-quoted argument whole, but has no escape for ``"``
    (newer releases take ``\\`` as one, older ones do not).  So a value of only
    ``[A-Za-z0-9_./:@%+,~-]`` is written as it is and any other in double quotes; one holding
    ``"``, ``\\``, a newline, CR or NUL cannot be written and is refused.

    Raises:
        PlanError: naming ``field`` and the value.
    """
    if _SSH_PLAIN.fullmatch(value):
        return value
    if any(c in value for c in '"\\\n\r\0'):
        raise PlanError(
            f"{value!r}: an ssh config line cannot hold a value with '\"', '\\', a newline, CR or NUL; "
            "rename or move it",
            field=field,
        )
    return f'"{value}"'


def rsh_agent(hosts: Sequence[Host], ssh_config: Optional[str], generated_path: str) -> Tuple[str, Optional[str]]:
    """OpenMPI's ``plm_rsh_agent`` for reaching ``hosts``, and an ssh config to write if needed.

    When every host has the same inventory ``ssh:`` settings, they become flags
    (``ssh [-F CFG] [-p N] [-i KEY] [-l USER] -o BatchMode=yes``; flags win over the config).
    When they differ, a config with one ``Host`` block per host (then ``Include`` of the user's
    config) is returned for ``generated_path`` and the agent is ``ssh -F <generated_path> ...``.

    Raises:
        PlanError: a path or value of the agent contains whitespace (OpenMPI splits the agent on
            spaces), or one for the config cannot be written there (:func:`ssh_config_arg`).
    """
    settings = {(h.ssh.user, h.ssh.port, h.ssh.key) for h in hosts}
    parts: List[str] = ["ssh"]
    config: Optional[str] = None
    if len(settings) <= 1:
        user, port, key = next(iter(settings)) if settings else (None, None, None)
        if ssh_config is not None:
            parts += ["-F", ssh_config]
        if port is not None:
            parts += ["-p", str(port)]
        if key is not None:
            parts += ["-i", key]
        if user is not None:
            parts += ["-l", user]
    else:
        blocks = ["# generated by mslaunch: per-host ssh settings of the inventory, for mpirun's rsh agent"]
        for h in hosts:
            lines = [f"    User {ssh_config_arg(h.ssh.user, f'{h.name}: ssh.user')}"] if h.ssh.user is not None else []
            lines += [f"    Port {h.ssh.port}"] if h.ssh.port is not None else []
            key = h.ssh.key
            lines += [f"    IdentityFile {ssh_config_arg(key, f'{h.name}: ssh.key')}"] if key is not None else []
            if lines:
                blocks.append(f"Host {h.name}\n" + "\n".join(lines))
        if ssh_config is not None:
            blocks.append(f"Match all\n    Include {ssh_config_arg(ssh_config, '--ssh-config')}")
        config = "\n".join(blocks) + "\n"
        parts += ["-F", generated_path]
    parts += ["-o", "BatchMode=yes"]
    for part in parts:
        if any(c.isspace() for c in part):
            raise PlanError(
                f"OpenMPI's rsh agent cannot take {part!r} (it splits on spaces); use a path without spaces",
                field="--ssh-config",
            )
    return " ".join(parts), config


@dataclass(frozen=True)
class MpirunPlan:
    """The mpirun backend's planned settings (``Plan.backend_settings``).

    Attributes:
        options: mpirun options with the rsh agent, NICs and hostfile resolved for the job.
        wrapper: the per-rank wrapper script (``templates/mslaunch-rank.sh``).
        log_name: the workers' log name with ``{rank}`` for the rank (the wrapper fills it in).
        python: the Python that samples each worker on its host for the straggler watch (the
            wrapper's ``MSLAUNCH_SAMPLER``; a host's own ``python:`` wins); None: no sampling.
    """

    options: MpiOptions
    wrapper: str
    log_name: str = layout.worker_log_template()
    python: Optional[str] = None


def plan_mpirun(
    options: MpiOptions,
    wrapper: Optional[str],
    log_name: str,
    used: Inventory,
    ssh_config: Optional[str],
    job_dir: str,
    python: Optional[str] = None,
) -> Tuple[MpirunPlan, Tuple[Tuple[str, ArtefactKind, str], ...]]:
    """The mpirun backend's settings for a job on ``used``, and the files it needs in the job dir.

    Resolves what the user left open: the rsh agent for remote hosts (with a generated ssh config
    when their inventory ``ssh:`` settings differ), the NICs from the inventory, the hostfile.

    Returns:
        ``(settings, files)``; ``files``: ``(name, kind, text)`` of each artefact to write.
    """
    assert wrapper is not None
    files: List[Tuple[str, ArtefactKind, str]] = []
    remote = [h for h in used.hosts if not h.is_local]
    if remote and options.rsh_agent is None:
        agent, config = rsh_agent(remote, ssh_config, posixpath.join(job_dir, SSH_CONFIG_NAME))
        if config is not None:
            files.append((SSH_CONFIG_NAME, ArtefactKind.SSH_CONFIG, config))
        options = replace(options, rsh_agent=agent)
    if options.nic is None:
        nics = list(dict.fromkeys(h.nic for h in used.hosts if h.nic is not None))
        if nics:
            options = replace(options, nic=",".join(nics))
    if options.hostfile is not None:
        files.append((layout.HOSTFILE_FILE, ArtefactKind.HOSTFILE, render_hostfile(used)))
    return MpirunPlan(options, wrapper, log_name, python), tuple(files)


#: Per-rank layout variables the wrapper derives from OMPI_COMM_WORLD_RANK instead of -x.
_WRAPPER_DERIVED = ("RANK_ID", "DEVICE_ID", "LOCAL_RANK", "MS_NODE_ID")


def mpirun_command(plan: "Plan", log_dir: Optional[str] = None) -> Tuple[str, ...]:
    """The mpirun argv of ``plan`` (:func:`mpirun_plan_launch` without the environment)."""
    return mpirun_plan_launch(plan, log_dir)[0]


def mpirun_plan_launch(plan: "Plan", log_dir: Optional[str] = None) -> Tuple[Tuple[str, ...], Dict[str, str]]:
    """The mpirun argv of ``plan``: one context for the scheduler (dynamic), then one per host
    with its ranks, and the variables mpirun's environment must hold (pure).

    Args:
        plan: a plan for the mpirun launcher (``plan.backend_settings`` is a :class:`MpirunPlan`).
        log_dir: where the ranks' logs go (a restart attempt's folder); default the job dir.

    Raises:
        PlanError: the plan was not made for the mpirun launcher.
    """
    settings = plan.backend_settings
    if not isinstance(settings, MpirunPlan):
        raise PlanError(
            "the plan has no mpirun settings (it was not planned for --launcher mpirun)", field="--launcher"
        )
    log_dir = plan.job_dir if log_dir is None else log_dir
    contexts: List[MpiContext] = []
    if plan.scheduler is not None:
        sched = plan.scheduler
        log = (
            sched.log
            if log_dir == plan.job_dir
            else posixpath.join(log_dir, posixpath.relpath(sched.log, plan.job_dir))
        )
        contexts.append(
            make_context(sched.host, 1, sched.env_dict(), sched.argv, dict(ctx_base="0", role=Role.SCHEDULER, log=log))
        )
    by_host: Dict[str, List["ProcPlan"]] = {}  # one pass over the ranks, one over the hosts: linear
    for r in plan.ranks:
        by_host.setdefault(r.host, []).append(r)
    threads = {t.host: t for t in plan.host_threads}
    base = sum(c.np for c in contexts)
    for host in plan.hosts:
        mine = by_host.get(host.name)
        if mine:
            python = host.python if host.python is not None else settings.python
            contexts.append(_rank_context(plan, mine, base, log_dir, python, threads.get(host.name)))
            base += len(mine)
    wrapped = [replace(c, argv=(settings.wrapper,) + c.argv) for c in contexts]
    return mpirun_launch(wrapped, settings.options)


def _rank_context(
    plan: "Plan",
    mine: Sequence["ProcPlan"],
    base: int,
    log_dir: str,
    python: Optional[str] = None,
    threads: Optional["HostThreads"] = None,
) -> MpiContext:
    """The app context of one host's ranks; ``base``: the MPI rank of its first process;
    ``python``: the host's Python, which samples its ranks (the wrapper's ``MSLAUNCH_SAMPLER``);
    ``threads``: the host's thread plan, if the backend sets its ranks' thread variables."""
    env = {k: v for k, v in mine[0].env if k not in _WRAPPER_DERIVED}
    settings = dict(
        ctx_base=str(base),
        role=Role.WORKER,
        first_rank=str(mine[0].rank),
        devices=",".join(str(r.device_id) for r in mine),
        log_dir=log_dir,
        log_name=plan.backend_settings.log_name,
        method=plan.method,
    )
    if plan.method == Method.RANKTABLE:
        settings["cwd_prefix"] = layout.rank_cwd_prefix(plan.job_dir)
        shown = sorted(k for k in env if k in plan.secrets)
        if shown:
            settings["secrets"] = ",".join(shown)  # the env dump shows them as <secret>
    if python is not None:
        settings["sampler"] = python
    if threads is not None and threads.set_vars:
        # the wrapper sets these from the host's usable cores (launcher.planning.cpu.hostcores' rule)
        settings["threads"] = ",".join(threads.set_vars)
        settings["host"] = mine[0].host
    return make_context(mine[0].host, len(mine), env, mine[0].argv, settings)
