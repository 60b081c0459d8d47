"""The one list of docs ``bash`` blocks the docs tests do not run, each with its reason.

A block is named by its page (under ``docs/``, or ``README.md``) and the first command line of
the block (comment lines skipped), so that editing other blocks does not move the names.  Every
entry must still match a block: a stale entry fails ``test_every_exemption_names_a_block``.
"""

from typing import Dict, Tuple

EXEMPT: Dict[Tuple[str, str], str] = {
    (
        "slurm.md",
        "salloc -N3 --ntasks-per-node=2",
    ): "an interactive allocation on a real Slurm cluster (salloc opens a shell); the same commands "
    "run inside the test cluster in the block under 'Trying it on one machine'",
    (
        "slurm.md",
        "mslaunch sbatch -N 3 --ntasks-per-node 2 -t 02:00:00 --signal USR1@120 --requeue \\",
    ): "trains ResNet-50 for hours on a real cluster; tests/integration/test_slurm_sbatch.py runs the "
    "same sbatch line (with a short run) on the test Slurm cluster",
    (
        "workload.md",
        "mslaunch data synth-cifar10 data/synth-cifar10 --train 3000 --test 500",
    ): "the commands of 'make run' (minutes of training); test_make_run_runs_the_documented_commands "
    "checks that the Makefile runs exactly these lines",
}
