"""Where each planned process's environment and cores come from (pure; a step of
:func:`~launcher.planning.build.build_plan`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.planning.cpu import hostcores
from launcher.planning.cpu import tuning as cpu
from launcher.planning.inventory.model import Host
from launcher.planning.job import envs, layout
from launcher.planning.job.kinds import Method
from launcher.planning.job.ranks import RankSlot

if TYPE_CHECKING:
    from launcher.planning.job.spec import JobSpec


@dataclass(frozen=True)
class ProcEnv:
    """Where each process's environment and cores come from.

    A process's user env is, lowest layer first: the method's tuning defaults (the job's
    compile-cache folder offered as ``MSLAUNCH_COMPILE_CACHE``, and MindSpore's compile cache on
    there with ``compile_cache`` unless the user sets it), the rank's CPU
    tuning (local ranks), its host's inventory ``env``, ``--env-file``s, ``--env``, then what
    msrun's flags imply (``RANK_TABLE_FILE``, ``MS_SIMULATION_LEVEL``) and the job's sizes
    (:func:`launcher.planning.job.envs.world_env`); the method's layout variables go on top
    (:func:`launcher.planning.job.envs.layered`).
    """

    tuning: Mapping[str, str]
    file_env: Mapping[str, str]
    flag_env: Mapping[str, str]
    msrun_env: Mapping[str, str]
    cpu: cpu.CpuPlan
    #: rank -> its index among this machine's ranks (the CPU plan's numbering)
    local_index: Mapping[int, int]
    #: whether mslaunch itself starts the processes here, so it can bind their cores
    bind_here: bool
    cpu_notes: Tuple[str, ...]
    #: remote hosts whose ranks' threads are set at start, where their cores are learned
    host_threads: Tuple[hostcores.HostThreads, ...] = ()
    #: the job's world sizes, planned and current (:func:`launcher.planning.job.envs.world_env`)
    job_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, spec: "JobSpec", launcher: str, slots: Sequence[RankSlot], used: Sequence[Host]) -> "ProcEnv":
        """Check the user's env layers (reserved names) and plan the CPU tuning of local ranks.

        Raises:
            PlanError: a reserved variable set by the user.
        """
        user_layers = [(f"{h.source or h.name} env", h.env) for h in used]
        user_layers += [(f"--env-file {path}", pairs) for path, pairs in spec.env_files]
        user_layers.append(("--env", spec.env))
        envs.check_reserved(spec.method, user_layers)
        file_env = dict(p for _, pairs in spec.env_files for p in pairs)
        flag_env = dict(spec.env)
        msrun_env: Dict[str, str] = {}
        if spec.rank_table_file is not None and spec.method == Method.DYNAMIC:
            msrun_env["RANK_TABLE_FILE"] = spec.rank_table_file
        if spec.sim_level is not None:
            msrun_env["MS_SIMULATION_LEVEL"] = str(spec.sim_level)

        local = {h.name for h in used if h.is_local}
        local_slots = [s for s in slots if s.host in local]
        local_user_env: Dict[str, str] = {}
        for h in used:
            if h.is_local:
                local_user_env.update(h.env)
        local_user_env.update(file_env)
        local_user_env.update(flag_env)
        cpu_plan = cpu.plan_cpu(spec.cpu, len(local_slots), local_user_env, spec.user_env_keys)
        notes = list(cpu_plan.notes)
        if cpu_plan.cpus and launcher != "local":
            notes.append(
                f"cores per rank not applied: the {launcher} launcher starts the ranks"
                + (
                    " (mslaunch passes --bind-to none; --mpi-arg=--bind-to --mpi-arg=core binds them by mpirun)"
                    if launcher == "mpirun"
                    else ""
                )
            )
        at_start = _remote_threads(spec, launcher, slots, used, file_env, flag_env)
        notes += [hostcores.deferred_note(t, launcher) for t in at_start]
        with_slots = {s.host for s in slots}  # one pass: a test per host would make planning quadratic
        remote = [h for h in used if not h.is_local and h.name in with_slots]
        if remote and spec.cpu.remote_tune and not at_start:
            notes.append(
                f"remote hosts: threads not planned (the {launcher} launcher starts their ranks without mslaunch "
                "learning their cores first)"
            )
        if remote and (cpu_plan.notes or at_start):
            notes.append("remote hosts: oneDNN ISA left as is (mslaunch doctor probes their CPU kernels)")
        return cls(
            tuning=envs.tuning_env(
                spec.method,
                spec.user_env_keys,
                layout.compile_cache_dir(spec.job_dir) if spec.compile_cache else None,
                user_keys=set(local_user_env) | {k for h in used for k, _ in h.env},
                cache_offer=layout.compile_cache_dir(spec.job_dir),
            ),
            file_env=file_env,
            flag_env=flag_env,
            msrun_env=msrun_env,
            cpu=cpu_plan,
            local_index={s.rank: i for i, s in enumerate(local_slots)},
            bind_here=launcher == "local",
            cpu_notes=tuple(notes),
            host_threads=at_start,
            job_env=envs.world_env(slots[0].world_size if slots else 0, spec.planned_np),
        )

    def user_env(self, host: Host, rank: Optional[int] = None) -> Dict[str, str]:
        """The user-side layers for a process on ``host`` (``rank`` None: the scheduler)."""
        out = dict(self.tuning)
        if rank is not None and rank in self.local_index:
            out.update(self.cpu.env.get(self.local_index[rank], {}))
        out.update(host.env)
        out.update(self.file_env)
        out.update(self.flag_env)
        out.update(self.msrun_env)
        out.update(self.job_env)
        return out

    def rank_cpus(self, rank: int) -> Optional[Tuple[int, ...]]:
        """The cores rank ``rank`` is bound to, or None (not bound, or not started by mslaunch here)."""
        if not self.bind_here or rank not in self.local_index:
            return None
        return self.cpu.cpus.get(self.local_index[rank])


#: Launchers whose ranks' threads are set on their host at start, from the cores read there: the
#: ssh agent, the Slurm task shim (:mod:`launcher.execution.slurm.shim`), mpirun's rank wrapper
#: (``templates/mslaunch-rank.sh``).
REACHES_HOSTS = ("ssh", "slurm", "mpirun")


def _remote_threads(
    spec: "JobSpec",
    launcher: str,
    slots: Sequence[RankSlot],
    used: Sequence[Host],
    file_env: Mapping[str, str],
    flag_env: Mapping[str, str],
) -> Tuple[hostcores.HostThreads, ...]:
    """The remote hosts whose ranks' threads are set at start, from the cores learned there."""
    if not spec.cpu.remote_tune or launcher not in REACHES_HOSTS:
        return ()
    by_host: Dict[str, List[int]] = {}
    for s in slots:  # one pass over the ranks, not one per host
        by_host.setdefault(s.host, []).append(s.rank)
    out = []
    for h in used:
        ranks = tuple(by_host.get(h.name, ()))
        if h.is_local or not ranks:
            continue
        user = dict(h.env)
        user.update(file_env)
        user.update(flag_env)
        names = set(user)  # the host's own environment is reported with its cores (theirs win too)
        out.append(
            hostcores.HostThreads(
                h.name, ranks, tuple(v for v in hostcores.THREAD_VARS if v not in names), user.get("OMP_NUM_THREADS")
            )
        )
    return tuple(out)
