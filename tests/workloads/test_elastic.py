"""The reference trainer in a smaller job (no MindSpore): the global batch kept by accumulating
more micro-batches, and the missing ranks' checkpoint folders kept current."""

from __future__ import annotations

import os

import pytest

from launcher.workloads.elastic import keep_global_batch, mirror_checkpoint, planned_size, smaller, stand_in_dirs


@pytest.mark.parametrize(
    "k, batch, size, planned, new, says",
    [
        (1, 32, 4, 4, 1, None),  # the planned size: as given
        (1, 32, 2, 4, 2, "so a step's global batch stays 128"),
        (2, 16, 3, 6, 4, "so a step's global batch stays 192"),
        (1, 32, 2, 3, 2, "the nearest to the planned global batch of 96: 128"),  # 1.5 -> 2 (halves up)
        (1, 8, 3, 4, 1, "the nearest to the planned global batch of 32: 24"),  # 1.33 -> 1
        (4, 8, 7, 8, 5, "the nearest to the planned global batch of 256: 280"),  # 4.57 -> 5
        (3, 4, 1, 5, 15, "so a step's global batch stays 60"),
        (1, 32, 6, 4, 1, None),  # more than planned (never planned so): as given
    ],
)
def test_the_global_batch_is_kept_or_the_nearest_is_named(k, batch, size, planned, new, says):
    got, line = keep_global_batch(k, batch, size, planned)
    assert got == new
    if says is None:
        assert line is None
    else:
        assert line is not None and "\n" not in line and says in line
        assert line.startswith(f"elastic: {size} of {planned} planned ranks: --grad-accum {k} -> {new} micro-batches")
    # the rule: the nearest whole K to k x planned / size, never below 1
    if planned > size:
        assert abs(new * size - k * planned) <= size / 2 and new >= 1


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
