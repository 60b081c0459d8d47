"""Measure MindSpore's CPU kernels on this host under oneDNN's default and capped ISAs.

A self-contained program (standard library, numpy and MindSpore only; nothing from ``launcher``),
so a launcher can run its source on any host with ``python -c``. Two modes:

``--facts [--script PATH | --module NAME]``
    Print (one JSON object) what decides the probe's outcome, without importing MindSpore
    (~0.1 s): the CPU model and flags, the MindSpore version, the bundled oneDNN library (name and
    size), and ``key``, a digest of those. A launcher caches a probe result under that key.
    With a program, also ``imports_mindspore``: whether its source file imports MindSpore
    (true/false, null when the file is not found).

(no argument)
    The probe (a few seconds, most of it ``import mindspore``). The parent imports MindSpore,
    then for each variant forks a child that sets ``ONEDNN_MAX_CPU_ISA`` (none: the default;
    then each of ``AVX2`` / ``AVX512_CORE`` the CPU supports) and ``ONEDNN_VERBOSE=1`` before
    its first oneDNN call, runs the kernels, and reports oneDNN's own execution time and the
    implementation it chose (read from the verbose lines). Kernels: a 64->64 3x3 NCHW
    convolution (batch 4, 16x16: the reference trainer's shape class) and a 512x512x512 matmul;
    each runs once to warm up, then until 0.25 s or 12 runs are spent (at least 3); the figure is
    the fastest run (the least disturbed by other load). The default runs first and last and
    the better run counts. The parent also times numpy's matmul as a hardware reference. Prints one JSON
    object (schema ``version`` 1)::

        {"version": 1, "key": ..., "facts": {...}, "onednn": "3.10.1",
         "onednn_isa": "Intel AVX2 ...", "numpy_gflops": 186.0,
         "import_seconds": 1.4, "seconds": 3.9,
         "variants": [{"isa": null, "kernels": {"conv": {"impl": "x64:gemm:jit",
                        "ms": 1.2, "gflops": 62.0}, "matmul": {...}}}, {"isa": "AVX2", ...}]}

    A variant whose child failed has ``"error"`` instead of ``"kernels"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

CONV_SHAPE = (4, 64, 16, 16)  # N, C, H, W; 64 output channels, 3x3, stride 1, same padding
MATMUL_N = 512
CHILD_TIMEOUT = 60.0
#: Part of the cache key: a change to what the probe measures re-probes every host.
PROBE_REVISION = 2


def conv_flops() -> float:
    n, c, h, w = CONV_SHAPE
    return 2.0 * n * h * w * 64 * c * 9


def matmul_flops() -> float:
    return 2.0 * MATMUL_N**3


def cpu_info() -> Tuple[str, List[str]]:
    """(model name, sorted flags) from /proc/cpuinfo; ("", []) where there is none."""
    model, flags = "", []  # type: str, List[str]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k == "model name" and not model:
                    model = v.strip()
                elif k == "flags" and not flags:
                    flags = sorted(set(v.split()))
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor(), flags


def candidate_isas(flags: List[str]) -> List[str]:
    """The ``ONEDNN_MAX_CPU_ISA`` caps worth timing on a CPU with ``flags``."""
    have = set(flags)
    out = []
    if {"avx2", "fma"} <= have:
        out.append("AVX2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= have:
        out.append("AVX512_CORE")
    return out


def facts() -> Dict[str, Any]:
    """What decides the probe's outcome (no MindSpore import) and its digest ``key``."""
    import importlib.util

    model, flags = cpu_info()
    ms_version = ""
    dnnl = ""
    try:
        from importlib import metadata

        ms_version = metadata.version("mindspore")
    except Exception:  # noqa: BLE001 - absent or broken: no MindSpore
        ms_version = ""
    if ms_version:
        try:
            spec = importlib.util.find_spec("mindspore")
            roots = list(spec.submodule_search_locations or []) if spec else []
            for root in roots:
                lib = os.path.join(root, "lib")
                for name in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
                    if name.startswith("libdnnl.so"):
                        dnnl = "%s:%d" % (name, os.path.getsize(os.path.join(lib, name)))
                        break
        except (ImportError, OSError, ValueError):
            pass
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count() or 1
    out = {
        "host": socket.gethostname(),
        "cpu_model": model,
        "cpu_flags": flags,
        "cpus": ncpu,
        "python": platform.python_version(),
        "mindspore": ms_version,
        "onednn_lib": dnnl,
    }
    decisive = json.dumps([PROBE_REVISION, model, flags, ms_version, dnnl], separators=(",", ":"))
    out["key"] = hashlib.sha256(decisive.encode()).hexdigest()[:16]
    return out


_EXEC_RE = re.compile(r"^onednn_verbose,.*?,primitive,exec,cpu,(\w+),([^,]*),")


def parse_verbose(text: str) -> Dict[str, List[Tuple[str, float]]]:
    """oneDNN verbose ``exec`` lines -> primitive kind -> [(implementation, ms)] in order."""
    out = {}  # type: Dict[str, List[Tuple[str, float]]]
    for line in text.splitlines():
        m = _EXEC_RE.match(line)
        if not m:
            continue
        try:
            ms = float(line.rsplit(",", 1)[1])
        except ValueError:
            continue
        out.setdefault(m.group(1), []).append((m.group(2), ms))
    return out


def _time_kernels(isa: Optional[str]) -> Dict[str, Any]:
    """In a fresh child: cap the ISA, run the kernels, return their figures."""
    import numpy as np
    from mindspore import Tensor, ops

    if isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = isa
    else:
        os.environ.pop("ONEDNN_MAX_CPU_ISA", None)
        os.environ.pop("DNNL_MAX_CPU_ISA", None)
    os.environ["ONEDNN_VERBOSE"] = "1"
    log = tempfile.TemporaryFile()
    sys.stdout.flush()
    os.dup2(log.fileno(), 1)
    rng = np.random.default_rng(0)
    x = Tensor(rng.random(CONV_SHAPE, dtype=np.float32))
    w = Tensor(rng.random((64, CONV_SHAPE[1], 3, 3), dtype=np.float32))
    a = Tensor(rng.random((MATMUL_N, MATMUL_N), dtype=np.float32))
    conv = ops.Conv2D(64, 3, pad_mode="same")
    kernels = {
        "conv": (lambda: conv(x, w).asnumpy(), conv_flops(), "convolution"),
        "matmul": (lambda: ops.matmul(a, a).asnumpy(), matmul_flops(), "matmul"),
    }
    walls = {}  # type: Dict[str, List[float]]
    for name, (fn, _, _) in kernels.items():
        fn()
        walls[name] = []
        spent = 0.0
        while len(walls[name]) < 3 or (spent < 0.25 and len(walls[name]) < 12):
            t = time.perf_counter()
            fn()
            walls[name].append(time.perf_counter() - t)
            spent += walls[name][-1]
    log.seek(0)
    text = log.read().decode("utf-8", "replace")
    seen = parse_verbose(text)
    version = re.search(r"info,oneDNN v([\d.]+)", text)
    detected = re.search(r"info,cpu,isa:([^\n]*)", text)
    out = {"_onednn": version.group(1) if version else "", "_isa": detected.group(1).strip() if detected else ""}  # type: Dict[str, Any]
    for name, (_, flops, kind) in kernels.items():
        runs = seen.get(kind, [])[1:]  # the first one is the warm-up
        if runs:
            ms = min(r[1] for r in runs)
            impl = runs[-1][0]
        else:  # no verbose output: wall time, implementation unknown
            ms = min(walls[name]) * 1000.0
            impl = ""
        out[name] = {
            "impl": impl,
            "ms": round(ms, 4),
            "gflops": round(flops / (ms / 1000.0) / 1e9, 2) if ms > 0 else 0.0,
        }
    return out


def _variant(isa: Optional[str]) -> Dict[str, Any]:
    """Fork, time the kernels in the child under ``isa``, return what it reported."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        code = 0
        try:
            kernels = _time_kernels(isa)
            payload = {
                "isa": isa,
                "onednn": kernels.pop("_onednn"),
                "onednn_isa": kernels.pop("_isa"),
                "kernels": kernels,
            }
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            payload = {"isa": isa, "error": "%s: %s" % (type(exc).__name__, exc)}
            code = 1
        with os.fdopen(w, "wb") as f:
            f.write(json.dumps(payload).encode())
        os._exit(code)
    os.close(w)
    chunks = []
    deadline = time.monotonic() + CHILD_TIMEOUT
    import select

    with os.fdopen(r, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                import signal

                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"isa": isa, "error": "timed out after %g s" % CHILD_TIMEOUT}
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks).decode())
    except ValueError:
        return {"isa": isa, "error": "the child reported nothing"}


def _better(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Per kernel, the faster of two runs of the same variant."""
    if "kernels" not in a:
        return b
    if "kernels" not in b:
        return a
    out = dict(a)
    out["kernels"] = {
        k: min(a["kernels"][k], b["kernels"].get(k, a["kernels"][k]), key=lambda t: t["ms"]) for k in a["kernels"]
    }
    return out


def _numpy_gflops() -> float:
    import numpy as np

    a = np.random.default_rng(0).random((MATMUL_N, MATMUL_N), dtype=np.float32)
    a @ a
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t)
    return round(matmul_flops() / best / 1e9, 1)


def probe() -> Dict[str, Any]:
    """The full probe (see the module docstring)."""
    t0 = time.perf_counter()
    f = facts()
    import mindspore  # noqa: F401 - imported once here; every child forks from it

    t_import = time.perf_counter() - t0
    # The default runs first and last (the better of the two counts), so a load change on a
    # shared machine during the probe does not pass for an ISA effect.
    first = _variant(None)
    caps = [_variant(c) for c in candidate_isas(f["cpu_flags"])]
    variants = [_better(first, _variant(None))] + caps
    version = variants[0].pop("onednn", "")
    isa = variants[0].pop("onednn_isa", "")
    for v in variants[1:]:
        v.pop("onednn", None)
        v["onednn_isa"] = v.get("onednn_isa", "")
    return {
        "version": 1,
        "key": f["key"],
        "facts": f,
        "onednn": version,
        "onednn_isa": isa,
        "numpy_gflops": _numpy_gflops(),
        "import_seconds": round(t_import, 2),
        "seconds": round(time.perf_counter() - t0, 2),
        "variants": variants,
    }


_IMPORT_RE = re.compile(r"^\s*(import|from)\s+mindspore\b", re.M)


def program_imports_mindspore(script: Optional[str] = None, module: Optional[str] = None) -> Optional[bool]:
    """Whether the program's own source file imports MindSpore (a top-level or indented
    ``import mindspore`` / ``from mindspore...`` line); None when the file cannot be found.
    ``module`` is looked up as ``python -m`` would (the current directory first)."""
    path = script
    if module:
        import importlib.util

        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        path = spec.origin
        if spec.submodule_search_locations:  # a package: python -m runs its __main__
            path = os.path.join(list(spec.submodule_search_locations)[0], "__main__.py")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return bool(_IMPORT_RE.search(f.read()))
    except OSError:
        return None


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--facts"] and len(args) in (1, 3) and (len(args) == 1 or args[1] in ("--script", "--module")):
        out = facts()
        if len(args) == 3:
            kind = args[1][2:]
            out["imports_mindspore"] = program_imports_mindspore(**{kind: args[2]})
    elif not args:
        out = probe()
    else:
        sys.stderr.write("usage: cpu_probe.py [--facts [--script PATH | --module NAME]]\n")
        return 2
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
