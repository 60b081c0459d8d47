"""The process library every backend and the supervisor use.

* :mod:`~.handle`: :class:`~.handle.ProcessHandle` (what the supervisor holds for each started
  process), :class:`~.handle.ReportedProcess`, :class:`~.handle.WatchdogLink`;
* :mod:`~.spawn`: start a process on this machine (:func:`~.spawn.start_local`,
  :class:`~.spawn.LocalProcess`), end a tree (:func:`~.spawn.kill_tree`), reap what ranks orphaned;
* :mod:`~.standin`: one local process that stands for many ranks (mpirun, srun);
* :mod:`~.watchdog`: ends the job's processes if mslaunch dies;
* :mod:`~.proctree`: processes from /proc (stdlib only: also sent to hosts);
* :mod:`~.stackdump`: Python stacks of running processes (stdlib only: also sent to hosts);
* :mod:`~.fastjoin`: the zygotes' shim that polls MindSpore's collective addresses quickly
  (stdlib only: also sent to hosts).
"""
