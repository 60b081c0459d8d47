"""Run a host's device-check commands (``npu-smi``, ``hccn_tool``, ``nvidia-smi``): the
``{"op": "devices"}`` command of the health probe (:mod:`~.health_probe`), sent to the host with
it (:func:`launcher.execution.checks.health.probe_source`).

The order comes from :func:`launcher.planning.health.devices.probe_order`; the contract of the answer is
in :mod:`launcher.planning.health.devices.checks`' docstring.  In short, per command:

* the executable: the first candidate that is an absolute path to an executable file, else the
  first bare name on ``PATH`` (``shutil.which``); none: ``{"key", "status": "not_found"}``;
* one tool's commands run one after the other (``hccn_tool`` refuses a second caller), different
  tools at once, each with stdin from ``/dev/null``, in its own session; after its ``timeout``
  (or when the host's ``limit`` is reached, whichever comes first) its process group is killed:
  ``{"key", "status": "timed_out", "seconds": s}``, and the tool's remaining commands are
  ``skipped`` (``"<key> timed out before it"``);
* commands not started when ``limit`` seconds have passed: ``skipped`` (``the host's <limit> s
  for device checks were spent``);
* a command that ran: ``{"key", "status": "exited", "exit_code", "stdout", "stderr", "seconds"}``
  (UTF-8 with replacement, each stream cut to ``output_limit`` bytes); one that could not start:
  ``{"key", "status": "error", "detail"}``.

Standard library only, Python >= 3.6 (it runs on the job's hosts).  Only processes it started are
ended, by their process group.
"""

import os
import shutil
import signal
import subprocess
import threading
import time

__all__ = ["resolve", "run_order"]


def resolve(candidates, path=None):
    """The executable of a command: the first absolute candidate that is an executable file,
    else the first bare name found on ``path`` (default: ``$PATH``); None when none is."""
    for c in candidates:
        if os.path.isabs(c) and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    for c in candidates:
        if not os.path.isabs(c) and "/" not in c:
            found = shutil.which(c, path=path)
            if found:
                return found
    return None


def _text(data, limit):
    return (data or b"")[:limit].decode("utf-8", "replace")


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def run_one(command, exe, timeout, output_limit):
    """Run one command (``exe``, then ``command["argv"]``: the arguments after the executable)
    for at most ``timeout`` s; its outcome."""
    key = command["key"]
    argv = [exe] + [str(a) for a in (command.get("argv") or [])]
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        return {"key": key, "status": "error", "detail": "%s: %s" % (exe, exc.strerror or exc)}
    try:
        out, err = proc.communicate(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild in its own session holds the pipes
            pass
        proc.wait()
        return {"key": key, "status": "timed_out", "seconds": round(timeout, 3)}
    finally:
        if proc.returncode is None:
            _kill_group(proc)
            proc.wait()
    return {
        "key": key,
        "status": "exited",
        "exit_code": proc.returncode,
        "stdout": _text(out, output_limit),
        "stderr": _text(err, output_limit),
        "seconds": round(time.monotonic() - t0, 3),
    }


def _run_tool(indexes, commands, answers, end, limit, output_limit):
    """One tool's commands, in order, into ``answers`` (by index)."""
    hung = None
    for i in indexes:
        c = commands[i]
        key = c.get("key")
        if hung is not None:
            answers[i] = {"key": key, "status": "skipped", "detail": "%s timed out before it" % hung}
            continue
        left = end - time.monotonic()
        if left <= 0:
            answers[i] = {
                "key": key,
                "status": "skipped",
                "detail": "the host's %g s for device checks were spent" % limit,
            }
            continue
        exe = resolve(c.get("candidates") or [])
        if exe is None:
            answers[i] = {"key": key, "status": "not_found"}
            continue
        timeout = float(c.get("timeout", 10))
        answer = run_one(c, exe, min(timeout, left), output_limit)
        if answer["status"] == "timed_out":
            hung = key
        answers[i] = answer


def run_order(order):
    """Run a ``{"op": "devices", "commands", "limit", "output_limit"}`` order; the answer
    ``{"outcomes": [...]}``, one entry per command with a string ``key``, in order."""
    t0 = time.monotonic()
    limit = float(order.get("limit", 60))
    output_limit = int(order.get("output_limit", 1 << 16))
    commands = [c for c in (order.get("commands") or []) if isinstance(c, dict) and isinstance(c.get("key"), str)]
    by_tool = {}  # type: dict[str, list[int]]
    for i, c in enumerate(commands):
        by_tool.setdefault(str(c.get("tool")), []).append(i)
    answers = [None] * len(commands)
    end = t0 + limit
    threads = [
        threading.Thread(target=_run_tool, args=(ix, commands, answers, end, limit, output_limit), daemon=True)
        for ix in by_tool.values()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = []
    for c, a in zip(commands, answers):
        out.append(a if a is not None else {"key": c["key"], "status": "error", "detail": "the probe did not run it"})
    return {"outcomes": out}
