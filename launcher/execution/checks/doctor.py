"""``mslaunch doctor``: check every host of a job before running it, in parallel.

Per host (one SSH connection each, opened at once; ``localhost`` runs the probe directly):

=============  ===========================================================================
check          passes when
=============  ===========================================================================
ssh            the host answers and authenticates within the connect timeout
python         the ranks' interpreter runs, and its version is the same on every host
mindspore      that interpreter has MindSpore, the same version on every host
workload       the script exists (``-m``: the module imports; ``--no-python``: the
               executable is found) and the working directory exists
master port    the scheduler's port is free on the master host (dynamic method)
clock          the host's clock is within ``max_skew`` seconds of this machine's
hccn.conf      the host has ``hccn_path`` with device addresses (ranktable method)
<backend>      the backend's tool (e.g. mpirun) is installed, at this machine's version
               (the backend's registered :class:`~launcher.execution.backend.ToolCheck`)
=============  ===========================================================================

Checks are plain functions of probe results returning :class:`Check` rows; a check that does
not apply is ``None`` ("-" in the table) and a host that cannot be reached gets ``None`` for
everything after ``ssh``.  The probe is one small Python program (:mod:`launcher.execution.probes.doctor_probe`) run
under
``python3`` (or the inventory's ``python:``) with its parameters as JSON on stdin.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.execution.backend import ToolCheck
from launcher.planning.inventory.model import Host

if TYPE_CHECKING:
    from launcher.execution.ssh.settings import SSHSettings

#: The checks every job gets; a backend's tool checks (``DoctorJob.tools``) follow them.
CHECKS = ("ssh", "python", "mindspore", "workload", "master port", "clock", "hccn.conf")
DEFAULT_MAX_SKEW = 1.0
DEFAULT_HCCN_PATH = "/etc/hccn.conf"


def probe_source() -> str:
    """The probe's source text, as ``python -S -c`` runs it on a host."""
    from launcher.execution.probes import program_source

    return program_source("launcher.execution.probes.doctor_probe")


@dataclass(frozen=True)
class Check:
    """One cell of the report: ``ok`` True/False, or None when the check does not apply."""

    name: str
    ok: Optional[bool]
    detail: str = ""

    @property
    def mark(self) -> str:
        return "-" if self.ok is None else ("✓" if self.ok else "✗")


@dataclass(frozen=True)
class HostReport:
    host: str
    checks: Tuple[Check, ...]

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        return Check(name, None)

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)


@dataclass(frozen=True)
class DoctorJob:
    """What to check, per host (built by the CLI from the run options).

    Attributes:
        hosts: the job's hosts.
        python: host name -> the ranks' interpreter there (None with ``--no-python``).
        script: host name -> script path, or None.
        module: ``-m`` module, or None.
        exe: ``--no-python`` executable, or None.
        cwd: the ranks' working directory.
        master: ``(host name, port)`` of the scheduler (dynamic method), or None.
        hccn_path: hccn.conf path to look for (ranktable method), or None.
        tools: the tool checks of the job's backend (e.g. mpirun), from the backend registry.
        tool_columns: every backend's tool check name (the report's last columns; "-" where
            the job's backend does not use that tool).
        max_skew: allowed clock difference, s.
    """

    hosts: Tuple[Host, ...]
    python: Dict[str, Optional[str]]
    script: Dict[str, Optional[str]]
    module: Optional[str]
    exe: Optional[str]
    cwd: Optional[str]
    master: Optional[Tuple[str, int]]
    hccn_path: Optional[str]
    tools: Tuple[ToolCheck, ...] = ()
    tool_columns: Tuple[str, ...] = ()
    max_skew: float = DEFAULT_MAX_SKEW


# ------------------------------------------------------------------------ probing


def _probe_config(job: DoctorJob, host: Host) -> Dict[str, Any]:
    return {
        "python": job.python.get(host.name),
        "module": job.module,
        "script": job.script.get(host.name),
        "exe": job.exe,
        "cwd": job.cwd,
        "port": job.master[1] if job.master is not None and job.master[0] == host.name else None,
        "hccn": job.hccn_path,
        "tools": {t.name: t.exe for t in job.tools},
    }


def _parse_probe(host: str, rc: Optional[int], out: bytes, err: bytes) -> Dict[str, Any]:
    try:
        data = json.loads(out.decode("utf-8", "replace"))
        if isinstance(data, dict):
            return data
    except ValueError:
        pass
    said = (err.decode("utf-8", "replace").strip().splitlines() or [f"exit {rc}"])[-1]
    return {"probe_error": f"the probe failed on {host}: {said}"}


def probe_local(job: DoctorJob, host: Host) -> Tuple[Dict[str, Any], float, float]:
    """Run the probe on this machine; ``(result, t_sent, t_received)``."""
    python = host.python or sys.executable
    t0 = time.time()
    try:
        p = subprocess.run(
            [python, "-S", "-c", probe_source()],
            input=json.dumps(_probe_config(job, host)).encode(),
            capture_output=True,
            timeout=120,
        )
        res = _parse_probe(host.name, p.returncode, p.stdout, p.stderr)
    except (OSError, subprocess.TimeoutExpired) as exc:
        res = {"probe_error": f"the probe failed on {host.name}: {exc}"}
    return res, t0, time.time()


def probe_remote(job: DoctorJob, host: Host, conn: Any) -> Tuple[Dict[str, Any], float, float]:
    """Run the probe over an :class:`~launcher.execution.ssh.connection.SshConnection`."""
    from launcher.errors import LaunchError

    python = host.python or "python3"
    command = "exec " + " ".join(shlex.quote(p) for p in (python, "-S", "-c", probe_source()))
    t0 = time.time()
    try:
        rc, out, err = conn.run(command, stdin=json.dumps(_probe_config(job, host)).encode(), timeout=120)
        res = _parse_probe(host.name, rc, out, err)
    except LaunchError as exc:
        res = {"probe_error": str(exc)}
    return res, t0, time.time()


# ------------------------------------------------------------------------ checks


def _same(values: Dict[str, Optional[str]]) -> Tuple[Optional[str], Dict[str, str]]:
    """The most common value and, per host, the text saying how it differs."""
    present = {h: v for h, v in values.items() if v}
    if not present:
        return None, {}
    common, _ = Counter(present.values()).most_common(1)[0]
    holders = [h for h, v in present.items() if v == common]
    return common, {h: f"{v} differs from {common} ({', '.join(holders)})" for h, v in present.items() if v != common}


def check_names(job: DoctorJob) -> Tuple[str, ...]:
    """The columns of ``job``'s report: :data:`CHECKS`, then the tool columns."""
    return CHECKS + tuple(dict.fromkeys(job.tool_columns + tuple(t.name for t in job.tools)))


def check_rows(
    job: DoctorJob, results: Dict[str, Any], local_versions: Mapping[str, Optional[str]]
) -> List[HostReport]:
    """Turn probe results (host -> ``(probe dict, t0, t1)`` or an ssh failure string) into rows.

    ``local_versions``: tool name -> its version on this machine (None: unknown)."""
    names = check_names(job)
    reports: List[HostReport] = []
    _, py_diff = _same({h: r[0].get("python") for h, r in results.items() if not isinstance(r, str)})
    _, ms_diff = _same({h: r[0].get("mindspore") for h, r in results.items() if not isinstance(r, str)})
    for host in job.hosts:
        res = results.get(host.name)
        if isinstance(res, str) or res is None:
            checks = [Check("ssh", False, res or "not checked")] + [Check(n, None, "unreachable") for n in names[1:]]
            reports.append(HostReport(host.name, tuple(checks)))
            continue
        data, t0, t1 = res
        rows = [Check("ssh", True, "local" if host.is_local else "ok")]
        if "probe_error" in data:
            rows.append(Check("python", False, data["probe_error"]))
            rows += [Check(n, None, "") for n in names[2:]]
        else:
            rows += _python_rows(job, host.name, data, py_diff, ms_diff)
            rows += [
                _workload_row(job, host.name, data),
                _port_row(job, host.name, data),
                _clock_row(job, data, t0, t1),
                _hccn_row(job, data),
            ]
            rows += _tool_rows(job, data, local_versions)
        reports.append(HostReport(host.name, tuple(rows)))
    return reports


def _python_rows(
    job: DoctorJob, host: str, data: Dict[str, Any], py_diff: Dict[str, str], ms_diff: Dict[str, str]
) -> List[Check]:
    """python and mindspore: present, and the same version as on most hosts."""
    if job.python.get(host) is None:
        return [Check("python", None), Check("mindspore", None)]
    if "python_error" in data:
        return [Check("python", False, f"{job.python[host]}: {data['python_error']}"), Check("mindspore", None)]
    rows = [Check("python", host not in py_diff, py_diff.get(host, data.get("python", "?")))]
    ms = data.get("mindspore") or ""
    if not ms:
        rows.append(Check("mindspore", False, f"not installed for {job.python[host]}"))
    else:
        rows.append(Check("mindspore", host not in ms_diff, ms_diff.get(host, ms)))
    return rows


def _workload_row(job: DoctorJob, host: str, data: Dict[str, Any]) -> Check:
    """The program (script, module or executable) and the working directory exist."""
    problems = []
    if job.cwd and data.get("cwd_found") is False:
        problems.append(f"working directory {job.cwd} missing")
    if job.script.get(host) and data.get("script_found") is False:
        problems.append(f"{job.script[host]} missing")
    if job.module and data.get("module_found") is False:
        problems.append(f"module {job.module} not importable")
    if job.exe and data.get("exe_found") is False:
        problems.append(f"{job.exe} not found")
    if not (job.script.get(host) or job.module or job.exe):
        return Check("workload", None, "no program given")
    return Check("workload", not problems, "; ".join(problems) or "found")


def _port_row(job: DoctorJob, host: str, data: Dict[str, Any]) -> Check:
    """The scheduler's port is free on its host."""
    if job.master is None or job.master[0] != host:
        return Check("master port", None)
    free = data.get("port_free")
    return Check(
        "master port",
        bool(free),
        f"{job.master[1]} free"
        if free
        else f"{job.master[1]} in use on {host} ({data.get('port_error', 'busy')}); pass --master-port auto or another "
        "port",
    )


def _clock_row(job: DoctorJob, data: Dict[str, Any], t0: float, t1: float) -> Check:
    """Clock skew: the probe read its clock ``elapsed`` s before its answer arrived at ``t1``
    (the interpreter's start-up happened before, so ``t1 - elapsed`` is closer than the midpoint)."""
    remote = float(data.get("time", 0.0))
    local = max(t0, t1 - float(data.get("elapsed", 0.0)))
    skew = remote - local
    return Check("clock", abs(skew) <= job.max_skew, f"{skew:+.3f} s")


def _hccn_row(job: DoctorJob, data: Dict[str, Any]) -> Check:
    """hccn.conf has device addresses (ranktable method)."""
    if job.hccn_path is None:
        return Check("hccn.conf", None)
    if "hccn_error" in data:
        return Check("hccn.conf", False, f"{job.hccn_path}: {data['hccn_error']}")
    n = int(data.get("hccn_devices", 0))
    return Check("hccn.conf", n > 0, f"{n} device addresses" if n else f"{job.hccn_path} has no address_N lines")


def _tool_rows(job: DoctorJob, data: Dict[str, Any], local_versions: Mapping[str, Optional[str]]) -> List[Check]:
    """One cell per tool column: checked for the job's backend's tools, else not applicable."""
    tools = {t.name: t for t in job.tools}
    names = check_names(job)[len(CHECKS) :]
    return [_tool_row(tools[n], data.get(n), local_versions.get(n)) if n in tools else Check(n, None) for n in names]


def _tool_row(tool: ToolCheck, version: Optional[str], local: Optional[str]) -> Check:
    """A backend tool's cell: installed, and at this machine's version."""
    if version is None:
        return Check(tool.name, False, f"not installed ({tool.install_hint})")
    if local is not None and version != local:
        return Check(tool.name, False, f"{version} differs from {local} on this machine")
    return Check(tool.name, True, version)


def tool_version(exe: str) -> Optional[str]:
    """``4.1.4`` from ``exe --version`` on this machine, or None."""
    import re

    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def run_doctor(job: DoctorJob, ssh: Optional["SSHSettings"] = None) -> List[HostReport]:
    """Probe every host in parallel and return one report per host (in inventory order).

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    from launcher.execution.ssh.connection import SshConnection, connect_each, run_parallel
    from launcher.execution.ssh.settings import SSHSettings

    remote = [h for h in job.hosts if not h.is_local]
    conns: Dict[str, Any] = connect_each(remote, ssh or SSHSettings()) if remote else {}
    try:

        def probe(host: Host) -> Any:
            if host.is_local:
                return probe_local(job, host)
            conn = conns.get(host.name)
            if not isinstance(conn, SshConnection):
                return conn
            return probe_remote(job, host, conn)

        local_versions = {t.name: tool_version(t.exe) for t in job.tools}
        outcomes = run_parallel(probe, list(job.hosts), 32)
        results = {}
        for host, (value, exc) in zip(job.hosts, outcomes):
            results[host.name] = value if exc is None else f"probe failed: {exc}"
        return check_rows(job, results, local_versions)
    finally:
        for c in conns.values():
            if isinstance(c, SshConnection):
                c.close()


def reports_json(reports: Sequence[HostReport]) -> List[Dict[str, Any]]:
    return [
        {"host": r.host, "ok": r.ok, "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in r.checks}}
        for r in reports
    ]


def cpu_probes(
    hosts: Sequence[Host],
    python: Dict[str, Optional[str]],
    home: str,
    ssh: Optional["SSHSettings"] = None,
    on_probe: Optional[Any] = None,
) -> Dict[str, Any]:
    """The CPU probe of every host (:func:`launcher.execution.checks.cpu.cached_probe`), one host
    after the other (hosts may share cores; parallel timings would disturb each other).

    Returns:
        host name -> :class:`~launcher.execution.checks.cpu.ProbeOutcome`, or a string saying why
        the host could not be probed (unreachable).

    Raises:
        LaunchError: the ssh config cannot be read.
    """
    from launcher.execution.checks.cpu import cached_probe, local_runner, ssh_runner
    from launcher.execution.ssh.connection import SshConnection, connect_each
    from launcher.execution.ssh.settings import SSHSettings

    remote = [h for h in hosts if not h.is_local]
    conns: Dict[str, Any] = connect_each(remote, ssh or SSHSettings()) if remote else {}
    out: Dict[str, Any] = {}
    try:
        for host in hosts:
            py = python.get(host.name) or host.python
            if host.is_local:
                # this machine's cache name, whatever the inventory calls it (as ``run`` uses)
                out[host.name] = cached_probe(
                    local_runner(py or sys.executable), home, socket.gethostname(), on_probe=on_probe
                )
                continue
            conn = conns.get(host.name)
            if not isinstance(conn, SshConnection):
                out[host.name] = f"not probed: {conn}"
                continue
            out[host.name] = cached_probe(ssh_runner(conn, py or "python3"), home, host.name, on_probe=on_probe)
    finally:
        for c in conns.values():
            if isinstance(c, SshConnection):
                c.close()
    return out
