"""The side-by-side goodput runs' core swapping (tests/harness/corepair.py): every thread of each
group goes to its core of the round, and the next round swaps them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.harness.corepair import Alternate, tree

#: A process with a second thread (a rank has many): both must move.
TWO_THREADS = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\ntime.sleep(60)\n"


def threads_of(pid):
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def cores_of(pid):
    return {tid: os.sched_getaffinity(tid) for tid in threads_of(pid)}


@pytest.fixture
def two():
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        pytest.skip("needs 2 cores to swap between")
    procs = [subprocess.Popen([sys.executable, "-c", TWO_THREADS]) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while any(len(threads_of(p.pid)) < 2 for p in procs):
            assert time.monotonic() < deadline, "the children did not start their threads"
            time.sleep(0.01)
        yield cores, procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_each_group_on_its_core_then_swapped(two):
    cores, (a, b) = two
    swap = Alternate([lambda: [a.pid], lambda: tree(b.pid)], cores, every=3600)
    swap.place()
    assert set(map(frozenset, cores_of(a.pid).values())) == {frozenset({cores[0]})}
    assert set(map(frozenset, cores_of(b.pid).values())) == {frozenset({cores[1]})}
    swap.rounds += 1
    swap.place()
    assert set(map(frozenset, cores_of(a.pid).values())) == {frozenset({cores[1]})}
    assert set(map(frozenset, cores_of(b.pid).values())) == {frozenset({cores[0]})}


def test_the_rounds_run_until_it_is_left_and_a_gone_process_is_skipped(two):
    cores, (a, b) = two
    b.kill()
    b.wait()
    with Alternate([lambda: [a.pid], lambda: [b.pid]], cores, every=0.01) as swap:
        deadline = time.monotonic() + 30
        while swap.rounds < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert not swap._thread.is_alive()
    assert tree(b.pid) == [] and tree(a.pid) == [a.pid]
