"""CPU planning (pure): the oneDNN ISA, cores and threads per MindSpore rank from a CPU probe
(:mod:`~.tuning`), and a host's usable cores and its ranks' threads (:mod:`~.hostcores`)."""
