"""The two ways a test runs the mslaunch CLI: in the test's own process, or as a process.

:func:`run_cli` runs it in this process: what ``python -m launcher ARGS`` would print and exit
with, without starting an interpreter (each start costs about 0.6 s of CPU, and a suite that
checks hundreds of refusals and reads of job folders paid minutes for them).  For commands that
start no job: refusals of bad input, ``plan``/``--dry-run``, the generators (``ranktable``,
``hostfile``, ``k8s gen``), and the readers of job folders (``ps``, ``status``, ``logs tail``
without ``-f``, ``report``).  A command that would start a job fails the test (:func:`run_cli`
refuses it).  The environment, working directory, standard streams and ``sys.argv`` are the
call's own and are put back after it; an exception other than ``SystemExit`` is printed as the
interpreter would print it (a traceback on stderr, exit 1), so "no traceback" checks keep their
meaning.

:func:`run_process` runs it as a child process and waits for it: jobs, and whatever needs a
process of its own (detach, signals, locks, the ranks' environment).  :func:`mslaunch_argv` is
its command line, for a test that starts the CLI itself (``subprocess.Popen`` of a command it
signals or reads while it runs, a shell line for ``sbatch`` or ``srun``).

No test module builds ``python -m launcher`` itself or defines a runner of its own
(``tests/harness/test_one_runner.py`` checks); a module's helper that adds something (a
cluster's ssh config, a plugin imported first) is a call of these with arguments.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union
from unittest import mock

__all__ = ["PROCESS_TIMEOUT", "mslaunch_argv", "run_cli", "run_process"]

#: Seconds :func:`run_process` waits for the CLI unless told otherwise.
PROCESS_TIMEOUT = 120.0


class _JobWouldStart(BaseException):
    """Raised where a job would start in the test's process (BaseException: no ``except Exception`` hides it)."""


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise _JobWouldStart("run_cli: this command starts a job; run it as a process (tests.harness.cli.run_process)")


def _stream() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace", newline="", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8", "replace")  # type: ignore[attr-defined]


def run_cli(
    *args: str,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    input: Optional[str] = None,
    timeout: Optional[float] = None,
) -> "subprocess.CompletedProcess[str]":
    """``mslaunch ARGS`` in this process; the result has the shape of ``subprocess.run(..., text=True)``'s.

    Args:
        env: the whole environment of the call (as ``subprocess.run``'s ``env``); None: this one.
        cwd: the working directory of the call.
        input: its standard input.
        timeout: accepted for the callers' sake; nothing here waits.

    Raises:
        AssertionError: the command would start a job (run it with :func:`run_process`).
    """
    del timeout
    argv = ["mslaunch", *args]
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    out, err = _stream(), _stream()
    code = 0
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = argv
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(input or ""), out, err
        with mock.patch("launcher.execution.runner.run_plan", _refuse), mock.patch("launcher.cli.run._detach", _refuse):
            code = _main(list(args))
    except SystemExit as exc:
        code = _exit_code(exc, err)
    except _JobWouldStart:
        raise AssertionError(f"run_cli {' '.join(args)}: this command starts a job; run it as a process") from None
    except BaseException:  # noqa: BLE001 - what the interpreter would do with it
        traceback.print_exc(file=err)
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        if env is not None or os.environ != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)
    return subprocess.CompletedProcess(argv, code, _text(out), _text(err))


def _main(args: Sequence[str]) -> int:
    """What ``launcher/__main__.py`` does with ``args`` (a return means exit 0)."""
    if list(args[:1]) == ["ranktable"]:
        from launcher.cli.ranktable import main as ranktable_main

        ranktable_main(list(args[1:]))
        return 0
    from launcher.cli.app import main

    main(list(args))
    return 0


def _exit_code(exc: SystemExit, err: io.TextIOWrapper) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    err.write(f"{exc.code}\n")  # sys.exit("text"): the interpreter prints it and exits 1
    return 1


def mslaunch_argv(*args: str, imports: Sequence[str] = ()) -> List[str]:
    """The command line of ``mslaunch ARGS`` under this interpreter.

    Args:
        args: the CLI's arguments.
        imports: modules the child imports before the CLI runs, as a plugin's would be (e.g. a
            test backend that registers itself); empty: plain ``python -m launcher``.

    Returns:
        ``[sys.executable, "-m", "launcher", *args]``, or with ``imports`` a ``-c`` program
        that imports them and then runs the ``launcher`` module as ``__main__``.
    """
    if not imports:
        return [sys.executable, "-m", "launcher", *args]
    driver = "".join(f"import {name}; " for name in imports)
    driver = (
        "import sys, runpy; "
        + driver
        + "sys.argv = ['mslaunch'] + sys.argv[1:]; runpy.run_module('launcher', run_name='__main__')"
    )
    return [sys.executable, "-c", driver, *args]


def run_process(
    *args: str,
    cwd: Optional[Union[str, "os.PathLike[str]"]] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = PROCESS_TIMEOUT,
    input: Optional[str] = None,
    imports: Sequence[str] = (),
    **popen: Any,
) -> "subprocess.CompletedProcess[str]":
    """``mslaunch ARGS`` as a child process, waited for; stdout and stderr captured as text.

    Args:
        cwd: the child's working directory; None: this one.
        env: the child's whole environment (as ``subprocess.run``'s); None: this one's.
        timeout: seconds to wait before ``subprocess.TimeoutExpired``; None: no limit.
        input: the child's standard input.
        imports: modules imported before the CLI (see :func:`mslaunch_argv`).
        popen: further ``subprocess.run`` arguments (``stdout=``/``stderr=`` replace the
            captures, e.g. ``stderr=subprocess.STDOUT``; ``start_new_session=True``).

    Returns:
        ``subprocess.run``'s result (``returncode``, ``stdout``, ``stderr``).

    Raises:
        subprocess.TimeoutExpired: the child ran past ``timeout`` (it is killed first).
    """
    kwargs: Dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.run(
        mslaunch_argv(*args, imports=imports), cwd=cwd, env=env, timeout=timeout, input=input, **kwargs
    )


#: The line :func:`imported_by`'s child ends its stderr with.
_MODULES = "mslaunch-test-modules "


def imported_by(*args: str, cwd: Optional[str] = None) -> "tuple[subprocess.CompletedProcess[str], List[str]]":
    """Run ``mslaunch ARGS`` as a process (with the clone first on its path) and list every module
    it had imported when it exited, for the tests of what a command imports.

    Returns:
        (``subprocess.run``'s result, with the modules' line taken out of ``stderr``; the sorted
        module names).
    """
    code = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: print({_MODULES!r} + json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        f"sys.argv = ['mslaunch', *{list(args)!r}]\n"
        "from launcher.__main__ import main\n"
        "main()\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd or root,
        env=dict(os.environ, PYTHONPATH=root),
        timeout=60,
    )
    lines = r.stderr.splitlines(keepends=True)
    found = [ln for ln in lines if ln.startswith(_MODULES)]
    r.stderr = "".join(ln for ln in lines if not ln.startswith(_MODULES))
    return r, json.loads(found[-1][len(_MODULES) :]) if found else []
