"""``run``'s ``--preflight``, ``--device-checks`` and ``--health-threshold``: the health check of
every host before the job starts (docs/health.md).

The decorator :func:`with_preflight_settings` adds the flags to a command, which receives one
:class:`PreflightSettings` (``preflight``), checked: bad values are one-line errors naming the flag.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional

import typer

from launcher.cli.flagset import flag_set
from launcher.planning.health.policy import DEFAULT_POLICY, DEFAULT_THRESHOLD, check_mode, check_policy, check_threshold

__all__ = ["PreflightSettings", "with_preflight_settings"]

_PANEL = "Run"


@dataclass(frozen=True)
class PreflightSettings:
    """``--preflight MODE`` (None: no check), ``--device-checks``, ``--health-threshold``."""

    mode: Optional[str] = None
    device_checks: str = DEFAULT_POLICY
    threshold: float = DEFAULT_THRESHOLD


_PARAMS = (
    inspect.Parameter(
        "preflight_mode",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--preflight",
            metavar="MODE",
            help=(
                "exclude | warn | fail: check every inventory host (compute kernel, paired transfers) before "
                "starting; exclude plans around slow or faulty hosts when there are spares, warn only reports, fail "
                "stops. See docs/health.md."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=Optional[str],
    ),
    inspect.Parameter(
        "device_checks",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            PreflightSettings.device_checks,
            "--device-checks",
            help=(
                "--preflight, Ascend and GPU jobs: off | try | require: check the planned NPUs/GPUs with the hosts' "
                "tools; require also fails a host whose device checks could not run."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=str,
    ),
    inspect.Parameter(
        "health_threshold",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            PreflightSettings.threshold,
            "--health-threshold",
            help=(
                "--preflight: a host below this fraction of the hosts' median (compute or network) is slow "
                "(as doctor --health's); lower it where other work shares the hosts."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=float,
    ),
)


def _build(values: Any, _: Any) -> PreflightSettings:
    check_mode(values["preflight_mode"])
    check_policy(values["device_checks"])
    check_threshold(values["health_threshold"])
    return PreflightSettings(values["preflight_mode"], values["device_checks"], values["health_threshold"])


def with_preflight_settings(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the flags to a command; it receives ``preflight: PreflightSettings``."""
    return flag_set(_PARAMS, "preflight", _build)(func)
