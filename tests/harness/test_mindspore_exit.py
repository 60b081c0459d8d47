"""``crashed_after_leaving``: the one failure an end-to-end test of MindSpore's full exit runs its
job again for (tests/harness/mindspore.py): a rank killed by a native fault after the scheduler
logged its unregistration. Job folders shaped as mslaunch and MindSpore 2.10 write them."""

from __future__ import annotations

import json

import pytest

from tests.harness.mindspore import crashed_after_leaving

SCHED = (
    "[WARNING] DISTRIBUTED(1,7f,python):... ProcessRegister] The new node: {n0}(role: MS_WORKER), rank id: 0, "
    "device id: 0, hostname: vm, ip: 127.0.0.1 is registered successfully.\n"
    "[WARNING] DISTRIBUTED(1,7f,python):... ProcessRegister] The new node: {n1}(role: MS_WORKER), rank id: 1, "
    "device id: 1, hostname: vm, ip: 127.0.0.1 is registered successfully.\n"
)


def _job(tmp_path, code, unregistered, crashed_rank=1, nodes=("0", "1")):
    sched = SCHED.format(n0=nodes[0], n1=nodes[1])
    sched += "".join(f"[WARNING] ... ProcessUnregister] Node {n} has unregistered.\n" for n in unregistered)
    (tmp_path / "scheduler.log").write_text(sched)
    name = f"rank {crashed_rank}"
    events = [
        {"kind": "job_start"},
        {"kind": "exited", "name": name, "rank": crashed_rank, "returncode": code},
        {"kind": "failure", "name": name, "returncode": code},
        {"kind": "exited", "name": f"rank {1 - crashed_rank}", "rank": 1 - crashed_rank, "returncode": -15},
    ]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(tmp_path)


def test_a_segfault_after_the_rank_left_the_cluster_is_the_cleanups(tmp_path) -> None:
    why = crashed_after_leaving(_job(tmp_path, -11, ["0", "1"]))
    assert why == "rank 1 was killed by SIGSEGV after it left the cluster (MindSpore's exit cleanup)"


def test_the_rank_is_matched_to_its_node_by_the_registration_line(tmp_path) -> None:
    folder = _job(tmp_path, -6, ["w1"], nodes=("w0", "w1"))
    assert crashed_after_leaving(folder) == (
        "rank 1 was killed by SIGABRT after it left the cluster (MindSpore's exit cleanup)"
    )


@pytest.mark.parametrize(
    "code, unregistered, crashed_rank",
    [
        (-11, ["0"], 1),  # its own node had not unregistered: a crash while it still ran
        (-11, [], 1),
        (1, ["0", "1"], 1),  # an exit code: the program's
        (-15, ["0", "1"], 1),  # a signal from outside
        (-9, ["0", "1"], 0),
    ],
)
def test_any_other_failure_is_not(tmp_path, code, unregistered, crashed_rank) -> None:
    assert crashed_after_leaving(_job(tmp_path, code, unregistered, crashed_rank)) is None


def test_a_job_folder_without_its_files_is_not(tmp_path) -> None:
    assert crashed_after_leaving(str(tmp_path)) is None
    _job(tmp_path, -11, ["0", "1"])
    (tmp_path / "scheduler.log").unlink()
    assert crashed_after_leaving(str(tmp_path)) is None
