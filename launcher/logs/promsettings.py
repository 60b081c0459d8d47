"""Where a job's Prometheus metrics go: :class:`MetricsSettings`, built by the CLI from
``--metrics-*``.  Stdlib only, so that a command that exports nothing never imports
``prometheus_client`` (:mod:`launcher.logs.promexport` does, once a job exports)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

__all__ = ["DEFAULT_ADDR", "MetricsSettings", "TEXTFILE_INTERVAL", "textfile_path"]

#: The address ``--metrics-port`` binds unless told otherwise: this machine only.
DEFAULT_ADDR = "127.0.0.1"
#: Seconds between rewrites of the textfile.
TEXTFILE_INTERVAL = 2.0


@dataclass(frozen=True)
class MetricsSettings:
    """Where the job's metrics go (built once by the CLI from ``--metrics-*``).

    Attributes:
        port: the port ``/metrics`` is served on (0: a free one), None: no server.
        addr: the address it binds.
        textfile: the folder of ``<job id>.prom``, None: no textfile.
    """

    port: Optional[int] = None
    addr: str = DEFAULT_ADDR
    textfile: Optional[str] = None

    @property
    def enabled(self) -> bool:
        return self.port is not None or self.textfile is not None


def textfile_path(folder: str, job_id: str) -> str:
    """The job's file in the textfile collector's folder."""
    return os.path.join(folder, f"{job_id}.prom")
