"""Pure planning: inventories, rank assignment, rank tables, hostfiles, env layouts and plans.

Nothing here starts a process, opens a socket or reads ``os.environ``.  Grouped by what it plans:

* :mod:`~.build` (``JobSpec`` -> ``Plan``) and :mod:`~.spares` (a plan around left-out hosts);
* :mod:`~.job`: the job's values (spec, plan, kinds, layout, ranks, environments);
* :mod:`~.inventory`: hosts and slots from hostfiles, ``-H``, YAML and Slurm hostlists;
* :mod:`~.backends`: what mpirun, Slurm, sbatch and Kubernetes need planned;
* :mod:`~.cpu`: threads and cores per rank; :mod:`~.health`: the health and device checks;
* :mod:`~.ranktable`: HCCL rank tables and hccn.conf; :mod:`~.text`: bounded text in, JSON/YAML out.
"""
