"""How ``mslaunch run`` starts local Python ranks (the zygote by default on MindSpore CPU jobs)."""

from __future__ import annotations

import sys

from launcher.cli.startmode import FORKED, StartMode, choose, scheduler_mode, start_mode
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.spec import JobSpec


def plan(**kw):
    base = dict(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python=sys.executable,
        cwd="/w",
        job_dir="/w/logs/j",
        job_id="j",
    )
    base.update(kw)
    return build_plan(JobSpec(**base))


def test_default_forks_mindspore_cpu_jobs_of_the_local_launcher_only():
    assert start_mode(plan(), True, None) == (True, FORKED + "; --no-zygote: one process per rank")
    assert start_mode(plan(), False, None) == (False, None)  # not a MindSpore CPU job: as before
    assert start_mode(plan(launcher="mpirun", wrapper="/t/w.sh"), True, None) == (False, None)
    other = start_mode(plan(python="/opt/other/python3"), True, None)
    assert other[0] is False and "the ranks' interpreter is not mslaunch's" in other[1]


def test_flags_win():
    assert start_mode(plan(), True, False) == (False, "one process per rank (--no-zygote)")
    assert start_mode(plan(), False, True) == (True, FORKED + " (--zygote)")
    assert start_mode(plan(launcher="mpirun", wrapper="/t/w.sh"), True, True) == (
        False,
        "--zygote applies to the local launcher only; not used",
    )


def test_the_scheduler_runs_init_alone_with_the_zygote_on_mindspore_cpu_jobs():
    p = plan()
    assert scheduler_mode(p, True, True, None)[0] is True
    assert scheduler_mode(p, True, True, False) == (False, "the scheduler runs your script (--script-scheduler)")
    assert scheduler_mode(p, False, True, None) == (False, None)  # no zygote: the script, as msrun
    assert scheduler_mode(p, True, False, None) == (False, None)  # --zygote on another job: only if asked
    assert scheduler_mode(p, True, False, True)[0] is True


def test_choose_is_both_decisions_with_their_notes_joined():
    p = plan()
    sched = "the scheduler runs MindSpore's init() alone, forked too (--script-scheduler: your script, as msrun)"
    assert choose(p, True, None, None) == StartMode(
        True, True, FORKED + "; --no-zygote: one process per rank; " + sched
    )
    assert choose(p, True, None, False) == StartMode(
        True, False, FORKED + "; --no-zygote: one process per rank; the scheduler runs your script (--script-scheduler)"
    )
    assert choose(p, True, False, True) == StartMode(False, False, "one process per rank (--no-zygote)")
    assert choose(p, False, None, None) == StartMode(False, False, None)  # nothing to say
