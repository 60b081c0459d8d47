"""The ``--ssh-*`` flags, declared once, and the :class:`SSHSettings` they build.

Every command that talks SSH (``run``, ``check``, ``doctor``, ``ranktable gen --collect``, and
``--ssh-config`` in every job command) takes its flags from here::

    @with_ssh_settings("accept_new", "connect_timeout")
    def doctor_cmd(..., *, ssh: SSHSettings) -> None: ...

The decorator adds the flags to the command's signature (so typer shows them) and hands the
command one frozen :class:`~launcher.execution.ssh.settings.SSHSettings`.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import typer

from launcher.errors import PlanError
from launcher.execution.ssh.settings import CONNECT_TIMEOUT, START_TIMEOUT, SSHSettings


@dataclass(frozen=True)
class _Flag:
    param: str
    annotation: Any
    default: Any
    flag: str
    help: str


#: SSHSettings field -> its command-line flag.
FLAGS: Dict[str, _Flag] = {
    "config": _Flag(
        "ssh_config",
        Optional[str],
        None,
        "--ssh-config",
        "ssh config for remote hosts (default $MSLAUNCH_SSH_CONFIG, else ~/.ssh/config).",
    ),
    "accept_new": _Flag(
        "ssh_accept_new", bool, False, "--ssh-accept-new", "Trust and record unknown SSH host keys (first use)."
    ),
    "connect_timeout": _Flag(
        "ssh_connect_timeout", float, CONNECT_TIMEOUT, "--ssh-connect-timeout", "Seconds to connect to a host."
    ),
    "start_timeout": _Flag(
        "ssh_start_timeout",
        float,
        START_TIMEOUT,
        "--ssh-start-timeout",
        "Seconds for a host's agent to start after login (slow login shells); then 'did not start'.",
    ),
}


def ssh_parameter(field: str, when: Optional[str] = None, panel: Optional[str] = "SSH") -> inspect.Parameter:
    """The keyword-only parameter declaring the flag of SSHSettings ``field``.

    Args:
        field: a key of :data:`FLAGS`.
        when: a flag the option only matters with (help then reads "With --collect: ...").
        panel: the ``--help`` panel, or None for the command's default one.
    """
    f = FLAGS[field]
    text = f"With {when}: {f.help[0].lower()}{f.help[1:]}" if when else f.help
    option = typer.Option(f.default, f.flag, help=text, rich_help_panel=panel)
    return inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=f.annotation)


def job_ssh_config(explicit: Optional[str], all_local: bool) -> Optional[str]:
    """The absolute ssh config of a job (``plan.ssh_config``): ``--ssh-config``; for a job with
    remote hosts also ``$MSLAUNCH_SSH_CONFIG`` or ``~/.ssh/config``; None if there is none.

    The file mslaunch's own SSH reads ($HOME/.ssh/config) goes into the plan so that OpenSSH
    (mpirun's agent) gets it with -F too: it would read the passwd home's instead (HOME differs
    in CI).

    Raises:
        PlanError: the file does not exist.
    """
    path = explicit or (os.environ.get("MSLAUNCH_SSH_CONFIG") if not all_local else None) or None
    if path is None and not all_local:
        from launcher.execution.ssh.config import config_path

        path = config_path()
    if path is None:
        return None
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise PlanError(f"no such ssh config file {path}", field="--ssh-config")
    return path


def settings_from(values: Dict[str, Any]) -> SSHSettings:
    """SSHSettings from the flag values given (by parameter name); absent flags keep defaults.

    Raises:
        PlanError: ``--ssh-start-timeout`` is not > 0.
    """
    fields = {field: values[f.param] for field, f in FLAGS.items() if f.param in values}
    if "start_timeout" in fields and not fields["start_timeout"] > 0:
        raise PlanError("--ssh-start-timeout must be > 0", field="--ssh-start-timeout")
    return SSHSettings(**fields)


def with_ssh_settings(
    *fields: str, when: Optional[str] = None, panel: Optional[str] = "SSH", before: Optional[str] = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the flags of ``fields`` to a command; it receives ``ssh: SSHSettings`` instead.

    The flags go before the parameter named ``before``, else after the command's own options
    (before a keyword-only ``opts``, if any); ``when`` and ``panel`` as for :func:`ssh_parameter`.
    """
    from launcher.cli.flagset import flag_set

    params = [ssh_parameter(field, when, panel) for field in fields]
    return flag_set(params, "ssh", lambda values, _: settings_from(values), before)
