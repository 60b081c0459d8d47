"""pytest fixtures for multi-host tests on a namespace cluster (see ``tests/netns_cluster.py``).

Fixtures:

* ``netns_cluster`` (session scope): one 3-host :class:`NamespaceCluster` shared by every test.
  Tests that cut links or stop sshds must undo it (``restore_link`` / ``start_sshd``, or
  ``netns_cluster.reset()`` in a ``finally``); tests must not leave processes behind.
* ``make_netns_cluster`` (function scope): a factory, ``make_netns_cluster(n_hosts=2, **kwargs)``
  returns a fresh :class:`NamespaceCluster`; every cluster it made is closed after the test, also
  when the test fails.

Both skip when the machine cannot run namespace clusters (not root, ``ip netns`` does not work,
no ``/usr/sbin/sshd``, ``ssh`` or ``ssh-keygen``) -- but when the ``CI`` environment variable is set
(and not ``0``/``false``/``no``), they fail instead: CI has these and must run the tests.

Use them with ``pytest_plugins = ["tests.harness.conftest_netns"]`` in the root ``tests/conftest.py``, or
by importing them into a test module.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import warnings
from typing import Any, Callable, Iterator, List, Optional

import pytest

from tests.harness.ci import skip_or_fail
from tests.harness.netns_cluster import SSHD, NamespaceCluster

__all__ = ["netns_cluster", "make_netns_cluster", "netns_unavailable_reason", "require_netns"]


@functools.lru_cache(maxsize=None)
def netns_unavailable_reason() -> Optional[str]:
    """Why namespace clusters cannot run here, or ``None`` if they can (probed once per process)."""
    if os.geteuid() != 0:
        return "namespace cluster tests need root (ip netns)"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"namespace cluster tests need '{tool}' (apt-get install iproute2 openssh-client)"
    if not os.access(SSHD, os.X_OK):
        return f"namespace cluster tests need {SSHD} (apt-get install openssh-server)"
    probe = f"msl{os.getpid()}probe"
    try:
        add = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"'ip netns add' does not work here: {exc}"
    if add.returncode != 0:
        return f"'ip netns add' does not work here: {add.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True, timeout=10)
    return None


def require_netns() -> None:
    """Skip the calling test (fail it under CI) if namespace clusters cannot run here."""
    reason = netns_unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)


# One shared cluster per process, reference-counted: if these fixtures are both registered as a
# plugin and imported into a test module, pytest keeps two fixture definitions; they still share it.
_shared: List[Any] = [None, 0]  # [cluster, users]


@pytest.fixture(scope="session")
def netns_cluster() -> Iterator[NamespaceCluster]:
    """A 3-host namespace cluster shared by the whole session (h1..h3, 2 slots each)."""
    require_netns()
    if _shared[0] is None:
        _shared[0] = NamespaceCluster(3)
    _shared[1] += 1
    cluster: NamespaceCluster = _shared[0]
    try:
        yield cluster
    finally:
        _shared[1] -= 1
        if _shared[1] == 0:
            _shared[0] = None
            leftovers = cluster.all_pids()
            try:
                cluster.close()
            finally:
                if leftovers:
                    warnings.warn(f"processes were left running in the shared netns cluster: {leftovers}", stacklevel=1)


@pytest.fixture
def make_netns_cluster() -> Iterator[Callable[..., NamespaceCluster]]:
    """Factory: ``make_netns_cluster(n_hosts=2, **kwargs)`` -> a fresh cluster, closed after the test."""
    require_netns()
    made: List[NamespaceCluster] = []

    def make(n_hosts: int = 2, **kwargs: Any) -> NamespaceCluster:
        cluster = NamespaceCluster(n_hosts, **kwargs)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        errors = []
        for cluster in reversed(made):
            try:
                cluster.close()
            except Exception as exc:  # noqa: BLE001 - close the others too
                errors.append(exc)
        if errors:
            raise errors[0]
