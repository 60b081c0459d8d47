"""The ranks' pid records (launcher.execution.process.rankpids): written whole, read back by rank."""

from __future__ import annotations

import os

from launcher.execution.process.rankpids import FOLDER, named, read_pids, write_pid


def test_records_round_trip_and_bad_ones_are_skipped(tmp_path):
    assert read_pids(str(tmp_path)) == {}
    write_pid(str(tmp_path), 0, 101)
    write_pid(str(tmp_path), 12, 102)
    write_pid(str(tmp_path), None, 100)
    write_pid(str(tmp_path), 12, 103)  # a second record replaces the first
    folder = tmp_path / FOLDER
    (folder / "rankx").write_text("5\n")
    (folder / "rank3").write_text("not a pid\n")
    (folder / ".rank4.77").write_text("7\n")  # a record being written
    assert read_pids(str(tmp_path)) == {0: 101, 12: 103, None: 100}
    assert sorted(os.listdir(folder)) == [".rank4.77", "rank0", "rank12", "rank3", "rankx", "scheduler"]
    procs = (("rank 0", 0, "h1"), ("rank 1", 1, "h2"), ("scheduler", None, "h1"))
    assert named(str(tmp_path), procs) == {"rank 0": (0, "h1", 101), "scheduler": (None, "h1", 100)}


def test_a_folder_that_cannot_be_written_is_no_error(tmp_path):
    (tmp_path / FOLDER).write_text("")  # a file where the folder should be
    write_pid(str(tmp_path), 0, 1)
    assert read_pids(str(tmp_path)) == {}
