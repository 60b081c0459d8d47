"""Programs that run on the job's hosts: each a real module (linted, imported by its tests) that is
also sent to a host as source text and run there as ``python -S -c <source>`` (mslaunch need
not be installed on the host): :mod:`~.stackdump` (stack dumps), :mod:`~.health_probe` (the
health check), :mod:`~.doctor_probe` (``mslaunch doctor``'s facts), :mod:`~.node_facts` (a Slurm
node's), and the ssh backend's remote agent (:mod:`launcher.execution.ssh.remote_agent`, with
:mod:`launcher.execution.ssh.remote_link`).  The CPU probe, which imports MindSpore,
is :mod:`launcher.workloads.cpu_probe`.

Such a program uses the standard library only (numpy where it says so), runs on Python >= 3.6
and imports from ``launcher`` only :mod:`launcher.execution.process.proctree` (and the modules sent with it), inside
``try: ... except
ImportError``: :func:`program_source` puts that module's source in front of the program's, so
on the host the names are already defined and the import is skipped.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

__all__ = ["program_source"]


@lru_cache(maxsize=None)
def program_source(*modules: str) -> str:
    """The source text that runs the last of ``modules`` on a host: :mod:`launcher.execution.process.proctree`'s
    source when one of them imports it, then each module's own, in order (a module's imports of
    the ones before it are then skipped)."""
    parts = []
    for name in modules:
        path = importlib.import_module(name).__file__
        assert path is not None
        with open(path, "r", encoding="utf-8") as fh:
            parts.append(fh.read())
    if any("from launcher.execution.process.proctree import" in part for part in parts):
        parts.insert(0, program_source("launcher.execution.process.proctree"))
    text = "\n\n".join(parts)
    if _FUTURE in text:  # it must come first: once, at the top
        text = _FUTURE + text.replace(_FUTURE, "")
    return text


_FUTURE = "from __future__ import annotations\n"
