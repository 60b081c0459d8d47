"""Run the CPU probe (``launcher/workloads/cpu_probe.py``) on a host and cache its result.

The probe's source runs as ``python -c SOURCE`` under the ranks' interpreter, locally or over an
:class:`~launcher.execution.ssh.connection.SshConnection`, so a host needs MindSpore but not mslaunch.
Two steps:

1. ``--facts`` (no MindSpore import, ~0.1 s): the CPU flags, MindSpore version and bundled oneDNN
   library of that interpreter, and their digest ``key``;
2. on a cache miss, the probe itself (a few seconds), whose JSON is stored.

Cache layout (one file per host and key; a changed key, e.g. another MindSpore version,
misses and re-probes)::

    $MSLAUNCH_HOME/cpu-probe/<host>-<key>.json     the probe's JSON output, as printed
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from launcher.errors import LaunchError
from launcher.planning.cpu.probe import CpuProbe, ProbeError, cap_can_matter, parse_probe

PROBE_TIMEOUT = 180.0
FACTS_TIMEOUT = 30.0

#: ``(argv tail) -> (exit status, stdout, stderr)``: runs ``python -c SOURCE *tail`` somewhere.
Runner = Callable[[Tuple[str, ...], float], Tuple[int, bytes, bytes]]


def probe_source() -> str:
    """The probe program's text (read from the package, not imported: it imports MindSpore)."""
    import importlib.util

    spec = importlib.util.find_spec("launcher.workloads.cpu_probe")
    assert spec is not None and spec.origin is not None
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()


def local_runner(python: str) -> Runner:
    """Run the probe under ``python`` on this machine (its output captured; no shell)."""

    def run(tail: Tuple[str, ...], timeout: float) -> Tuple[int, bytes, bytes]:
        try:
            p = subprocess.run(
                [python, "-c", probe_source(), *tail], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise LaunchError(f"the CPU probe did not finish within {timeout:g} s") from None
        except OSError as exc:
            raise LaunchError(f"cannot run {python!r} for the CPU probe: {exc.strerror}") from None
        return p.returncode, p.stdout, p.stderr

    return run


def ssh_runner(conn: Any, python: str) -> Runner:
    """Run the probe under ``python`` over an open SSH connection."""

    def run(tail: Tuple[str, ...], timeout: float) -> Tuple[int, bytes, bytes]:
        command = "exec " + " ".join(shlex.quote(p) for p in (python, "-c", probe_source(), *tail))
        return conn.run(command, timeout=timeout)

    return run


def _last_json(rc: int, out: bytes, err: bytes, what: str) -> Dict[str, Any]:
    lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.startswith("{")]
    if rc == 0 and lines:
        try:
            data = json.loads(lines[-1])
            if isinstance(data, dict):
                return data
        except ValueError:
            pass
    said = (err.decode("utf-8", "replace").strip().splitlines() or [f"exit {rc}"])[-1]
    raise LaunchError(f"the CPU probe's {what} failed: {said}")


@dataclass(frozen=True)
class ProbeOutcome:
    """A probe result and where it came from.

    Attributes:
        probe: the parsed result, or None (no MindSpore there, or the probe failed).
        facts: the ``--facts`` output ({} if that failed).
        cached: the result came from the cache.
        path: the cache file, if any.
        note: why there is no result, or "cached"/"probed in N s".
        needless: not probed because no ISA cap can change oneDNN's kernels there (``note`` says why).
    """

    probe: Optional[CpuProbe]
    facts: Dict[str, Any]
    cached: bool
    path: Optional[str]
    note: str
    needless: bool = False


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "host"


def cache_path(home: str, host: str, key: str) -> str:
    return os.path.join(home, "cpu-probe", f"{_safe(host)}-{_safe(key)}.json")


def read_cached(path: str) -> Optional[CpuProbe]:
    """The cached result at ``path``, or None when absent or unreadable (then it is re-probed)."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_probe(f.read(), path)
    except (OSError, ProbeError):
        return None


#: The test the probe's ``--facts --script`` step makes of a program's source (the probe's own
#: ``_IMPORT_RE``; a test keeps the two the same).
IMPORTS_MINDSPORE_RE = re.compile(r"^\s*(import|from)\s+mindspore\b", re.M)


def script_imports_mindspore(path: str) -> Optional[bool]:
    """What ``--facts --script PATH`` reports as ``imports_mindspore``, found here without starting
    an interpreter: whether the file imports MindSpore; None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return bool(IMPORTS_MINDSPORE_RE.search(f.read()))
    except OSError:
        return None


def program_facts(run: Runner, program: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """The ``--facts`` output (``program``: ``("--script", path)`` / ``("--module", name)``
    adds ``imports_mindspore``).

    Raises:
        LaunchError: the interpreter could not run the facts step.
    """
    return _last_json(*run(("--facts",) + tuple(program), FACTS_TIMEOUT), "facts step")


def cached_probe(
    run: Runner,
    home: str,
    host: str,
    refresh: bool = False,
    on_probe: Optional[Callable[[str], None]] = None,
    facts: Optional[Dict[str, Any]] = None,
    needed_only: bool = False,
) -> ProbeOutcome:
    """The probe result of ``host`` (reached through ``run``), from the cache when its key matches.

    Args:
        run: how to run the probe program there (:func:`local_runner` / :func:`ssh_runner`).
        home: ``$MSLAUNCH_HOME``.
        host: the host's name (cache file name).
        refresh: ignore the cache and probe again.
        on_probe: called with a one-line message before a (slow) probe run.
        facts: the ``--facts`` output if the caller has it already.
        needed_only: do not probe a CPU on which no ISA cap can change oneDNN's kernels
            (:func:`~launcher.planning.cpu.tuning.cap_can_matter`: the answer is known, ~10 s saved on
            a cold cache); ``doctor`` measures anyway.

    Returns:
        The outcome; ``probe`` is None when that interpreter has no MindSpore or the probe
        failed (``note`` says which). Never raises for a failing probe: tuning then sets nothing.
    """
    if facts is None:
        try:
            facts = program_facts(run)
        except LaunchError as exc:
            return ProbeOutcome(None, {}, False, None, str(exc))
    if not facts.get("mindspore"):
        return ProbeOutcome(None, facts, False, None, "no MindSpore in the ranks' interpreter")
    flags = facts.get("cpu_flags")
    needless = cap_can_matter([str(f) for f in flags]) if needed_only and isinstance(flags, list) and flags else None
    if needless is not None:
        return ProbeOutcome(None, facts, False, None, needless, needless=True)
    key = str(facts.get("key", ""))
    path = cache_path(home, host, key)
    if not refresh:
        hit = read_cached(path)
        if hit is not None and hit.key == key:
            return ProbeOutcome(hit, facts, True, path, f"cached in {path}")
    if on_probe is not None:
        on_probe(f"probing MindSpore's CPU kernels on {host} (once per CPU and MindSpore version; a few seconds)")
    try:
        rc, out, err = run((), PROBE_TIMEOUT)
        data = _last_json(rc, out, err, "run")
        text = json.dumps(data, indent=1) + "\n"
        probe = parse_probe(text, f"{host} probe")
    except (LaunchError, ProbeError) as exc:
        return ProbeOutcome(None, facts, False, None, str(exc))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return ProbeOutcome(probe, facts, False, path, f"probed in {probe.seconds:.1f} s, cached in {path}")
