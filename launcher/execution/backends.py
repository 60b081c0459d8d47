"""The built-in backends: name -> ``module:Class``, imported on first use.

Listing the class here, not importing its module, keeps the CLI's start-up light (the ssh
backend imports paramiko), and importing a backend module registers nothing: the registry
(:func:`launcher.execution.backend.get_backend`) loads a built-in backend from this table when
it is first asked for.  A backend outside this package is registered explicitly with
:func:`launcher.execution.backend.register_backend`.
"""

from __future__ import annotations

from typing import Dict

#: Backend name -> ``module:Class``, in the order ``--launcher`` lists them.
BUILTIN: Dict[str, str] = {
    "local": "launcher.execution.local.backend:LocalBackend",
    "ssh": "launcher.execution.ssh.backend:SshBackend",
    "mpirun": "launcher.execution.mpirun.backend:MpirunBackend",
    "slurm": "launcher.execution.slurm.backend:SlurmBackend",
}
