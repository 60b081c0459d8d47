"""The forked child of the zygote (stdlib only): become the planned process, then run its program
as ``python script args`` / ``python -m module args`` would, down to the interpreter's end.

:func:`run_child` is all :mod:`launcher.execution.local.zygote_server` calls after a fork: own
session, a fresh process's signal dispositions, the zygote's fds closed, stdio on the log, cwd,
the planned environment (with what the preload's import did to ``os.environ``), cores, new random
state, ``sys.argv``/``sys.path``/``__main__``, the process title, then the program; its report
of an uncaught exception without the zygote's frames; and the native exit handlers the zygote's
libraries registered skipped.

This module's state is the zygote's, captured when the server imports it at its start, before
the preload (so it must be imported at the top of the server, never later): the signal
dispositions a new interpreter has (:data:`_START_SIGNALS`), libc, and the process's name
(:func:`title_setup`); :func:`record_preload_env` keeps what the preload did to the environment.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

try:  # sent to a remote host as source (launcher.execution.ssh.remote_zygote), zygote_libs' comes first
    from launcher.execution.local.zygote_libs import argv_at_import, reseed
except ImportError:
    pass

#: The signal dispositions this interpreter started with (a new Python process's: SIGINT raises
#: KeyboardInterrupt, SIGPIPE and SIGXFSZ ignored, the rest as inherited); a child gets them back.
_START_SIGNALS = {
    sig: signal.getsignal(sig)
    for sig in signal.valid_signals()
    if sig not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(sig) is not None
}
_PR_SET_NAME = 15


def _load_libc() -> Optional[ctypes.CDLL]:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()
_PRCTL = getattr(_LIBC, "prctl", None)
_KEEP: List[Any] = []  # buffers native code points to for the life of the process
_COMM = b""  # this process's name (comm) as exec gave it
#: What the preload did to ``os.environ`` (``import mindspore`` sets variables it needs when they
#: are absent): (before, after); a child's environment gets the same changes (:func:`_child_env`).
_PRELOAD_ENV: Tuple[Dict[str, str], Dict[str, str]] = ({}, {})


def record_preload_env(before: Dict[str, str], after: Dict[str, str]) -> None:
    """Keep ``os.environ`` as it was before the preload's import and after it (in the zygote, once:
    every child's environment gets the same changes, :func:`_child_env`)."""
    global _PRELOAD_ENV
    _PRELOAD_ENV = (dict(before), dict(after))


def run_child(request: Dict[str, Any], own_fds: Sequence[int]) -> "NoReturn":
    """In the forked child: become the planned process and run its program as ``python`` would.

    Never returns: the program's end, its ``SystemExit`` or its uncaught exception leaves the
    zygote's frames as an exception, so the interpreter ends this process exactly as it ends
    ``python script.py`` (``Py_FinalizeEx``): non-daemon threads are joined, every ``atexit``
    handler runs (MindSpore's, registered while the zygote imported it, included: its C++
    cleanup finalizes the rank with the cluster's scheduler, and ``_async_save_close`` waits
    for asynchronous checkpoints), objects are finalized, streams flushed, and the exit status
    is python's (``sys.exit("msg")`` prints and exits 1, an uncaught ``KeyboardInterrupt`` ends
    the process by SIGINT).  Only the native destructors of libraries the zygote loaded are
    skipped (:func:`_skip_inherited_native_exit`).
    """
    try:
        _become(request, own_fds)
        runner = _prepare(list(request["argv"]), request.get("title"))
    except _CannotOpen as exc:  # as python says it: "python3: can't open file 'x.py': [Errno 2] ...", exit 2
        os.write(2, f"{request.get('interpreter') or sys.executable}: {exc}\n".encode())
        os._exit(2)
    except BaseException:  # noqa: BLE001 - setting the child up failed: say why in its log (fd 2), exit 1
        import traceback

        try:
            os.write(2, ("mslaunch zygote: " + traceback.format_exc()).encode())
        except OSError:
            pass
        os._exit(1)
    _skip_inherited_native_exit()
    argv_at_import(list(request["argv"]))
    try:
        runner()
    except SystemExit:
        runner.flush_io()
        raise
    except BaseException as exc:  # noqa: BLE001 - reported by the interpreter, without the zygote's frames
        runner.flush_io()
        _report_without_zygote_frames(exc, runner.top_code)
        raise
    runner.flush_io()
    raise SystemExit(None)


def _flush_io() -> None:
    """What ``python script.py`` does when the script's code ends, however it ends, before it
    reports an exception and before the interpreter's finalization: flush stderr, then stdout
    (CPython's ``flush_io``; ``python -m`` does not)."""
    for stream in (sys.stderr, sys.stdout):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - as CPython: errors of this flush are ignored
            pass


class _CannotOpen(Exception):
    """The script cannot be read (python's own message follows the interpreter's name)."""


class _TopCode:
    """Matches the code object of a script's module level (compiled when it runs)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def matches(self, code: Any) -> bool:
        return code.co_filename == self.path and code.co_name == "<module>"


def _report_without_zygote_frames(exc: BaseException, top_code: Any) -> None:
    """Make the interpreter's report of ``exc`` (``sys.excepthook``, whatever the program set it
    to: MindSpore's ``init()`` sets one that tells the cluster) show the traceback a plain
    process shows: from the program's own first frame, not the zygote's; none at all when the
    program never ran (a SyntaxError of the script: python shows only the error)."""
    tb = exc.__traceback__
    while tb is not None and not (
        top_code.matches(tb.tb_frame.f_code) if isinstance(top_code, _TopCode) else tb.tb_frame.f_code is top_code
    ):
        tb = tb.tb_next
    program_hook = sys.excepthook
    trimmed = tb

    def hook(etype: Any, value: Any, full_tb: Any) -> None:
        sys.excepthook = program_hook
        if value is exc:  # the report prints the exception's own traceback, not this argument
            value.__traceback__ = full_tb = trimmed
        program_hook(etype, value, full_tb)

    sys.excepthook = hook


def _become(request: Dict[str, Any], own_fds: Sequence[int]) -> None:
    """Own session, a fresh process's signal dispositions, the zygote's fds closed, stdio on the
    log, cwd, env, cores, new random state."""
    os.setsid()
    if request.get("die_with_parent") and _PRCTL is not None:  # a remote host's zygote: it dies with its agent
        _PRCTL(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    for fd in own_fds:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    for sig, handler in _START_SIGNALS.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    fd = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(devnull)
    _new_stdio()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(_child_env(request["env"]))
    if request.get("cpus"):
        os.sched_setaffinity(0, [int(c) for c in request["cpus"]])
    if request.get("batch_start"):  # until it joined the cluster (launcher.execution.local.joinsched)
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    reseed()


def _child_env(env: Dict[str, str]) -> Dict[str, str]:
    """The planned environment with what the preload's import did to ``os.environ`` done to it
    too, as the import does it in a plain process: a variable it added is set where the rank
    does not set it; one it changed or removed, where the rank has the value the import found."""
    before, after = _PRELOAD_ENV
    out = dict(env)
    for key in set(before) | set(after):
        if before.get(key) == after.get(key):
            continue
        if key not in before:
            out.setdefault(key, after[key])
        elif out.get(key) == before[key]:
            if key in after:
                out[key] = after[key]
            else:
                del out[key]
    return out


def _new_stdio() -> None:
    """``sys.stdin``/``stdout``/``stderr`` as CPython makes them for a new process (its
    ``create_stdio``): buffered unless the zygote (so every rank: their ``PYTHON*`` variables are
    the zygote's) runs unbuffered, line-buffered on a terminal, stderr always line-buffered, the
    zygote's encodings and error handlers (the same environment and locale decided them)."""
    import io

    unbuffered = isinstance(getattr(sys.__stdout__, "buffer", None), io.RawIOBase)  # PYTHONUNBUFFERED / -u
    for fd, name, mode in ((0, "stdin", "rb"), (1, "stdout", "wb"), (2, "stderr", "wb")):
        like = getattr(sys, f"__{name}__", None) or getattr(sys, name)
        raw = io.FileIO(fd, mode, closefd=False)
        raw.name = f"<{name}>"
        tty = raw.isatty()
        buf: Any = io.BufferedReader(raw) if fd == 0 else (raw if unbuffered else io.BufferedWriter(raw))
        text = io.TextIOWrapper(
            buf,
            encoding=getattr(like, "encoding", None),
            errors=getattr(like, "errors", None),
            newline="\n",
            line_buffering=not unbuffered and (tty or fd == 2),
            write_through=unbuffered,
        )
        setattr(sys, name, text)
        setattr(sys, f"__{name}__", text)


def _prepare(argv: List[str], title: Optional[str]) -> Any:
    """Set ``sys.argv``, ``sys.path[0]``, ``sys.orig_argv`` and a fresh ``__main__`` module as
    ``python script args`` / ``python -m module args`` would, and the process title; the
    program's runner (``runner()`` runs it; ``runner.top_code`` is its first frame's code)."""
    import types

    if title:
        _set_title(title)
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = sys.modules["builtins"]
    main.__dict__["__annotations__"] = {}
    old = sys.modules.get("__main__")
    for name, module in list(sys.modules.items()):  # aliases too: multiprocessing's ``__mp_main__``
        if module is old:
            sys.modules[name] = main
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = [sys.orig_argv[0] if sys.orig_argv else sys.executable, *argv]
    safe_path = bool(getattr(sys.flags, "safe_path", False))
    if argv[0] == "-m":
        import runpy

        sys.argv = [argv[1]] + argv[2:]  # runpy puts the module's file in argv[0], as python -m does
        if not safe_path:
            sys.path[0] = os.getcwd()

        def run_module() -> None:
            runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]  # python -m's own

        run_module.top_code = runpy._run_module_as_main.__code__  # type: ignore[attr-defined]  # the runner function carries these for run_child
        run_module.flush_io = lambda: None  # type: ignore[attr-defined]  # the runner function carries these for run_child
        return run_module
    script = argv[0]
    sys.argv = list(argv)
    path = os.path.abspath(script)  # __file__ and the code's file name are absolute since 3.9
    if not safe_path:
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    import io

    try:
        with io.open_code(path) as f:
            source = f.read()
    except OSError as exc:
        raise _CannotOpen(f"can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}") from None
    main.__dict__.update({"__file__": path, "__cached__": None})
    try:
        from importlib.machinery import SourceFileLoader

        main.__dict__["__loader__"] = SourceFileLoader("__main__", path)
    except ImportError:
        pass

    def run_script() -> None:
        exec(
            compile(source, path, "exec", dont_inherit=True), main.__dict__
        )  # a SyntaxError is the program's, as in python

    run_script.top_code = _TopCode(path)  # type: ignore[attr-defined]  # the runner function carries these for run_child
    run_script.flush_io = _flush_io  # type: ignore[attr-defined]  # the runner function carries these for run_child
    return run_script


def title_setup() -> None:
    """Before any title is set (in the zygote, at its start): let ``setproctitle`` find this
    process's argv and environ areas while they are the ones the kernel laid out (a child's
    ``os.environ.clear()`` would hide them from it), and give glibc's
    ``program_invocation_name``/``_short_name`` copies of their own: they point into the argv
    area the title overwrites, and native code names the process with them (MindSpore's log
    lines: ``ME(pid,tid,python)``), as a plain process's ``python``."""
    try:
        import setproctitle
    except ImportError:
        return
    if _LIBC is not None:
        for name in ("program_invocation_name", "program_invocation_short_name"):
            try:
                ptr = ctypes.c_void_p.in_dll(_LIBC, name)
            except ValueError:
                continue
            if ptr.value:
                copy = ctypes.create_string_buffer(ctypes.string_at(ptr.value))
                _KEEP.append(copy)
                ptr.value = ctypes.addressof(copy)
    global _COMM
    try:
        with open("/proc/self/comm", "rb") as f:
            _COMM = f.read().strip()[:15]
    except OSError:
        _COMM = b""
    setproctitle.getproctitle()  # its set-up also renames the process (comm): named back
    _set_comm()


def _set_comm() -> None:
    """The process's short name (``/proc/PID/comm``, ``ps -o comm``, ``top``) back to the
    interpreter's, as a plain process has it: ``setproctitle`` changes it with the title."""
    if _COMM and _PRCTL is not None:
        _PRCTL(_PR_SET_NAME, ctypes.c_char_p(_COMM), 0, 0, 0)


def _set_title(title: str) -> None:
    """The process title (``ps``, ``pgrep -f``, ``top -c``): the command a plain process shows,
    with ``setproctitle`` (its comm, the short name, stays the interpreter's)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(title)
    _set_comm()


def _skip_inherited_native_exit() -> None:
    """After the interpreter's finalization, skip the C/C++ exit handlers (static destructors)
    of the libraries the zygote loaded: registered in the zygote before the fork, they belong to
    its threads and state (in a forked child some wait for threads that do not exist and hang).
    glibc runs ``exit()``'s handlers newest first, so an ``on_exit(_exit)`` registered now runs
    after every handler the program registers itself (libraries it loads, objects it constructs)
    and before the inherited ones; ``_exit`` gets the exit status ``exit()`` was given."""
    if _LIBC is None:
        return
    try:
        on_exit = _LIBC.on_exit
        exit_now = ctypes.cast(_LIBC._exit, ctypes.c_void_p)
    except AttributeError:
        return
    on_exit.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    on_exit(exit_now, None)
