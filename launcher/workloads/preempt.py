"""A checkpoint on SIGTERM: what the reference trainer does when it is stopped (a preemption, a
stop, mslaunch's teardown).  Stdlib only.

SIGTERM (SIGTERM, then SIGKILL after ``--grace``: mslaunch's teardown, Slurm's, Kubernetes') sets a
flag; the training loop looks at it after each step: a rank with steps not yet saved writes a
checkpoint there (:meth:`StopOnSignal.stop_here`) and then ends *by the signal* (its exit status
stays "killed by SIGTERM", as a rank without the handler).

With several ranks the stop is *agreed*: after each step every rank tells the others whether it
heard the signal (one AllReduce of a number, :meth:`StopOnSignal.agreed`) and they all stop at
the first step where one did.  Without it a rank that heard the signal between two steps saved
there while a peer, already in the next step, waited in that step's AllReduce for a rank that had
left: that peer saved nothing, and a planned restart found no checkpoint in common.

A rank whose current step cannot end never reaches that point: in data parallel, a rank whose
peers are gone waits in the gradient AllReduce for ever.  Python runs a signal handler only
between bytecodes of the main thread, so a helper thread hears the signal too (``set_wakeup_fd``)
and ends the process by the signal when the loop has not reached a step's end within
``patience`` s (1.5 times its last step time, at least half a second): a stuck rank does not cost the whole grace.
A *planned* stop (``MSLAUNCH_STOPPING_FILE`` says ``planned``: mslaunch restarts the job to leave a
slow host out, or to grow it) waits for the step however long it takes, up to mslaunch's grace:
the step of a rank on a slow host is many times its last one, and the stop is there to save it.
Unless the rank's last step is saved already (a checkpoint every step, as ``--ckpt-every auto``
offers after a fault): then the step under way would add one step at most, and on a slow host its
peers wait for it in its AllReduce; the rank ends at once, and a rank that hears the signal while
it writes a checkpoint ends when it is written, so every rank's newest checkpoint is the same step.
With nothing to save (before the first step, right after a checkpoint, after training) the
process ends at once; so it does when mslaunch says it stops the ranks after a fault (its
``MSLAUNCH_STOPPING_FILE`` says ``failed`` or ``hung``): the rank that failed has no checkpoint of
this step, so no resume could load one, and the teardown after a fault stays as short as before.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Mapping, Optional, Tuple

__all__ = ["StopOnSignal"]

#: The least time a rank in a step is given to reach its end after SIGTERM.
MIN_PATIENCE = 0.5
#: What mslaunch's ``stopping`` file says when it stops the ranks after a fault.
FAULTS = ("failed", "hung")
#: What it says for a planned restart (``--straggler replace``, ``--grow-at-checkpoint``).
PLANNED = "planned"


class StopOnSignal:
    """The trainer's SIGTERM: a checkpoint at the next step's end (see the module doc).

    Use: :meth:`install` once; :meth:`step_started` / :meth:`step_done` around each step, with
    ``due = stop.agreed()`` before :meth:`step_done`; :meth:`saving` / :meth:`saved` around each
    checkpoint; after each step ``if due: stop.stop_here(save)``.

    Args:
        agree: ``agree(flag)``: whether ``flag`` is true on any rank, the same answer on every
            rank (a collective; default: this rank alone).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] = os.environ,
        agree: Optional[Callable[[bool], bool]] = None,
    ) -> None:
        self.requested = False
        self._agree = agree
        self._why = environ.get("MSLAUNCH_STOPPING_FILE")  # mslaunch writes why it stops the ranks there
        self._clock = clock
        self._lock = threading.Lock()
        self._unsaved = False  # steps done since the last checkpoint
        self._in_step_since: Optional[float] = None
        self._step_s = 0.0  # the last step's time (not the first, which compiles)
        self._steps = 0
        self._saving = False
        self._stopping = threading.Event()  # the loop reached a step's end and saves
        self.signalled_at: Optional[float] = None

    def install(self) -> "StopOnSignal":
        """Handle SIGTERM in this process (call from the main thread)."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.signal(signal.SIGTERM, self._handler)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read,), name="sigterm-watch", daemon=True).start()
        return self

    # ------------------------------------------------------------------ the loop's side

    def step_started(self) -> None:
        with self._lock:
            self._in_step_since = self._clock()

    def agreed(self) -> bool:
        """Whether the ranks stop at this step's end: some rank heard the signal (call it on every
        rank after every step, inside the step: a rank waiting here for a slow peer is in a step)."""
        return self._agree(self.requested) if self._agree is not None else self.requested

    def step_done(self) -> None:
        with self._lock:
            self._steps += 1
            if self._in_step_since is not None and self._steps > 1:
                self._step_s = self._clock() - self._in_step_since
            self._in_step_since = None
            self._unsaved = True

    def saving(self) -> None:
        with self._lock:
            self._saving = True

    def saved(self, ok: bool = True) -> None:
        """The save has ended; ``ok`` False: nothing was written (the steps stay unsaved, so a
        stop saves them at its step's end)."""
        with self._lock:
            self._saving = False
            self._unsaved = self._unsaved and not ok
            unsaved = self._unsaved
        if self.requested and not unsaved and not self._stopping.is_set() and self._stopping_why() == PLANNED:
            self.die()  # a planned stop heard while saving: nothing is left to save (see the module doc)

    def stop_here(self, save: Callable[[], Any]) -> None:
        """At a step's end after SIGTERM: ``save()`` (unless nothing is new; False from it: the
        checkpoint could not be written), then end by the signal."""
        self._stopping.set()
        with self._lock:
            unsaved = self._unsaved
        if unsaved and not self.after_fault():
            t0 = self._clock()
            if save() is not False:
                print(f"preempted: checkpoint saved in {self._clock() - t0:.2f} s after SIGTERM", flush=True)
        self.die()

    @staticmethod
    def die() -> None:
        """End the process by SIGTERM (its default action), from any thread."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        else:  # only the main thread may call signal.signal: libc's own
            try:
                import ctypes

                ctypes.CDLL(None).signal(int(signal.SIGTERM), 0)  # SIG_DFL
            except (OSError, AttributeError):
                os._exit(128 + signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal ends the process before this returns
        os._exit(128 + signal.SIGTERM)

    # ------------------------------------------------------------------ the signal's side

    def after_fault(self) -> bool:
        """mslaunch stops the ranks after a fault (its ``stopping`` file says so)."""
        return self._stopping_why() in FAULTS

    def _stopping_why(self) -> str:
        """What mslaunch's ``stopping`` file says ("" when there is none)."""
        if not self._why:
            return ""
        try:
            with open(self._why) as fh:
                return fh.read(64).strip()
        except OSError:
            return ""

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def patience(self) -> Tuple[bool, Optional[float]]:
        """Whether to wait for the loop, and how long (None: as long as it takes)."""
        with self._lock:
            if self._saving:
                return True, None  # a checkpoint being written: the loop stops right after it
            if not self._unsaved and (self._in_step_since is None or self._steps == 0):
                return False, None  # nothing trained since the last checkpoint (or the first step compiles)
            if self._in_step_since is None and self._agree is None:
                return True, MIN_PATIENCE  # between steps: the check is near
            step_s = self._step_s  # agreed: between steps, the stop may come at the next step's end
            unsaved = self._unsaved
        if self._stopping_why() == PLANNED:
            # a slow host's step: as long as it takes (mslaunch's grace is the limit), unless the
            # last step is saved: this one would add a step at most
            return unsaved, None
        return True, max(MIN_PATIENCE, 1.5 * step_s)

    def _watch(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except InterruptedError:
                continue
            if signal.SIGTERM not in data:
                continue
            if self.signalled_at is None:
                self.signalled_at = self._clock()
            wait, limit = self.patience()
            if not wait or self.after_fault() or not self._stopping.wait(limit):
                self.die()  # nothing to save, or stuck in a step that cannot end
            return  # the loop saves; mslaunch's SIGKILL after --grace is the limit
