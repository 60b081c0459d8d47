"""The ranks' pid records (launcher.execution.process.rankpids), as the rank wrapper writes them, read back by rank."""

from __future__ import annotations

from launcher.execution.process.rankpids import FOLDER, file_name, named, read_pids


def test_records_are_read_by_rank_and_bad_ones_are_skipped(tmp_path):
    assert read_pids(str(tmp_path)) == {}
    folder = tmp_path / FOLDER
    folder.mkdir()
    for rank, pid in ((0, 101), (12, 103), (None, 100)):
        (folder / file_name(rank)).write_text(f"{pid}\n")
    (folder / "rankx").write_text("5\n")
    (folder / "rank3").write_text("not a pid\n")
    (folder / ".rank4.77").write_text("7\n")  # a record being written
    assert read_pids(str(tmp_path)) == {0: 101, 12: 103, None: 100}
    procs = (("rank 0", 0, "h1"), ("rank 1", 1, "h2"), ("scheduler", None, "h1"))
    assert named(str(tmp_path), procs) == {"rank 0": (0, "h1", 101), "scheduler": (None, "h1", 100)}


def test_a_file_where_the_folder_should_be_is_no_error(tmp_path):
    (tmp_path / FOLDER).write_text("")
    assert read_pids(str(tmp_path)) == {}
