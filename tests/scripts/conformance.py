"""What a Python program can observe of its own process, one case per run: the differential
conformance suite (``tests/execution/local/test_zygote_conformance.py``) runs each case as a plain
process and forked from the zygote and compares what each printed, wrote and how it ended.

Usage: ``python conformance.py CASE [ARGS...]``; ``OUT`` (env) names a folder for files a case
writes.  Each case prints its observations on stdout/stderr; what a case cannot print before it
ends (files written at exit) goes to ``OUT``.
"""

import atexit
import json
import os
import signal
import sys
import threading
import time

OUT = os.environ.get("OUT", ".")


def _handler_name(h):
    if h is signal.SIG_DFL:
        return "SIG_DFL"
    if h is signal.SIG_IGN:
        return "SIG_IGN"
    if h is signal.default_int_handler:
        return "default_int_handler"
    return repr(h) if h is None else getattr(h, "__qualname__", type(h).__name__)


def _stream(s):
    buf = getattr(s, "buffer", None)
    return {
        "type": type(s).__name__,
        "name": getattr(s, "name", None),
        "encoding": s.encoding,
        "errors": s.errors,
        "line_buffering": s.line_buffering,
        "write_through": getattr(s, "write_through", None),
        "buffer": type(buf).__name__,
        "raw": type(getattr(buf, "raw", buf)).__name__,
        "fileno": s.fileno(),
        "isatty": s.isatty(),
        "closefd": getattr(getattr(buf, "raw", buf), "closefd", None),
        "newlines": s.newlines,
    }


def open_fds():
    """Descriptors above 2 and what they are (the listing's own descriptor left out)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
        if int(fd) > 2 and not target.startswith("/proc/"):
            out[int(fd)] = target
    return out


def case_process():
    """The process as the program sees it: main module, argv, paths, streams, signals, limits..."""
    import ctypes
    import gc
    import resource
    import warnings

    import mindspore  # noqa: F401  (the default forks only programs that import it)

    main = sys.modules["__main__"]
    g = vars(main)
    libc = ctypes.CDLL(None)
    mask = os.umask(0)
    os.umask(mask)
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    with open("/proc/self/status") as f:
        status = {k: v.strip() for k, v in (line.split(":", 1) for line in f if ":" in line)}
    seen = {
        "main": {
            k: (type(v).__name__ if k not in ("__name__", "__file__", "__package__", "__cached__", "__doc__") else v)
            for k, v in sorted(g.items())
            if k.startswith("__")
        },
        "main_is_this": main.__dict__ is globals(),
        "spec": None if main.__spec__ is None else main.__spec__.name,
        "loader": type(getattr(main, "__loader__", None)).__name__,
        "argv": sys.argv,
        "orig_argv": getattr(sys, "orig_argv", [None])[1:],
        "path": sys.path,
        "executable": sys.executable,
        "prefix": [sys.prefix, sys.base_prefix, sys.exec_prefix],
        "flags": repr(sys.flags),
        "cwd": os.getcwd(),
        "environ": dict(sorted(os.environ.items())),
        "umask": mask,
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
        "signals": {
            str(int(s)): _handler_name(signal.getsignal(s))
            for s in signal.valid_signals()
            if s not in (signal.SIGKILL, signal.SIGSTOP)
        },
        "wakeup_fd": signal.set_wakeup_fd(-1),
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "stdin": _stream(sys.stdin),
        "stdout": _stream(sys.stdout),
        "stderr": _stream(sys.stderr),
        "std_is_dunder": [sys.stdin is sys.__stdin__, sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__],
        "stdin_read": sys.stdin.read(),
        "own_group": os.getpgid(0) == os.getpid(),
        "own_session": os.getsid(0) == os.getpid(),
        "fds": open_fds(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "threads": threading.active_count(),
        "main_thread": threading.current_thread() is threading.main_thread(),
        "native_threads": len(os.listdir("/proc/self/task")),
        "gc": [gc.isenabled(), gc.get_threshold()],
        "recursion": sys.getrecursionlimit(),
        "switch": sys.getswitchinterval(),
        "warnings": [repr(f) for f in warnings.filters],
        "excepthook": [sys.excepthook is sys.__excepthook__, threading.excepthook is threading.__excepthook__],
        "displayhook": sys.displayhook is sys.__displayhook__,
        "title": open("/proc/self/cmdline", "rb").read().replace(b"\0", b" ").decode().strip(),
        "comm": comm,
        "program_invocation_name": ctypes.c_char_p.in_dll(libc, "program_invocation_name").value.decode(),
        "program_invocation_short_name": ctypes.c_char_p.in_dll(libc, "program_invocation_short_name").value.decode(),
        "sigmasks": {k: status.get(k) for k in ("SigBlk", "SigIgn", "NoNewPrivs", "Seccomp", "Cpus_allowed_list")},
        "atexit_handlers": atexit._ncallbacks(),
        "pid_is_new": os.getpid() != os.getppid(),
        # what MindSpore read of argv and sys.path at its import: its compile cache hashes the
        # entry script and the files it imports to tell a changed program (MS_COMPILER_CACHE_ENABLE)
        "mindspore_entry_script": mindspore.graph.api.entry_script_path,
        "mindspore_sys_path": mindspore.graph.api.sys_path,
        "mindspore_cache_deps": mindspore.graph.api._get_compile_cache_dep_files(),
    }
    json.dump(seen, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def case_exit(kind):
    """How the program ends: ``sys.exit`` with an int, a str, None, a large int, an object; an
    uncaught exception (chained); ``os._exit``; death by a signal; an uncaught KeyboardInterrupt."""
    print("before the end")  # buffered unless PYTHONUNBUFFERED: os._exit loses it in both
    sys.stderr.write("on stderr\n")
    if kind == "int":
        sys.exit(3)
    if kind == "str":
        sys.exit("bye: a message")
    if kind == "none":
        sys.exit(None)
    if kind == "big":
        sys.exit(256 + 7)
    if kind == "obj":
        sys.exit(["a", 1])
    if kind == "raise":

        def inner():
            try:
                {}["missing"]
            except KeyError as exc:
                raise ValueError("bad value") from exc

        inner()
    if kind == "os_exit":
        os._exit(7)
    if kind == "signal":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "hook":

        def hook(t, v, tb):
            frames = []
            while tb is not None:
                frames.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            sys.stderr.write(f"my hook: {t.__name__}: {v} frames={frames}\n")

        sys.excepthook = hook

        def deep():
            raise RuntimeError("through the hook")

        deep()
    if kind == "thread_raise":
        t = threading.Thread(target=lambda: 1 / 0, name="worker")
        t.start()
        t.join()
        return
    raise SystemExit(f"unknown exit kind {kind}")


class _Finalized:
    def __del__(self):
        print("__del__ of a global at shutdown", flush=True)


def case_ending():
    """What reaches the log at the end, in which order: buffered stdout, stderr, atexit handlers
    registered in order, a non-daemon thread still running, a global's ``__del__``, weakref
    finalizers, and a file written by that thread."""
    import weakref

    global keep
    keep = _Finalized()

    class Obj:
        pass

    global obj
    obj = Obj()
    weakref.finalize(obj, print, "weakref.finalize at shutdown", flush=True)
    print("main: start")
    sys.stderr.write("main: stderr line\n")
    atexit.register(print, "atexit: first registered", flush=True)
    atexit.register(lambda: sys.stdout.write("atexit: second registered (runs first)\n"))

    def late():
        time.sleep(0.5)
        with open(os.path.join(OUT, "thread_file.txt"), "w") as f:
            f.write("written by a non-daemon thread after main returned\n")
        print("thread: done after main returned", flush=True)

    threading.Thread(target=late, name="late").start()
    unclosed = open(os.path.join(OUT, "unclosed.txt"), "w")
    unclosed.write("buffered in a file the program never closes\n")
    global leak
    leak = unclosed
    print("main: end of script (stdout buffered)")


def case_term():
    """A SIGTERM handler of the program's own runs when the launcher stops the job."""

    def on_term(signum, frame):
        print(f"handler: got {signal.Signals(signum).name}", flush=True)
        with open(os.path.join(OUT, "term.txt"), "w") as f:
            f.write("saved on SIGTERM\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    time.sleep(120)
    sys.exit(5)


def _square(x):
    return x * x


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)


def case_multiprocessing(method):
    """A pool under each start method mapping a function of ``__main__``; a ``__main__`` class pickled."""
    import multiprocessing as mp
    import pickle

    p = Point(1, 2)
    print("pickle:", pickle.loads(pickle.dumps(p)) == p, type(pickle.loads(pickle.dumps(p))).__module__)
    ctx = mp.get_context(method)
    with ctx.Pool(2) as pool:
        print(method, pool.map(_square, range(5)))
    q = ctx.Queue()
    proc = ctx.Process(target=q.put, args=(Point(3, 4),))
    proc.start()
    got = q.get(timeout=60)
    proc.join(60)
    print(method, "process:", type(got).__module__, got == Point(3, 4), proc.exitcode)


def case_random():
    """Random numbers drawn without a seed: numpy's legacy global state, ``random``, MindSpore,
    and the state of every generator the imports created (a digest per generator type)."""
    import hashlib
    import random

    import mindspore as ms
    import numpy as np

    ms.set_device("CPU")
    print(
        json.dumps(
            {
                "numpy": float(np.random.rand()),
                "random": random.random(),
                "numpy_default_rng": float(np.random.default_rng().random()),
                "mindspore": [round(float(v), 6) for v in ms.ops.rand(2).asnumpy()],
                "generators": generator_digests(hashlib, random, np),
            }
        )
    )


def generator_digests(hashlib, random, np):
    """``{type name: [digest of each such generator's state]}`` for every generator object alive."""
    import gc

    out = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, random.SystemRandom):
                continue
            if isinstance(o, random.Random):
                state = o.getstate()
            elif isinstance(o, np.random.RandomState):
                state = o.get_state(legacy=False)
            elif isinstance(o, np.random.BitGenerator):
                state = o.state
            else:
                continue
        except ReferenceError:
            continue
        out.setdefault(type(o).__name__, []).append(hashlib.sha1(repr(state).encode()).hexdigest()[:12])
    return {k: sorted(v) for k, v in sorted(out.items())}


def case_hash():
    """``hash()`` of a str (PYTHONHASHSEED decides it)."""
    print(hash("conformance"), sys.flags.hash_randomization)


CASES = {
    "process": case_process,
    "exit": case_exit,
    "ending": case_ending,
    "term": case_term,
    "multiprocessing": case_multiprocessing,
    "random": case_random,
    "hash": case_hash,
}

if __name__ == "__main__":
    CASES[sys.argv[1]](*sys.argv[2:])
