"""Run a plan as a job: job dir, artefacts, checks before start, supervision, summary.

Order of work (nothing starts until every check passed):

1. checks: the scheduler's port is free (when the scheduler runs on this machine); the rank
   table (ranktable method) validates;
2. the job dir (created 0700, or an empty one; locked for the job's life) with ``plan.json``, the artefacts, ``job.json``; the registry entry;
3. the watchdog; per-attempt preparation (ranktable: ``device<rank>/`` dirs and env dumps);
4. the supervisor (with the metrics writer: ``metrics.jsonl``; its events go to ``events.jsonl``); then ``summary.json`` (and ``--summary-json`` / ``--junit`` copies).
"""
from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from launcher.errors import LaunchError
from launcher.execution.results import JobResult
from launcher.execution.supervisor import Launcher, SuperviseOptions, Supervisor, Watchdog
from launcher.jobs import jobdir
from launcher.jobs.files import write_atomic
from launcher.planning.inventory import is_local
from launcher.planning.kinds import EventKind
from launcher.planning.plan import Plan

if TYPE_CHECKING:
    from launcher.execution.ssh.settings import SSHSettings


def make_launcher_factory(plan: Plan, ssh: Optional["SSHSettings"] = None, watchdog: Optional[Watchdog] = None,
                          zygote: bool = False) -> Callable[[], Launcher]:
    """The launcher of ``plan``'s backend; local processes register with ``watchdog``."""
    if plan.launcher == "local" and zygote:
        from launcher.execution.zygote import ZygoteLauncher

        return lambda: ZygoteLauncher.warm(watchdog)
    if plan.launcher == "local":
        from launcher.execution.local import LocalLauncher

        return lambda: LocalLauncher(watchdog)
    if plan.launcher == "mpirun":
        from launcher.execution.mpirun import MpirunLauncher

        return lambda: MpirunLauncher(watchdog)  # type: ignore[return-value]
    if plan.launcher == "ssh":
        from launcher.execution.ssh import SSHSettings, SshLauncher

        return lambda: SshLauncher(plan, ssh or SSHSettings())
    raise LaunchError(f"unknown launcher {plan.launcher!r}")


def preflight(plan: Plan) -> None:
    """Checks that must pass before anything is written or started.

    Raises:
        LaunchError: busy scheduler port on this machine.
        RankTableError: the rank table does not validate.
    """
    if plan.scheduler is not None and plan.master_port is not None and plan.launcher in ("local", "mpirun"):
        from launcher.execution.ports import check_port_free

        check_port_free(plan.master_port)
    for art in plan.artefacts:
        if art.kind == "rank_table":
            from launcher.errors import RankTableError
            from launcher.planning.ranktable import validate_rank_table

            problems = validate_rank_table(json.loads(art.content))
            if problems:
                first = "; ".join(f"{v.json_path}: {v.message}" for v in problems[:3])
                raise RankTableError(f"the generated rank table is invalid: {first}", path=art.name)


def write_job_files(plan: Plan, argv: List[str]) -> None:
    """Claim and lock the job dir (see :func:`launcher.jobs.jobdir.claim_job_dir`), write its files, register."""
    jobdir.claim_job_dir(plan.job_dir)
    jobdir.write_json(os.path.join(plan.job_dir, jobdir.PLAN_FILE), plan.to_json())
    for art in plan.artefacts:
        write_atomic(os.path.join(plan.job_dir, art.name), art.content, mode=0o600)
    jobdir.register(plan.job_id, plan.job_dir, os.getpid(), argv)


def prepare_ranktable_dirs(plan: Plan, adir: str) -> None:
    """Seed 001's layout: ``device<rank>/`` per rank with ``env<rank>.log`` (the rank's env)."""
    for proc in plan.ranks:
        if proc.env_dump is None:
            continue
        rel = os.path.relpath(proc.cwd, plan.job_dir)
        cwd = os.path.join(adir, rel)
        os.makedirs(cwd, mode=0o700, exist_ok=True)
        if not is_local(proc.host) and plan.launcher != "local":
            continue  # remote ranks: the ssh launcher writes their dump on the host
        env = dict(os.environ)
        env.update(proc.env)
        write_atomic(os.path.join(cwd, os.path.basename(proc.env_dump)), "".join(f"{k}={v}\n" for k, v in env.items()), mode=0o600)


def run_plan(
    plan: Plan,
    options: SuperviseOptions,
    argv: List[str],
    on_event: Optional[Callable[[str, Dict[str, Any]], None]] = None,
    ssh: Optional["SSHSettings"] = None,
    on_started: Optional[Callable[[], None]] = None,
    zygote: bool = False,
) -> JobResult:
    """Run ``plan`` to the end; returns the result after writing ``summary.json``.

    ``zygote``: start local Python ranks by forking them from one process that imported
    MindSpore once (see :mod:`launcher.execution.zygote`)."""
    preflight(plan)
    write_job_files(plan, argv)
    if on_started is not None:
        on_started()
    from launcher.execution.local import become_subreaper, reap_orphans

    become_subreaper()
    from launcher.logs.metricsfile import MetricsWriter, append_event

    metrics = MetricsWriter(plan.job_dir).start()  # metrics.jsonl from every rank's log, as lines arrive
    append_event(plan.job_dir, EventKind.JOB_START, {"job_id": plan.job_id})

    def record_event(kind: str, data: Dict[str, Any]) -> None:
        """events.jsonl (the report's timeline), then the caller's callback."""
        append_event(plan.job_dir, kind, data)
        if on_event is not None:
            on_event(kind, data)

    watchdog = Watchdog()
    try:
        prepare = (lambda k, adir: prepare_ranktable_dirs(plan, adir)) if plan.method == "ranktable" and plan.launcher != "mpirun" else None
        sup = Supervisor(plan, make_launcher_factory(plan, ssh, watchdog, zygote), options, on_event=record_event, prepare_attempt=prepare,
                         watchdog=watchdog, reap_orphans=lambda keep: reap_orphans(keep | {watchdog.pid}))
        started = time.time()
        try:
            result = sup.run()
        except LaunchError as exc:  # the launcher could not be set up (e.g. a host is unreachable): nothing started
            from launcher.execution.results import FAILED

            failed = JobResult(plan.job_id, plan.job_dir, FAILED, exc.exit_code, started, time.time(), 1, (), message=str(exc))
            jobdir.write_json(os.path.join(plan.job_dir, jobdir.SUMMARY_FILE), failed.to_json())
            jobdir.release_job_dir(plan.job_dir)
            raise
    finally:
        watchdog.close()
        metrics.stop()
    jobdir.write_json(os.path.join(plan.job_dir, jobdir.SUMMARY_FILE), result.to_json())
    append_event(plan.job_dir, EventKind.JOB_END, {"status": result.status, "exit_code": result.exit_code})
    jobdir.release_job_dir(plan.job_dir)  # after summary.json: the job is never seen as "lost" in between
    return result


def junit_xml(result: JobResult) -> str:
    """JUnit XML: one testcase per process; a failure carries its reason and log tail."""
    import re
    from xml.sax.saxutils import escape, quoteattr

    from launcher.execution.results import tail_lines

    not_xml = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # e.g. ANSI colours in a log: not allowed in XML 1.0
    attr = lambda s: quoteattr(not_xml.sub("", s))  # noqa: E731

    cases = []
    failures = 0
    for p in result.processes:
        name = attr(p.name)
        secs = (p.ended or result.ended) - (p.started or result.started)
        body = ""
        if p.failed:
            failures += 1
            tail = "\n".join(tail_lines(p.log, 20))
            body = f"<failure message={attr(p.describe())}>{escape(not_xml.sub('', tail))}</failure>"
        elif p.torn_down:
            body = f"<skipped message={attr('ended by mslaunch after another process failed')}/>"
        cases.append(f'  <testcase classname={attr("mslaunch." + result.job_id)} name={name} time="{secs:.3f}">{body}</testcase>')
    head = (f'<testsuite name={attr("mslaunch " + result.job_id)} tests="{len(result.processes)}" '
            f'failures="{failures}" time="{result.ended - result.started:.3f}">')
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + head + "\n" + "\n".join(cases) + "\n</testsuite>\n"
