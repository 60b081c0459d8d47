"""A stand-in for ``npu-smi``, ``hccn_tool`` and ``nvidia-smi``: prints recorded outputs.

Run as ``fake_device_tool.py TOOL ARGS...`` (the ``npu-smi``, ``hccn_tool`` and ``nvidia-smi``
scripts next to this file do that), so the device checks can run on hosts without devices:
over real ssh, under Slurm, in a pod.

What it prints is chosen per host:

* the configuration folder is ``$MSLAUNCH_FAKE_DEVICES_DIR``, else ``/tmp/mslaunch-fake-devices``;
* the host is ``$MSLAUNCH_FAKE_HOST``, else ``$SLURMD_NODENAME`` (a Slurm step), else the
  server address of ``$SSH_CONNECTION`` (an ssh session: each namespace host has its own),
  else the host name;
* ``<folder>/hosts/<host>`` (else ``<folder>/hosts/default``) names the case on its first line,
  then optional ``key=value`` lines (values for the case's text templates, e.g. ``net=2``);
* the case is ``<folder>/cases/<case>.json``, else ``tests/planning/data/devices/cases/<case>.json``:
  an object from command keys to answers.  Keys: ``npu-smi info``, ``hccn_tool -i N -link``
  (one device) or ``hccn_tool -link`` (every device), ``nvidia-smi --query-gpu``,
  ``nvidia-smi --query-compute-apps``; ``"base": "<case>"`` takes the other keys from that case.
  An answer is ``{"file": <fixture under tests/planning/data/devices>}`` or ``{"text": ...}``
  (``{i}`` is the device id, other ``{name}``s come from the host file), with optional
  ``"exit"`` (status, default 0), ``"stderr": true`` (print there), ``"sleep"`` (seconds
  before answering: a hanging tool), ``"missing": true`` (as a shell that does not find the
  tool: ``<tool>: command not found``, status 127).

An ``nvidia-smi`` answer is recorded as ``--format=csv,noheader,nounits`` prints it (what the
checks ask for); asked for ``--format=csv`` the fake adds what nvidia-smi adds (recorded on an
H100, driver 580): the header line (the queried names, ``used_gpu_memory [MiB]`` for
``used_memory``) and the unit after the memory values (``8710 MiB``).

A command the case does not answer, or a host without a case, exits 2 with a message saying
what to configure.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "..", "planning", "data", "devices"))
DEFAULT_DIR = "/tmp/mslaunch-fake-devices"


def host_name(env: Dict[str, str]) -> str:
    if env.get("MSLAUNCH_FAKE_HOST"):
        return env["MSLAUNCH_FAKE_HOST"]
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    parts = env.get("SSH_CONNECTION", "").split()
    if len(parts) >= 3:
        return parts[2]
    return socket.gethostname()


def host_case(folder: str, host: str) -> Tuple[str, Dict[str, str]]:
    for name in (host, "default"):
        path = os.path.join(folder, "hosts", name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            if not lines:
                break
            values = dict(ln.split("=", 1) for ln in lines[1:] if "=" in ln)
            return lines[0], values
    raise SystemExit(
        f"fake device tool: no case for host {host!r}: write its case name into {folder}/hosts/{host} "
        f"(or {folder}/hosts/default)"
    )


def load_case(folder: str, case: str, seen: Optional[List[str]] = None) -> Dict[str, dict]:
    seen = seen or []
    if case in seen:
        raise SystemExit(f"fake device tool: case {case!r} is its own base ({' -> '.join(seen + [case])})")
    for base_dir in (os.path.join(folder, "cases"), os.path.join(FIXTURES, "cases")):
        path = os.path.join(base_dir, case + ".json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            answers: Dict[str, dict] = {}
            if "base" in data:
                answers.update(load_case(folder, data["base"], seen + [case]))
            answers.update({k: v for k, v in data.items() if k not in ("base", "comment")})
            return answers
    raise SystemExit(f"fake device tool: no case file {case}.json in {folder}/cases or {FIXTURES}/cases")


def keys_for(tool: str, args: List[str]) -> Tuple[List[str], Optional[int]]:
    """The case keys that answer this command, most specific first, and the device id."""
    if tool == "npu-smi":
        return [" ".join(["npu-smi"] + args)], None
    if tool == "hccn_tool":
        if len(args) == 4 and args[0] == "-i" and args[1].isdigit() and args[3] == "-g":
            return [f"hccn_tool -i {args[1]} {args[2]}", f"hccn_tool {args[2]}"], int(args[1])
        return [" ".join(["hccn_tool"] + args)], None
    if tool == "nvidia-smi" and args:
        query = args[0].split("=", 1)[0]
        return [f"nvidia-smi {query}"], None
    return [" ".join([tool] + args)], None


def answer(tool: str, args: List[str], env: Dict[str, str]) -> int:
    folder = env.get("MSLAUNCH_FAKE_DEVICES_DIR") or DEFAULT_DIR
    case, values = host_case(folder, host_name(env))
    answers = load_case(folder, case)
    keys, device = keys_for(tool, args)
    entry = next((answers[k] for k in keys if k in answers), None)
    if entry is None:
        sys.stderr.write(f"fake device tool: case {case!r} has no answer for {keys[0]!r}\n")
        return 2
    if entry.get("missing"):
        sys.stderr.write(f"sh: 1: {tool}: not found\n")
        return 127
    if entry.get("sleep"):
        time.sleep(float(entry["sleep"]))
    if "file" in entry:
        with open(os.path.join(FIXTURES, entry["file"]), encoding="utf-8") as f:
            text = f.read()
    else:
        try:
            text = str(entry.get("text", "")).format(i=device if device is not None else "", **values)
        except KeyError as exc:
            sys.stderr.write(f"fake device tool: case {case!r} needs {exc.args[0]}=... in the host file\n")
            return 2
    if tool == "nvidia-smi" and not entry.get("stderr") and not entry.get("exit"):
        text = csv_format(args, text)
    (sys.stderr if entry.get("stderr") else sys.stdout).write(text)
    return int(entry.get("exit", 0))


#: nvidia-smi's header names of the query fields whose values have units, with ``--format=csv``.
HEADER_NAMES = {
    "used_memory": "used_gpu_memory [MiB]",
    "memory.total": "memory.total [MiB]",
    "memory.used": "memory.used [MiB]",
}


def csv_format(args: List[str], text: str) -> str:
    """``text`` (as ``--format=csv,noheader,nounits`` prints it) as nvidia-smi prints it for the
    ``--format`` in ``args``: a header line unless ``noheader``, ``MiB`` after memory values unless ``nounits``."""
    query = next((a.split("=", 1)[1].split(",") for a in args if a.startswith("--query-") and "=" in a), [])
    fmt = next(
        (a.split("=", 1)[1].split(",") for a in args if a.startswith("--format=")), ["csv", "noheader", "nounits"]
    )
    lines = text.splitlines()
    if "nounits" not in fmt:
        with_unit = [i for i, name in enumerate(query) if name in HEADER_NAMES]
        lines = [", ".join(f"{v} MiB" if i in with_unit else v for i, v in enumerate(ln.split(", "))) for ln in lines]
    if "noheader" not in fmt and query:
        lines.insert(0, ", ".join(HEADER_NAMES.get(name, name) for name in query))
    return "".join(ln + "\n" for ln in lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: fake_device_tool.py TOOL [ARGS...]")
    try:
        code = answer(sys.argv[1], sys.argv[2:], dict(os.environ))
    except SystemExit as exc:  # a configuration problem: say it, exit 2
        sys.stderr.write(f"{exc.code}\n")
        code = 2
    sys.exit(code)
