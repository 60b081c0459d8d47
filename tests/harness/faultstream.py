"""A stream of real faults injected from outside into a running ``mslaunch run`` job, and the
goodput accounting of what each one cost (used by ``bench/bench_goodput.py`` and by the short
stream in ``tests/integration/test_fault_stream.py``).

The job is watched through its job directory only, as an operator's tool would: ``events.jsonl``
(each attempt's ranks with their pids and hosts, failures, hangs, restarts) and ``metrics.jsonl``
(each rank's step lines with the time mslaunch read them).  Progress is the highest global step
any rank has logged ("new" steps); fault *i* is injected once the job has trained
``at_steps[i]`` new steps, so faults come at points of useful work, whatever the faults before
them cost.

Fault kinds (each on a rank drawn with the stream's seed, among the ranks of the running attempt):

* ``kill``     SIGKILL to the rank's process;
* ``stop``     SIGSTOP to it (no exit, no output: the commonest face of a real hang);
* ``cut``      the link of the rank's namespace host goes down (its processes stay alive behind
               it), restored once the job trains a new step elsewhere; never the first host (the
               dynamic cluster's scheduler runs there);
* ``restart``  SIGKILL to a rank of the *next* attempt as soon as it started (a fault while a
               restart is starting): it comes with the fault before it and is counted on its own;
* ``slow``     the rank's namespace host under a CPU quota (cgroup v1: its sshd's group, so what
               starts there later, and the rank moved in by its pid), lifted once the job trained
               a new step in a later attempt, or once the next fault is due (a job that never
               leaves the host trains at its pace until then); never the first host;
* ``ckpt``     the rank's next checkpoint write fails: its checkpoint (``ckpt_path(rank)``, a file
               or a folder) is moved aside and something of the other kind put in its place; put
               back as soon as the job noticed a fault (the rank's save failed), before a restart
               reads it.

Ranks are found by a mark in their environment (:func:`rank_pids`); every pid of a rank is a
pid of this machine (namespace hosts share the pid namespace), so ``os.kill`` reaches remote
ranks too.

For each fault, from the job's own records: when it was injected, when mslaunch noticed it (the
first ``failure``, ``hung`` or ``cluster_stop`` event after it), when the next attempt was asked
for (``restart``), when that attempt logged its first step, and when it logged its first *new*
step.  The badput of a fault is split into detect / teardown / restart / retrain along those
times.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tests.harness.steppace import median_step_ms

__all__ = ["FAULT_KINDS", "FaultStream", "Injected", "JobView", "badput_table", "inside_and_outside", "rank_pids"]

FAULT_KINDS = ("kill", "stop", "cut", "restart", "slow", "ckpt")
#: The events that say the job noticed a fault (``slow``: also its straggler event; ``ckpt``: also
#: ``ckpt_failed``, a rank's report that it trains on without that checkpoint).
NOTICED = ("failure", "hung", "cluster_stop")
CKPT_NOTICED = NOTICED + ("ckpt_failed",)


def job_mark(folder: Any) -> str:
    """A ``FAULT_STREAM_MARK`` value no other job on this machine carries: the test's folder is
    not enough (pytest names each worker's temporary folders alike: two tests whose names begin
    the same get the same ``tmp_path.name`` on two workers at once), so the worker's pid joins it."""
    return f"{os.getpid()}-{os.path.basename(str(folder))}"


def rank_pids(mark: str, job_dir: Optional[str] = None) -> Dict[Tuple[str, int], int]:
    """(MSLAUNCH_ATTEMPT, RANK_ID) -> pid of each rank's own process of the job whose ranks carry
    ``FAULT_STREAM_MARK=<mark>`` in their environment, from /proc (every namespace host shares
    this machine's pid namespace).  A rank's own process is the topmost one with its rank id (its
    children inherit the environment).  A rank forked from a zygote shows the zygote's environment
    in /proc (its own is set after the fork): with ``job_dir``, the pids the job's events name
    (``started``, and ``pid`` once a remote rank's pid is known) are taken too."""
    found: Dict[int, Tuple[Tuple[str, int], int]] = {}
    needle = f"FAULT_STREAM_MARK={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            if needle not in env:
                continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        values = dict(item.split(b"=", 1) for item in env if b"=" in item)
        if values.get(b"MS_ROLE") == b"MS_SCHED" or b"RANK_ID" not in values:
            continue
        key = (values.get(b"MSLAUNCH_ATTEMPT", b"0").decode(), int(values[b"RANK_ID"]))
        found[int(name)] = (key, ppid)
    out: Dict[Tuple[str, int], int] = {}
    for pid, (key, ppid) in found.items():
        if ppid not in found or found[ppid][0] != key:
            out[key] = pid
    if job_dir is not None:
        for e in _records(os.path.join(job_dir, "events.jsonl")):
            if e.get("kind") in ("started", "pid") and e.get("rank") is not None and isinstance(e.get("pid"), int):
                out[(str(e.get("attempt", 0)), int(e["rank"]))] = int(e["pid"])
    return out


def kinds_after(kinds: Sequence[str], i: int) -> Optional[str]:
    """The kind of the fault after fault ``i``, or None."""
    return kinds[i + 1] if i + 1 < len(kinds) else None


def _records(path: str) -> List[Dict[str, Any]]:
    try:
        with open(path, errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


class JobView:
    """What a job directory says now (re-read on each call: the files are small)."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir

    def events(self) -> List[Dict[str, Any]]:
        return _records(os.path.join(self.job_dir, "events.jsonl"))

    def steps(self) -> List[Dict[str, Any]]:
        return [r for r in _records(os.path.join(self.job_dir, "metrics.jsonl")) if r.get("kind") == "step"]

    def attempt(self) -> int:
        return max((e.get("attempt", 0) for e in self.events() if e.get("kind") == "started"), default=-1)

    def ranks(self, attempt: int) -> Dict[int, str]:
        """rank -> host of the ranks ``attempt`` started (their ``started`` events; under mpirun and
        Slurm, whose one process stands for every rank, their ``pid`` events)."""
        out = {}
        for e in self.events():
            if e.get("kind") in ("started", "pid") and e.get("attempt", 0) == attempt and e.get("rank") is not None:
                out[int(e["rank"])] = str(e["host"])
        return out

    def ended(self) -> bool:
        return any(e.get("kind") == "job_end" for e in self.events())

    def best_step(self) -> int:
        return max((int(r.get("global_step") or 0) for r in self.steps()), default=0)


@dataclass
class Injected:
    """One fault as injected, and what the job's records say it cost (epoch seconds)."""

    kind: str
    rank: int
    host: str
    attempt: int
    at: float
    best_before: int  # the highest global step trained before it
    noticed: Optional[float] = None
    restart: Optional[float] = None
    first_step: Optional[float] = None
    new_step: Optional[float] = None
    note: str = ""
    trained_on: bool = False  # the job went on without a restart (a checkpoint its ranks did not write)
    since: Optional[float] = None  # the job's last progress before it (see net())
    new_global: Optional[int] = None  # the global step of the next new step
    step_s: Optional[float] = None  # the job's median step (s)

    def phases(self) -> Dict[str, Optional[float]]:
        """Seconds of detect / teardown / restart / retrain (None where a time is missing; none
        at all for a fault the job trained on through)."""
        if self.trained_on:
            return {"detect": 0.0, "teardown": 0.0, "restart": 0.0, "retrain": 0.0}

        def gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
            return None if a is None or b is None else max(0.0, b - a)

        return {
            "detect": gap(self.at, self.noticed),
            "teardown": gap(self.noticed, self.restart),
            "restart": gap(self.restart, self.first_step),
            "retrain": gap(self.first_step, self.new_step),
        }

    def lost(self) -> Optional[float]:
        if self.trained_on:
            return 0.0
        return None if self.new_step is None else self.new_step - self.at

    def net(self) -> Optional[float]:
        """What the fault cost the job: from its last progress before the fault (the step
        ``best_before`` logged, or the end of the fault before's recovery if later) to its next
        new step, less a median step for every new step it made meanwhile (the step under way when
        the fault came, the slow steps of a slow host).  :meth:`lost`, from the injection, counts
        the rest of the step under way, which the job would have spent anyway, and not its part
        done before the fault, which is lost.  None where a time is missing."""
        if self.trained_on:
            return 0.0
        if self.new_step is None or self.since is None or self.step_s is None or self.new_global is None:
            return None
        return max(0.0, self.new_step - self.since - (self.new_global - self.best_before) * self.step_s)


@dataclass
class FaultStream:
    """Inject ``kinds[i]`` once the job trained ``at_steps[i]`` new steps (see the module doc).

    Args:
        job_dir: the job's ``--log-dir``.
        kinds: one fault kind per fault (:data:`FAULT_KINDS`).
        at_steps: the new-step count at which each fault is injected (``restart`` faults take
            none: they ride on the restart after the fault before them).
        mark: the value of ``FAULT_STREAM_MARK`` in the ranks' environment (``--env``): how their
            processes are found (:func:`rank_pids`).
        seed: draws the ranks.
        cluster: the :class:`~tests.harness.netns_cluster.NamespaceCluster` (``cut``, ``slow``).
        ckpt_path: rank -> the path of its checkpoint (``ckpt`` only).
        quota_us: the CPU quota of a ``slow`` host, in us per 100 ms.
    """

    job_dir: str
    kinds: Sequence[str]
    at_steps: Sequence[int]
    mark: str
    seed: int = 0
    cluster: Any = None
    ckpt_path: Optional[Callable[[int], str]] = None
    quota_us: int = 10000
    injected: List[Injected] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.view = JobView(self.job_dir)
        self._rng = random.Random(self.seed)
        self._cut: List[str] = []
        self._slow: List[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ driving

    def start(self) -> "FaultStream":
        self._thread = threading.Thread(target=self._run, name="fault-stream", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the stream (the job ended); restore every cut link."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for host in self._cut:
            try:
                self.cluster.restore_link(host, wait=True)  # the next user of the cluster finds it whole
            except Exception as exc:  # noqa: BLE001 - reported with the results
                self.errors.append(f"restore {host}: {exc}")
        self._cut = []
        self._unslow()

    def _wait(self, cond, poll: float = 0.05) -> Any:
        while not self._stop.is_set():
            value = cond()
            if value:
                return value
            if self.view.ended():
                return None
            time.sleep(poll)
        return None

    def _run(self) -> None:
        steps = iter(self.at_steps)
        try:
            for i, kind in enumerate(self.kinds):
                if kind == "restart":
                    self._during_restart()
                    if self._cut:
                        self._restore_when_moved()
                    continue
                target = next(steps)
                if self._wait(lambda: self.view.best_step() >= target) is None:
                    return
                self._inject(kind)
                if kind in ("kill", "stop") and self.injected and self.injected[-1].kind == kind:
                    # one fault at a time: the next one (due at a step the job may pass before it
                    # noticed this one) goes to the attempt after it, not to one being torn down
                    done = self.injected[-1].attempt
                    self._wait(lambda: self.view.attempt() > done)
                if self._cut and kinds_after(self.kinds, i) != "restart":
                    self._restore_when_moved()
                if self._slow:
                    timed = len(self.injected) - self._restarts()  # the next timed fault's index
                    self._restore_when_moved(until_step=self.at_steps[timed] if timed < len(self.at_steps) else None)
        except Exception as exc:  # noqa: BLE001 - the stream must not kill the bench; reported
            self.errors.append(f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ faults

    def _running(self) -> Optional[Tuple[int, Dict[int, Tuple[int, str]]]]:
        """(attempt, rank -> (pid, host)) once every rank of the newest attempt has its process."""
        attempt = self.view.attempt()
        hosts = self.view.ranks(attempt)
        pids = rank_pids(self.mark, self.view.job_dir)
        ranks = {r: (pids[(str(attempt), r)], h) for r, h in hosts.items() if (str(attempt), r) in pids}
        return (attempt, ranks) if hosts and len(ranks) == len(hosts) else None

    def _inject(self, kind: str) -> None:
        got = self._wait(self._running, poll=0.02)
        if got is None:
            return
        attempt, ranks = got
        first_host = ranks[min(ranks)][1]
        choices = sorted(r for r, (_, host) in ranks.items() if kind not in ("cut", "slow") or host != first_host)
        if not choices:
            self.errors.append(f"{kind}: no rank to inject into")
            return
        rank = self._rng.choice(choices)
        pid, host = ranks[rank]
        fault = Injected(kind, rank, host, attempt, time.time(), self.view.best_step())
        if kind == "kill":
            os.kill(pid, signal.SIGKILL)
        elif kind == "stop":
            os.kill(pid, signal.SIGSTOP)
        elif kind == "cut":
            self.cluster.cut_link(host)
            self._cut.append(host)
        elif kind == "slow":
            from tests.harness.hostfaults import CPU_ROOT, FAVORED_SHARES, throttle_cpu, throttle_pids

            group = throttle_cpu(self.cluster, host, quota_us=self.quota_us)
            self._slow.append(host)
            throttle_pids(os.path.relpath(group, CPU_ROOT), [pid], quota_us=self.quota_us)
            # The quota slows the host, not the machine's other work: under the suite's load the
            # host's sshd (which carries its agent's answers) got less than its quota and the host
            # was taken for lost after 5 s without an answer, not named slow.  With a weight it
            # gets its whole quota, no more.
            with open(os.path.join(group, "cpu.shares"), "w") as fh:
                fh.write(str(FAVORED_SHARES))
        elif kind == "ckpt":
            self.injected.append(fault)
            self._fail_next_save(fault)
            return
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        self.injected.append(fault)

    def _fail_next_save(self, fault: Injected) -> None:
        """``ckpt``: the rank's checkpoint aside, a blocker of the other kind in its place, until
        the job noticed a fault (or ended); then the checkpoint back."""
        assert self.ckpt_path is not None, "a ckpt fault needs ckpt_path"
        path = self.ckpt_path(fault.rank)
        aside = f"{path}.fault-aside"
        try:
            os.rename(path, aside)
        except OSError as exc:
            fault.note = f"nothing to block at {path}: {exc.strerror}"
            return
        if os.path.isdir(aside):
            with open(path, "w"):
                pass
        else:
            os.mkdir(path)
        try:
            kinds = CKPT_NOTICED
            self._wait(lambda: any(e.get("kind") in kinds for e in self.view.events() if e["time"] >= fault.at), 0.02)
        finally:
            if os.path.isdir(path):
                os.rmdir(path)
            else:
                os.unlink(path)
            os.rename(aside, path)

    def _restarts(self) -> int:
        return sum(1 for f in self.injected if f.kind == "restart")

    def _unslow(self) -> None:
        from tests.harness.hostfaults import unthrottle

        for host in self._slow:
            try:
                unthrottle(self.cluster, host)
            except Exception as exc:  # noqa: BLE001 - reported with the results
                self.errors.append(f"unthrottle {host}: {exc}")
        self._slow = []

    def _during_restart(self) -> None:
        """SIGKILL to a rank of the next attempt as soon as its process runs."""
        before = self.view.attempt()
        got = self._wait(lambda: self._running() if self.view.attempt() > before else None, poll=0.02)
        if got is None:
            return
        attempt, ranks = got
        rank = self._rng.choice(sorted(ranks))
        pid, host = ranks[rank]
        fault = Injected("restart", rank, host, attempt, time.time(), self.view.best_step())
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            fault.note = "the rank was gone already"
        self.injected.append(fault)

    def _restore_when_moved(self, until_step: Optional[int] = None) -> None:
        """Once the job trained a new step in a later attempt (or reached ``until_step``): cut
        links back, slow hosts back to full speed."""
        best = self.view.best_step()
        before = self.view.attempt()

        def moved() -> bool:
            now = self.view.best_step()
            return (self.view.attempt() > before and now > best) or (until_step is not None and now >= until_step)

        self._wait(moved)
        for host in self._cut:
            self.cluster.restore_link(host, wait=False)
        self._cut = []
        self._unslow()

    # ------------------------------------------------------------------ accounting

    def account(self) -> List[Injected]:
        """Fill in each fault's times from the job's records (call after the job ended)."""
        events = self.view.events()
        steps = sorted(self.view.steps(), key=lambda r: r.get("time", 0.0))
        step_ms = median_step_ms(self.view.job_dir)
        end: Optional[float] = None  # where the recovery of the fault before ended
        for k, f in enumerate(self.injected):
            f.step_s = step_ms / 1000.0 if step_ms else None
            logged = [
                r.get("time", 0.0)
                for r in steps
                if int(r.get("global_step") or 0) == f.best_before and r.get("time", 0.0) <= f.at
            ]
            marks = [t for t in (max(logged) if logged else None, end) if t is not None]
            f.since = max(marks) if marks else None
            later = [e for e in events if e.get("time", 0.0) >= f.at]
            kinds = CKPT_NOTICED if f.kind == "ckpt" else NOTICED
            kinds += ("straggler", "planned_restart") if f.kind == "slow" else ()
            noticed = next((e for e in later if e.get("kind") in kinds), None)
            if noticed is not None and noticed.get("kind") == "ckpt_failed":  # no restart: it trained on
                f.noticed, f.trained_on = noticed["time"], True
                f.note = (f.note + "; " if f.note else "") + "the job trained on without that checkpoint"
                continue
            restart = next((e for e in later if e.get("kind") == "restart"), None)
            f.noticed = noticed["time"] if noticed else None
            f.restart = restart["time"] if restart else None
            nxt = restart.get("attempt") if restart else None
            if nxt is None and restart is not None:
                nxt = f.attempt + 1
            if nxt is not None:
                mine = [r for r in steps if r.get("attempt") == nxt]
                f.first_step = mine[0]["time"] if mine else None
                new = [r for r in mine if int(r.get("global_step") or 0) > f.best_before]
                f.new_step = new[0]["time"] if new else None
                f.new_global = int(new[0]["global_step"]) if new else None
            if k + 1 < len(self.injected) and self.injected[k + 1].kind == "restart":
                # the restart was hit in turn: this fault's recovery ends where that one's begins
                hit = self.injected[k + 1].at
                f.first_step = f.new_step = hit  # restarting until then; no step retrained
                f.new_global = f.best_before  # and no new step made
                f.note = (f.note + "; " if f.note else "") + "its restart was hit by the next fault"
            end = f.new_step if f.new_step is not None else end
        return self.injected


def badput_table(faults: Sequence[Injected], t0: float) -> List[str]:
    """A line per fault and the sums by phase (seconds)."""
    lines = [
        f"{'fault':8} {'rank':>4} {'host':>14} {'injected':>9} {'noticed':>8} {'next new step':>14} "
        f"{'detect':>7} {'teardown':>8} {'restart':>8} {'retrain':>8} {'lost':>7} {'net':>6}"
    ]
    sums: Dict[str, float] = {"detect": 0.0, "teardown": 0.0, "restart": 0.0, "retrain": 0.0}

    def rel(t: Optional[float]) -> str:
        return "-" if t is None else f"{t - t0:.1f}"

    def sec(v: Optional[float]) -> str:
        return "-" if v is None else f"{v:.1f}"

    for f in faults:
        ph = f.phases()
        for k, v in ph.items():
            sums[k] += v or 0.0
        lines.append(
            f"{f.kind:8} {f.rank:>4} {f.host:>14} {rel(f.at):>9} {rel(f.noticed):>8} {rel(f.new_step):>14} "
            f"{sec(ph['detect']):>7} {sec(ph['teardown']):>8} {sec(ph['restart']):>8} {sec(ph['retrain']):>8} "
            f"{sec(f.lost()):>7} {sec(f.net()):>6}" + (f"  ({f.note})" if f.note else "")
        )
    total = sum(sums.values())
    net = sum(f.net() or 0.0 for f in faults)
    lines.append(
        f"{'sum':8} {'':>4} {'':>14} {'':>9} {'':>8} {'':>14} {sums['detect']:>7.1f} {sums['teardown']:>8.1f} "
        f"{sums['restart']:>8.1f} {sums['retrain']:>8.1f} {total:>7.1f} {net:>6.1f}"
    )
    lines.append(
        "(lost: from the injection to the next new step, by phase; net: from the last progress before"
        " the fault, less a median step for each new step made meanwhile, see Injected.net)"
    )
    return lines


def inside_and_outside(faults: Sequence[Injected], job_dir: str) -> List[str]:
    """The badput by phase as measured here from outside (:func:`badput_table`'s sums) beside
    mslaunch's own accounting of the same job (``summary.json``'s ``goodput``,
    :func:`launcher.logs.goodput.account`), which sees no injection: a fault starts for it at the
    failed process's exit, or a hung attempt's last step."""
    from launcher.logs.goodput import KINDS, Goodput, account, goodput_line

    view = JobView(job_dir)
    try:
        with open(os.path.join(job_dir, "summary.json")) as fh:
            inside = Goodput.from_json(json.load(fh).get("goodput"))
    except (OSError, ValueError):
        inside = None
    if inside is None:
        inside = account(view.events(), view.steps())
    outside: Dict[str, float] = {"detect": 0.0, "teardown": 0.0, "restart": 0.0, "retrain": 0.0}
    for f in faults:
        for k, v in f.phases().items():
            outside[k] += v or 0.0
    lines = [f"{'phase':10} {'outside':>8} {'mslaunch':>8}"]
    for k in KINDS:
        seen = f"{outside[k]:8.1f}" if k in outside else f"{'-':>8}"
        lines.append(f"{k:10} {seen} {inside.badput_s[k]:8.1f}")
    lines.append(f"{'productive':10} {'-':>8} {inside.productive_s:8.1f}")
    lines.append("mslaunch: " + goodput_line(inside))
    return lines
