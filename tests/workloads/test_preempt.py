"""The trainer's checkpoint on SIGTERM (launcher/workloads/preempt.py).

Stand-in loops (no MindSpore) drive :class:`StopOnSignal` the way the trainer does: a rank in a
step saves at its end and ends by the signal; a rank stuck in a step (as in an AllReduce whose
peer is gone) ends by the signal after its patience without saving; a rank with nothing new ends
at once; two ranks in lockstep (a socket pair as their AllReduce) stop at the same step whichever
of them heard the signal between two steps.  Then one real preemption: SIGTERM to mslaunch while
the reference trainer trains; the checkpoint it wrote on SIGTERM loads, and a run with ``--resume`` continues from it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from tests.harness.cli import mslaunch_argv

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)

#: A loop of steps of STEP seconds (a step is a sleep; ``stuck`` makes step 3 never end, ``slow``
#: makes it 40 times the others, as on a host put under a CPU quota; both say ``in step 3`` once
#: inside it), saving to SAVED on SIGTERM; prints ``step N`` after each.  With ``every`` it also
#: saves after every step (``slowsave``: the save of step 3 says ``saving 3`` and takes 2 s).
LOOP = """
import os, sys, time
from launcher.workloads.preempt import StopOnSignal
step_s, mode, saved, every = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:] == ["every"]
stop = StopOnSignal().install()
for step in range(1, 10000):
    stop.step_started()
    if mode in ("stuck", "slow") and step == 3:
        print("in step 3", flush=True)
    time.sleep({"stuck": 3600, "slow": 40 * step_s}.get(mode, step_s) if step == 3 else step_s)
    due = stop.requested  # as the trainer's agreement: inside the step, before its checkpoint
    stop.step_done()
    print(f"step {step}", flush=True)
    if every:
        stop.saving()
        if mode == "slowsave" and step == 3:
            print("saving 3", flush=True)
            time.sleep(2)
        open(saved, "w").write(str(step))
        stop.saved()
    if due:
        stop.stop_here(lambda: open(saved, "w").write(str(step)))
"""


#: Two ranks in lockstep, as the trainer's (``argv``: a socket to the peer, the rank, where to save,
#: the step after which the rank pauses between two steps, saying ``between steps``): each step
#: ends with an exchange with the peer (the gradient AllReduce: a rank whose peer left waits for
#: ever), then the stop is agreed over the same socket; prints ``step N`` after each.
PAIR = """
import socket, struct, sys, time
from launcher.workloads.preempt import StopOnSignal
peer, rank, saved, pause_after = socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def exchange(x):
    peer.sendall(struct.pack("d", x))
    got = b""
    while len(got) < 8:
        chunk = peer.recv(8 - len(got))
        if not chunk:
            time.sleep(3600)
        got += chunk
    return x + struct.unpack("d", got)[0]
stop = StopOnSignal(agree=lambda flag: exchange(float(flag)) > 0).install()
for step in range(1, 10000):
    stop.step_started()
    time.sleep(0.05)
    exchange(1.0)
    due = stop.agreed()
    stop.step_done()
    print(f"step {step}", flush=True)
    if step == pause_after:
        print("between steps", flush=True)
        time.sleep(1.0)
    if due:
        stop.stop_here(lambda: open(saved, "w").write(str(step)))
"""


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _loop(tmp_path, step_s, mode, every=False, **environ):
    env = dict(os.environ, PYTHONPATH=ROOT, **environ)
    if "MSLAUNCH_STOPPING_FILE" not in environ:  # not a rank of a job
        env.pop("MSLAUNCH_STOPPING_FILE", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(step_s), mode, str(tmp_path / "saved")] + (["every"] if every else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc


def _until(proc, line):
    seen = []
    for got in proc.stdout:
        seen.append(got.strip())
        if got.strip() == line:
            return seen
    raise AssertionError(f"{line!r} never came: {seen}")


def test_a_rank_in_a_step_saves_at_its_end_and_ends_by_the_signal(tmp_path):
    proc = _loop(tmp_path, 0.3, "steps")
    _until(proc, "step 2")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, err
    lines = out.splitlines()  # after "step 2"
    step = int((tmp_path / "saved").read_text())
    assert step in (2, 3)  # the step it was in when the signal came (or the one it had just ended)
    assert lines[:-1] == [f"step {k}" for k in range(3, step + 1)]
    assert re.fullmatch(r"preempted: checkpoint saved in \d+\.\d\d s after SIGTERM", lines[-1])


def test_a_rank_stuck_in_a_step_ends_by_the_signal_without_saving(tmp_path):
    proc = _loop(tmp_path, 0.05, "stuck")
    _until(proc, "in step 3")  # step 3 never ends (the AllReduce of a rank whose peer is gone)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)  # its patience (0.5 s here), not mslaunch's grace
    assert proc.returncode == -signal.SIGTERM, err
    assert not (tmp_path / "saved").exists() and "preempted" not in out


def test_a_planned_stop_waits_for_a_slow_step_and_saves_at_its_end(tmp_path):
    """mslaunch's planned restart (``--straggler replace``: the stopping file says ``planned``)
    stops a rank whose step is many times its last one (its host is the slow one): the rank waits
    for that step (1.5 times its last one, 0.15 s, would end it unsaved) and saves at its end."""
    (tmp_path / "stopping").write_text("planned\n")
    proc = _loop(tmp_path, 0.1, "slow", MSLAUNCH_STOPPING_FILE=str(tmp_path / "stopping"))
    _until(proc, "in step 3")  # 4 s, after steps of 0.1 s
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, err
    assert (tmp_path / "saved").read_text() == "3"
    assert out.splitlines()[0] == "step 3" and out.splitlines()[1].startswith("preempted: checkpoint saved in ")


def test_a_planned_stop_with_the_last_step_saved_does_not_wait_for_the_step_under_way(tmp_path):
    """A checkpoint after every step (``--ckpt-every auto`` after a fault): a planned stop in a step
    that cannot end (a slow host's, whose peers wait for it in the AllReduce) has nothing to gain
    from it: the rank ends at once, its newest checkpoint the last step."""
    (tmp_path / "stopping").write_text("planned\n")
    proc = _loop(tmp_path, 0.05, "stuck", every=True, MSLAUNCH_STOPPING_FILE=str(tmp_path / "stopping"))
    _until(proc, "in step 3")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)  # waiting for the step, it would never end
    assert proc.returncode == -signal.SIGTERM, err
    assert (tmp_path / "saved").read_text() == "2" and "preempted" not in out


def test_a_planned_stop_heard_while_saving_ends_once_the_checkpoint_is_written(tmp_path):
    """The same rank hears the planned stop while it writes step 3's checkpoint: it ends when it
    is written, before another step (its peers, with step 3 saved too, end at once)."""
    (tmp_path / "stopping").write_text("planned\n")
    proc = _loop(tmp_path, 0.05, "slowsave", every=True, MSLAUNCH_STOPPING_FILE=str(tmp_path / "stopping"))
    _until(proc, "saving 3")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, err
    assert (tmp_path / "saved").read_text() == "3" and out == "", out


def test_a_stop_that_is_not_planned_does_not_wait_for_a_slow_step(tmp_path):
    """The same slow step under a preemption (no stopping file): 1.5 times the last step, then the
    signal ends it unsaved, so a stuck rank does not cost the whole grace."""
    proc = _loop(tmp_path, 0.1, "slow")
    _until(proc, "in step 3")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, err
    assert not (tmp_path / "saved").exists() and "preempted" not in out


@pytest.mark.parametrize("why", ["failed", "hung"])
def test_a_rank_stopped_after_a_fault_ends_at_once_without_saving(tmp_path, why):
    """mslaunch's stopping file says the teardown follows a fault: the rank that failed has no
    checkpoint of this step, so none is written (and the teardown is not held up by one)."""
    (tmp_path / "stopping").write_text(f"{why}\n")
    proc = _loop(tmp_path, 0.3, "steps", MSLAUNCH_STOPPING_FILE=str(tmp_path / "stopping"))
    _until(proc, "step 2")  # as in the first test, which saves: here nothing is
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGTERM, err
    assert "preempted" not in out
    assert not (tmp_path / "saved").exists()


def test_a_rank_with_nothing_new_ends_at_once(tmp_path):
    """SIGTERM during the first step (the compile): nothing trained since the start to save."""
    proc = _loop(tmp_path, 60, "steps")
    deadline = time.monotonic() + 30
    while len(psutil.Process(proc.pid).threads()) < 2:  # installed: its watching thread runs
        assert time.monotonic() < deadline and proc.poll() is None, "the handler was never installed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, err
    assert out == "" and not (tmp_path / "saved").exists()


def test_ranks_stop_at_the_same_step_when_one_heard_the_signal_between_two_steps(tmp_path):
    """A planned stop (the slow host's rank): rank 1 hears SIGTERM between steps 3 and 4, while
    rank 0 is already in step 4, waiting in its AllReduce; then rank 0 hears it.  Saving at once,
    rank 1 would leave rank 0 in step 4 for ever, with no checkpoint of step 3: agreed, both end
    step 4, both save it, and both end by the signal."""
    (tmp_path / "stopping").write_text("planned\n")
    env = dict(os.environ, PYTHONPATH=ROOT, MSLAUNCH_STOPPING_FILE=str(tmp_path / "stopping"))
    ends = socket.socketpair()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                PAIR,
                str(ends[r].fileno()),
                str(r),
                str(tmp_path / f"saved{r}"),
                str(3 + 1000 * (1 - r)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            pass_fds=(ends[r].fileno(),),
        )
        for r in (0, 1)
    ]
    for end in ends:
        end.close()
    try:
        _until(procs[1], "between steps")
        procs[1].send_signal(signal.SIGTERM)
        procs[0].send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [p.returncode for p in procs] == [-signal.SIGTERM] * 2, outs
    assert [(tmp_path / f"saved{r}").read_text() for r in (0, 1)] == ["4", "4"], outs
    assert all("preempted: checkpoint saved in " in out for out, _ in outs), outs


def test_agreed_ranks_between_steps_wait_for_the_next_steps_end():
    """Alone a rank between steps saves at once (patience 0.5 s); with the agreement it may stop
    only at the next step's end, so a stop that is not planned gives it 1.5 step times (and a
    planned one, as long as it takes, as in a step)."""
    from launcher.workloads.preempt import MIN_PATIENCE, StopOnSignal

    now = [0.0]
    for agree, expected in ((None, MIN_PATIENCE), (bool, 1.5 * 2.0)):
        stop = StopOnSignal(clock=lambda: now[0], environ={}, agree=agree)
        for _ in range(3):  # steps of 2 s (the first, which compiles, is not timed)
            stop.step_started()
            now[0] += 2.0
            stop.step_done()
        assert stop.patience() == (True, expected)


def test_a_save_that_wrote_nothing_leaves_its_steps_unsaved_and_a_planned_stop_waits_to_save_them(tmp_path):
    """A planned stop heard while a checkpoint is written ends the rank once it is written; when
    nothing could be written (a full disk), the steps are still unsaved: the rank goes on to its
    step's end, where the stop saves them (every rank alike: they agreed the write failed)."""
    from launcher.workloads.preempt import StopOnSignal

    (tmp_path / "stopping").write_text("planned\n")
    died = []
    for ok in (False, True):
        stop = StopOnSignal(environ={"MSLAUNCH_STOPPING_FILE": str(tmp_path / "stopping")}, agree=bool)
        stop.die = lambda: died.append(ok)  # type: ignore[method-assign]
        for _ in range(2):
            stop.step_started()
            stop.step_done()
        stop.saving()
        stop.requested = True  # SIGTERM while writing
        stop.saved(ok)
        assert stop.patience() == ((True, None) if not ok else (False, None))
    assert died == [True]


# ---------------------------------------------------------------------------- a real preemption


@pytest.mark.mindspore
@pytest.mark.cost(25)  # measured alone: 20 s
def test_sigterm_to_mslaunch_leaves_a_checkpoint_a_resumed_run_continues_from(tmp_path):
    from launcher.workloads.cifar10_synth import write_synthetic_cifar10

    data = tmp_path / "data"
    write_synthetic_cifar10(str(data), train=64, test=8)
    ckpt = tmp_path / "ckpt"
    common = ["--arch", "resnet8", "--data-path", str(data), "--image-size", "32", "--batch-size", "2"]
    common += ["--workers", "1", "--ckpt-dir", str(ckpt)]
    job = tmp_path / "job"
    argv = mslaunch_argv(
        "run", "--np", "1", "--master-port", "auto", "--log-dir", str(job), "--tee", "none", "--quiet",
        "-m", "launcher.workloads.resnet50_cifar10", *common, "--steps-per-epoch", "30",
    )  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT, MSLAUNCH_HOME=str(tmp_path / "home"), GLOG_v="3")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    log = job / "worker_0.log"
    try:
        deadline = time.monotonic() + 240
        while not (log.exists() and "epoch: 1 step: 2," in log.read_text(errors="replace")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # a preemption: mslaunch tears the rank down with SIGTERM
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert (job / "stopping").read_text() == "stopped\n"  # what the rank read before it saved
    text = log.read_text(errors="replace")
    saved = re.findall(r"^checkpoint: (\S+resnet8-1_(\d+)\.ckpt)$", text, re.M)
    assert saved and "preempted: checkpoint saved in" in text, text[-2000:]
    path, step = saved[-1][0], int(saved[-1][1])
    assert step >= 2 and os.path.exists(path)
    # Every process of the job is gone (the scheduler, the rank).
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    started = [e["pid"] for e in events if e["kind"] == "started"]
    assert len(started) == 2 and not [p for p in started if _alive(p)]
    assert [e["kind"] for e in events if e["kind"] in ("interrupted", "job_end")] == ["interrupted", "job_end"]
    # It loads, and a resumed run continues after it: one more step.
    resumed = subprocess.run(
        [sys.executable, "-m", "launcher.workloads.resnet50_cifar10", *common, "--resume"]
        + ["--steps-per-epoch", str(step + 1)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resume: {path} (global step {step}); continuing at epoch 1 step {step + 1}" in resumed.stdout
    assert f"epoch: 1 step: {step + 1}, loss is" in resumed.stdout
