"""``run``'s ``--metrics-port``, ``--metrics-addr`` and ``--metrics-textfile``: the job's metrics for Prometheus.

The decorator :func:`with_metrics_settings` adds the flags to a command, which receives one
:class:`~launcher.logs.promsettings.MetricsSettings`; :func:`start_exporter` binds the server and
writes the first textfile before the job starts, so a port in use or a folder that cannot be
written is a one-line error and nothing runs (``docs/watching.md#prometheus``).
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Tuple

import typer

from launcher.cli.flagset import flag_set
from launcher.errors import MsLaunchError
from launcher.logs.promsettings import DEFAULT_ADDR, MetricsSettings

if TYPE_CHECKING:
    from launcher.logs.promexport import MetricsExporter
    from launcher.logs.promodel import JobIdentity
    from launcher.planning.job.spec import JobSpec, Plan

__all__ = ["check_bindable", "job_identity", "parse_settings", "start_exporter", "with_metrics_settings"]

_PANEL = "Metrics"
_PARAMS = (
    inspect.Parameter(
        "metrics_port",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--metrics-port",
            metavar="[HOST:]PORT",
            help=(
                "Serve the job's Prometheus metrics on http://HOST:PORT/metrics while it runs (HOST default 127.0.0.1;"
                " PORT 0: a free one, printed and recorded in job.json). See docs/watching.md#prometheus."
            ),
            rich_help_panel=_PANEL,
        ),
        annotation=Optional[str],
    ),
    inspect.Parameter(
        "metrics_addr",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--metrics-addr",
            help="With --metrics-port: the address to bind (0.0.0.0: every interface; default 127.0.0.1).",
            rich_help_panel=_PANEL,
        ),
        annotation=Optional[str],
    ),
    inspect.Parameter(
        "metrics_textfile",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            None,
            "--metrics-textfile",
            metavar="DIR",
            help="Write the metrics to DIR/<job id>.prom (node_exporter's textfile collector) every 2 s and at the end",
            rich_help_panel=_PANEL,
        ),
        annotation=Optional[str],
    ),
)


def _split_port(value: str) -> Tuple[Optional[str], str]:
    """``(host or None, port text)`` of ``PORT``, ``HOST:PORT`` or ``[V6]:PORT``."""
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        return (host, port) if sep else (None, value)
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, port
    return None, value


def parse_settings(port: Optional[str], addr: Optional[str], textfile: Optional[str]) -> MetricsSettings:
    """The settings of the flags' values.

    Raises:
        MsLaunchError: a port that is not 0..65535, two different addresses, ``--metrics-addr``
            without ``--metrics-port``, an empty address or folder.
    """
    number: Optional[int] = None
    host = addr
    if port is not None:
        given, text = _split_port(port.strip())
        if not text.isdigit() or int(text) > 65535:
            raise MsLaunchError(
                f"{port!r} is not a port; give PORT or HOST:PORT with PORT in 0..65535 (0: a free one)",
                field="--metrics-port",
            )
        number = int(text)
        if given is not None:
            if not given:
                raise MsLaunchError(f"{port!r} has an empty host; give PORT or HOST:PORT", field="--metrics-port")
            if addr is not None and addr != given:
                raise MsLaunchError(
                    f"--metrics-port {port} binds {given} but --metrics-addr says {addr}; give one of them",
                    field="--metrics-addr",
                )
            host = given
    elif addr is not None:
        raise MsLaunchError("serves nothing without --metrics-port; add --metrics-port PORT", field="--metrics-addr")
    if host is not None and not host.strip():
        raise MsLaunchError("empty address; give an IP address or host name", field="--metrics-addr")
    if textfile is not None and not textfile.strip():
        raise MsLaunchError("empty folder; give node_exporter's textfile folder", field="--metrics-textfile")
    return MetricsSettings(
        port=number,
        addr=host or DEFAULT_ADDR,
        textfile=None if textfile is None else os.path.abspath(os.path.expanduser(textfile)),
    )


def with_metrics_settings(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the flags to a command; it receives ``metrics: MetricsSettings``, before its keyword-only ``opts``.
    Bad values are refused first; so is a textfile folder that cannot be written, unless ``--dry-run``."""

    def build(values: Dict[str, Any], others: Mapping[str, Any]) -> MetricsSettings:
        settings = parse_settings(*[values[p.name] for p in _PARAMS])
        if not others.get("dry_run"):  # a real run (and sbatch's check at submit time): the folder is there
            check_textfile(settings)
        return settings

    return flag_set(_PARAMS, "metrics", build)(func)


def check_textfile(settings: MetricsSettings) -> None:
    """The textfile's folder is a writable directory (before anything starts).

    Raises:
        MsLaunchError: it is not.
    """
    folder = settings.textfile
    if folder is not None and not (os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)):
        what = "is not a directory" if not os.path.isdir(folder) else "is not writable"
        raise MsLaunchError(
            f"{folder} {what}; create it (node_exporter's --collector.textfile.directory) or choose another",
            field="--metrics-textfile",
        )


def _bind_error(settings: MetricsSettings, exc: OSError) -> MsLaunchError:
    return MsLaunchError(
        f"cannot serve on {settings.addr}:{settings.port}: {exc.strerror or exc}; "
        "choose another port (0: a free one) or --metrics-addr",
        field="--metrics-port",
    )


def check_bindable(settings: MetricsSettings) -> None:
    """``--detach``: the port can be bound now (the background run binds it again), the textfile's
    folder is writable.

    Raises:
        MsLaunchError: it cannot.
    """
    check_textfile(settings)
    if settings.port is None or settings.port == 0:
        return
    import socket

    try:
        infos = socket.getaddrinfo(settings.addr, settings.port, type=socket.SOCK_STREAM)
        sock = socket.socket(infos[0][0], socket.SOCK_STREAM)
        try:
            sock.bind(infos[0][4])
        finally:
            sock.close()
    except OSError as exc:
        raise _bind_error(settings, exc) from None


class JobMetrics:
    """The run's exporter, if it has one: what to record of it, and its end."""

    def __init__(self, job_dir: str, exporter: "Optional[MetricsExporter]") -> None:
        self.job_dir = job_dir
        self.exporter = exporter

    def job_extra(self) -> Optional[Dict[str, Any]]:
        """``job.json``'s ``metrics_url`` and ``metrics_textfile``."""
        e = self.exporter
        return None if e is None else {"metrics_url": e.url, "metrics_textfile": e.textfile}

    def announce(self) -> None:
        """The ``metrics`` event (once the job dir is written)."""
        if self.exporter is not None:
            from launcher.logs.metricsfile import append_event
            from launcher.planning.job.events import MetricsEndpoint

            append_event(self.job_dir, MetricsEndpoint(self.exporter.url, self.exporter.textfile))

    def close(self) -> None:
        """Write the textfile a final time (the job's end) and stop serving."""
        if self.exporter is not None:
            self.exporter.close()


def start_exporter(settings: MetricsSettings, spec: "JobSpec", plan: "Plan") -> JobMetrics:
    """Bind ``/metrics`` and write the first textfile, before the job starts; print where they are.

    Raises:
        MsLaunchError: the port cannot be bound (in use, an address not of this machine), the
            folder cannot be written.
    """
    if not settings.enabled:
        return JobMetrics(plan.job_dir, None)
    check_textfile(settings)
    from launcher.logs.causes import KINDS
    from launcher.logs.promexport import MetricsExporter  # prometheus_client: only for a job that exports
    from launcher.logs.promgoodput import GoodputFamilies

    exporter = MetricsExporter(
        plan.job_dir, job_identity(spec, plan), causes=KINDS, extra=[GoodputFamilies(plan.job_dir)]
    )
    try:
        if settings.port is not None:
            try:
                url = exporter.serve(settings.addr, settings.port)
            except OSError as exc:
                raise _bind_error(settings, exc) from None
            sys.stderr.write(f"mslaunch: metrics: {url}\n")
        if settings.textfile is not None:
            try:
                exporter.start_textfile(settings.textfile)
            except OSError as exc:
                raise MsLaunchError(
                    f"cannot write {settings.textfile}: {exc.strerror or exc}; choose a writable folder",
                    field="--metrics-textfile",
                ) from None
    except BaseException:
        exporter.close()
        raise
    return JobMetrics(plan.job_dir, exporter)


def job_identity(spec: "JobSpec", plan: "Plan") -> "JobIdentity":
    """The job as ``mslaunch_job_info`` names it: its id, backend, program (a file name or a module);
    the ranks this mslaunch runs (per-node mode: its node's, so the pods' sum is the world size)."""
    program = spec.program[0] if spec.program else ""
    script = program if spec.module else os.path.basename(program)
    node = spec.node.node_rank if spec.node is not None else None
    from launcher.logs.promodel import JobIdentity  # the exporter's model: only for a job that exports

    return JobIdentity(plan.job_id, plan.launcher, script, len(plan.ranks), node)  # per-node mode: this node's
