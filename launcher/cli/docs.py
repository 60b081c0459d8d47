"""Where a command's ``--help`` points for more than a line: its page under ``docs/``."""

from __future__ import annotations

#: Every page a ``--help`` epilog names (a test checks that each exists).
PAGES = {
    "running": "running.md",
    "inventories": "inventories.md",
    "ranktables": "ranktables.md",
    "watching": "watching.md",
    "ssh": "ssh.md",
    "slurm": "slurm.md",
    "kubernetes": "kubernetes.md",
    "workload": "workload.md",
    "msrun": "msrun.md",
    "long-jobs": "long-jobs.md",
    "spares": "spare-hosts.md",
    "cpu": "cpu-performance.md",
    "health": "health.md",
    "failures": "failures.md",
}


def epilog(topic: str) -> str:
    """The ``--help`` epilog naming ``topic``'s docs page."""
    return f"More: docs/{PAGES[topic]} in the mslaunch repository (linked from its README)."
