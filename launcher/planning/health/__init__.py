"""Health checks (pure): the pre-flight check's pairing rounds, medians and verdicts
(:mod:`~.rounds`) and the device checks of NPUs and GPUs (:mod:`~.devices`)."""
