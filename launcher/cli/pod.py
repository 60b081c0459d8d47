"""Per-node mode inside a Kubernetes pod: the scheduler's address and the console default.

* The scheduler's address (``--master_addr``, or ``MS_SCHED_HOST`` under ``--node_rank auto``)
  may be a DNS name (``<job>-0.<service>``) that resolves only once the scheduler's pod exists:
  pods start in any order.  :func:`resolve_master` waits for it within ``--start-timeout`` and
  puts the IP address in its place, because MindSpore needs an address in ``MS_SCHED_HOST`` (a
  name fails with "Failed to get socket address").
* In a pod, stdout is where logs are collected (``kubectl logs``): :func:`console_default` makes
  per-node mode print every local rank's lines, prefixed, unless ``--tee`` or msrun's
  ``--tail_worker_log`` says otherwise.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Mapping, Optional

from launcher.cli.options import JobOptions

#: Set by the kubelet in every container (the API server's Service address).
KUBERNETES_VAR = "KUBERNETES_SERVICE_HOST"


def per_node(opts: JobOptions) -> bool:
    """Whether ``opts`` run in per-node mode (see :func:`launcher.cli.spec.job_shape`)."""
    if opts.hosts is not None or opts.host_list is not None:
        return False
    if opts.node_rank is not None:
        return True
    return opts.np is not None and opts.per_host is not None and opts.per_host < opts.np


def in_kubernetes(environ: Mapping[str, str]) -> bool:
    return bool(environ.get(KUBERNETES_VAR))


def resolve_master(opts: JobOptions, start_timeout: float, environ: Mapping[str, str]) -> JobOptions:
    """``opts`` with the scheduler's address as an IP address (per-node mode only).

    Raises:
        LaunchError: the name did not resolve within ``start_timeout`` seconds.
    """
    if not per_node(opts):
        return opts
    addr = opts.master_addr
    auto = opts.node_rank is not None and opts.node_rank.strip().lower() == "auto"
    if addr is None and auto:
        addr = environ.get("MS_SCHED_HOST") or None
    if addr is None:
        return opts
    from launcher.execution.resolve import wait_resolved

    def waiting() -> None:
        sys.stderr.write(
            f"mslaunch: waiting for the scheduler's address {addr} to resolve (--start-timeout {start_timeout:g} s)\n"
        )
        sys.stderr.flush()

    ip = wait_resolved(addr, start_timeout, on_wait=waiting)
    return opts if ip == addr else replace(opts, master_addr=ip)


def console_default(opts: JobOptions, tee: Optional[str], environ: Mapping[str, str]) -> Optional[str]:
    """The ``--tee`` mode to use when none is given: ``all`` for per-node mode in a pod, else ``tee``."""
    if tee is None and opts.tail_worker_log is None and per_node(opts) and in_kubernetes(environ):
        return "all"
    return tee
