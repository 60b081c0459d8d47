"""What each backend needs planned beyond the plan itself (pure): mpirun's argv, hostfile and ssh
config (:mod:`~.mpirun`), Slurm allocations and srun steps (:mod:`~.slurm`), the shape
``mslaunch sbatch`` asks for (:mod:`~.sbatch`) and Kubernetes manifests (:mod:`~.k8s`)."""
