"""Recorded and published failure logs (tests/logs/data/causes/) classified as their headers say.

Each ``*.log`` there starts with ``## key: value`` lines: ``source`` (recorded: the command that made
it; or the public page or source file it comes from; or ``composed`` and from what), ``exit`` (the
process's return code, subprocess convention or a shell's 128+N), ``kind``, any number of
``evidence`` / ``hint`` (text the cause's evidence / hint must contain), and for a host's records
``records`` (a folder beside it: ``kernel.log``, the cgroup's files, ``before/``) and ``pid``.
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

import pytest

from launcher.logs.causerules import Failure
from launcher.logs.causes import classify
from launcher.logs.hostmem import HostRecords, read_cgroup_files

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "causes")
LOGS = sorted(n for n in os.listdir(DATA) if n.endswith(".log"))


def load(name: str) -> Tuple[Dict[str, List[str]], Tuple[str, ...]]:
    """The headers and the log lines of one fixture."""
    head: Dict[str, List[str]] = {}
    lines: List[str] = []
    with open(os.path.join(DATA, name), encoding="utf-8") as fh:
        for line in fh.read().splitlines():
            if line.startswith("## ") and not lines:
                key, _, value = line[3:].partition(": ")
                head.setdefault(key, []).append(value)
            else:
                lines.append(line)
    return head, tuple(lines)


def failure(name: str) -> Tuple[Dict[str, List[str]], Failure]:
    head, lines = load(name)
    records, pids = HostRecords(), ()
    if "records" in head:
        folder = os.path.join(DATA, head["records"][0])
        with open(os.path.join(folder, "kernel.log"), encoding="utf-8") as fh:
            kernel = tuple(fh.read().splitlines())
        records = HostRecords(kernel, read_cgroup_files(folder), read_cgroup_files(os.path.join(folder, "before")))
        pids = tuple(int(p) for p in head.get("pid", []))
    rc = int(head["exit"][0].split()[0])
    return head, Failure("rank 1", "node2", rc, lines, "/job/rank_1.log", records=records, pids=pids)


def test_every_fixture_names_its_source_and_what_it_shows():
    assert len(LOGS) >= 20
    for name in LOGS:
        head, lines = load(name)
        assert head.get("source") and head.get("exit") and head.get("kind"), name
        assert lines, name


@pytest.mark.parametrize("name", LOGS)
def test_fixture_is_classified_as_its_header_says(name):
    head, fail = failure(name)
    cause = classify(fail)
    assert cause.kind == head["kind"][0], (cause, name)
    for text in head.get("evidence", []):
        assert text in cause.evidence, (text, cause.evidence)
    for text in head.get("hint", []):
        assert text in cause.hint, (text, cause.hint)


def test_the_recorded_oom_is_not_oom_without_its_host_records():
    _, fail = failure("oom_rank.log")
    bare = Failure(fail.name, fail.host, fail.returncode, fail.tail, fail.log)
    assert classify(bare).kind == "unknown"


DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "failures.md")
_JUDGED = {  # the docs' samples that no log file stands for: the failure each shows
    "missing_module": Failure(
        "rank 2",
        "node2",
        1,
        (
            "Traceback (most recent call last):",
            '  File "/job/train.py", line 3, in <module>',
            "    import mindformers",
            "ModuleNotFoundError: No module named 'mindformers'",
        ),
    ),
    "hang": Failure(
        "rank 1",
        "node2",
        -15,
        hang={
            "kind": "no_progress",
            "limit_s": 60.0,
            "derived": "auto: the 60 s floor",
            "idle_s": 61.2,
            "stacks_dir": "/job/attempt_1/stacks",
            "culprit": {"rank": 1, "evidence": "its last step is behind the others' (step 3 < step 4)"},
            "ranks": [{"rank": 1, "host": "node2"}],
        },
    ),
    "lost_host": Failure("rank 2", "node2", 255, lost="connection to node2 lost (no answer for 30 s)"),
    "native_crash": Failure(  # after the rank left the cluster (a CI run's logs, the test suite's load)
        "rank 1",
        "localhost",
        -11,
        (
            "main code done",
            "[INFO] DISTRIBUTED(26179,7fde7bfff6c0,python):2026-11-29-22:35:42.327.505 [mindspore/ccsrc/cluster/rpc/"
            "core/communicator/tcp_server.cc:314] Start] Event base dispatch success!",
        ),
        scheduler_tail=(
            "[WARNING] DISTRIBUTED(26170,7fde92ba06c0,python):2026-11-29-22:35:42.427.931 [mindspore/ccsrc/cluster/"
            "topology/meta_server_node.cc:323] ProcessUnregister] Node 0 has unregistered.",
            "[WARNING] DISTRIBUTED(26170,7fde92ba06c0,python):2026-11-29-22:35:42.447.807 [mindspore/ccsrc/cluster/"
            "topology/meta_server_node.cc:323] ProcessUnregister] Node 1 has unregistered.",
        ),
    ),
}


def doc_samples() -> List[Tuple[str, List[str]]]:
    """The docs' sample blocks (``cause:`` / ``hint:`` lines) with the log file the paragraph before names, or ''."""
    import re

    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    out = []
    for m in re.finditer(r"((?:[^\n]+\n)*)\n```text\n(cause: .+\nhint: .+)\n```", text):
        named = re.findall(r"`(\w+\.log)`", m.group(1))
        out.append((named[-1] if named else "", m.group(2).splitlines()))
    return out


def test_the_docs_samples_are_what_the_classifier_says():
    from launcher.logs.causes import console_lines

    samples = doc_samples()
    assert len(samples) >= 12
    kinds = set()
    for name, lines in samples:
        kind = lines[0].split(":")[1].strip()
        kinds.add(kind)
        fail = failure(name)[1] if name else _JUDGED[kind]
        assert console_lines(classify(fail)) == lines, name or kind
    assert kinds >= {
        "oom",
        "python_exception",
        "missing_module",
        "missing_file",
        "address_in_use",
        "native_crash",
        "disk_full",
        "device_error",
        "hang",
        "lost_host",
    }
