"""Joining the cluster a launcher set up: shared by the shipped MindSpore workloads."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any, Callable, Mapping, NoReturn, Optional, Sequence


def distributed_from_env(env: Mapping[str, str]) -> bool:
    """True when a launcher set a distributed environment (dynamic cluster, rank table, OpenMPI)."""
    return bool(env.get("MS_ROLE") or env.get("RANK_TABLE_FILE") or env.get("OMPI_COMM_WORLD_SIZE"))


def join_collective_cluster(prog: str, description: str, argv: Optional[Sequence[str]] = None) -> Optional[int]:
    """Parse ``--device-target``, set MindSpore up and ``init()`` the communication.

    Args:
        prog: the module's name for messages (``allreduce_smoke``).
        description: ``--help`` text.
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        None when this process is a worker ready for collectives; otherwise the exit code to
        return: 2 without a distributed environment or with an unusable device (one line on
        stderr), 0 for the scheduler (in MindSpore 2.10 its ``init()`` serves the cluster and
        ends the process itself, so that return is not reached).
    """
    parser = argparse.ArgumentParser(prog=f"python -m launcher.workloads.{prog}", description=description)
    parser.add_argument(
        "--device-target", default=os.environ.get("DEVICE_TARGET") or "CPU", choices=("CPU", "GPU", "Ascend")
    )
    args = parser.parse_args(argv)
    if not distributed_from_env(os.environ):
        sys.stderr.write(
            f"{prog}: error: no distributed environment (MS_ROLE, RANK_TABLE_FILE or "
            "OMPI_COMM_WORLD_SIZE); start it with a launcher\n"
        )
        return 2

    import mindspore as ms
    from mindspore.communication import init

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        ms.set_device(args.device_target)
    except RuntimeError as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        sys.stderr.write(f"{prog}: error: --device-target {args.device_target} is not usable: {first}\n")
        return 2
    init()
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return 0
    return None


def _one_op_cell(make_op: Callable[[], Any]) -> Any:
    """A MindSpore cell whose ``construct(x)`` applies one operator made by ``make_op()``."""
    from mindspore import nn

    class _OneOp(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.op = make_op()

        def construct(self, x):
            return self.op(x)

    return _OneOp()


def all_reduce_sum() -> Any:
    """A MindSpore cell that sums a tensor over every rank of the world group (``ops.AllReduce``);
    call it after :func:`join_collective_cluster` returned None."""
    from mindspore import ops

    return _one_op_cell(ops.AllReduce)


def any_rank(size: int) -> Callable[[bool], bool]:
    """``f(flag)``: whether ``flag`` is true on any of the ``size`` ranks, the same answer on every
    rank (an AllReduce of one number, called by every rank in the same order); ``size`` 1: the
    flag itself."""
    if size <= 1:
        return bool
    import mindspore as ms

    total = all_reduce_sum()

    def agree(flag: bool) -> bool:
        return bool(total(ms.Tensor([1.0 if flag else 0.0], ms.float32)).asnumpy()[0] > 0)

    return agree


def all_gather() -> Any:
    """A MindSpore cell that concatenates a tensor of every rank of the world group along axis 0,
    in rank order (``ops.AllGather``); call it after the communication is initialised."""
    from mindspore import ops

    return _one_op_cell(ops.AllGather)


#: The longest MindSpore's exit cleanup may take once the result is decided (its handshake with
#: the scheduler waits for the slowest peer's last collective, the same small one on every rank of
#: a check): past it an alarm ends the process with the result's code (:func:`keep_code_through_teardown`).
#: It was 120 s until a crash in a cleanup thread, whose handler waits for Python's lock while the
#: main thread holds it in the cleanup, held a 4-rank mpirun AllReduce that long after its result.
TEARDOWN_SECONDS = 40
#: Seconds after :data:`TEARDOWN_SECONDS` when faulthandler's watchdog ends a process the alarm
#: could not end (exit 1, with every thread's stack on stderr).
TEARDOWN_LAST = 20
#: Past this, a cleanup that still runs ends the process with the result's code, when Python can
#: still run (:func:`end_after`): under mpirun, every rank of a 4-rank check was once seen stuck in
#: MindSpore's cleanup after each had unregistered from the scheduler (which did not end either).
TEARDOWN_GRACE = 30
_FAULTS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL")
_KEEP: list = []  # the native fault handler (ctypes keeps no reference of its own)
_ENDING = threading.Lock()  # held by the one caller of _end_with that writes the line and exits


def keep_code_through_teardown(code: int) -> bool:
    """Make a crash in the exit cleanup that runs from now on end the process with ``code``.

    A collective check decides its result before it exits; MindSpore's C++ cleanup (an ``atexit``
    handler) then finalizes the rank with the scheduler and now and then crashes doing so (SIGSEGV
    once every worker had printed a correct sum). That crash is the framework's, not the check's
    result: a native handler for the fault signals writes one line on stderr and ends the process
    with ``code``.  A crash in a thread other than the main one is handled once the main thread
    lets the interpreter go (as ``join`` does).  A cleanup that still runs after
    :data:`TEARDOWN_SECONDS` (one that holds Python's lock, which :func:`end_after`'s thread needs)
    is ended by an alarm whose handler runs on the thread that holds the lock, with ``code`` too:
    under mpirun, every worker of a correct AllReduce was once seen in MindSpore's finalize for two
    minutes, and the alarm's default action (exit by SIGALRM) failed the job.  Should even that
    handler not run (the alarm taken by a thread that waits for the lock), faulthandler's watchdog
    thread, which needs no lock, dumps the threads' stacks and ends the process (exit 1) after
    :data:`TEARDOWN_LAST` seconds more, so the exit stays bounded.  Returns False where no
    native handler can be installed (the cleanup then runs unguarded)."""
    import ctypes
    import faulthandler
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        install, alarm = libc.signal, libc.alarm
    except (OSError, AttributeError):
        return False
    handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int)

    def on_fault(signum: int) -> None:
        if signum == signal.SIGALRM:
            _end_with(code, f"did not end within {TEARDOWN_SECONDS:g} s")
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        _end_with(code, f"crashed ({name})")

    handler = handler_type(on_fault)
    install.restype = ctypes.c_void_p
    install.argtypes = (ctypes.c_int, handler_type)
    _KEEP.append(handler)
    for name in _FAULTS + ("SIGALRM",):
        install(int(getattr(signal, name)), handler)
    faulthandler.dump_traceback_later(TEARDOWN_SECONDS + TEARDOWN_LAST, exit=True)
    alarm(ctypes.c_uint(TEARDOWN_SECONDS))
    return True


def _end_with(code: int, what: str) -> "NoReturn":
    """One line on stderr (the exit cleanup ``what``, after the result), then end with ``code``.
    Once: the alarm's handler and the grace's thread can both get here (the handler's Python lets
    the waiting thread in); the second waits for the first's exit."""
    if not _ENDING.acquire(blocking=False):
        _ENDING.acquire()  # never released: the first caller ends the process
    os.write(
        2,
        (
            f"{os.path.basename(sys.argv[0] or 'python')}: the framework's exit cleanup {what} "
            f"after the result was decided; exit code {code} stands\n"
        ).encode(),
    )
    os._exit(code & 0xFF)


def end_after(seconds: float, code: int) -> None:
    """From a daemon thread: once ``seconds`` have passed, one line on stderr and end the process
    with ``code``.  For a cleanup that runs after the result is decided and may not end: where it
    waits with Python's lock released, this ends the process with the result's code; where it holds
    the lock, the thread never runs and :func:`keep_code_through_teardown`'s alarm ends it."""
    import time

    def wait() -> None:
        time.sleep(seconds)
        _end_with(code, f"did not end within {seconds:g} s")

    threading.Thread(target=wait, name="teardown-grace", daemon=True).start()


def exit_now(code: int) -> "NoReturn":
    """End a program whose result is decided: flush, run the exit handlers (MindSpore's cluster
    finalize among them) guarded, then ``os._exit``, which skips the interpreter's finalization
    and the static destructors: after a finished job they add ~2.7 s a process here and now and
    then crash (SIGSEGV after the result line was printed, and after the rank had left the
    cluster), which would fail a job whose result was correct.

    The handlers run under every launcher. The cluster's finalize is what lets the peers finish:
    the scheduler of msrun, or one mpirun started, ends only when every worker has left (else it
    reports them lost and exits 1), and in MindSpore's ring collectives a sender waits for the
    receiver's acknowledgement, so a rank that ended right after its last collective left a peer
    waiting for it until the collective timed out (``RingAllReduce wait sending 2 failed``: once in
    CI, under mslaunch, when these handlers were skipped there).  A crash in them ends the process
    with ``code`` all the same (:func:`keep_code_through_teardown`), and so does one that has not
    ended after :data:`TEARDOWN_GRACE` seconds (:func:`end_after`)."""
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
        keep_code_through_teardown(code)
        end_after(TEARDOWN_GRACE, code)
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code & 0xFF)
