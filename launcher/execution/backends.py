"""The built-in backends: name -> the module that registers it (imported on first use).

Each module calls :func:`launcher.execution.backend.register_backend` at import.  Listing the
module here, not importing it, keeps the CLI's start-up light (the ssh backend imports paramiko).
A backend outside this package registers itself the same way once its module is imported.
"""
from __future__ import annotations

from typing import Dict, Tuple

#: Backend name -> its module, in the order ``--launcher`` lists them.
BUILTIN: Dict[str, str] = {
    "local": "launcher.execution.local.backend",
    "ssh": "launcher.execution.ssh.backend",
    "mpirun": "launcher.execution.mpirun.backend",
    "slurm": "launcher.execution.slurm.backend",
}


def load_all() -> Tuple[str, ...]:
    """Import every built-in backend module (registering each); their names."""
    import importlib

    for module in BUILTIN.values():
        importlib.import_module(module)
    return tuple(BUILTIN)
