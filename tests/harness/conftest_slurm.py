"""pytest fixtures for tests on a real Slurm cluster (see :mod:`tests.harness.slurm_cluster`).

* ``slurm_cluster`` (session scope): one 3-node :class:`SlurmCluster` (``node1..node3``, 4 CPUs
  each) shared by every test; each test using it starts with every node idle and no job queued
  (the fixture ``slurm`` waits for that) and must leave no process in any node.

Both skip when the machine cannot run it (not root, no namespaces, no slurmd) -- but fail when
``CI`` is set: CI has these and must run the tests.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator, List

import pytest

from tests.harness.ci import skip_or_fail
from tests.harness.conftest_netns import require_netns
from tests.harness.slurm_cluster import SlurmCluster, slurm_unavailable_reason

__all__ = ["slurm_cluster", "slurm", "require_slurm"]

_shared: List[Any] = [None]


def require_slurm() -> None:
    """Skip the calling test (fail it under CI) if a Slurm test cluster cannot run here."""
    require_netns()
    reason = slurm_unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A 3-node Slurm cluster shared by the whole session."""
    require_slurm()
    cluster = SlurmCluster(3)
    try:
        yield cluster
    finally:
        leftovers = cluster.node_pids()
        cluster.close()
        if leftovers:
            warnings.warn(f"processes were left running on the Slurm nodes: {leftovers}", stacklevel=1)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The shared cluster, idle at the start of the test; checked idle and empty after it."""
    slurm_cluster.wait_idle()
    yield slurm_cluster
    slurm_cluster.wait_idle()
