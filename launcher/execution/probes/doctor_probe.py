"""``mslaunch doctor``'s probe: the facts of one host, as one JSON object on stdout.

Runs on each host as ``python -S -c <this source>`` (:func:`launcher.execution.checks.doctor.probe_source`),
under the host's own Python, with its settings as JSON on stdin: ``python`` (the ranks'
interpreter: its version, MindSpore's version, whether ``module`` is found), ``script``, ``exe``
and ``cwd`` (do they exist there), ``port`` (is it free), ``hccn`` (how many device addresses
its hccn.conf has), ``tools`` (name -> executable: its version or None).  Standard library only,
Python >= 3.6, no imports from ``launcher``, no annotations.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time


def main():
    start = time.time()
    cfg = json.loads(sys.stdin.read())
    out = {"time": start}  # type: dict[str, object]

    def run(argv, timeout=60):
        try:
            cwd = cfg.get("cwd") if cfg.get("cwd") and os.path.isdir(cfg["cwd"]) else None
            p = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd
            )
            o, e = p.communicate(timeout=timeout)
            return p.returncode, o.decode("utf-8", "replace"), e.decode("utf-8", "replace")
        except Exception as exc:
            return None, "", str(exc)

    py = cfg.get("python")
    if py:
        code = (
            "import sys, platform\nprint(platform.python_version())\n"
            "try:\n import importlib.metadata as m\n print(m.version('mindspore'))\n"
            "except Exception:\n print('')\n"
        )
        mod = cfg.get("module")
        if mod:
            code += (
                "import importlib.util\ntry:\n print(importlib.util.find_spec(%r) is not None)\nexcept Exception:\n "
                "print(False)\n" % mod
            )
        rc, o, e = run([py, "-c", code])
        lines = o.splitlines()
        if rc == 0 and lines:
            out["python"] = lines[0].strip()
            out["mindspore"] = lines[1].strip() if len(lines) > 1 else ""
            if mod:
                out["module_found"] = len(lines) > 2 and lines[2].strip() == "True"
        else:
            out["python_error"] = (e.strip().splitlines() or [o.strip() or "exit %s" % rc])[-1]
    script = cfg.get("script")
    if script:
        out["script_found"] = os.path.isfile(script)
    exe = cfg.get("exe")
    if exe:
        out["exe_found"] = bool(shutil.which(exe)) if "/" not in exe else os.access(exe, os.X_OK)
    if cfg.get("cwd"):
        out["cwd_found"] = os.path.isdir(cfg["cwd"])
    port = cfg.get("port")
    if port:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of a finished job is not busy
        try:
            s.bind(("", int(port)))
            out["port_free"] = True
        except OSError as exc:
            out["port_free"] = False
            out["port_error"] = exc.strerror or str(exc)
        finally:
            s.close()
    hccn = cfg.get("hccn")
    if hccn:
        try:
            with open(hccn) as fh:
                text = fh.read()
            out["hccn_devices"] = len(re.findall(r"^\s*address_\d+\s*=", text, re.M))
        except OSError as exc:
            out["hccn_error"] = exc.strerror or str(exc)
    for name, exe in (cfg.get("tools") or {}).items():
        path = shutil.which(exe)
        if path:
            rc, o, e = run([path, "--version"], timeout=20)
            m = re.search(r"(\d+\.\d+\.\d+)", o)
            out[name] = m.group(1) if m else "unknown"
        else:
            out[name] = None
    out["elapsed"] = time.time() - start
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
