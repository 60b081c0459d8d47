"""The reference trainer's checkpoints: a network built to be loaded from a checkpoint (its random
initial weights not drawn) trains exactly like one built as usual and loaded the same way; a
checkpoint is kept only where every rank wrote its own, and a write that fails does not end the
training (unit tests with a stand-in writer and AllGather, then one real 2-rank job)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.harness.cli import run_process

pytestmark = pytest.mark.mindspore


def _built(ckpt_dir, prefix, x, y, path, step=True):
    """(weights skipped?, parameters after the load, loss of one step, parameters after it); without
    ``step``, only whether the weights were skipped (no graph to compile)."""
    import mindspore as ms

    from launcher.workloads.checkpoints import weights_from_checkpoint
    from launcher.workloads.resnet50 import resnet
    from launcher.workloads.resnet50_cifar10 import make_train_step

    ms.set_seed(7)
    with weights_from_checkpoint(ckpt_dir, prefix):
        net = resnet("resnet8", num_classes=10)
    skipped = all(p.has_init for p in net.get_parameters())  # no data drawn yet: the initializer kept
    if not step:
        return skipped, None, None, None
    _, train_net = make_train_step(net, 0.01, 0.9)
    not_loaded, _ = ms.load_param_into_net(train_net, ms.load_checkpoint(path), strict_load=True)
    assert not_loaded == []
    loaded = {p.name: p.asnumpy().copy() for p in train_net.get_parameters()}
    loss = float(train_net(x, y).asnumpy())
    return skipped, loaded, loss, {p.name: p.asnumpy().copy() for p in train_net.get_parameters()}


@pytest.mark.cost(8)  # 3-4 s alone
def test_a_network_built_for_its_checkpoint_trains_like_one_initialised_first(tmp_path) -> None:
    import mindspore as ms
    from mindspore import Tensor

    from launcher.workloads.checkpoints import save_checkpoint
    from launcher.workloads.resnet50 import resnet
    from launcher.workloads.resnet50_cifar10 import make_train_step

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    _, saved = make_train_step(resnet("resnet8", num_classes=10), 0.01, 0.9)
    ckpt = tmp_path / "ckpt_0"
    ckpt.mkdir()
    path = save_checkpoint(saved, str(ckpt), 1, 4, 4, 1, "resnet8")
    rng = np.random.RandomState(0)
    x, y = Tensor(rng.rand(4, 3, 32, 32).astype(np.float32)), Tensor(np.array([1, 2, 3, 4], np.int32))

    usual = _built(None, "resnet8", x, y, path)  # no checkpoint to load: weights drawn
    other = _built(str(ckpt), "resnet50", x, y, path, step=False)  # no checkpoint of this prefix: drawn too
    skipped = _built(str(ckpt), "resnet8", x, y, path)  # built for its checkpoint
    assert (usual[0], other[0], skipped[0]) == (False, False, True)
    assert usual[1].keys() == skipped[1].keys() and all(np.array_equal(usual[1][k], skipped[1][k]) for k in usual[1])
    assert usual[2] == skipped[2] and np.isfinite(usual[2])
    assert all(np.array_equal(usual[3][k], skipped[3][k]) for k in usual[3])
    assert any(not np.array_equal(usual[1][k], usual[3][k]) for k in usual[1])  # the step changed the weights


class _Gathered:
    """What the AllGather gives ``save_on_every_rank``: this rank's positions in its row, the
    others' as given; records what this rank sent."""

    def __init__(self, rank, others):
        self.rank, self.others, self.sent = rank, others, []

    def __call__(self, mine, size):
        self.sent.append(list(mine))
        rows = list(self.others)
        rows.insert(self.rank, list(mine))
        assert len(rows) == size
        return rows


@pytest.fixture
def written(monkeypatch):
    """MindSpore's writer stands in (what is tested is which checkpoints stay; a real network's is
    written by the trainer's runs): a file per call, and no MindSpore runtime started in this
    process, which a trainer run in it would then refuse."""
    import mindspore as ms

    def write(cell, path, **kwargs):
        with open(path, "wb") as fh:
            fh.write(b"ckpt")

    monkeypatch.setattr(ms, "save_checkpoint", write)
    return monkeypatch


def _net():
    return object()  # the writer above never looks at it


def test_a_checkpoint_every_rank_wrote_is_kept_and_one_some_rank_could_not_write_is_removed(tmp_path, written) -> None:
    from launcher.workloads.checkpoints import list_checkpoints, save_on_every_rank

    folder, net = str(tmp_path / "ckpt_0"), _net()
    everyone = _Gathered(0, [[(1, 4)]])
    saved = save_on_every_rank(net, folder, (1, 4, 4), 1, (0, 2), gather=everyone)
    assert saved == (f"{folder}/resnet50-1_4.ckpt", None, None) and everyone.sent == [[(1, 4)]]
    # rank 1's write of step 8 failed: this rank's goes too, step 4 stays (nothing pruned)
    not_rank_1 = _Gathered(0, [[]])
    saved = save_on_every_rank(net, folder, (1, 8, 8), 1, (0, 2), gather=not_rank_1)
    assert saved == (None, "rank 1 could not write theirs", None) and not_rank_1.sent == [[(1, 8)]]
    assert [p[:2] for p in list_checkpoints(folder)] == [(1, 4)]
    # three ranks, 0 and 2 failed: named once each, this rank's own error first
    saved = save_on_every_rank(net, folder, (1, 9, 9), 1, (1, 3), gather=_Gathered(1, [[], []]))
    assert saved == (None, "ranks 0, 2 could not write theirs", None)
    assert [p[:2] for p in list_checkpoints(folder)] == [(1, 4)]


def test_a_write_that_fails_here_is_said_and_leaves_nothing_half_written(tmp_path, written) -> None:
    import mindspore as ms

    from launcher.workloads import checkpoints

    folder, net = tmp_path / "ckpt_1", _net()
    folder.mkdir()

    def full_disk(cell, path, **kwargs):  # half a file, then the error a full disk gives
        with open(path, "wb") as fh:
            fh.write(b"half")
        raise OSError(28, "No space left on device")

    written.setattr(ms, "save_checkpoint", full_disk)
    others = _Gathered(1, [[(2, 3)]])
    saved = checkpoints.save_on_every_rank(net, str(folder), (2, 3, 13), 1, (1, 2), gather=others)
    full = "[Errno 28] No space left on device"
    assert saved == (None, f"rank 1: {full}", full) and others.sent == [[]]
    assert list(folder.iterdir()) == []
    # a folder that is a file now (its disk unmounted, say): the same, alone (nothing to agree on)
    blocked = tmp_path / "ckpt_0"
    blocked.write_text("")
    written.undo()  # the stand-in writer again: the folder is refused before anything is written
    written.setattr(ms, "save_checkpoint", lambda *a, **k: pytest.fail("nothing to write"))
    path, why, mine = checkpoints.save_on_every_rank(net, str(blocked), (1, 1, 1), 1, (0, 1), gather=None)
    assert path is None and why == f"rank 0: {mine}" and mine.startswith("[Errno 17] File exists"), why
    # both: this rank's error, then the others'
    two_more = _Gathered(0, [[], []])
    path, why, mine = checkpoints.save_on_every_rank(net, str(blocked), (1, 2, 2), 1, (0, 3), gather=two_more)
    assert path is None and why == f"rank 0: {mine}; ranks 1, 2 could not write theirs", why


def test_every_gather_of_a_process_goes_through_one_cell(monkeypatch) -> None:
    """One compiled graph for the resume's positions and each save's agreement: MindSpore's compile
    cache finds graphs by the order they were compiled in (launcher.workloads.compile_cache)."""
    from launcher.workloads import checkpoints

    made = []

    class Cell:
        def __call__(self, tensor):
            return tensor

    monkeypatch.setattr(checkpoints, "_GATHER", [])
    monkeypatch.setattr(checkpoints, "all_gather", lambda: made.append(1) or Cell())
    assert checkpoints._gather_positions([(1, 4)], 1) == [[(1, 4)]]
    assert checkpoints._gather_positions([], 1) == [[]]
    assert made == [1]

    import mindspore as ms

    class Pair:  # two ranks: this one's row, then another's with other figures
        def __call__(self, tensor):
            other = np.full_like(tensor.asnumpy(), -1.0)
            other[0, 0], other[0, 1] = 0.5, 3.0
            return ms.Tensor(np.vstack([tensor.asnumpy(), other]))

    monkeypatch.setattr(checkpoints, "_GATHER", [Pair()])
    got = checkpoints.gather_figures((0.25, 2.0), 2)  # the schedule's figures: the same cell
    assert got == [(0.25, 2.0), (0.5, 3.0)]
    assert checkpoints.gather_figures((0.25, 2.0), 1) == [(0.25, 2.0)]  # one rank: nothing gathered


@pytest.mark.cost(20)  # measured alone: 12 s
def test_a_checkpoint_one_rank_cannot_write_is_kept_by_none_and_the_job_trains_on_without_a_restart(tmp_path) -> None:
    """Rank 1's step-4 checkpoint cannot take its name (a folder is in the way): both ranks say so,
    rank 0 removes its own, mslaunch records one event, and the job trains to its end and saves
    the later checkpoints on both ranks, in one attempt."""
    from launcher.workloads.cifar10_synth import write_synthetic_cifar10

    write_synthetic_cifar10(str(tmp_path / "data"), train=64, test=8)
    ckpt, job = tmp_path / "ckpt", tmp_path / "job"
    (ckpt / "ckpt_1" / "resnet8-1_4.ckpt").mkdir(parents=True)
    r = run_process(
        "run", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--tee", "none",
        "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet8", "--data-path", str(tmp_path / "data"),
        "--image-size", "16", "--batch-size", "2", "--workers", "1", "--steps-per-epoch", "12", "--epochs", "1",
        "--ckpt-dir", str(ckpt), "--ckpt-every", "4", cwd=str(tmp_path), timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    logs = [(job / f"worker_{k}.log").read_text(errors="replace") for k in (0, 1)]
    said = [
        [ln for ln in text.splitlines() if ln.startswith(("checkpoint:", 'MSLAUNCH_METRIC {"ckpt_f'))] for text in logs
    ]
    error = "[Errno 21] Is a directory"
    on = "training goes on from the one before"
    assert said[0][0] == f"checkpoint: not written at epoch 1 step 4 (rank 1 could not write theirs); {on}"
    assert said[1][0].startswith(f"checkpoint: not written at epoch 1 step 4 (rank 1: {error}: ")
    assert said[1][1].startswith('MSLAUNCH_METRIC {"ckpt_failed": "%s: ' % error), said[1]
    for k in (0, 1):  # then both write step 8 and the last step; the one before the newest stays at the end
        assert [ln for ln in said[k] if not ln.startswith(("checkpoint: not", "MSLAUNCH"))] == [
            f"checkpoint: {ckpt}/ckpt_{k}/resnet8-1_{step}.ckpt" for step in (8, 12)
        ]
    assert sorted(os.listdir(ckpt / "ckpt_0")) == ["resnet8-1_12.ckpt", "resnet8-1_8.ckpt"]
    assert sorted(os.listdir(ckpt / "ckpt_1")) == ["resnet8-1_12.ckpt", "resnet8-1_4.ckpt", "resnet8-1_8.ckpt"]
    assert (ckpt / "ckpt_1" / "resnet8-1_4.ckpt").is_dir()  # the obstacle, nothing written beside it
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    assert [(e["rank"], e["why"][: len(error)]) for e in events if e["kind"] == "ckpt_failed"] == [(1, error)]
    assert f"mslaunch: rank 1: a checkpoint was not written ({error}: " in r.stderr
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "succeeded" and len(summary["attempt_results"]) == 1
    assert not [e["pid"] for e in events if e["kind"] == "started" and _alive(e["pid"])]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.cost(20)
def test_auto_works_out_its_interval_and_every_rank_saves_at_the_same_steps(tmp_path) -> None:
    """``--ckpt-every auto`` with nothing offered: the first saves come at every step, until every
    rank has timed a step and a write; then Young/Daly on the figures the ranks agreed on through
    the save's AllGather. Two ranks with their own timings save at the same steps (a save is
    collective: a rank saving alone would wait for the other), and the job ends 0."""
    from launcher.workloads.cifar10_synth import write_synthetic_cifar10

    write_synthetic_cifar10(str(tmp_path / "data"), train=64, test=8)
    ckpt, job = tmp_path / "ckpt", tmp_path / "job"
    r = run_process(
        "run", "--np", "2", "--master-port", "auto", "--log-dir", str(job), "--tee", "none",
        "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet8", "--data-path", str(tmp_path / "data"),
        "--image-size", "16", "--batch-size", "2", "--workers", "1", "--steps-per-epoch", "16", "--epochs", "1",
        "--ckpt-dir", str(ckpt), "--ckpt-every", "auto", "--keep-checkpoints", "0", cwd=str(tmp_path), timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    steps = []
    for k in (0, 1):
        lines = (job / f"worker_{k}.log").read_text(errors="replace").splitlines()
        saved = [ln.rsplit("_", 1)[1] for ln in lines if ln.startswith(f"checkpoint: {ckpt}/ckpt_{k}/resnet8-1_")]
        steps.append([int(s[: -len(".ckpt")]) for s in saved])
        assert sorted(os.listdir(ckpt / f"ckpt_{k}")) == sorted(f"resnet8-1_{s}.ckpt" for s in steps[k])
    assert steps[0] == steps[1], steps
    assert steps[0][:2] == [1, 2] and steps[0][-1] == 16, steps  # the epoch's end saves too
