"""Planned restarts: the pending request, and the grow watch that asks for one when a left-out
host answers while the job runs smaller than planned."""

from __future__ import annotations

import threading
from typing import List

from launcher.execution.supervision.planned import GrowWatch, PlannedRequest, PlannedRestarts
from launcher.planning.job.spec import Exclusion
from tests.execution.supervision.test_hostfaults import elastic_plan

LOST = (Exclusion("h2", "host lost (x)", "restart", 1), Exclusion("h3", "host lost (y)", "restart", 1))


def test_one_request_at_a_time_taken_once_and_dropped_when_an_attempt_begins():
    planned = PlannedRestarts()
    assert planned.request(PlannedRequest("a")) and not planned.request(PlannedRequest("b"))
    assert planned.take() == PlannedRequest("a") and planned.take() is None
    planned.request(PlannedRequest("c"))
    planned.begin(2)
    assert planned.take() is None and planned.attempt == 2


def test_the_grow_watch_asks_once_a_left_out_host_answers_and_only_while_the_job_is_smaller():
    asked: List[str] = []
    answers = {"h2": False, "h3": False}

    def reachable(host: str) -> bool:
        asked.append(host)
        return answers[host]

    planned = PlannedRestarts()
    plan = [elastic_plan("/j", LOST)]  # 2 of 6 ranks on h1
    watch = GrowWatch(lambda: plan[0], lambda ex: [e.host for e in ex], reachable, planned)
    assert watch.round() is None and asked == ["h2", "h3"] and planned.take() is None
    answers["h3"] = True
    assert watch.round() == "h3"
    assert planned.take() == PlannedRequest("h3 answers again: growing back to 6 ranks")
    plan[0] = elastic_plan("/j")  # back at the planned size: nothing to ask
    asked.clear()
    assert watch.round() is None and asked == []


def test_the_grow_watch_thread_stops_when_asked():
    planned = PlannedRestarts()
    rounds = threading.Event()

    def candidates(ex):
        rounds.set()
        return []

    watch = GrowWatch(lambda: elastic_plan("/j", LOST), candidates, lambda h: False, planned, every=0.01).start()
    assert rounds.wait(10.0)
    watch.stop()
    assert not watch._thread.is_alive()
