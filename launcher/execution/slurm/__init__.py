"""The slurm backend (see :mod:`launcher.execution.slurm.backend`); the shim and the step canceller run on their own."""
