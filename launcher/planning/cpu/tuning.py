"""CPU tuning for MindSpore ranks (pure): the oneDNN ISA setting, cores and threads per rank.

Inputs are values: a parsed CPU probe result (:class:`~launcher.planning.cpu.probe.CpuProbe`,
produced by ``launcher/workloads/cpu_probe.py`` and cached by :mod:`launcher.execution.checks.cpu`), the cores
this machine lets mslaunch use, the number of local ranks, the names the user already set, and
the ``--cpu-tune`` / ``--bind-core`` choices. The output (:class:`CpuPlan`) is per-rank env, a
per-rank core list (affinity, applied by the local backend at process start), and one-line notes
that the plan, ``--dry-run`` and the run's header print.

What is set, per local rank of a MindSpore CPU job (never over a value the user set anywhere:
launching environment, inventory env, ``--env-file``, ``--env``):

* ``ONEDNN_MAX_CPU_ISA=<isa>`` when the probe measured that cap >= :data:`MIN_GAIN` times faster
  than oneDNN's default (geometric mean over the probe's kernels); nothing otherwise;
* ``OMP_NUM_THREADS=<t>`` and ``MSLAUNCH_CPU_THREADS=<t>`` (MindSpore 2.10 reads no variable
  for its kernel thread pool; ``launcher.workloads.cputhreads.apply_cpu_threads()`` applies it),
  where ``t`` is the size of the rank's core range;
* no affinity by default: each of k ranks on N cores gets ``N // k`` threads (at least 1),
  and the kernel places them. Pinning was measured not to pay on the default path (short jobs
  started 0.86-1.40x msrun, erratically; training throughput 0.99-1.12x), see
  docs/cpu-performance.md. With k > N a warning says the cores are oversubscribed.

``--bind-core`` (msrun's ``--bind_core``): ``True`` = contiguous core ranges, for any job: k
ranks on N cores get ``N // k`` cores each (the first ``N % k`` one more; k > N: one core
each, round-robin), and threads sized to the range; ``False`` = no affinity; a dict ``{"device0": ["0-3"], "device1":
["4,5"], "scheduler": ["6"]}``
gives core lists per local rank (in order; msrun's device index is the local rank on CPU).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Union

from launcher.errors import PlanError
from launcher.planning.cpu.hostcores import THREAD_VARS, HostCores, format_cpus, thread_shares
from launcher.planning.cpu.probe import CpuProbe, isa_advice

CPU_TUNE_MODES = ("auto", "on", "off")
ISA_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")

# ------------------------------------------------------------------ cores and threads


def parse_cpu_list(text: str, field: str = "--bind-core") -> Tuple[int, ...]:
    """``"0-3,6"`` -> ``(0, 1, 2, 3, 6)``.

    Raises:
        PlanError: naming ``field`` for anything else.
    """
    out: List[int] = []
    for part in re.sub(r"\s+", "", text).split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise PlanError(f"bad CPU list {text!r}; use e.g. 0-3,6", field=field)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise PlanError(f"bad CPU range {part!r} in {text!r}", field=field)
        out.extend(range(lo, hi + 1))
    return tuple(dict.fromkeys(out))


BindCore = Union[bool, Mapping[str, Tuple[int, ...]]]


def parse_bind_core(text: Optional[str]) -> Optional[BindCore]:
    """msrun's ``--bind_core`` value: ``True`` / ``False`` (any case), or a JSON dict
    ``{"device0": ["0-10"], ..., "scheduler": ["11"]}`` whose lists hold CPU list strings.

    Returns:
        None (not given), a bool, or ``{"device<i>" | "scheduler": cpu tuple}`` in the given order.

    Raises:
        PlanError: anything else, naming ``--bind-core`` and the bad part.
    """
    if text is None:
        return None
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    try:
        data = json.loads(text)
    except ValueError:
        raise PlanError(
            f'expected True, False or a JSON dict like {{"device0": ["0-3"]}}, got {text!r}', field="--bind-core"
        ) from None
    if not isinstance(data, dict) or not data:
        raise PlanError(f"expected True, False or a non-empty JSON dict, got {text!r}", field="--bind-core")
    out: Dict[str, Tuple[int, ...]] = {}
    for key, value in data.items():
        if not re.fullmatch(r"device\d+|scheduler", key):
            raise PlanError(f"key {key!r} must be 'scheduler' or 'deviceX'", field="--bind-core")
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise PlanError(
                f'{key}: expected a list of CPU list strings like ["0-3"], got {value!r}', field="--bind-core"
            )
        out[key] = parse_cpu_list(",".join(value))
    return out


def split_cores(k: int, cpus: Sequence[int]) -> Tuple[Tuple[int, ...], ...]:
    """k contiguous core ranges from ``cpus`` (N of them): ``N // k`` each, the first ``N % k``
    one more; with k > N one core each, round-robin."""
    cores = sorted(set(cpus))
    n = len(cores)
    if k <= 0 or n == 0:
        return ()
    if k > n:
        return tuple((cores[i % n],) for i in range(k))
    base, extra = divmod(n, k)
    out: List[Tuple[int, ...]] = []
    start = 0
    for i in range(k):
        size = base + (1 if i < extra else 0)
        out.append(tuple(cores[start : start + size]))
        start += size
    return tuple(out)


@dataclass(frozen=True)
class CpuSpec:
    """The CPU-tuning inputs of a job (built by the CLI; all facts passed in).

    Attributes:
        mode: ``auto`` (MindSpore CPU jobs only), ``on`` (any job, e.g. a ``--no-python``
            wrapper that runs MindSpore), ``off``.
        mindspore_cpu: the CLI's verdict that the ranks run MindSpore on CPU (see the README).
        bind_core: ``--bind-core`` (None: not given).
        local_cpus: the cores mslaunch may use on this machine (its own affinity).
        probe: this machine's probe result, or None (not run, or it failed).
        probe_note: why there is no probe result, or where it came from (for the notes).
        local_quota, local_quota_source: this machine's cgroup CPU quota in cores, and its file
            (:mod:`launcher.execution.probes.host_cores`); None: no quota.
        isa_settled: not probed because no ISA cap can change oneDNN's kernels on this CPU
            (:func:`cap_can_matter`; ``probe_note`` says why).
        remote_tune: plan the threads of remote ranks (learned at start on their hosts): the
            job may run MindSpore on CPU (its source imports it) or ``--cpu-tune on``.
    """

    mode: str = "auto"
    mindspore_cpu: bool = False
    bind_core: Optional[BindCore] = None
    local_cpus: Tuple[int, ...] = ()
    probe: Optional[CpuProbe] = None
    probe_note: Optional[str] = None
    local_quota: Optional[float] = None
    local_quota_source: Optional[str] = None
    remote_tune: bool = False
    isa_settled: bool = False

    @property
    def local_cores(self) -> "HostCores":
        """This machine's cores as the thread rule sees them."""
        return HostCores("this machine", self.local_cpus, self.local_quota, self.local_quota_source)


@dataclass(frozen=True)
class CpuPlan:
    """Per-local-rank CPU settings and the notes that explain them.

    Attributes:
        env: local rank -> variables to add (under the user's own values).
        cpus: local rank -> core list (affinity); absent: not bound.
        scheduler_cpus: the scheduler's cores (``--bind-core`` dict with ``scheduler``), or None.
        notes: one line each: what was set and why, and warnings.
        warnings: the subset of ``notes`` that are warnings.
    """

    env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    cpus: Mapping[int, Tuple[int, ...]] = field(default_factory=dict)
    scheduler_cpus: Optional[Tuple[int, ...]] = None
    notes: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()


def plan_cpu(spec: CpuSpec, local_ranks: int, user_env: Mapping[str, str], user_env_keys: FrozenSet[str]) -> CpuPlan:
    """Decide the CPU settings of this machine's ``local_ranks`` ranks.

    Args:
        spec: the inputs (mode, probe, cores, ``--bind-core``).
        local_ranks: ranks on this machine (k).
        user_env: variables the user set for the ranks (inventory, ``--env-file``, ``--env``).
        user_env_keys: names set in the launching environment.

    Returns:
        The plan; empty (no env, no cpus, no notes) when tuning does not apply.

    Raises:
        PlanError: a ``--bind-core`` dict that names a CPU mslaunch may not use, or fewer
            devices than local ranks.
    """
    if spec.mode not in CPU_TUNE_MODES:
        raise PlanError(f"unknown --cpu-tune {spec.mode!r}; use one of {', '.join(CPU_TUNE_MODES)}", field="--cpu-tune")
    if local_ranks <= 0:
        return CpuPlan()
    tune = spec.mode == "on" or (spec.mode == "auto" and spec.mindspore_cpu)
    user_set = set(user_env) | set(user_env_keys)
    notes: List[str] = []
    warnings: List[str] = []
    n = len(spec.local_cpus)
    env = _isa_env(spec, user_set, notes) if tune else {}
    ranges, sched = _core_ranges(spec, local_ranks, tune, notes, warnings)
    per_rank_env: Dict[int, Dict[str, str]] = {}
    for i in range(local_ranks):
        e = dict(env)
        threads = _threads_per_rank(spec, local_ranks, ranges.get(i), i) if tune else 0
        if threads:
            for var in THREAD_VARS:
                if var not in user_set:
                    e[var] = str(threads)
        per_rank_env[i] = e
    if tune:
        sizes = sorted(
            {v.get("MSLAUNCH_CPU_THREADS", v.get("OMP_NUM_THREADS", "")) for v in per_rank_env.values()} - {""}
        )
        if sizes:
            where = f": {local_ranks} local rank(s) on {spec.local_cores.describe()}" if n and not ranges else ""
            notes.append(f"threads per rank: {'/'.join(sizes)} (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS){where}")
        user_omp = user_env.get("OMP_NUM_THREADS")
        usable = spec.local_cores.usable if n else 0
        if user_omp is not None and user_omp.isdigit() and n and local_ranks * int(user_omp) > usable:
            warnings.append(
                f"{local_ranks} ranks x OMP_NUM_THREADS={user_omp} (yours) exceed the {usable} usable cores here "
                "(oversubscribed)"
            )
    elif not ranges:
        return CpuPlan()
    return CpuPlan(
        env=per_rank_env, cpus=ranges, scheduler_cpus=sched, notes=tuple(notes + warnings), warnings=tuple(warnings)
    )


def _isa_env(spec: CpuSpec, user_set: Set[str], notes: List[str]) -> Dict[str, str]:
    """``ONEDNN_MAX_CPU_ISA`` from the probe, unless the user set an ISA variable; says why in ``notes``."""
    if any(v in user_set for v in ISA_VARS):
        notes.append("oneDNN ISA: left as you set it")
        return {}
    if spec.probe is None and spec.isa_settled:
        notes.append(f"oneDNN ISA: unchanged: {spec.probe_note} (not probed)")
        return {}
    if spec.probe is None:
        notes.append(f"oneDNN ISA: not probed ({spec.probe_note or 'no probe result'}); nothing set")
        return {}
    advice = isa_advice(spec.probe)
    if advice.isa is None:
        notes.append(f"oneDNN ISA: unchanged: {advice.summary}")
        return {}
    notes.append(f"set ONEDNN_MAX_CPU_ISA={advice.isa}: {advice.summary}")
    return {"ONEDNN_MAX_CPU_ISA": advice.isa}


def _core_ranges(
    spec: CpuSpec,
    local_ranks: int,
    tune: bool,
    notes: List[str],
    warnings: List[str],
) -> Tuple[Dict[int, Tuple[int, ...]], Optional[Tuple[int, ...]]]:
    """Cores per local rank (and the scheduler's): from a ``--bind-core`` dict, or an even split of
    this machine's cores (``--bind-core True``); empty when nothing is bound (the default).

    Raises:
        PlanError: a ``--bind-core`` dict with fewer devices than local ranks, or a CPU not here.
    """
    bind = spec.bind_core
    n = len(spec.local_cpus)
    if isinstance(bind, Mapping):
        devices = [v for k, v in bind.items() if k != "scheduler"]
        if len(devices) < local_ranks:
            raise PlanError(
                f"--bind-core lists {len(devices)} device(s) for {local_ranks} local rank(s)", field="--bind-core"
            )
        allowed = set(spec.local_cpus)
        for key, cores in bind.items():
            bad = [c for c in cores if allowed and c not in allowed]
            if bad:
                raise PlanError(
                    f"--bind-core {key}: CPU {format_cpus(bad)} is not available here (available: "
                    f"{format_cpus(spec.local_cpus)})",
                    field="--bind-core",
                )
        ranges = {i: tuple(devices[i]) for i in range(local_ranks)}
        notes.append(
            "cores per rank from --bind-core: "
            + ", ".join(f"local rank {i}: {format_cpus(c)}" for i, c in ranges.items())
        )
        return ranges, (tuple(bind["scheduler"]) if "scheduler" in bind else None)
    oversubscribed = (
        f"{local_ranks} ranks on {n} cores: several ranks share each core"
        " (oversubscribed; expect each rank to run slower)"
    )
    if n and bind is None and tune and local_ranks >= 2:
        # measured: pinning made short jobs slower and erratic and training no faster
        usable = spec.local_cores.usable
        notes.append(
            f"{local_ranks} local rank(s) on {usable} usable core(s): no core binding (the kernel places the threads; "
            "--bind-core True pins each rank to its own range)"
        )
        if local_ranks > usable:
            warnings.append(
                f"{local_ranks} ranks on {usable} usable core(s): several ranks share each core (oversubscribed; "
                "expect each rank to run slower)"
            )
        return {}, None
    if n and bind is True:
        ranges = dict(enumerate(split_cores(local_ranks, spec.local_cpus)))
        notes.append(
            f"{local_ranks} local rank(s) on {n} core(s): "
            + ", ".join(f"local rank {i}: cores {format_cpus(c)}" for i, c in ranges.items())
        )
        if local_ranks > n:
            warnings.append(oversubscribed)
        return ranges, None
    return {}, None


def _threads_per_rank(spec: CpuSpec, local_ranks: int, cores: Optional[Tuple[int, ...]], index: int) -> int:
    """Threads for one tuned rank: its cores (1 when ranks outnumber the cores, unless bound by
    a ``--bind-core`` dict), else an even share of this machine's usable cores (its cpuset
    capped by its cgroup quota; the first ``N % k`` ranks one more; 1 when ranks outnumber
    them, :func:`~launcher.planning.cpu.hostcores.thread_shares`); 0: set nothing."""
    n = len(spec.local_cpus)
    if cores is not None:
        return len(cores) if local_ranks <= n or isinstance(spec.bind_core, Mapping) else 1
    if not n:
        return 0
    return thread_shares(spec.local_cores.usable, local_ranks)[index]
