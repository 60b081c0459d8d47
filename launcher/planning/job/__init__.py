"""The job's values (pure): what the user asked for (:mod:`~.spec`: ``JobSpec``, ``Plan``,
``ProcPlan``), the named values mslaunch writes and compares (:mod:`~.kinds`), the job directory
layout (:mod:`~.layout`), rank assignment (:mod:`~.ranks`), the environment of each rendezvous
method (:mod:`~.envs`), each process's environment and cores (:mod:`~.procenv`) and mpirun's
job-wide options (:mod:`~.mpirun_options`).  :mod:`launcher.planning.build` composes them into a plan."""
