"""The one exception family of mslaunch.

Every error a user can cause (bad hostfile, YAML, rank table, flag, busy port, unreachable host)
is an :class:`MsLaunchError` or a subclass.  Only ``launcher.cli`` turns them into a one-line
message and an exit code; nothing below it prints or exits.
"""

from __future__ import annotations

from typing import Optional


class MsLaunchError(Exception):
    """Base class for every error mslaunch reports to a user.

    Args:
        message: what is wrong and, where it helps, what to do about it.
        path: the file the error is in, if any.
        line: 1-based line in ``path``, if known.
        field: a JSON path / YAML key path (``server_list[1].device[0].rank_id``), if any.
        exit_code: the process exit code the CLI uses for this error (2: bad input).
    """

    exit_code: int = 2

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        line: Optional[int] = None,
        field: Optional[str] = None,
        exit_code: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        if exit_code is not None:
            self.exit_code = exit_code

    def where(self) -> str:
        """``path:line``, ``path: field``, ``field`` or ``""``."""
        loc = ""
        if self.path is not None:
            loc = self.path if self.line is None else f"{self.path}:{self.line}"
        if self.field is not None:
            loc = f"{loc}: {self.field}" if loc else self.field
        return loc

    def __str__(self) -> str:
        loc = self.where()
        return f"{loc}: {self.message}" if loc else self.message


class InventoryError(MsLaunchError):
    """A hostfile, ``-H`` list, YAML cluster file or host filter is wrong."""


class RankTableError(MsLaunchError):
    """A rank table (or an hccn.conf feeding one) cannot be read, built or merged."""


class PlanError(MsLaunchError):
    """The job cannot be planned from the options given (e.g. more ranks than slots)."""


class LaunchError(MsLaunchError):
    """A job could not be started (busy port, missing mpirun, unreachable host...)."""

    exit_code = 1


class JobError(MsLaunchError):
    """A job id or job directory is unknown or unreadable."""
