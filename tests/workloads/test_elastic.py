"""The reference trainer in a smaller job (no MindSpore): the global batch kept by accumulating
more micro-batches, and the missing ranks' checkpoint folders kept current."""

from __future__ import annotations

import os

import pytest

from launcher.workloads.elastic import (
    cache_subfolder,
    keep_global_batch,
    mirror_checkpoint,
    planned_size,
    smaller,
    stand_in_dirs,
)


@pytest.mark.parametrize(
    "k, batch, size, planned, new, micro, says",
    [
        (1, 32, 4, 4, 1, 32, None),  # the planned size: as given
        (1, 32, 2, 4, 2, 32, "so a step's global batch stays 128"),
        (2, 16, 3, 6, 4, 16, "so a step's global batch stays 192"),
        (1, 32, 2, 3, 2, 24, "(--batch-size 32 -> 24) per step, so a step's global batch stays 96"),  # 48 a rank
        (1, 8, 2, 3, 2, 6, "(--batch-size 8 -> 6) per step, so a step's global batch stays 24"),
        (1, 8, 3, 4, 1, 8, "the nearest to the planned global batch of 32: 24"),  # 32 / 3: no whole batch a rank
        (4, 8, 7, 8, 5, 8, "the nearest to the planned global batch of 256: 280"),  # 256 / 7: none either
        (3, 4, 1, 5, 15, 4, "so a step's global batch stays 60"),
        (1, 8, 2, 13, 13, 4, "(--batch-size 8 -> 4) per step, so a step's global batch stays 104"),  # 52 = 13 x 4
        (1, 8, 8, 11, 1, 8, "the nearest to the planned global batch of 88: 64"),  # 11 a rank: 11 > 8, 1 x 11
        (1, 10, 6, 7, 1, 10, "the nearest to the planned global batch of 70: 60"),  # 70 / 6: none
        (1, 10, 5, 7, 2, 7, "(--batch-size 10 -> 7) per step, so a step's global batch stays 70"),  # 14 = 2 x 7
        (1, 10, 2, 5, 5, 5, "(--batch-size 10 -> 5) per step"),  # 25 a rank: 5 x 5, half of 10 still goes
        (1, 32, 6, 4, 1, 32, None),  # more than planned (never planned so): as given
    ],
)
def test_the_global_batch_is_kept_or_the_nearest_is_named(k, batch, size, planned, new, micro, says):
    got, got_micro, line = keep_global_batch(k, batch, size, planned)
    assert (got, got_micro) == (new, micro)
    if planned <= size:
        assert line is None
        return
    assert line is not None and "\n" not in line and says in line
    assert line.startswith(f"elastic: {size} of {planned} planned ranks: --grad-accum {k} -> {new} micro-batches")
    # the rule: exact with a micro-batch between half the user's and the user's, the fewest micro-batches
    # of it; else the nearest whole K to k x planned / size (never below 1) of the user's micro-batch
    want = k * batch * planned
    exact = [(n, want // size // n) for n in range(1, want + 1) if want % size == 0 and (want // size) % n == 0]
    exact = [(n, b) for n, b in exact if batch / 2 <= b <= batch]
    if exact:
        assert (got, got_micro) == exact[0] and got * got_micro * size == want
        assert "so a step's global batch stays" in line
    else:
        assert got_micro == batch and abs(got * size - k * planned) <= size / 2 and got >= 1


@pytest.mark.parametrize(
    "env, size, want",
    [({}, 4, 4), ({"MSLAUNCH_PLANNED_WORLD_SIZE": "8"}, 4, 8), ({"MSLAUNCH_PLANNED_WORLD_SIZE": "x"}, 4, 4),
     ({"MSLAUNCH_PLANNED_WORLD_SIZE": "2"}, 4, 4)],
)  # fmt: skip
def test_planned_size(env, size, want):
    assert planned_size(env, size) == want


def test_smaller_is_read_before_init_from_both_variables():
    assert smaller({"MSLAUNCH_WORLD_SIZE": "2", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"})
    assert not smaller({"MSLAUNCH_WORLD_SIZE": "3", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"})
    assert not smaller({"MSLAUNCH_PLANNED_WORLD_SIZE": "3"}) and not smaller({})
    # and the compile cache's folder for that size (none at the planned size)
    assert cache_subfolder({"MSLAUNCH_WORLD_SIZE": "2", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"}) == "world-2-of-3"
    assert cache_subfolder({"MSLAUNCH_WORLD_SIZE": "3", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"}) is None
    assert cache_subfolder({"MSLAUNCH_WORLD_SIZE": "x", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"}) is None


def test_each_missing_rank_is_kept_by_exactly_one_rank_left():
    for planned in range(1, 13):
        for size in range(1, planned + 1):
            kept = [
                int(os.path.basename(d).split("_")[1])
                for r in range(size)
                for d in stand_in_dirs(f"/c/ckpt_{r}", r, size, planned)
            ]
            assert sorted(kept) == list(range(size, planned)), (size, planned)
    assert stand_in_dirs("/c/ckpt_1", 1, 2, 6) == ["/c/ckpt_3", "/c/ckpt_5"]


def test_a_mirrored_checkpoint_is_the_same_file_in_each_folder(tmp_path):
    own = tmp_path / "ckpt_0"
    own.mkdir()
    ckpt = own / "resnet8-1_6.ckpt"
    ckpt.write_bytes(b"weights")
    (tmp_path / "ckpt_3").mkdir()
    (tmp_path / "ckpt_3" / "resnet8-1_3.ckpt").write_bytes(b"older")  # what rank 3 wrote before it went
    dirs = stand_in_dirs(str(own), 0, 2, 6)
    written = mirror_checkpoint(str(ckpt), dirs)
    assert written == [str(tmp_path / "ckpt_2" / ckpt.name), str(tmp_path / "ckpt_4" / ckpt.name)]
    for path in written:
        assert open(path, "rb").read() == b"weights" and os.path.samefile(path, ckpt)  # a hard link here
    assert not [n for d in dirs for n in os.listdir(d) if n.startswith(".tmp-")]
