"""``run``'s ``--min-hosts``, ``--rejoin-after`` and ``--grow-at-checkpoint``: a job that goes on
with fewer hosts when no spare is left, and takes hosts back when they answer again
(docs/spare-hosts.md).

The decorator :func:`with_elastic_settings` adds the flags to a command, which receives one
:class:`~launcher.execution.settings.ElasticSettings` (``elastic``); bad values are one-line
errors naming the flag.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import typer

from launcher.cli.flagset import flag_set
from launcher.errors import PlanError
from launcher.execution.settings import ElasticSettings

__all__ = ["parse_rejoin_after", "with_elastic_settings"]

_PANEL = "Long jobs"
_PARAMS = (
    inspect.Parameter(
        "min_hosts",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--min-hosts",
            metavar="N",
            help=(
                "When hosts are left out (lost, failing) and no spare is left, restarts go on with the hosts left, at "
                "least N, with fewer ranks (each process finds MSLAUNCH_WORLD_SIZE and MSLAUNCH_PLANNED_WORLD_SIZE; "
                "the reference trainer keeps its global batch). Default: the job stops. See docs/spare-hosts.md."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=Optional[int],
    ),
    inspect.Parameter(
        "rejoin_after",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--rejoin-after",
            metavar="SECONDS|off",
            help=(
                "A host left out is tried again at a restart this long after (if its ssh port answers; doubled "
                "each time it is left out again), so a smaller job grows back (default 300; off: never)."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=Optional[str],
    ),
    inspect.Parameter(
        "grow_at_checkpoint",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            False,
            "--grow-at-checkpoint",
            help=(
                "With --min-hosts: a job running smaller restarts to grow back as soon as a left-out host answers "
                "after --rejoin-after (the ranks save at their next step's end first), not at the next fault."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=bool,
    ),
)


def parse_rejoin_after(text: Optional[str]) -> Optional[float]:
    """``--rejoin-after``: seconds >= 0, ``off`` (None); None: the default.

    Raises:
        PlanError: anything else.
    """
    if text is None:
        return ElasticSettings.rejoin_after
    if text.strip().lower() in ("off", "never", "no"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise PlanError(f"--rejoin-after {text!r}: expected seconds >= 0, or off", field="--rejoin-after")
    return seconds


def with_elastic_settings(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the flags to a command; it receives ``elastic: ElasticSettings``, before its keyword-only ``opts``."""
    build = lambda v, _: ElasticSettings(v["min_hosts"], parse_rejoin_after(v["rejoin_after"]), v["grow_at_checkpoint"])  # noqa: E731  (one line)
    return flag_set(_PARAMS, "elastic", build)(func)
