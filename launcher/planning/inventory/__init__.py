"""Inventories (pure): which hosts a job may use, with how many slots, and what is known of each.

* :mod:`~.model`: :class:`~.model.Host`, :class:`~.model.Inventory`, "is this host local", and the
  checks and bounds every source shares;
* :mod:`~.sources`: ``read_inventory`` / ``read_hosts_arg`` (which source a path or flag is) and
  the local inventory;
* :mod:`~.hostfile`: OpenMPI hostfiles, read as OpenMPI 4.1 reads them;
* :mod:`~.hostarg`: ``-H h1:8,h2:8`` lists;
* :mod:`~.hostlist`: Slurm hostlists (``node[01-04]``), through ClusterShell;
* :mod:`~.clusteryaml` (with :mod:`~.yamltree`, a bounded YAML composer): YAML cluster files;
* :mod:`~.filters`: ``--include`` / ``--exclude``.
"""
