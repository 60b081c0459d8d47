"""How the slurm backend turns the shims' records into one result per rank (no cluster needed)."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

from launcher.execution.backend import StartRequest
from launcher.execution.results import earliest_failure
from launcher.execution.slurm.step import SrunStepProcess
from launcher.planning.job.spec import ProcPlan


def _proc(rank, role="worker", name=None):
    return ProcPlan(
        name=name or f"rank {rank}",
        role=role,
        host=f"node{rank + 1 if rank is not None else 1}",
        rank=rank,
        local_rank=0,
        node_rank=0,
        device_id=None,
        argv=("x",),
        env=(),
        cwd="/",
        log=f"/j/worker_{rank}.log",
    )


def _handle(tmp_path, ranks, lost=None):
    h = object.__new__(SrunStepProcess)
    asked = []
    h.backend = SimpleNamespace(
        status_dir=str(tmp_path), lost_nodes=lambda nodes: asked.append(list(nodes)) or dict(lost or {})
    )
    h.asked = asked
    h.procs = [StartRequest(_proc(r), f"/j/worker_{r}.log", "/") for r in ranks]
    h.plan = _proc(None, role="launcher", name="srun")
    h.started, h.own_log, h.pid = 1.0, "/j/srun.log", 42
    return h


def _record(tmp_path, rank, rc, ended, stopped=False, node="n"):
    (tmp_path / f"rank_{rank}.start.json").write_text(
        json.dumps({"pid": 100 + rank, "node": node, "started": 1.0, "job": "7", "step": "1"})
    )
    (tmp_path / f"rank_{rank}.exit.json").write_text(
        json.dumps({"returncode": rc, "ended": ended, "node": node, "stopped": stopped})
    )


def test_the_failing_rank_is_the_cause_and_later_sigterm_exits_are_consequences(tmp_path) -> None:
    _record(tmp_path, 0, -signal.SIGTERM, 5.2)  # killed by Slurm's SIGTERM before its shim saw the stop
    _record(tmp_path, 1, 3, 5.0, node="node2")  # the real failure
    _record(tmp_path, 2, 143, 5.3, stopped=True)  # its shim saw the stop
    (tmp_path / "rank_3.start.json").write_text(
        json.dumps({"pid": 103, "node": "node3", "started": 1.0})
    )  # SIGKILLed: no exit record
    results = _handle(tmp_path, [0, 1, 2, 3]).outcomes(143, 6.0, False)
    by_rank = {r.rank: r for r in results}
    assert [r.rank for r in results] == [0, 1, 2, 3]
    assert by_rank[1].returncode == 3 and not by_rank[1].torn_down and by_rank[1].host == "node2"
    assert by_rank[0].torn_down and by_rank[2].torn_down and by_rank[3].torn_down
    assert by_rank[3].returncode is None and by_rank[3].reason == "ended by Slurm"
    cause = earliest_failure(results)
    assert cause is not None and cause.rank == 1 and cause.exit_code == 3 and cause.pid == 101


def test_a_sigterm_death_with_no_other_cause_is_the_failure(tmp_path) -> None:
    _record(tmp_path, 0, 0, 5.0)
    _record(tmp_path, 1, -signal.SIGTERM, 5.1)
    results = _handle(tmp_path, [0, 1]).outcomes(143, 6.0, False)
    assert earliest_failure(results).rank == 1


def test_srun_itself_failed_before_any_task(tmp_path) -> None:
    results = _handle(tmp_path, [0, 1]).outcomes(1, 2.0, False)
    assert [(r.name, r.returncode, r.torn_down) for r in results] == [
        ("rank 0", None, True),
        ("rank 1", None, True),
        ("srun", 1, False),
    ]
    assert earliest_failure(results).name == "srun" and results[0].reason == "not started by srun"


def test_success_without_records_is_success(tmp_path) -> None:
    results = _handle(tmp_path, [0]).outcomes(0, 2.0, False)
    assert [(r.rank, r.returncode) for r in results] == [(0, 0)]


def test_the_ranks_on_a_node_slurm_holds_lost_end_with_their_host_lost(tmp_path) -> None:
    """node2's slurmd stopped: Slurm ended the step (SIGKILL to the other tasks); rank 1 has no
    exit record and its node is DOWN: it is the failure, typed as a lost host, and srun is not."""
    (tmp_path / "rank_0.start.json").write_text(json.dumps({"pid": 100, "node": "node1", "started": 1.0}))
    (tmp_path / "rank_1.start.json").write_text(json.dumps({"pid": 101, "node": "node2", "started": 1.0}))
    how = "Slurm node node2 is DOWN+NOT_RESPONDING"
    h = _handle(tmp_path, [0, 1], lost={"node2": how})
    results = h.outcomes(137, 6.0, False)
    assert [(r.name, r.torn_down, r.lost) for r in results] == [("rank 0", True, None), ("rank 1", False, how)]
    assert earliest_failure(results).rank == 1 and results[1].reason == how and results[1].to_json()["host_lost"] == how
    assert h.asked == [["node1", "node2"]]
    h.outcomes(137, 6.0, False)
    assert len(h.asked) == 1  # asked once


def test_a_signal_exit_on_a_surviving_node_is_a_consequence_of_the_lost_node(tmp_path) -> None:
    """Slurm ended the step because node2 was lost, and rank 0's shim on node1 lived long enough
    to record its SIGKILL (or SIGTERM) exit, earlier than srun's end: the lost node is still the
    cause, and rank 0 was ended by Slurm.  A rank that failed by itself stays a failure."""
    how = "Slurm node node2 is DOWN"
    for code in (137, -signal.SIGKILL, 143, -signal.SIGTERM):
        _record(tmp_path, 0, code, 3.0, node="node1")
        (tmp_path / "rank_1.start.json").write_text(json.dumps({"pid": 101, "node": "node2", "started": 1.0}))
        results = _handle(tmp_path, [0, 1], lost={"node2": how}).outcomes(137, 6.0, False)
        assert [(r.name, r.torn_down, r.lost) for r in results] == [("rank 0", True, None), ("rank 1", False, how)], (
            code
        )
        assert earliest_failure(results).rank == 1 and results[0].reason == "ended by Slurm: node node2 lost"
    _record(tmp_path, 0, 5, 3.0, node="node1")
    results = _handle(tmp_path, [0, 1], lost={"node2": how}).outcomes(137, 6.0, False)
    assert [(r.name, r.torn_down) for r in results] == [("rank 0", False), ("rank 1", False)]
    assert earliest_failure(results).rank == 0
    # without a lost node, a SIGKILL exit is a failure of its own
    _record(tmp_path, 0, 137, 3.0, node="node1")
    assert earliest_failure(_handle(tmp_path, [0, 1]).outcomes(137, 6.0, False)).rank == 0


def test_nodes_are_not_asked_after_a_success_or_a_teardown(tmp_path) -> None:
    h = _handle(tmp_path, [0, 1], lost={"node2": "Slurm node node2 is DOWN"})
    assert all(not r.lost for r in h.outcomes(0, 6.0, False)) and h.asked == []
    h = _handle(tmp_path, [0, 1], lost={"node2": "Slurm node node2 is DOWN"})
    assert all(r.torn_down and not r.lost for r in h.outcomes(143, 6.0, True)) and h.asked == []
    h._stopping = True
    assert all(not r.lost for r in h.outcomes(143, 6.0, False)) and h.asked == []


def test_a_rank_its_shim_ended_when_cut_off_is_lost_with_its_node(tmp_path) -> None:
    """node2 went silent (no heartbeat: launcher.execution.slurm.beat) and its shim, cut off from
    mslaunch, ended rank 1 and wrote its record (the job folder is still reachable): rank 1 is
    lost with its node, not a rank torn down, so the restart leaves node2 out.  So is a rank
    there whose record is Slurm's SIGKILL; a rank there that failed by itself stays a failure."""
    how = "no heartbeat from node node2 for 5 s (its rank_1's shim); the node or its link is down"
    for extra, code in (({"cut_off": True}, -signal.SIGKILL), ({}, 137)):
        _record(tmp_path, 0, -signal.SIGKILL, 3.0, node="node1")
        _record(tmp_path, 1, code, 3.5, node="node2")
        rec = json.loads((tmp_path / "rank_1.exit.json").read_text())
        (tmp_path / "rank_1.exit.json").write_text(json.dumps({**rec, **extra}))
        results = _handle(tmp_path, [0, 1], lost={"node2": how}).outcomes(-signal.SIGKILL, 6.0, False)
        assert [(r.name, r.torn_down, r.lost) for r in results] == [("rank 0", True, None), ("rank 1", False, how)]
        assert earliest_failure(results).rank == 1
    _record(tmp_path, 1, 1, 2.0, node="node2")
    results = _handle(tmp_path, [0, 1], lost={"node2": how}).outcomes(-signal.SIGKILL, 6.0, False)
    assert [(r.name, r.returncode, r.lost) for r in results][1] == ("rank 1", 1, None)


def test_a_graceful_stop_goes_over_the_heartbeat_links_and_through_slurm_only_when_one_is_missing(tmp_path) -> None:
    """``scancel --signal`` waits for every node of the job (6 s with one node silent): the
    teardown's SIGTERM goes to the shims over their links, and through Slurm only when a shim of
    the step has no link (not started yet, or it could not connect)."""
    for reached, scancels in (({"rank_0", "rank_1"}, []), ({"rank_0"}, ["TERM"]), (set(), ["TERM"])):
        h = _handle(tmp_path, [0, 1])
        sent, called = [], []
        h.backend.signal_shims = lambda keys, code, reached=reached: sent.append((sorted(keys), code)) or set(reached)
        h._scancel = called.append
        h.stop_gracefully()
        assert sent == [(["rank_0", "rank_1"], b"T")] and called == scancels, reached
