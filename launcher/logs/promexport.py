"""A running job's metrics for Prometheus: ``/metrics`` over HTTP and a node_exporter textfile.

The supervising mslaunch (``mslaunch run --metrics-port`` / ``--metrics-textfile``, in every
launcher and in per-node mode) keeps one :class:`MetricsExporter`.  At each scrape (and each
textfile refresh) it reads what was appended to the job dir's ``events.jsonl`` and
``metrics.jsonl`` since the last one (:class:`launcher.logs.metricsfile.JsonlTail`: the files the
supervisor and the metrics writer already write; no second parser of the ranks' logs), feeds
the pure :class:`launcher.logs.promodel.JobModel` and writes its sample as metric families with
``prometheus_client`` (the exposition formats are the library's).

Every series carries the ``job_id`` label, so the textfiles of several jobs in one node_exporter
directory never collide.  The names (``docs/watching.md`` has the table):

=========================================  ========  =========================================
``mslaunch_job_info``                       gauge     1, labels ``job_id``, ``backend``, ``script``, ``node_rank``
``mslaunch_job_state``                      gauge     1 for the job's state (``state`` label), 0 for the others
``mslaunch_job_start_time_seconds``         gauge     when the job's supervision started (Unix time)
``mslaunch_ranks_planned``                  gauge     ranks planned (per-node mode: this node's)
``mslaunch_ranks_running``                  gauge     ranks of the current attempt running
``mslaunch_attempt``                        gauge     the current attempt (0, then 1.. after restarts)
``mslaunch_restarts_total``                 counter   restarts
``mslaunch_failures_total``                 counter   failed attempts by ``cause`` (the failure classifier's kinds)
``mslaunch_checkpoint_failures_total``      counter   checkpoints a rank could not write while the job trained on
``mslaunch_hosts_excluded``                 gauge     hosts left out (``--preflight exclude``, restarts)
``mslaunch_samples_per_second``             gauge     the ranks' throughput together
``mslaunch_rank_step``                      gauge     per ``rank``: its newest step (over the run)
``mslaunch_rank_loss``                      gauge     per ``rank``: its newest loss
``mslaunch_rank_samples_per_second``        gauge     per ``rank``: its throughput
``mslaunch_rank_step_seconds``              gauge     per ``rank``: its time per step
``mslaunch_rank_last_step_timestamp_seconds`` gauge   per ``rank``: when its last step line was read
``mslaunch_rank_seconds_since_last_step``   gauge     per ``rank``: seconds since then
``mslaunch_rank_straggler``                 gauge     per ``rank``: 1 while the straggler watch names it (or slow steps)
=========================================  ========  =========================================

Other gauges (a goodput account, say) join through ``extra``: callables that take the sample
and yield more metric families.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from prometheus_client import start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from launcher.logs.metricsfile import EVENTS_FILE, METRICS_FILE, JsonlTail
from launcher.logs.promodel import STATES, JobIdentity, JobModel, JobSample
from launcher.logs.promsettings import DEFAULT_ADDR, TEXTFILE_INTERVAL, MetricsSettings, textfile_path

__all__ = ["DEFAULT_ADDR", "MetricsExporter", "MetricsSettings", "TEXTFILE_INTERVAL", "families", "textfile_path"]

Extra = Callable[[JobSample], Iterable[Metric]]


def families(sample: JobSample) -> Iterator[Metric]:
    """The metric families of one sample."""
    ident = sample.identity
    job = [ident.job_id]
    info = InfoMetricFamily("mslaunch_job", "The job's identity.", labels=["job_id"])
    info.add_metric(
        job,
        {
            "backend": ident.backend,
            "script": ident.script,
            "node_rank": "" if ident.node_rank is None else str(ident.node_rank),
        },
    )
    yield info
    state = GaugeMetricFamily(
        "mslaunch_job_state", "1 for the job's state, 0 for the others.", labels=["job_id", "state"]
    )
    states = STATES if sample.state in STATES else STATES + (sample.state,)
    for name in states:
        state.add_metric(job + [name], 1.0 if name == sample.state else 0.0)
    yield state
    if sample.started is not None:
        yield _gauge(
            "mslaunch_job_start_time_seconds", "When the job's supervision started (Unix time).", job, sample.started
        )
    yield _gauge("mslaunch_ranks_planned", "Ranks planned (per-node mode: this node's).", job, ident.ranks_planned)
    yield _gauge("mslaunch_ranks_running", "Ranks of the current attempt running.", job, sample.ranks_running)
    yield _gauge("mslaunch_attempt", "The current attempt (0, then 1.. after restarts).", job, sample.attempt)
    restarts = CounterMetricFamily("mslaunch_restarts", "Restarts of the job.", labels=["job_id"])
    restarts.add_metric(job, sample.restarts)
    yield restarts
    failures = CounterMetricFamily(
        "mslaunch_failures", "Failed attempts by the cause of their root cause.", labels=["job_id", "cause"]
    )
    for cause in sorted(sample.failures):
        failures.add_metric(job + [cause], sample.failures[cause])
    yield failures
    ckpt = CounterMetricFamily(
        "mslaunch_checkpoint_failures",
        "Checkpoints a rank reported it could not write (ckpt_failed) while the job trained on.",
        labels=["job_id"],
    )
    ckpt.add_metric(job, sample.ckpt_failures)
    yield ckpt
    yield _gauge("mslaunch_hosts_excluded", "Hosts left out (preflight or restarts).", job, sample.hosts_excluded)
    if sample.samples_per_s is not None:
        yield _gauge(
            "mslaunch_samples_per_second", "The ranks' samples per second together.", job, sample.samples_per_s
        )
    yield from _rank_families(sample)


def _gauge(name: str, doc: str, job: List[str], value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["job_id"])
    g.add_metric(job, value)
    return g


#: per-rank gauge -> (help, the sample's attribute)
_RANK_GAUGES: Tuple[Tuple[str, str, str], ...] = (
    ("mslaunch_rank_step", "The rank's newest step (counted over the run).", "step"),
    ("mslaunch_rank_loss", "The rank's newest loss (NaN once it was not finite).", "loss"),
    ("mslaunch_rank_samples_per_second", "The rank's samples per second.", "samples_per_s"),
    ("mslaunch_rank_step_seconds", "The rank's time per step.", "step_seconds"),
    (
        "mslaunch_rank_last_step_timestamp_seconds",
        "When the rank's last step line was read (Unix time).",
        "last_step_time",
    ),
    ("mslaunch_rank_seconds_since_last_step", "Seconds since the rank's last step line.", "seconds_since_step"),
)


def _rank_families(sample: JobSample) -> Iterator[Metric]:
    job = sample.identity.job_id
    for name, doc, attr in _RANK_GAUGES:
        g = GaugeMetricFamily(name, doc, labels=["job_id", "rank"])
        for r in sample.ranks:
            value = getattr(r, attr)
            if value is not None:
                g.add_metric([job, str(r.rank)], float(value))
        yield g
    straggler = GaugeMetricFamily(
        "mslaunch_rank_straggler",
        "1 while the straggler watch names the rank, or its step time is well above the median.",
        labels=["job_id", "rank"],
    )
    for r in sample.ranks:
        straggler.add_metric([job, str(r.rank)], 1.0 if r.straggler else 0.0)
    yield straggler


class JobCollector(Collector):
    """Reads the job dir's new records at each collection and yields :func:`families` of the sample."""

    def __init__(
        self, job_dir: str, model: JobModel, clock: Callable[[], float] = time.time, extra: Sequence[Extra] = ()
    ) -> None:
        self._events = JsonlTail(os.path.join(job_dir, EVENTS_FILE))
        self._metrics = JsonlTail(os.path.join(job_dir, METRICS_FILE))
        self._model = model
        self._clock = clock
        self._extra = tuple(extra)
        self._lock = threading.Lock()  # the HTTP server's threads and the textfile's

    def sample(self) -> JobSample:
        with self._lock:
            for rec in self._events.read():
                self._model.add_event(rec)
            for rec in self._metrics.read():
                self._model.add_metric(rec)
            return self._model.sample(self._clock())

    def collect(self) -> Iterator[Metric]:
        sample = self.sample()
        yield from families(sample)
        for more in self._extra:
            yield from more(sample)


class MetricsExporter:
    """The job's ``/metrics`` server and textfile.

    Args:
        job_dir: the job directory (its files may not exist yet).
        identity: the job.
        causes: the failure causes whose counters start at 0.
        extra: more metric families from each sample (see the module's docstring).
    """

    def __init__(
        self, job_dir: str, identity: JobIdentity, causes: Tuple[str, ...] = (), extra: Sequence[Extra] = ()
    ) -> None:
        self.identity = identity
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(JobCollector(job_dir, JobModel(identity, causes), extra=extra))
        self._server: Any = None
        self.textfile: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.url: Optional[str] = None

    def serve(self, addr: str, port: int) -> str:
        """Serve ``/metrics`` on ``addr:port`` (0: a free port) in daemon threads; returns its URL.

        Raises:
            OSError: the address cannot be bound (in use, not this machine's).
        """
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{server.server_port}/metrics"
        return self.url

    def start_textfile(self, folder: str, interval: float = TEXTFILE_INTERVAL) -> str:
        """Write ``folder/<job id>.prom`` now and every ``interval`` s until :meth:`close`; returns its path.

        Raises:
            OSError: the first write failed.
        """
        path = textfile_path(folder, self.identity.job_id)
        write_to_textfile(path, self.registry)
        self.textfile = path
        self._thread = threading.Thread(target=self._refresh, args=(interval,), name="metrics-textfile", daemon=True)
        self._thread.start()
        return path

    def _refresh(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._write()

    def _write(self) -> None:
        if self.textfile is None:
            return
        try:
            write_to_textfile(self.textfile, self.registry)
        except OSError:
            pass  # best effort, as metrics.jsonl: never fail the job for it

    def close(self) -> None:
        """Write the textfile a final time and stop serving (once; later calls do nothing)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._write()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
