"""How ``mslaunch run`` starts Python ranks (the zygote by default on MindSpore CPU jobs, local and
over ssh) and what it gives the ssh launcher for that (each host's zygote, the agents kept for a
restart, the spare hosts started at once)."""

from __future__ import annotations

import sys
from dataclasses import replace

from launcher.cli.startmode import (
    FORKED,
    FORKED_SSH,
    StartMode,
    choose,
    mindspore_cpu_job,
    scheduler_mode,
    ssh_settings,
    start_mode,
)
from launcher.execution.local.zygote import PRELOAD
from launcher.execution.ssh.pool import AgentPool
from launcher.execution.ssh.settings import SSHSettings
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.spec import JobSpec


def spec(**kw):
    base = dict(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python=sys.executable,
        cwd="/w",
        job_dir="/w/logs/j",
        job_id="j",
    )
    base.update(kw)
    return JobSpec(**base)


def plan(**kw):
    return build_plan(spec(**kw))


def remote(**kw):
    """A job on three remote hosts of one slot, two ranks: the third host is spare."""
    return spec(inventory=parse_host_list("h1:1,h2:1,h3:1"), np=2, **kw)


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
        "--zygote applies to the local and ssh launchers only; not used",
    )


def test_ssh_jobs_fork_each_hosts_ranks_from_its_zygote_and_the_scheduler_runs_the_script():
    p = build_plan(remote())
    assert p.launcher == "ssh"
    assert start_mode(p, True, None) == (True, FORKED_SSH + "; --no-zygote: one process per rank")
    assert start_mode(p, False, None) == (False, None)
    assert start_mode(p, True, False) == (False, "one process per rank (--no-zygote)")
    assert start_mode(p, False, True) == (True, FORKED_SSH + " (--zygote)")
    # no mslaunch on a remote host to run init() alone: its zygote forks the user's script
    assert scheduler_mode(p, True, True, None) == (False, None)
    assert scheduler_mode(p, True, True, True) == (False, None)


def test_a_remote_job_is_a_mindspore_cpu_one_when_its_programs_source_here_imports_mindspore(tmp_path):
    (tmp_path / "ms.py").write_text("import numpy\nfrom mindspore import nn\n")
    (tmp_path / "plain.py").write_text("import numpy\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('a package is never imported to find this')\n")
    (tmp_path / "pkg" / "train.py").write_text("import mindspore as ms\n")
    cpu = replace(spec().cpu, remote_tune=True)  # a candidate: Python, dynamic, no other device

    def verdict(**kw):
        s = remote(cwd=str(tmp_path), **kw)
        s = replace(s, cpu=cpu)
        return mindspore_cpu_job(s, build_plan(s))

    assert verdict(program=("ms.py",)) is True
    assert verdict(program=("plain.py",)) is False
    assert verdict(program=("missing.py",)) is False
    assert verdict(program=("pkg.train",), module=True) is True
    assert verdict(program=("launcher.workloads.resnet50_cifar10",), module=True) is True  # on sys.path
    assert verdict(program=("pkg.nothing",), module=True) is False
    s = replace(remote(cwd=str(tmp_path), program=("ms.py",)), cpu=replace(cpu, remote_tune=False))
    assert mindspore_cpu_job(s, build_plan(s)) is False  # not a candidate (another device, --cpu-tune off...)
    # a job with a host here: the probe's verdict, whatever the source says
    local = replace(spec(cwd=str(tmp_path), program=("plain.py",)), cpu=replace(cpu, mindspore_cpu=True))
    assert mindspore_cpu_job(local, build_plan(local)) is True


def test_ssh_settings_give_each_host_a_zygote_keep_the_agents_and_start_the_spare_hosts():
    s = remote()
    p = build_plan(s)
    notes = []
    got = ssh_settings(SSHSettings(), s, p, StartMode(True, False, None), notes.append)
    assert got.zygote == PRELOAD and isinstance(got.keep, AgentPool) and got.on_note is not None
    assert [(h.name, python) for h, python in got.standby] == [("h3", sys.executable)]
    cold = ssh_settings(SSHSettings(), s, p, StartMode(False, False, None, keep_zygote=False), notes.append)
    assert (cold.zygote, cold.keep, cold.standby) == ((), None, ())  # --no-zygote --cold-restarts: as before
    # every job gets its own pool
    assert ssh_settings(SSHSettings(), s, p, StartMode(True, False, None), notes.append).keep is not got.keep
    # another launcher: only the notes
    local = ssh_settings(SSHSettings(), spec(), plan(), StartMode(True, False, None), notes.append)
    assert (local.zygote, local.keep, local.standby) == ((), None, ())
    # the straggler watch's looks (--straggler replace:10: one every 1.67 s) set how often each
    # host's agent samples its ranks: twice per look; without a watch, the agent's default
    assert got.sample_every == 2.0
    watched = ssh_settings(SSHSettings(), s, p, StartMode(True, False, None), notes.append, 10 / 6)
    assert watched.sample_every == 5 / 6 and watched.zygote == PRELOAD


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
