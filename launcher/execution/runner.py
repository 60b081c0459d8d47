"""Run a plan as a job: job dir, artefacts, checks before start, supervision, summary.

Order of work (nothing starts until every check passed):

1. checks: the scheduler's port is free (when the scheduler runs on this machine); the rank
   table (ranktable method) validates;
2. the job dir (created 0700, or an empty one; locked for the job's life) with ``plan.json``, the artefacts,
``job.json``; the registry entry;
3. the watchdog; per-attempt preparation (ranktable: ``device<rank>/`` dirs and env dumps);
4. the supervisor (with the metrics writer: ``metrics.jsonl``, whose lines also feed the hang watch; its
   events go to ``events.jsonl``); then ``summary.json`` (and ``--summary-json`` / ``--junit`` copies).

A restart re-planned without bad hosts (``--host-failures``, docs/spare-hosts.md) rewrites the job
dir's ``plan.json`` (with ``excluded_hosts``) and artefacts (rank table, hostfile) before its
backend is made: the job dir always describes the attempt running or last run; each attempt's
hosts stay in ``summary.json``'s ``attempt_results``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, get_backend, plan_json
from launcher.execution.process.watchdog import Watchdog
from launcher.execution.results import JobResult
from launcher.execution.settings import SuperviseOptions
from launcher.execution.supervision.attempt import BackendFactory
from launcher.execution.supervision.supervisor import Supervisor
from launcher.jobs import jobdir, joblock
from launcher.jobs.files import write_atomic
from launcher.planning.inventory.model import is_local
from launcher.planning.job.events import Event, JobEnd, JobStart, OnEvent
from launcher.planning.job.kinds import ArtefactKind, JobStatus, Method
from launcher.planning.job.secrets import SHOWN
from launcher.planning.job.spec import Exclusion, Plan

if TYPE_CHECKING:
    from launcher.execution.supervision.hangwatch import HangWatch
    from launcher.execution.supervision.hostfaults import Spares
    from launcher.execution.supervision.restarts import AttemptProgress


def backend_factory(
    plan: Plan,
    settings: Optional[Mapping[str, Any]] = None,
    watchdog: Optional[Watchdog] = None,
    options: Optional[SuperviseOptions] = None,
    attempt_base: int = 0,
) -> BackendFactory:
    """Makes the backend of ``plan.launcher`` for each attempt (see :mod:`launcher.execution.backend`),
    from the attempt's plan (``plan`` unless a restart was re-planned).

    Args:
        plan: the job's first plan.
        settings: backend name -> its settings object, from the CLI.
        watchdog: the job's watchdog (local processes register with it).
        options, attempt_base: each attempt's plan carries ``MSLAUNCH_ATTEMPT`` / ``MSLAUNCH_MAX_RESTARTS``
            (:func:`launcher.execution.supervision.restarts.attempt_plan`).

    Raises:
        LaunchError: no backend has the plan's name.
    """
    entry = get_backend(plan.launcher)

    def make(attempt: int, attempt_dir: str, current: Optional[Plan] = None) -> Backend:
        from launcher.execution.supervision.restarts import attempt_plan

        now = current if current is not None else plan
        mine = (
            attempt_plan(now, attempt, options.max_restarts, attempt_base, attempt_dir) if options is not None else now
        )
        return entry.create(BackendContext(mine, attempt, attempt_dir, watchdog, dict(settings or {})))

    return make


def preflight(plan: Plan) -> None:
    """Checks that must pass before anything is written or started.

    Raises:
        LaunchError: busy scheduler port on this machine (backends that run it here), remote
            hosts for a backend that runs processes here only, or an unknown backend.
        RankTableError: the rank table does not validate.
    """
    backend = get_backend(plan.launcher).factory
    remote = [h.name for h in plan.hosts if not h.is_local]
    if backend.local_only and remote:
        raise LaunchError(
            f"--launcher {plan.launcher} runs on this machine only, but the inventory has {', '.join(remote)}"
        )
    backend.preflight(plan)
    check_artefacts(plan)


def check_artefacts(plan: Plan) -> None:
    """The generated rank table validates (also that of a re-planned restart).

    Raises:
        RankTableError: it does not.
    """
    for art in plan.artefacts:
        if art.kind == ArtefactKind.RANK_TABLE:
            from launcher.errors import RankTableError
            from launcher.planning.ranktable import validate_rank_table

            problems = validate_rank_table(json.loads(art.content))
            if problems:
                first = "; ".join(f"{v.json_path}: {v.message}" for v in problems[:3])
                raise RankTableError(f"the generated rank table is invalid: {first}", path=art.name)


def write_job_files(plan: Plan, argv: List[str], job_extra: Optional[Mapping[str, Any]] = None) -> None:
    """Claim and lock the job dir (see :func:`launcher.jobs.jobdir.claim_job_dir`), write its files, register
    (``job_extra``: more fields of ``job.json`` and the registry entry)."""
    joblock.claim_job_dir(plan.job_dir)
    write_plan_files(plan)
    extra = dict(job_extra or {})
    if plan.launcher == "slurm" and os.environ.get("SLURM_JOB_ID"):
        extra["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    jobdir.register(plan.job_id, plan.job_dir, os.getpid(), argv, extra=extra or None)


def write_plan_files(plan: Plan) -> None:
    """``plan.json`` and the artefacts (rank table, hostfile) in the job dir (again after a re-plan)."""
    jobdir.write_json(os.path.join(plan.job_dir, jobdir.PLAN_FILE), plan_json(plan))
    for art in plan.artefacts:
        write_atomic(os.path.join(plan.job_dir, art.name), art.content, mode=0o600)


def replan_writing(replan: Callable[[Sequence[Exclusion]], Plan]) -> Callable[[Sequence[Exclusion]], Plan]:
    """``replan`` that checks the new plan (:func:`check_artefacts`) and writes its files (:func:`write_plan_files`)."""

    def run(exclusions: Sequence[Exclusion]) -> Plan:
        plan = replan(exclusions)
        check_artefacts(plan)
        write_plan_files(plan)
        return plan

    return run


def prepare_ranktable_dirs(plan: Plan, adir: str, local_only: bool = False) -> None:
    """Seed 001's layout: ``device<rank>/`` per rank with ``env<rank>.log`` (the rank's env).

    ``local_only``: the backend runs every process here (else remote ranks' dumps are written
    on their host by the backend)."""
    for proc in plan.ranks:
        if proc.env_dump is None:
            continue
        rel = os.path.relpath(proc.cwd, plan.job_dir)
        cwd = os.path.join(adir, rel)
        os.makedirs(cwd, mode=0o700, exist_ok=True)
        if not is_local(proc.host) and not local_only:
            continue  # remote ranks: the ssh launcher writes their dump on the host
        env = dict(os.environ)
        env.update(proc.env)
        env.update((k, SHOWN) for k in plan.secrets if k in env)  # a secret's value is never written
        write_atomic(
            os.path.join(cwd, os.path.basename(proc.env_dump)),
            "".join(f"{k}={v}\n" for k, v in env.items()),
            mode=0o600,
        )


def run_plan(
    plan: Plan,
    options: SuperviseOptions,
    argv: List[str],
    on_event: Optional[OnEvent] = None,
    backend_settings: Optional[Mapping[str, Any]] = None,
    on_started: Optional[Callable[[], None]] = None,
    replan: Optional[Callable[[Sequence[Exclusion]], Plan]] = None,
    job_extra: Optional[Mapping[str, Any]] = None,
    on_ended: Optional[Callable[[], None]] = None,
    reachable: Optional[Callable[[str], bool]] = None,
) -> JobResult:
    """Run ``plan`` to the end; returns the result after writing ``summary.json``.

    Args:
        plan: the plan.
        options: supervision settings.
        argv: mslaunch's command line (for the job registry).
        on_event: console callback (see :class:`Supervisor`).
        backend_settings: backend name -> its settings (e.g. ``{"local": LocalSettings(zygote=True)}``).
        on_started: called once the job dir is written, before anything starts.
        replan: the plan without the given hosts, same world size (:func:`launcher.planning.spares.replan`
            of the job's spec): restarts leave out hosts that failed ``options.host_failures`` times.
        reachable: whether a host left out answers again (``--rejoin-after``); None: asks nothing
            (a host is tried again once its cooldown is over).
        job_extra: more fields of ``job.json`` (e.g. ``metrics_url``).
        on_ended: called after the ``job_end`` event, while the job dir is still locked (the metrics
            textfile's last write: whoever waits for the job's end finds it).

    Raises:
        LaunchError: the first attempt's backend could not be set up (summary.json says so too).
    """
    preflight(plan)
    write_job_files(plan, argv, job_extra)
    if on_started is not None:
        on_started()
    from launcher.execution.process.spawn import become_subreaper
    from launcher.execution.supervision.hangwatch import HangWatch
    from launcher.logs.metricsfile import MetricsWriter, append_event

    become_subreaper()
    from launcher.execution.supervision.restarts import AttemptProgress

    hang = HangWatch(options.hang)
    progress = AttemptProgress()
    metrics = MetricsWriter(plan.job_dir, on_line=hang.on_line, on_records=progress.on_records)
    progress.flush = lambda: metrics.poll(final=True)  # every file listed again, partial last lines too
    metrics.start()  # metrics.jsonl from every rank's log, as lines arrive
    append_event(plan.job_dir, JobStart(plan.job_id))
    watchdog = Watchdog()
    try:
        result = _supervise(
            make_supervisor(
                plan,
                options,
                watchdog,
                on_event,
                backend_settings,
                hang=hang,
                progress=progress,
                replan=replan,
                reachable=reachable,
            )
        )
    finally:
        try:
            get_backend(plan.launcher).factory.end_job(dict(backend_settings or {}))  # what attempts kept for a restart
        finally:
            watchdog.close()
        metrics.stop()
    if hang.stragglers is not None:  # every rank named while the job ran; what watching cost
        result = replace(result, extra={**result.extra, **hang.stragglers.summary()})
    end = JobEnd(result.status, result.exit_code, _cause_kind(result))
    result = replace(result, extra={**result.extra, "goodput": _goodput(plan.job_dir, end, result.ended)})
    jobdir.write_json(os.path.join(plan.job_dir, jobdir.SUMMARY_FILE), result.to_json())
    append_event(plan.job_dir, end, when=result.ended)  # the end the goodput counted to
    if on_ended is not None:
        on_ended()
    joblock.release_job_dir(plan.job_dir)  # after summary.json: the job is never seen as "lost" in between
    return result


def _cause_kind(result: JobResult) -> Optional[str]:
    """The kind of a failed or hung job's root cause (``job_end``'s ``cause``), else None."""
    if result.status not in (JobStatus.FAILED, JobStatus.HUNG) or result.root_cause is None:
        return None
    cause = result.root_cause.cause
    return cause.kind if cause is not None else None


def _goodput(job_dir: str, end: JobEnd, ended: float) -> Any:
    """``summary.json``'s ``goodput`` (:func:`launcher.logs.goodput.account`): the job's events with
    its ``job_end`` at ``ended`` (written right after, with that time), and its metric records;
    None if it could not be counted."""
    from launcher.logs.goodput import account
    from launcher.logs.metricsfile import METRICS_FILE, read_events, read_records

    try:
        events = read_events(job_dir) + [dict(end.to_json(), time=round(ended, 3), kind=end.kind)]
        return account(events, read_records(os.path.join(job_dir, METRICS_FILE))).to_json()
    except Exception:  # an accounting bug must not cost the job its summary (status counts it again)
        return None


def make_supervisor(
    plan: Plan,
    options: SuperviseOptions,
    watchdog: Watchdog,
    on_event: Optional[OnEvent] = None,
    backend_settings: Optional[Mapping[str, Any]] = None,
    hang: Optional["HangWatch"] = None,
    progress: Optional["AttemptProgress"] = None,
    replan: Optional[Callable[[Sequence[Exclusion]], Plan]] = None,
    reachable: Optional[Callable[[str], bool]] = None,
) -> Supervisor:
    """The job's supervisor: its backend, events to ``events.jsonl`` then ``on_event``, the
    ranktable dirs prepared per attempt (unless the backend does it), orphans reaped, the hang watch,
    restarts re-planned on spare hosts (``replan``, ``reachable``: see :func:`run_plan`)."""
    from launcher.execution.process.spawn import reap_orphans
    from launcher.logs.metricsfile import append_event

    def record_event(event: Event) -> None:
        """events.jsonl (the report's timeline), then the caller's callback."""
        append_event(plan.job_dir, event)
        if on_event is not None:
            on_event(event)

    backend = get_backend(plan.launcher).factory

    def prepare_dirs(attempt: int, adir: str) -> None:
        prepare_ranktable_dirs(sup.plan, adir, backend.local_only)  # the attempt's plan

    prepare = prepare_dirs if plan.method == Method.RANKTABLE and backend.prepares_rank_dirs else None
    from launcher.execution.supervision.hostfaults import Spares
    from launcher.execution.supervision.restarts import attempt_base

    base = attempt_base(plan.launcher, os.environ)
    spares = (
        Spares(replan_writing(replan), options.host_failures, options.elastic.rejoin_after, reachable)
        if replan is not None
        else None
    )
    sup = Supervisor(
        plan,
        backend_factory(plan, backend_settings, watchdog, options, base),
        options,
        on_event=record_event,
        prepare_attempt=prepare,
        watchdog=watchdog,
        reap_orphans=lambda keep: reap_orphans(keep | {watchdog.pid}),
        hang=hang,
        progress=progress,
        attempt_base=base,
        spares=spares,
    )
    if progress is not None:  # a rank's checkpoint not written: an event, and the job trains on
        progress.on_event = sup.emit
    if hang is not None:
        _planned_restarts(sup, hang, options, spares, replan, reachable, progress)
    return sup


def _planned_restarts(
    sup: Supervisor,
    hang: "HangWatch",
    options: SuperviseOptions,
    spares: Optional["Spares"],
    replan: Optional[Callable[[Sequence[Exclusion]], Plan]],
    reachable: Optional[Callable[[str], bool]],
    progress: Optional["AttemptProgress"],
) -> None:
    """The straggler watch, and what asks for planned restarts (:mod:`launcher.execution.supervision.planned`):
    ``--straggler replace`` (a straggler's host left out when the job can go on without it) and
    ``--grow-at-checkpoint`` (a smaller job grows back once a left-out host answers)."""
    from launcher.execution.supervision.planned import GrowWatch, PlannedRequest, PlannedRestarts
    from launcher.execution.supervision.stragglerwatch import StragglerWatch

    planned = hang.planned = PlannedRestarts()
    if spares is not None:
        spares.check = replan  # the same re-plan, nothing written: can the job go on without a host?
    on_named = None
    if options.straggler.mode == "replace" and spares is not None:

        def on_named(host: str, evidence: str) -> bool:
            if not spares.can_leave_out(sup.plan, host):
                return False  # no spare, no --min-hosts: named only
            why = f"straggler: {evidence}"
            return planned.request(PlannedRequest(f"leaving out {host}: {evidence}", ((host, why),)))

    if options.straggler.watching:
        hang.stragglers = StragglerWatch(options.straggler, sup.emit, on_named=on_named)
    if options.elastic.grow and spares is not None and reachable is not None:
        trained = (lambda: progress.steps(sup.current_attempt) >= 2) if progress is not None else (lambda: True)
        sup.watchers.append(GrowWatch(lambda: sup.plan, spares.cooldown_over, reachable, planned, ready=trained))


def _supervise(sup: Supervisor) -> JobResult:
    """``sup.run()``; when the first attempt could not be set up (e.g. a host is unreachable:
    nothing started), ``summary.json`` says so before the error goes on."""
    plan = sup.plan
    started = time.time()
    try:
        return sup.run()
    except LaunchError as exc:
        from launcher.execution.results import FAILED

        failed = JobResult(
            plan.job_id, plan.job_dir, FAILED, exc.exit_code, started, time.time(), 1, (), message=str(exc)
        )
        jobdir.write_json(os.path.join(plan.job_dir, jobdir.SUMMARY_FILE), failed.to_json())
        joblock.release_job_dir(plan.job_dir)
        raise


def junit_xml(result: JobResult) -> str:
    """JUnit XML: one testcase per process; a failure carries its reason and log tail (the root
    cause's process: its cause too, :func:`launcher.logs.causes.junit_message`)."""
    import re
    from xml.sax.saxutils import escape, quoteattr

    from launcher.execution.results import tail_lines
    from launcher.logs.causes import junit_message

    not_xml = re.compile(
        "[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]"
    )  # e.g. ANSI colours in a log: not allowed in XML 1.0
    attr = lambda s: quoteattr(not_xml.sub("", s))  # noqa: E731  (a one-line local helper)

    cases = []
    failures = 0
    for p in result.processes:
        name = attr(p.name)
        secs = (p.ended or result.ended) - (p.started or result.started)
        body = ""
        culprit = result.status == JobStatus.HUNG and result.root_cause is not None and p.name == result.root_cause.name
        if p.failed or culprit:  # a hung job's likely culprit was torn down, but it is the failure
            failures += 1
            tail = "\n".join(tail_lines(p.log, 20))
            reason = result.message or p.describe() if culprit else p.describe()
            if (
                result.root_cause is not None
                and result.root_cause.cause is not None
                and p.name == result.root_cause.name
            ):
                reason = junit_message(result.root_cause.cause, reason)
            body = f"<failure message={attr(reason)}>{escape(not_xml.sub('', tail))}</failure>"
        elif p.torn_down:
            body = f"<skipped message={attr('ended by mslaunch after another process failed')}/>"
        cases.append(
            f'  <testcase classname={attr("mslaunch." + result.job_id)} name={name} time="{secs:.3f}">{body}</testcase>'
        )
    head = (
        f'<testsuite name={attr("mslaunch " + result.job_id)} tests="{len(result.processes)}" '
        f'failures="{failures}" time="{result.ended - result.started:.3f}">'
    )
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + head + "\n" + "\n".join(cases) + "\n</testsuite>\n"
