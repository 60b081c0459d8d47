"""The job's goodput for Prometheus: :func:`launcher.logs.goodput.account` over what the job wrote
so far, as gauges beside :mod:`launcher.logs.promexport`'s (one of its ``extra`` sources).

=========================================  ========  =========================================
``mslaunch_job_elapsed_seconds``            gauge     the job's time so far (the goodput account's elapsed)
``mslaunch_job_productive_seconds``         gauge     of it, training steps for the first time
``mslaunch_job_badput_seconds``             gauge     the rest, by ``kind`` (start-up, detect, teardown,
                                                      restart, retrain, planned, finish: docs/watching.md)
``mslaunch_job_goodput_ratio``              gauge     productive / elapsed (absent before the first step)
=========================================  ========  =========================================

Gauges, not counters: a running job's last moments are counted again when a fault is noticed
(time after the last step becomes time waiting to notice it), so a figure may go down.

The job's files are read incrementally; of the step records only what the account needs is
kept: when each attempt first logged each step, and its last record (memory grows with the
steps, not with the ranks).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Tuple

from prometheus_client.core import GaugeMetricFamily, Metric

from launcher.logs.goodput import KINDS, account
from launcher.logs.metricsfile import EVENTS_FILE, METRICS_FILE, JsonlTail
from launcher.logs.promodel import JobSample

__all__ = ["GoodputFamilies"]


class GoodputFamilies:
    """Callable ``extra`` of :class:`launcher.logs.promexport.MetricsExporter`: the goodput gauges
    of the job in ``job_dir`` at each sample's time."""

    def __init__(self, job_dir: str) -> None:
        self._events_tail = JsonlTail(os.path.join(job_dir, EVENTS_FILE))
        self._metrics_tail = JsonlTail(os.path.join(job_dir, METRICS_FILE))
        self._events: List[Mapping[str, Any]] = []
        self._first: Dict[Tuple[int, int], float] = {}  # (attempt, step) -> when first logged
        self._last: Dict[int, Tuple[float, int]] = {}  # attempt -> (time, step) of its newest record

    def _read(self) -> None:
        self._events.extend(self._events_tail.read())
        for rec in self._metrics_tail.read():
            t, step, attempt = rec.get("time"), rec.get("global_step"), rec.get("attempt", 0)
            if rec.get("kind") != "step" or not isinstance(t, (int, float)) or not isinstance(step, int):
                continue
            key = (attempt if isinstance(attempt, int) else 0, step)
            self._first[key] = min(float(t), self._first.get(key, float(t)))
            if float(t) >= self._last.get(key[0], (float("-inf"), 0))[0]:
                self._last[key[0]] = (float(t), step)

    def _records(self) -> List[Dict[str, Any]]:
        out = [{"kind": "step", "time": t, "global_step": s, "attempt": a} for (a, s), t in self._first.items()]
        out += [{"kind": "step", "time": t, "global_step": s, "attempt": a} for a, (t, s) in self._last.items()]
        return out

    def __call__(self, sample: JobSample) -> Iterator[Metric]:
        self._read()
        g = account(self._events, self._records(), now=sample.time)
        job = sample.identity.job_id
        elapsed = GaugeMetricFamily(
            "mslaunch_job_elapsed_seconds", "The job's time so far (goodput accounting).", labels=["job_id"]
        )
        elapsed.add_metric([job], g.elapsed_s)
        yield elapsed
        productive = GaugeMetricFamily(
            "mslaunch_job_productive_seconds", "Time spent training steps for the first time.", labels=["job_id"]
        )
        productive.add_metric([job], g.productive_s)
        yield productive
        bad = GaugeMetricFamily(
            "mslaunch_job_badput_seconds", "Time not training new steps, by kind.", labels=["job_id", "kind"]
        )
        for kind in KINDS:
            bad.add_metric([job, kind], float(g.badput_s.get(kind, 0.0)))
        yield bad
        ratio = GaugeMetricFamily("mslaunch_job_goodput_ratio", "Productive time over elapsed time.", labels=["job_id"])
        if g.has_steps and g.elapsed_s > 0:
            ratio.add_metric([job], g.ratio)
        yield ratio
