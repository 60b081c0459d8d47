"""``--secret-env``, ``--secret-env-file``, ``--secret-pattern`` and ``--no-secret-patterns``: the
job's secret variables (:mod:`launcher.planning.job.secrets`), read once for the job spec.

``--secret-env NAME`` marks ``NAME`` secret; its value is the one ``--env``, an env file or the
inventory gives, else this process's environment (so a secret need never be on a command line:
``TOKEN=... mslaunch run --secret-env TOKEN``).  Every variable of a ``--secret-env-file`` is
secret; such files layer with the ``--env-file``s (after them, below ``--env``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, FrozenSet, Iterable, List, Mapping, Sequence, Set, Tuple

from launcher.errors import PlanError
from launcher.planning.inventory.model import env_problem
from launcher.planning.job import secrets

Pairs = Tuple[Tuple[str, str], ...]
#: The label of the layer holding ``--secret-env`` values taken from this environment.
FROM_ENVIRONMENT = "--secret-env (this environment)"


@dataclass(frozen=True)
class SecretInputs:
    """What the secret flags add to a job spec.

    Attributes:
        env_files: ``(label, pairs)`` layers after the ``--env-file``s: each ``--secret-env-file``,
            then the ``--secret-env`` values taken from this environment.
        named: the names marked secret.
        patterns: the name patterns in force.
    """

    env_files: Tuple[Tuple[str, Pairs], ...]
    named: FrozenSet[str]
    patterns: Tuple[str, ...]


def secret_inputs(
    names: Iterable[str],
    files: Iterable[str],
    patterns: Iterable[str],
    no_defaults: bool,
    given: Iterable[str],
    environ: Mapping[str, str],
    read_file: Callable[[str], Pairs],
) -> SecretInputs:
    """The secret flags' layers, names and patterns.

    Args:
        names: ``--secret-env`` names; files: ``--secret-env-file`` paths; patterns:
            ``--secret-pattern`` globs; no_defaults: ``--no-secret-patterns``.
        given: names the other layers set (``--env``, ``--env-file``, the inventory's ``env``).
        environ: this process's environment (where a ``--secret-env`` value not given comes from).
        read_file: reads an env file's pairs (raising a one-line error naming path:line).

    Raises:
        PlanError: a name that is not a variable name, or one set nowhere (naming ``--secret-env``);
            an empty pattern (naming ``--secret-pattern``).
    """
    layers: List[Tuple[str, Pairs]] = []
    named: Set[str] = set()
    for path in files:
        pairs = read_file(path)
        layers.append((path, pairs))
        named.update(k for k, _ in pairs)
    known = set(given) | named
    taken: List[Tuple[str, str]] = []
    for name in names:
        problem = env_problem(name, "")
        if problem is not None:
            raise PlanError(f"{name!r}: {problem}", field="--secret-env")
        named.add(name)
        if name in known or name in dict(taken):
            continue
        if name not in environ:
            raise PlanError(
                f"{name} is set nowhere: export it before running mslaunch, or give it with "
                "--env, --env-file or --secret-env-file",
                field="--secret-env",
            )
        problem = env_problem(name, environ[name])
        if problem is not None:
            raise PlanError(f"{name}: {problem}", field="--secret-env")
        taken.append((name, environ[name]))
    if taken:
        layers.append((FROM_ENVIRONMENT, tuple(taken)))
    extra = tuple(patterns)
    if any(not p.strip() for p in extra):
        raise PlanError("an empty pattern matches nothing; give a glob such as '*_CRED*'", field="--secret-pattern")
    return SecretInputs(tuple(layers), frozenset(named), (() if no_defaults else secrets.DEFAULT_PATTERNS) + extra)


def read_secret_file(path: str) -> Pairs:
    """A ``--secret-env-file``'s pairs: a JSON object of strings (any value, newlines and
    surrounding blanks included: what ``mslaunch sbatch`` writes), else ``K=V`` lines as
    ``--env-file`` reads them.

    Raises:
        MsLaunchError: the file is missing, or a value or line is malformed (naming the file).
    """
    from launcher.errors import MsLaunchError
    from launcher.planning.job import envs
    from launcher.planning.text.textfile import read_text

    text = read_text(path, MsLaunchError, "no such secret env file", "a secret env file")
    if not text.lstrip().startswith("{"):
        return envs.parse_env_file(text, path)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MsLaunchError(f"not a JSON object of NAME: VALUE strings ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise MsLaunchError("not a JSON object of NAME: VALUE strings", path=path)
    out: List[Tuple[str, str]] = []
    for key, value in data.items():
        problem = env_problem(key, value)
        if problem is not None:
            raise MsLaunchError(f"{key!r}: {problem}", path=path)
        out.append((key, value))
    return tuple(out)


def take_secret_env_args(
    run: Sequence[str], names: Iterable[str], patterns: Sequence[str]
) -> Tuple[List[str], List[Tuple[str, str]]]:
    """``run`` options without the ``--env`` assignments of secret variables (``--env K=V``,
    ``-e K=V``, ``--env=K=V``, ``-eK=V``), and those assignments' pairs.

    Args:
        run: ``mslaunch run`` options (no program).
        names: the names marked secret; patterns: the secret name patterns in force.
    """
    named = set(names)
    out: List[str] = []
    taken: List[Tuple[str, str]] = []
    i = 0
    while i < len(run):
        arg = run[i]
        if arg in ("--env", "-e") and i + 1 < len(run):
            text, used = run[i + 1], 2
        elif arg.startswith("--env="):
            text, used = arg[len("--env=") :], 1
        elif arg.startswith("-e") and not arg.startswith("--") and len(arg) > 2:
            text, used = arg[2:], 1
        else:
            out.append(arg)
            i += 1
            continue
        name, _, value = text.partition("=")
        if name in named or secrets.matches(name, patterns):
            taken.append((name, value))
        else:
            out.extend(run[i : i + used])
        i += used
    return out, taken
