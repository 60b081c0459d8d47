"""Stop signals: recorded at any moment, raised once per arming (a second signal while the first
is handled is only recorded), and only recorded inside ``recorded_only``."""

from __future__ import annotations

import os
import signal

import pytest

from launcher.execution import stopsignals


@pytest.fixture
def handlers():
    stopsignals.reset()
    previous = stopsignals.install()
    try:
        yield
    finally:
        stopsignals.restore(previous)
        stopsignals.reset()


def test_a_second_signal_while_the_first_is_handled_is_only_recorded(handlers) -> None:
    stopsignals.arm(True)
    with pytest.raises(stopsignals.Interrupted) as info:
        os.kill(os.getpid(), signal.SIGTERM)  # Slurm's SIGTERM to mslaunch ...
    assert info.value.signum == signal.SIGTERM
    os.kill(os.getpid(), signal.SIGTERM)  # ... and the batch script's forwarded one: no raise
    assert stopsignals.pending == [signal.SIGTERM, signal.SIGTERM]
    stopsignals.arm(True)  # armed again (a new supervision): the next one raises
    with pytest.raises(stopsignals.Interrupted):
        os.kill(os.getpid(), signal.SIGINT)


def test_recorded_only_defers_and_restores_the_arming(handlers) -> None:
    stopsignals.arm(True)
    with stopsignals.recorded_only():
        os.kill(os.getpid(), signal.SIGUSR1)
    assert stopsignals.first() == signal.SIGUSR1
    with pytest.raises(stopsignals.Interrupted):
        stopsignals.check()  # what the supervisor's next check does with it
    with pytest.raises(stopsignals.Interrupted):
        os.kill(os.getpid(), signal.SIGHUP)  # still armed after the block
