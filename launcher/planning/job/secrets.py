"""Secret variables: which of the ranks' variables are secret, and their values out of what
mslaunch writes and prints (pure).

A variable is secret when the user names it (``--secret-env NAME``, every variable of a
``--secret-env-file``), or when a variable the user sets (inventory ``env``, ``--env-file``,
``--env``) has a name matching one of the secret patterns (:data:`DEFAULT_PATTERNS`, shell globs
matched without regard to case; ``--secret-pattern`` adds one, ``--no-secret-patterns`` drops the
defaults).  A secret's value reaches the ranks on every backend, but every file mslaunch writes
(``plan.json``, ``job.json``, the registry, env dumps, ``sbatch.sh``, k8s manifests) and every
command that prints a plan shows :data:`SHOWN` in its place.
"""

from __future__ import annotations

import fnmatch
from typing import AbstractSet, FrozenSet, Iterable, List, Sequence, Tuple

#: What is written or printed in place of a secret's value.
SHOWN = "<secret>"
#: Names matching one of these (case-insensitive) are secret unless ``--no-secret-patterns``.
DEFAULT_PATTERNS: Tuple[str, ...] = ("*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*")


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of ``patterns`` (shell globs, case-insensitive)."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def secret_names(named: Iterable[str], user_names: Iterable[str], patterns: Sequence[str]) -> FrozenSet[str]:
    """The job's secret names: ``named`` ones, and those of ``user_names`` (the variables the user
    sets) that match ``patterns``."""
    return frozenset(named) | frozenset(n for n in user_names if matches(n, patterns))


def redact_pairs(pairs: Iterable[Tuple[str, str]], secrets: AbstractSet[str]) -> Tuple[Tuple[str, str], ...]:
    """``(name, value)`` pairs with each secret's value shown as :data:`SHOWN`."""
    return tuple((k, SHOWN if k in secrets else v) for k, v in pairs)


def split_pairs(
    pairs: Iterable[Tuple[str, str]], secrets: AbstractSet[str]
) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """``(plain, secret)``: the pairs that are not secret, and those that are."""
    plain: List[Tuple[str, str]] = []
    secret: List[Tuple[str, str]] = []
    for k, v in pairs:
        (secret if k in secrets else plain).append((k, v))
    return plain, secret
