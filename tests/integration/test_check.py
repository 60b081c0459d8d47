"""`mslaunch check` result parsing and judging (the end-to-end run is in test_e2e_mindspore.py)."""

from launcher.cli.check import judge, parse_check_lines


def test_parse_check_line():
    log = "[WARNING] noise\nmslaunch-check rank=1 size=2 gathered=0,1\nmore\n"
    assert parse_check_lines(log) == (1, 2, [0, 1])
    assert parse_check_lines("nothing here\n") is None


def test_judge_names_missing_and_wrong_ranks():
    ok = {0: (0, 2, [0, 1]), 1: (1, 2, [0, 1])}
    assert judge(2, ok) == []
    bad = {0: (0, 3, [0, 1]), 1: None, 2: (2, 3, [0, 2, 2])}
    assert judge(3, bad) == [
        "rank 0: gathered [0, 1], missing [2]",
        "rank 1: no result (see its log)",
        "rank 2: gathered [0, 2, 2], missing [1]",
    ]
    assert judge(2, {0: (1, 2, [0, 1]), 1: (1, 4, [0, 1])}) == [
        "rank 0: reports itself as rank 1",
        "rank 1: sees a world of 4, expected 2",
    ]
