"""Stop signals (SIGINT, SIGTERM, SIGHUP) to mslaunch: recorded at any moment, raised when armed.

``mslaunch run`` installs :func:`install` as early as it can (``python -m launcher``, before the
CLI's imports), so a stop signal during start-up is never lost: it is recorded in
:data:`pending`, and the supervisor turns it into a ``stopped`` job with a summary (nothing is
started once a stop signal is pending).  While the supervisor starts and watches processes
the handler is *armed* and raises :class:`Interrupted` at once, so ``finally`` blocks tear down;
raising disarms it, so a second signal cannot interrupt the handling of the first.

This module is imported before anything else: standard library only, nothing heavy.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Dict, List, Optional

#: SIGUSR1 is Slurm's preemption / time-limit warning (``sbatch --signal=B:USR1@<s>``): the job
#: stops the same graceful way and its summary says ``preempted``.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)

#: Stop signals received, in order (cleared by :func:`reset`).
pending: List[int] = []
_armed = [False]


class Interrupted(Exception):
    """mslaunch received a signal asking it to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _handler(signum: int, frame: Any) -> None:
    pending.append(signum)
    if _armed[0]:
        # One Interrupted per arming: a second signal while the first is handled (Slurm sends
        # SIGTERM to mslaunch and its batch script forwards another) is only recorded.
        _armed[0] = False
        raise Interrupted(signum)


def installed() -> bool:
    """True when this module's handler handles SIGTERM."""
    return signal.getsignal(signal.SIGTERM) is _handler


def install() -> Dict[int, Any]:
    """Record stop signals from now on (main thread only); returns the previous handlers."""
    previous: Dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, _handler)
    return previous


def restore(previous: Dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def arm(on: bool) -> None:
    """Raise :class:`Interrupted` from the handler (True) or only record (False)."""
    _armed[0] = on


def first() -> Optional[int]:
    """The first stop signal received, or None."""
    return pending[0] if pending else None


def check() -> None:
    """Raise :class:`Interrupted` if a stop signal was received."""
    if pending:
        raise Interrupted(pending[0])


def reset() -> None:
    """Forget received signals (a new supervision in the same process)."""
    del pending[:]
    arm(False)


class recorded_only:
    """Within the block a stop signal is only recorded, not raised, even when armed: for a short
    call that must finish (asking the cluster's scheduler why the job ends, while it signals
    mslaunch more than once)."""

    def __enter__(self) -> None:
        self._was = _armed[0]
        _armed[0] = False

    def __exit__(self, *exc: Any) -> None:
        _armed[0] = self._was


class blocked:
    """Defer SIGINT/SIGTERM/SIGHUP for the duration of the block (main thread only): a
    process being started is registered before a stop signal can interrupt."""

    def __enter__(self) -> None:
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


def install_for_run() -> Dict[int, Any]:
    """Record stop signals for one supervision; keep those received before (``mslaunch run``
    installs the same handler first thing, so a signal during start-up is pending here).
    Returns what :func:`restore_after_run` needs."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    if installed():
        return {}
    reset()
    return install()


def restore_after_run(previous: Dict[int, Any]) -> None:
    """Disarm and put back the handlers :func:`install_for_run` replaced."""
    arm(False)
    restore(previous)
