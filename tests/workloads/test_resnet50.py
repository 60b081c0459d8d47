"""The ResNet-50 CIFAR-10 trainer, end to end on a small synthetic set (real MindSpore, CPU).

Every MindSpore process costs seconds here, so the file runs the trainer three times in all:
one 12-step run (losses, throughput, checkpoint), one resumed run of 6 more steps with --eval
(step count, optimizer state, accuracy), both with ``--arch resnet8`` on 16x16 images (the
training loop, its lines and checkpoints depend on neither the depth nor the image size, and
ResNet-8 on 16x16 costs a fraction of ResNet-50 on 32x32: 15 s for both runs against 25 s), with
oneDNN's ISA capped as mslaunch caps it for its ranks on a host whose default is its reference
kernel (there the cap halves the runs' CPU); and two steps of the default network, ResNet-50 (it
builds and trains in the trainer), with the trainer's ``main`` in this process, as in the
bad-flag case (which refuses before MindSpore does anything). One more process imports MindSpore
and is refused at its flags: how the trainer run as a program ends (a crash at its exit).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

from launcher.workloads.allgather_check import diagnose
from launcher.workloads.cifar10_synth import write_synthetic_cifar10
from tests.harness.mindspore import LAUNCHER_VARS, trainer_env

RESNET50_PARAMS_10 = 23_528_522  # trainable parameters of ResNet-50 with a 10-class head
RESNET8_PARAMS_10 = 469_066  # and of ResNet-8 (2 stages of 1 block), the network of the runs below
MODULE = "launcher.workloads.resnet50_cifar10"
LOSS_RE = re.compile(r"^epoch: (\d+) step: (\d+), loss is ([0-9.eE+-]+)$")
STEPS_A, STEPS_B = 12, 6


def _run(args: List[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=timeout, env=trainer_env()
    )


def _losses(stdout: str) -> List[Tuple[int, int, float]]:
    out = []
    for line in stdout.splitlines():
        m = LOSS_RE.match(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    """ResNet-8 on 16x16 images. Run A: 12 steps with checkpoints; run B: --resume to epoch 2 (6 steps) with --eval."""
    root = tmp_path_factory.mktemp("resnet50")
    write_synthetic_cifar10(str(root / "data"), train=1000, test=200, seed=0)
    common = [
        "--data-path",
        str(root / "data"),
        "--image-size",
        "16",
        "--arch",
        "resnet8",
        "--batch-size",
        "16",
        "--ckpt-dir",
        str(root / "ckpt"),
        "--seed",
        "1",
        "--log-every",
        "1",
    ]
    a = _run(common + ["--epochs", "1", "--steps-per-epoch", str(STEPS_A)])
    ckpts_after_a = sorted(os.listdir(root / "ckpt" / "ckpt_0")) if (root / "ckpt" / "ckpt_0").is_dir() else []
    b = _run(common + ["--epochs", "2", "--steps-per-epoch", str(STEPS_B), "--resume", "--eval"])
    return {"root": root, "a": a, "b": b, "ckpts_after_a": ckpts_after_a}


@pytest.mark.mindspore
def test_parameter_count_of_resnet50_with_10_classes() -> None:
    from launcher.workloads.resnet50 import count_parameters, resnet50

    net = resnet50(num_classes=10)
    n = count_parameters(net)
    assert n == RESNET50_PARAMS_10
    assert 23_400_000 <= n <= 23_600_000
    # 53 convolutions + 53 BatchNorms (gamma, beta) + dense weight and bias; BN moving statistics
    # are parameters too, but not trainable ones.
    assert len(net.trainable_params()) == 53 + 2 * 53 + 2
    assert count_parameters(net, trainable_only=False) == n + 2 * 26560


@pytest.mark.mindspore
@pytest.mark.cost(10, group="runs")
def test_training_run_logs_falling_losses_throughput_and_a_checkpoint(runs: Dict[str, object]) -> None:
    a = runs["a"]
    assert a.returncode == 0, a.stdout + a.stderr
    lines = a.stdout.splitlines()
    assert lines[0] == f"params: {RESNET8_PARAMS_10}"
    assert lines[1].startswith("data: ") and "1000 records" in lines[1] and "rank 0 of 1: 62 batches of 16" in lines[1]
    losses = _losses(a.stdout)
    assert [(e, s) for e, s, _ in losses] == [(1, s) for s in range(1, STEPS_A + 1)]
    values = [v for _, _, v in losses]
    assert 1.8 < values[0] < 3.2  # about ln(10) = 2.30 at the start
    assert sum(values[-3:]) / 3 < sum(values[:3]) / 3 - 0.3, values
    assert re.search(r"^epoch 1 throughput: [\d.]+ img/s per rank, [\d.]+ img/s total \(1 ranks\)$", a.stdout, re.M)
    ckpt = runs["root"] / "ckpt" / "ckpt_0" / f"resnet8-1_{STEPS_A}.ckpt"
    assert f"checkpoint: {ckpt}" in lines
    assert runs["ckpts_after_a"] == [ckpt.name]  # no temp files left behind


@pytest.mark.mindspore
@pytest.mark.cost(10, group="runs")
def test_resume_continues_the_step_count_and_eval_reports_accuracy(runs: Dict[str, object]) -> None:
    a, b = runs["a"], runs["b"]
    assert a.returncode == 0 and b.returncode == 0, b.stdout + b.stderr
    ckpt_dir = runs["root"] / "ckpt" / "ckpt_0"
    assert (
        f"resume: {ckpt_dir / f'resnet8-1_{STEPS_A}.ckpt'} (global step {STEPS_A}); continuing at epoch 2 step 1"
        in b.stdout.splitlines()
    )
    losses_b = _losses(b.stdout)
    assert [(e, s) for e, s, _ in losses_b] == [(2, s) for s in range(1, STEPS_B + 1)]
    first_a = sum(v for _, _, v in _losses(a.stdout)[:3]) / 3
    first_b = sum(v for _, _, v in losses_b[:3]) / 3
    assert first_b < 0.7 * first_a, (first_a, first_b)  # not back at the initial loss
    m = re.search(r"^accuracy: (\d\.\d{4})$", b.stdout, re.M)
    assert m, b.stdout
    assert float(m.group(1)) >= 0.5
    # The newest checkpoint replaced the old one (--keep-checkpoints 1) and carries the
    # optimizer's global step, which only reaches 12 + 6 if it was restored.
    assert sorted(os.listdir(ckpt_dir)) == [f"resnet8-2_{STEPS_B}.ckpt"]
    import mindspore as ms

    params = ms.load_checkpoint(str(ckpt_dir / f"resnet8-2_{STEPS_B}.ckpt"))
    assert int(params["global_step"].asnumpy().reshape(-1)[0]) == STEPS_A + STEPS_B
    assert int(params["epoch_num"].asnumpy()) == 2 and int(params["step_num"].asnumpy()) == STEPS_B
    assert any(k.startswith("moments.") for k in params)  # Momentum's accumulators are saved


@pytest.mark.mindspore
@pytest.mark.cost(16)
def test_the_default_network_is_resnet50_and_it_trains(tmp_path, capsys, monkeypatch) -> None:
    """The runs above train ResNet-8; the default --arch, ResNet-50 (its stages of several blocks,
    most of them with identity shortcuts), builds, compiles and trains in the trainer: two steps
    on 16x16 images (its compile is most of the cost; 32x32 would add half as much again).  The
    trainer's ``main`` runs in this process (no checkpoints, so no signal handler of its own): it
    prints and returns what ``python -m`` would, without a MindSpore start of its own."""
    from launcher.workloads.resnet50_cifar10 import main

    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    write_synthetic_cifar10(str(tmp_path / "data"), train=40, test=10, seed=0)
    args = ["--data-path", str(tmp_path / "data"), "--image-size", "16", "--batch-size", "4", "--seed", "1"]
    code = main(args + ["--epochs", "1", "--steps-per-epoch", "2"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    lines = out.out.splitlines()
    assert lines[0] == f"params: {RESNET50_PARAMS_10}"
    losses = _losses(out.out)
    assert [(e, s) for e, s, _ in losses] == [(1, 1), (1, 2)]
    assert 1.8 < losses[0][2] < 3.2 and 0 < losses[1][2] < 5, losses  # about ln(10) = 2.30 at the start


@pytest.mark.mindspore
def test_auto_parallel_on_cpu_is_a_one_line_error_with_exit_2(capsys, monkeypatch) -> None:
    from launcher.workloads.resnet50_cifar10 import main

    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    assert main(["--parallel-mode", "auto_parallel", "--device-target", "CPU"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    err = out.err.strip().splitlines()
    assert len(err) == 1, out.err
    assert err[0].startswith("resnet50_cifar10: error: --parallel-mode auto_parallel is not supported on CPU")


#: The trainer run as a program, an exit handler registered first (it runs last) that crashes, as
#: MindSpore's cleanup now and then does after a finished job.
AS_PROGRAM = (
    "import atexit, ctypes, runpy, sys\n"
    "atexit.register(ctypes.string_at, 0)\n"
    "sys.argv = ['resnet50_cifar10', *sys.argv[1:]]\n"
    f"runpy.run_module({MODULE!r}, run_name='__main__')\n"
)


@pytest.mark.mindspore
def test_under_mslaunch_a_crash_in_the_trainers_exit_cleanup_keeps_its_code() -> None:
    """Its code decided, the trainer ends as the collective checks do (``cluster.exit_now``): the
    exit handlers run (MindSpore's finalize: its peers' last collective waits for it), and a crash
    in them keeps the trainer's code (MindSpore's cleanup after the last checkpoint once crashed a
    warm restart's rank 0 with SIGSEGV, exit 139). Which handlers run is
    tests/workloads/test_cluster.py's; here one process, MindSpore imported, refused at its flags."""
    env = dict(trainer_env(), MSLAUNCH_ATTEMPT="0")
    r = subprocess.run(
        [sys.executable, "-c", AS_PROGRAM, "--data-path", ""], capture_output=True, text=True, timeout=120, env=env
    )
    assert (r.returncode, r.stdout) == (2, ""), r.stdout + r.stderr
    err = r.stderr.splitlines()
    assert "resnet50_cifar10: error: --data-path is required (or set DATA_PATH)" in err, r.stderr
    assert err[-1].endswith(
        "the framework's exit cleanup crashed (SIGSEGV) after the result was decided; exit code 2 stands"
    )


@pytest.mark.parametrize(
    "gathered, size, problem",
    [
        ([0, 1, 2], 3, None),
        ([0, 0, 2], 3, "missing ranks 1, wrong: position 1 has 0"),
        ([0, 1], 3, "missing ranks 2, got 2 values for 3 ranks"),
        ([1, 0], 2, "wrong: position 0 has 1; position 1 has 0"),
    ],
)
def test_allgather_check_diagnosis(gathered: List[int], size: int, problem: object) -> None:
    assert diagnose(gathered, size) == problem


def _ckpt_files(folder, *positions: Tuple[int, int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for epoch, step in positions:
        (folder / f"resnet50-{epoch}_{step}.ckpt").write_bytes(b"x")


@pytest.mark.mindspore
def test_distributed_resume_takes_the_newest_checkpoint_every_rank_has(tmp_path) -> None:
    """A rank stopped while the others saved lacks their newest checkpoint: every rank resumes
    from the newest common one, and the newer ones of a rank (steps trained again) go."""
    from launcher.workloads.checkpoints import common_checkpoint, resume_point
    from launcher.workloads.cifar10_data import UsageError

    assert common_checkpoint([[(1, 8), (2, 8)], [(1, 8)], [(1, 8), (2, 8)]]) == (1, 8)
    assert common_checkpoint([[(1, 4), (1, 8), (2, 4)], [(1, 8), (2, 4)]]) == (2, 4)
    assert common_checkpoint([[(1, 8)], [(2, 8)]]) is None and common_checkpoint([]) is None

    mine = tmp_path / "ckpt_0"
    _ckpt_files(mine, (1, 4), (1, 8), (2, 4))
    seen = []

    def gather(positions, size):  # what the AllGather gives: this rank's, then rank 1's
        seen.append((list(positions), size))
        return [list(positions), [(1, 4), (1, 8)]]

    assert resume_point(str(mine), 2, gather) == str(mine / "resnet50-1_8.ckpt")
    assert seen == [([(1, 4), (1, 8), (2, 4)], 2)]
    assert sorted(os.listdir(mine)) == ["resnet50-1_4.ckpt", "resnet50-1_8.ckpt"]
    # alone: the newest, nothing gathered
    assert resume_point(str(mine), 1, None) == str(mine / "resnet50-1_8.ckpt")
    # no rank has one: from scratch
    assert resume_point(str(tmp_path / "none"), 2, lambda p, n: [[], []]) is None
    # some rank has one, but none is common: one message naming each rank's newest
    with pytest.raises(UsageError) as info:
        resume_point(str(mine), 3, lambda p, n: [list(p), [(2, 8)], []])
    assert str(info.value) == (
        "--resume: the ranks have no checkpoint in common (newest: rank 0 resnet50-1_8, rank 1 resnet50-2_8, rank 2 "
        "none); "
        "every rank needs CKPT_DIR/ckpt_<rank>/ of the same run (or remove them all to start over)"
    )
    assert sorted(os.listdir(mine)) == ["resnet50-1_4.ckpt", "resnet50-1_8.ckpt"]  # nothing removed on an error


@pytest.mark.mindspore
@pytest.mark.mindspore
def test_a_run_that_does_not_resume_gathers_like_one_that_does(tmp_path) -> None:
    """With the compile cache, every attempt must compile the resume's AllGather first: a
    distributed run with checkpoints that does not resume gathers too (and ignores the answer);
    a single process or a run without checkpoints has no AllGather in any attempt."""
    from launcher.workloads.checkpoints import align_compile_order

    seen = []
    gather = lambda positions, size: seen.append((list(positions), size)) or [[]] * size  # noqa: E731
    align_compile_order(str(tmp_path), 2, gather)
    align_compile_order(str(tmp_path), 1, gather)
    align_compile_order(None, 4, gather)
    assert seen == [([], 2)]


@pytest.mark.mindspore  # launcher.workloads.checkpoints imports the trainer, which imports MindSpore
def test_pruning_keeps_the_newest_and_drops_half_written_files_of_others(tmp_path) -> None:
    from launcher.workloads.checkpoints import prune_checkpoints

    _ckpt_files(tmp_path, (1, 2), (1, 10), (2, 1))
    (tmp_path / ".tmp-1-resnet50-3_1.ckpt").write_bytes(b"half")  # a process killed mid-save
    mine = tmp_path / f".tmp-{os.getpid()}-resnet50-3_1.ckpt"  # this process, saving now
    mine.write_bytes(b"")
    prune_checkpoints(str(tmp_path), 2)
    assert sorted(os.listdir(tmp_path)) == sorted([mine.name, "resnet50-1_10.ckpt", "resnet50-2_1.ckpt"])
    prune_checkpoints(str(tmp_path), 0)  # 0: keep every checkpoint
    assert len(os.listdir(tmp_path)) == 3
    # a folder that cannot be read (gone; a file in its place): nothing pruned, no error
    (tmp_path / "file").write_text("")
    for folder in (tmp_path / "gone", tmp_path / "file"):
        prune_checkpoints(str(folder), 1)
    assert len(os.listdir(tmp_path)) == 4


@pytest.mark.mindspore
def test_each_arch_has_its_own_checkpoints_and_blocks(tmp_path) -> None:
    """--arch: the checkpoints carry the network's name, so a resume of one network never picks
    another's; the shallower networks are the same blocks, fewer of them."""
    from launcher.workloads.checkpoints import list_checkpoints, prune_checkpoints, resume_point
    from launcher.workloads.resnet50 import ARCHS, count_parameters, resnet
    from launcher.workloads.resnet50_cifar10 import parse_args

    _ckpt_files(tmp_path, (1, 8), (2, 8))
    (tmp_path / "resnet8-1_4.ckpt").write_bytes(b"x")
    assert [p[:2] for p in list_checkpoints(str(tmp_path), "resnet8")] == [(1, 4)]
    assert resume_point(str(tmp_path), 1, None, prefix="resnet8") == str(tmp_path / "resnet8-1_4.ckpt")
    assert resume_point(str(tmp_path), 1, None) == str(tmp_path / "resnet50-2_8.ckpt")
    assert resume_point(str(tmp_path), 1, None, prefix="resnet26") is None
    prune_checkpoints(str(tmp_path), 1, "resnet8")  # another network's files are not this one's to prune
    assert sorted(os.listdir(tmp_path)) == ["resnet50-1_8.ckpt", "resnet50-2_8.ckpt", "resnet8-1_4.ckpt"]

    assert parse_args(["--data-path", "d"], {}).arch == "resnet50"
    assert parse_args(["--arch", "resnet8", "--data-path", "d"], {}).arch == "resnet8"
    for arch, blocks in ARCHS.items():
        assert arch == f"resnet{3 * sum(blocks) + 2}"
    small = resnet("resnet14", num_classes=10)
    # stem + 3 convolutions per block + one projection per stage; a BatchNorm (gamma, beta) each; dense weight and bias
    convs = 1 + 3 * 4 + 4
    assert len(small.trainable_params()) == convs + 2 * convs + 2
    assert count_parameters(resnet("resnet8")) == RESNET8_PARAMS_10
    assert RESNET8_PARAMS_10 < count_parameters(small) < count_parameters(resnet("resnet26")) < RESNET50_PARAMS_10
