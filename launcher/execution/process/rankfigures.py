"""Each rank's scheduler figures, sampled on its own host and read here by the straggler watch,
for backends whose ranks mslaunch does not start itself (mpirun's and Slurm's).

``<attempt dir>/rank-figures/<name>`` (``<name>`` as :mod:`launcher.execution.process.rankpids`
names it: ``rank<N>``): one line, ``[time, cpu_s, delay_s, send_queued, busiest_link_s]`` as
:meth:`~launcher.execution.process.proctree.SchedCounter.sample` gives it (``time`` is the sampling
host's monotonic clock: only differences of one rank's samples count).  Written to a temporary name
and renamed, so a reader sees a whole line or the last one.  The job dir is on a filesystem every
host sees (as for ``rank-pids/``).

Who samples: mpirun's rank wrapper (``templates/mslaunch-rank.sh``) starts
``python -m launcher.execution.process.rankfigures PID FILE`` beside each rank; the Slurm task
shim samples its rank in a thread (:func:`sample_until_gone`).  Either stops once the rank is gone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import List, Optional, Tuple

from launcher.execution.process.rankpids import file_name

__all__ = ["EVERY", "FOLDER", "path_of", "read", "sample_until_gone", "write"]

FOLDER = "rank-figures"
#: Seconds between samples (as the ssh agents send theirs).
EVERY = 2.0

#: as :data:`launcher.execution.process.handle.RankFigures` (not imported: this module runs beside each rank)
Figures = Tuple[float, float, float, float, float]


def path_of(attempt_dir: str, rank: Optional[int]) -> str:
    """The file of ``rank``'s figures in ``attempt_dir``."""
    return os.path.join(attempt_dir, FOLDER, file_name(rank))


def write(path: str, figures: List[float]) -> None:
    """``figures`` as the file's one line, whole (a temporary name in the same folder, then a rename)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(json.dumps(figures) + "\n")
    os.replace(tmp, path)


def read(attempt_dir: str, rank: Optional[int]) -> Optional[Figures]:
    """The last figures written for ``rank``, or None (none yet, or not a well-formed line)."""
    try:
        with open(path_of(attempt_dir, rank), "r", encoding="ascii") as fh:
            got = json.loads(fh.read(256))
    except (OSError, ValueError):
        return None
    if not isinstance(got, list) or len(got) not in (4, 5):
        return None
    try:
        t, cpu, delay, queued, link = (float(x) for x in got + [-1.0] * (5 - len(got)))
    except (TypeError, ValueError):
        return None
    return (t, cpu, delay, queued, link)


def sample_until_gone(pid: int, path: str, every: float = EVERY) -> None:
    """Write ``pid``'s tree's figures to ``path`` every ``every`` seconds until it is gone; never raises."""
    from launcher.execution.process.proctree import SchedCounter

    counter = SchedCounter()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        while True:
            got = counter.sample(pid)
            if got is None:
                return
            write(path, got)
            time.sleep(every)
    except Exception:  # noqa: BLE001 - sampling is best effort: the rank runs on without it
        return


def main(argv: List[str]) -> int:
    """``python -m launcher.execution.process.rankfigures PID FILE``: sample until PID is gone."""
    if len(argv) != 2 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m launcher.execution.process.rankfigures PID FILE\n")
        return 2
    sample_until_gone(int(argv[0]), argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
