"""The console of ``mslaunch run`` (launcher.cli.console): one line per event it shows, on stderr."""

from __future__ import annotations

import pytest

from launcher.cli.console import Console, event_line
from launcher.execution.results import ProcResult, RootCause
from launcher.logs.causes import Cause
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job import events as ev
from launcher.planning.job.ckptinterval import Advice
from launcher.planning.job.spec import Exclusion, JobSpec


@pytest.fixture
def console():
    plan = build_plan(
        JobSpec(
            inventory=parse_host_list("localhost:1"),
            program=("t.py",),
            python="/p",
            cwd="/w",
            job_dir="/w/j",
            job_id="j",
        )
    )
    return Console(plan, tee="none")


def _cause(judged=None):
    return RootCause(ProcResult("rank 0", 0, "h1", 3, 0.0, 1.0, "/l"), ("x",), judged)


def test_console_failure_line_uses_the_one_wording(console, capsys):
    console.event(ev.Failure("rank 0", "localhost", -9))
    assert capsys.readouterr().err == "mslaunch: rank 0 on localhost failed (killed by SIGKILL); tearing down the job\n"


@pytest.mark.parametrize(
    "event, line",
    [
        (ev.Failure("rank 1", "h2", 3), "rank 1 on h2 failed (exit code 3); tearing down the job"),
        (ev.Teardown(("rank 0", "rank 2")), "stopping 2 process(es)"),
        (ev.TimedOut(0.2), "the job ran past --timeout 0.2 s; tearing down"),
        (ev.TimedOut(30.0), "the job ran past --timeout 30 s; tearing down"),
        (ev.Interrupted(15), "received signal 15; tearing down"),
        (ev.Hung("no rank made progress for 60 s", {}), "no rank made progress for 60 s; tearing down"),
        (ev.StopRestarts("crash loop: same cause"), "crash loop: same cause"),
        (
            ev.HostExcluded(
                Exclusion("h2", "2 failures (rank 2 killed by SIGKILL)", "restart", 2), "ranks 2-3 move to h4"
            ),
            "restart: leaving out h2 after 2 failures (rank 2 killed by SIGKILL); ranks 2-3 move to h4",
        ),
        (
            ev.HostExcluded(Exclusion("h3", "host lost (rank 4: connection lost)", "restart", 1), ""),
            "restart: leaving out h3 host lost (rank 4: connection lost)",
        ),
        (
            ev.Resized(2, 4, 6, 6, 2, "h2: host lost (rank 2: connection lost)"),
            "elastic: attempt 2 goes on with 4 of 6 ranks on 2 hosts (h2: host lost (rank 2: connection lost)); "
            "every process finds MSLAUNCH_WORLD_SIZE=4 MSLAUNCH_PLANNED_WORLD_SIZE=6",
        ),
        (
            ev.Resized(4, 6, 4, 6, 3, "back: h2"),
            "elastic: attempt 4 grows back to 6 of 6 ranks on 3 hosts (back: h2); every process finds "
            "MSLAUNCH_WORLD_SIZE=6 MSLAUNCH_PLANNED_WORLD_SIZE=6",
        ),
        (
            ev.PlannedRestart("leaving out h3: rank 2 on h3 waited for CPU 97 %"),
            "planned restart: leaving out h3: rank 2 on h3 waited for CPU 97 %; the ranks save at their next step's "
            "end, then restart",
        ),
        (
            ev.HostRejoined("h2", 4, "host lost (rank 2: connection lost)"),
            "restart: h2 answers again; trying it again (it was left out: host lost (rank 2: connection lost))",
        ),
        (ev.ClusterStop("preempted", "Slurm preempted job 5 at T"), "Slurm preempted job 5 at T; tearing down"),
        (
            ev.Straggler(2, "h3", "rank 2 on h3 waited for CPU 90 % ...", 1.0, 0),
            "straggler: rank 2 on h3 waited for CPU 90 % ...",
        ),
        (
            ev.Straggler(2, "h3", "rank 2 on h3 waited for CPU 20 % ...", 1.0, 0, cleared=True),
            "rank 2 on h3 is no longer a straggler: rank 2 on h3 waited for CPU 20 % ...",
        ),
        (
            ev.CheckpointFailed(1, 0, "rank 1: [Errno 28] No space left on device"),
            "rank 1: a checkpoint was not written (rank 1: [Errno 28] No space left on device); the job trains on",
        ),
    ],
)
def test_each_shown_event_is_one_line_on_stderr(console, capsys, event, line):
    console.event(event)
    assert capsys.readouterr() == ("", f"mslaunch: {line}\n")
    assert event_line(event) == line


def test_a_restart_names_its_attempt_its_logs_and_the_cause_judged(console, capsys):
    console.event(ev.Restart(1, _cause(Cause("python_exception", "ValueError: bad", "fix it")), 1))
    console.event(ev.Restart(2, _cause(), 5))  # no cause judged
    console.event(ev.Restart(3, None, 3))  # no root cause
    console.event(ev.Restart(4, None, 4, Advice(39.6, 1.2, 690.0, 3, 0.5)))  # a checkpoint interval offered
    assert capsys.readouterr().err == (
        "mslaunch: restarting the job: attempt 1 (MSLAUNCH_ATTEMPT=1); logs in /w/j/attempt_1;"
        " attempt 0 failed with python_exception: ValueError: bad\n"
        "mslaunch: restarting the job: attempt 2 (MSLAUNCH_ATTEMPT=5); logs in /w/j/attempt_2\n"
        "mslaunch: restarting the job: attempt 3 (MSLAUNCH_ATTEMPT=3); logs in /w/j/attempt_3\n"
        "mslaunch: restarting the job: attempt 4 (MSLAUNCH_ATTEMPT=4); logs in /w/j/attempt_4;"
        " checkpoint interval 40 s = 79 steps offered (MSLAUNCH_CKPT_INTERVAL: Young/Daly from a 1.2 s checkpoint"
        " and 11.5 min between faults, 3 so far)\n"
    )


@pytest.mark.parametrize(
    "event",
    [
        ev.Started("rank 0", 0, "h", 12, "/l", 0),
        ev.Exited("rank 0", 0, "h", 0, 0),
        ev.JobStart("j"),
        ev.JobEnd("failed", 1),
        ev.Preflight("warn", 1.0, None, (), {}),
    ],
)
def test_other_events_print_nothing(console, capsys, event):
    console.event(event)
    assert capsys.readouterr() == ("", "")
    assert event_line(event) is None
