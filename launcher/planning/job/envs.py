"""Environment layouts, one per rendezvous method (pure).

Each function returns only the variables mslaunch sets for a process; the process inherits the
rest of its environment (the launching shell locally, the login environment over SSH), as with
torchrun.  Precedence, lowest first (later layers win):

1. launcher tuning defaults (:data:`DYNAMIC_TUNING`, ``PYTHONUNBUFFERED``), skipped for any
   variable the user already set in the launching environment;
2. the inventory's ``defaults.env``, then the host's ``env``;
3. ``--env-file`` files, in the order given, line by line;
4. ``--env K=V`` flags, in the order given;
5. the method's layout (``MS_ROLE``, ``RANK_ID``, ...): these are per rank and cannot be
   overridden; setting one of them in layers 2-4 is an error that names the flag to use instead.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from launcher.errors import MsLaunchError, PlanError
from launcher.planning.inventory.model import env_problem
from launcher.planning.job.kinds import Method, values
from launcher.planning.job.ranks import RankSlot

METHODS: Tuple[str, ...] = values(Method)

#: Dynamic-cluster variables mslaunch tunes for a launcher that starts the scheduler first and
#: waits for its port: workers then register at their first try, so long retry waits only cost.
DYNAMIC_TUNING: Tuple[Tuple[str, str], ...] = (
    ("MS_RETRY_INTERVAL_LOWER", "0"),
    ("MS_RETRY_INTERVAL_UPPER", "1"),
)

#: Variables each method sets per process, with the flag that controls them.
RESERVED: Dict[str, Dict[str, str]] = {
    Method.DYNAMIC: {
        "MS_ROLE": "the launcher sets it per process",
        "MS_WORKER_NUM": "use --np / --worker-num",
        "MS_SCHED_HOST": "use --master-addr",
        "MS_SCHED_PORT": "use --master-port",
        "MS_NODE_ID": "the launcher sets it per rank",
        "RANK_ID": "the launcher sets it per rank",
        "RANK_SIZE": "use --np",
        "DEVICE_ID": "use devices: in the inventory or --include",
    },
    Method.RANKTABLE: {
        "RANK_TABLE_FILE": "the launcher writes the rank table into the job dir",
        "RANK_ID": "the launcher sets it per rank",
        "RANK_SIZE": "use --np",
        "DEVICE_ID": "use devices: in the inventory or --include",
    },
    Method.MPI: {
        "RANK_ID": "OpenMPI assigns ranks",
        "RANK_SIZE": "use --np",
        "DEVICE_ID": "use devices: in the inventory or --include",
    },
}

for _reserved in RESERVED.values():  # every method: the job's sizes (world_env)
    _reserved["MSLAUNCH_WORLD_SIZE"] = "the ranks of this attempt: use --np"
    _reserved["MSLAUNCH_PLANNED_WORLD_SIZE"] = "the job's planned size: use --np"

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env_assignment(text: str, field: str = "--env") -> Tuple[str, str]:
    """Parse ``K=V`` (V may be empty or contain ``=``).

    Raises:
        PlanError: naming ``field`` when there is no ``=``, the name is not a valid identifier,
            or the value cannot be passed to a process (see
            :func:`launcher.planning.inventory.sources.env_problem`).
    """
    key, sep, value = text.partition("=")
    if not sep or not _KEY_RE.fullmatch(key):
        raise PlanError(f"expected NAME=VALUE, got {_clip(text)}", field=field)
    problem = env_problem(key, value)
    if problem is not None:
        raise PlanError(f"{key}: {problem}", field=field)
    return key, value


def parse_env_file(text: str, path: Optional[str] = None) -> Tuple[Tuple[str, str], ...]:
    """Parse a dotenv-style file: ``K=V`` or ``export K=V`` lines, ``#`` comments, blank lines.

    Values may be wrapped in single or double quotes, which are removed; nothing is expanded.

    Raises:
        MsLaunchError: ``path:line`` for a malformed line or a value no process can take (a NUL
            character, a lone surrogate, too long; see
            :func:`launcher.planning.inventory.sources.env_problem`).
    """
    out: List[Tuple[str, str]] = []
    where = path or "<env-file>"
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY_RE.fullmatch(key):
            raise MsLaunchError(f"expected NAME=VALUE, got {_clip(raw.strip())}", path=where, line=lineno)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        problem = env_problem(key, value)
        if problem is not None:
            raise MsLaunchError(f"{key}: {problem}", path=where, line=lineno)
        out.append((key, value))
    return tuple(out)


def check_reserved(method: str, layers: Iterable[Tuple[str, Iterable[Tuple[str, str]]]]) -> None:
    """Refuse user env that would override a method's per-rank layout.

    Args:
        method: the rendezvous method.
        layers: ``(where, pairs)`` for each user layer, e.g. ``("--env", pairs)``.

    Raises:
        PlanError: naming the variable, where it was set, and what to use instead.
    """
    reserved = RESERVED[method]
    for where, pairs in layers:
        for key, _ in pairs:
            if key in reserved:
                raise PlanError(f"{key} is set by mslaunch for the {method} method ({reserved[key]})", field=where)


def tuning_env(
    method: str,
    user_env_keys: Iterable[str],
    compile_cache: Optional[str] = None,
    user_keys: Iterable[str] = (),
    cache_offer: Optional[str] = None,
) -> Dict[str, str]:
    """Launcher defaults that the user has not set in the launching environment.

    Args:
        method: the rendezvous method.
        user_env_keys: names set in the launching environment.
        compile_cache: the job's compile-cache folder (:func:`compile_cache_env`), or None.
        user_keys: names the user sets in any layer (host env, ``--env-file``, ``--env``): the
            compile cache is left alone when one of :data:`COMPILE_CACHE_VARS` is among them.
        cache_offer: the job's compile-cache folder offered to every process as
            :data:`COMPILE_CACHE_OFFER` (a program that compiles the same graphs in the same
            order in every attempt turns MindSpore's cache on there itself), or None.
    """
    skip = set(user_env_keys)
    pairs: List[Tuple[str, str]] = [("PYTHONUNBUFFERED", "1")]
    if method == Method.DYNAMIC:
        pairs.extend(DYNAMIC_TUNING)
    if compile_cache is not None and not (set(COMPILE_CACHE_VARS) & (skip | set(user_keys))):
        pairs.extend(compile_cache_env(compile_cache).items())
    if cache_offer is not None:
        pairs.append((COMPILE_CACHE_OFFER, cache_offer))
    return {k: v for k, v in pairs if k not in skip}


#: MindSpore's compile cache: on, and where (read by every process at its first graph compile).
COMPILE_CACHE_VARS: Tuple[str, str] = ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH")


#: The job's compile-cache folder, offered to every process: MindSpore's cache stays off unless the
#: program turns it on (the reference trainer does: launcher/workloads/compile_cache.py).
COMPILE_CACHE_OFFER = "MSLAUNCH_COMPILE_CACHE"


def compile_cache_env(folder: str) -> Dict[str, str]:
    """The variables that make MindSpore keep its compiled graphs in ``folder`` (``rank_<id>/``
    per rank) and load them on the next compile of the same graph: a restart of the job skips
    the frontend's compile.  MindSpore checks the hash of the network's Python files and compiles
    anew when they changed."""
    return {COMPILE_CACHE_VARS[0]: "1", COMPILE_CACHE_VARS[1]: folder}


#: Every process's view of the job's size: the ranks of this attempt, and the job's planned world
#: size (larger when a restart goes on with fewer hosts, ``--min-hosts``: a data-parallel program
#: keeps its global batch by accumulating ``planned / current`` micro-batches per step).
WORLD_SIZE_VARS: Tuple[str, str] = ("MSLAUNCH_WORLD_SIZE", "MSLAUNCH_PLANNED_WORLD_SIZE")


def world_env(world_size: int, planned: Optional[int] = None) -> Dict[str, str]:
    """:data:`WORLD_SIZE_VARS` of a job of ``world_size`` ranks planned as ``planned`` (None: the same)."""
    return {WORLD_SIZE_VARS[0]: str(world_size), WORLD_SIZE_VARS[1]: str(planned or world_size)}


def _common(slot: RankSlot) -> Dict[str, str]:
    return {
        "RANK_ID": str(slot.rank),
        "RANK_SIZE": str(slot.world_size),
        "DEVICE_ID": str(slot.device_id),
        "LOCAL_RANK": str(slot.local_rank),
        "LOCAL_WORLD_SIZE": str(slot.local_world_size),
    }


def dynamic_scheduler_env(
    world_size: int, sched_host: str, sched_port: int, topo_timeout: Optional[int] = None
) -> Dict[str, str]:
    """The scheduler's layout: ``MS_ROLE=MS_SCHED`` plus the values every process shares."""
    env = {
        "MS_ROLE": "MS_SCHED",
        "MS_WORKER_NUM": str(world_size),
        "MS_SCHED_HOST": sched_host,
        "MS_SCHED_PORT": str(sched_port),
    }
    if topo_timeout is not None:
        env["MS_TOPO_TIMEOUT"] = str(topo_timeout)
    return env


def dynamic_worker_env(
    slot: RankSlot, sched_host: str, sched_port: int, topo_timeout: Optional[int] = None
) -> Dict[str, str]:
    """A worker's layout: ``MS_ROLE=MS_WORKER``, the shared values, ``MS_NODE_ID`` = rank."""
    return dynamic_worker_layout(slot.world_size, sched_host, sched_port, topo_timeout)(slot)


def dynamic_worker_layout(
    world_size: int,
    sched_host: str,
    sched_port: int,
    topo_timeout: Optional[int] = None,
) -> Callable[[RankSlot], Dict[str, str]]:
    """:func:`dynamic_worker_env` for many ranks of one job: the values every worker shares are
    built once; the function returned adds a rank's own (a fresh dict per call)."""
    shared = dynamic_scheduler_env(world_size, sched_host, sched_port, topo_timeout)
    shared["MS_ROLE"] = "MS_WORKER"

    def layout(slot: RankSlot) -> Dict[str, str]:
        env = dict(shared)
        rank = str(slot.rank)
        env["MS_NODE_ID"] = rank
        env["RANK_ID"] = rank
        env["RANK_SIZE"] = str(slot.world_size)
        env["DEVICE_ID"] = str(slot.device_id)
        env["LOCAL_RANK"] = str(slot.local_rank)
        env["LOCAL_WORLD_SIZE"] = str(slot.local_world_size)
        return env

    return layout


def simulation_env(slot: RankSlot, single: bool = False) -> Dict[str, str]:
    """msrun's ``--sim_level`` layout (MindSpore's dry run): no role, no scheduler address.

    Args:
        slot: the rank.
        single: ``--sim_rank_id`` was given (one process simulates ``slot.rank``; msrun leaves
            ``MS_NODE_ID`` unset then).
    """
    env = {"MS_WORKER_NUM": str(slot.world_size)}
    if not single:
        env["MS_NODE_ID"] = str(slot.rank)
    env.update(_common(slot))
    return env


def ranktable_env(slot: RankSlot, rank_table_file: str) -> Dict[str, str]:
    """A rank-table rank's layout (seed 001's run.sh): ``RANK_TABLE_FILE``, ``RANK_ID``, ..."""
    env = {"RANK_TABLE_FILE": rank_table_file}
    env.update(_common(slot))
    return env


def mpi_env(slot: RankSlot) -> Dict[str, str]:
    """An mpi-method rank's layout as planned; under mpirun the wrapper derives the same values
    from OpenMPI's ``OMPI_COMM_WORLD_*`` variables at start."""
    return _common(slot)


def layered(*layers: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    """Merge mappings in order (later wins) into a tuple of pairs, first-set order kept."""
    out: Dict[str, str] = {}
    for layer in layers:
        out.update(layer)
    return tuple(out.items())


def _clip(text: str, limit: int = 60) -> str:
    """``repr`` of ``text``, shortened to about ``limit`` characters for error messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
