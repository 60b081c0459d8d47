"""The log follower (launcher.logs.follow): which files a job folder has, new lines and new
files as they appear, partial lines, truncation and rotation, attempt folders, tails."""

import os
import threading

import pytest

from launcher.logs import follow
from launcher.logs.follow import Follower, LogSource, job_log_sources, last_lines, prefix


def write(path, data, mode="ab"):
    with open(path, mode) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


class Seen:
    """Collects ``(label, line)`` from a follower."""

    def __init__(self):
        self.lines = []

    def __call__(self, src, line):
        self.lines.append((src.label, line))

    def take(self):
        out, self.lines = self.lines, []
        return out


def follower_of(folder, seen, **kw):
    kw.setdefault("rescan", 0)  # list the folder at every poll (the rescan interval has its own test)
    return Follower(lambda: job_log_sources(str(folder)), seen, **kw)


def test_job_log_sources_orders_ranks_numerically_scheduler_last(tmp_path):
    for name in (
        "worker_10.log",
        "worker_2.log",
        "worker_0.log",
        "scheduler.log",
        "worker_x.log",
        "worker_1.log.1",
        "other.log",
    ):
        write(tmp_path / name, "")
    got = job_log_sources(str(tmp_path))
    assert [(s.label, os.path.basename(s.path), s.rank) for s in got] == [
        ("rank 0", "worker_0.log", 0),
        ("rank 2", "worker_2.log", 2),
        ("rank 10", "worker_10.log", 10),
        ("scheduler", "scheduler.log", None),
    ]
    assert [s.rank for s in job_log_sources(str(tmp_path), ranks=[10, 0])] == [
        0,
        10,
    ]  # a rank filter drops the scheduler
    assert [s.label for s in job_log_sources(str(tmp_path), scheduler=False)] == ["rank 0", "rank 2", "rank 10"]


def test_folder_names_with_glob_characters_are_taken_literally(tmp_path):
    odd = tmp_path / "job[1]*"
    odd.mkdir()
    write(odd / "worker_0.log", "")
    (tmp_path / "job1x").mkdir()  # what job[1]*/ would match as a pattern
    write(tmp_path / "job1x" / "worker_9.log", "")
    assert [s.path for s in job_log_sources(str(odd))] == [str(odd / "worker_0.log")]


def test_prefix_plain_and_coloured():
    src = LogSource("rank 3", "/x", 3)
    assert prefix(src, False) == "[rank 3] "
    assert prefix(src, True) == "\x1b[35m[rank 3]\x1b[0m "
    assert prefix(LogSource("scheduler", "/y", None), True) == "\x1b[2m[scheduler]\x1b[0m "


def test_new_lines_and_new_files_are_picked_up(tmp_path):
    seen = Seen()
    f = follower_of(tmp_path, seen)
    assert f.poll() == 0
    write(tmp_path / "worker_0.log", "a\nb\n")
    assert f.poll() == 2
    assert seen.take() == [("rank 0", "a"), ("rank 0", "b")]
    write(tmp_path / "worker_1.log", "c\n")  # a file that appears later
    write(tmp_path / "worker_0.log", "d\n")
    assert f.poll() == 2
    assert sorted(seen.take()) == [("rank 0", "d"), ("rank 1", "c")]
    assert f.poll() == 0 and seen.take() == []


def test_partial_lines_wait_for_their_newline_and_flush_emits_them(tmp_path):
    seen = Seen()
    log = tmp_path / "worker_0.log"
    f = follower_of(tmp_path, seen)
    write(log, "hel")
    assert f.poll() == 0 and seen.take() == []
    write(log, "lo\r\nwor")
    f.poll()
    assert seen.take() == [("rank 0", "hello")]  # CRLF: the \r is dropped
    write(log, "ld")
    f.flush()
    assert seen.take() == [("rank 0", "world")]
    f.flush()
    assert seen.take() == []  # emitted once


def test_a_multibyte_character_split_across_polls_is_not_mangled(tmp_path):
    seen = Seen()
    log = tmp_path / "worker_0.log"
    data = "δοκιμή ✓\n".encode("utf-8")
    f = follower_of(tmp_path, seen)
    write(log, data[:3])
    f.poll()
    write(log, data[3:])
    f.poll()
    assert seen.take() == [("rank 0", "δοκιμή ✓")]


def test_truncation_starts_the_file_over(tmp_path):
    seen = Seen()
    log = tmp_path / "worker_0.log"
    f = follower_of(tmp_path, seen)
    write(log, "one\ntwo\npart")
    f.poll()
    assert seen.take() == [("rank 0", "one"), ("rank 0", "two")]
    write(log, "x\n", mode="wb")  # truncated and rewritten, shorter than before
    f.poll()
    assert seen.take() == [("rank 0", "x")]  # the stale partial "part" is dropped


def test_rotation_follows_the_new_file_under_the_same_name(tmp_path):
    seen = Seen()
    log = tmp_path / "worker_0.log"
    f = follower_of(tmp_path, seen)
    write(log, "old 1\nold 2\n")
    f.poll()
    seen.take()
    os.rename(log, tmp_path / "worker_0.log.1")  # logrotate-style: move away, start a new file
    write(log, "new 1\n")
    f.poll()
    assert seen.take() == [("rank 0", "new 1")]
    os.rename(log, tmp_path / "worker_0.log.2")  # again, the new file already longer than the old
    write(log, "a much longer first line of the third file\nsecond\n")
    f.poll()
    assert seen.take() == [("rank 0", "a much longer first line of the third file"), ("rank 0", "second")]
    assert [os.path.basename(s.path) for s in job_log_sources(str(tmp_path))] == ["worker_0.log"]


def test_from_end_skips_what_was_there_and_seek_continues_from_an_offset(tmp_path):
    log = tmp_path / "worker_0.log"
    write(log, "before\n")
    seen = Seen()
    f = follower_of(tmp_path, seen, from_start=False)
    assert f.poll() == 0
    write(log, "after\n")
    f.poll()
    assert seen.take() == [("rank 0", "after")]

    write(tmp_path / "worker_1.log", "shown by a tail\nnew\n")
    g = follower_of(tmp_path, seen)
    g.seek({str(log): os.path.getsize(log), str(tmp_path / "worker_1.log"): len("shown by a tail\n")})
    g.poll()
    assert seen.take() == [("rank 1", "new")]


def test_a_big_burst_is_read_in_bounded_chunks_without_losing_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "MAX_READ", 100)
    log = tmp_path / "worker_0.log"
    lines = [f"line {i:04d}" for i in range(200)]
    write(log, "".join(line + "\n" for line in lines))
    seen = Seen()
    f = follower_of(tmp_path, seen)
    polls = 0
    while len(seen.lines) < len(lines):
        f.poll()
        polls += 1
        assert polls < 100
    assert [line for _, line in seen.take()] == lines
    assert polls > 10  # 2,000 bytes took many reads of at most 100 bytes


def test_attempt_folders_switch_to_the_new_attempts_files(tmp_path):
    """A restarted job writes attempt_<k>/worker_<r>.log: the run console points its sources at
    the newest folder and gets those files from their start, not the old ones again."""
    write(tmp_path / "worker_0.log", "attempt 0\n")
    current = [str(tmp_path)]
    seen = Seen()
    f = Follower(lambda: job_log_sources(current[0]), seen, rescan=0)
    f.poll()
    assert seen.take() == [("rank 0", "attempt 0")]
    attempt = tmp_path / "attempt_1"
    attempt.mkdir()
    write(attempt / "worker_0.log", "attempt 1\n")
    assert f.poll() == 0  # the job folder lists only its own files
    current[0] = str(attempt)
    write(tmp_path / "worker_0.log", "late line of attempt 0\n")
    f.poll()
    assert seen.take() == [("rank 0", "attempt 1")]


def test_run_polls_until_stopped_then_reads_the_rest(tmp_path):
    log = tmp_path / "worker_0.log"
    seen = Seen()
    got_first = threading.Event()

    def emit(src, line):
        seen(src, line)
        got_first.set()

    f = Follower(lambda: job_log_sources(str(tmp_path)), emit, interval=0.01)
    stop = threading.Event()
    t = threading.Thread(target=f.run, args=(stop,))
    t.start()
    try:
        write(log, "first\n")
        assert got_first.wait(30)
        write(log, "last, no newline")
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert seen.take() == [("rank 0", "first"), ("rank 0", "last, no newline")]


@pytest.mark.parametrize("n,expected", [(0, []), (2, ["c", "d"]), (10, ["a", "b", "c", "d"])])
def test_last_lines_leaves_a_partial_line_for_the_follower(tmp_path, n, expected):
    log = tmp_path / "worker_0.log"
    write(log, "a\nb\nc\nd\npart")
    lines, offset = last_lines(str(log), n)
    assert lines == expected
    assert offset == len("a\nb\nc\nd\n")


def test_last_lines_reads_only_the_end_of_a_big_file(tmp_path):
    log = tmp_path / "worker_0.log"
    write(log, "".join(f"{i}\n" for i in range(100_000)))
    lines, offset = last_lines(str(log), 3, block=16)
    assert lines == ["99997", "99998", "99999"]
    assert offset == os.path.getsize(log)


def test_last_lines_of_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "worker_0.log"
    os.mkfifo(fifo)  # opening and reading a FIFO must not block
    assert last_lines(str(fifo), 5) == ([], 0)
    assert last_lines(str(tmp_path / "missing.log"), 5) == ([], 0)


def test_files_are_listed_again_only_every_rescan_seconds(tmp_path):
    """A sweep stats the known files; the folder is listed at most every ``rescan`` seconds
    (and by flush), so new files show up after that, from their start."""
    now = [100.0]
    calls = []

    def sources():
        calls.append(now[0])
        return job_log_sources(str(tmp_path))

    seen = Seen()
    f = Follower(sources, seen, rescan=1.0, clock=lambda: now[0])
    write(tmp_path / "worker_0.log", "a\n")
    assert f.poll() == 1 and calls == [100.0]
    write(tmp_path / "worker_1.log", "b\n")
    write(tmp_path / "worker_0.log", "c\n")
    now[0] = 100.5
    assert f.poll() == 1 and calls == [100.0]  # rank 0's new line, rank 1 not listed yet
    now[0] = 101.0
    assert f.poll() == 1 and calls == [100.0, 101.0]
    assert seen.take() == [("rank 0", "a"), ("rank 0", "c"), ("rank 1", "b")]
    write(tmp_path / "worker_2.log", "d")
    f.flush()
    assert calls == [100.0, 101.0, 101.0] and seen.take() == [("rank 2", "d")]


def test_idle_sweeps_back_off_and_lines_reset_the_wait(tmp_path):
    f = follower_of(tmp_path, Seen(), interval=0.1)
    waits = [f.next_wait(0) for _ in range(6)]
    assert waits == [0.2, 0.4, 0.8, follow.MAX_INTERVAL, follow.MAX_INTERVAL, follow.MAX_INTERVAL]
    assert f.next_wait(3) == 0.1 and f.next_wait(0) == 0.2


@pytest.mark.heavy
def test_lines_from_1500_files_all_arrive_in_order(tmp_path):
    """1,500 rank logs growing while a follower thread runs: every line of every file arrives,
    in each file's order, with the right label."""
    files, rounds = 1500, 4
    got = {}
    done = threading.Event()
    lock = threading.Lock()

    def emit(src, line):
        with lock:
            got.setdefault(src.rank, []).append(line)
            if sum(len(v) for v in got.values()) == files * rounds:
                done.set()

    f = Follower(lambda: job_log_sources(str(tmp_path)), emit, interval=0.01, rescan=0.05)
    stop = threading.Event()
    t = threading.Thread(target=f.run, args=(stop,))
    t.start()
    try:
        for k in range(rounds):
            for r in range(files):
                with open(tmp_path / f"worker_{r}.log", "a") as fh:
                    fh.write(f"rank {r} line {k}\n")
        assert done.wait(120), f"{sum(len(v) for v in got.values())} of {files * rounds} lines arrived"
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert sorted(got) == list(range(files))
    assert all(got[r] == [f"rank {r} line {k}" for k in range(rounds)] for r in range(files))


def test_a_tail_reads_each_byte_once_however_far_back_its_lines_start(tmp_path):
    """``last_lines`` reads backwards a block at a time, up to MAX_TAIL bytes: the CPU it takes
    grows with what it reads, not with its square (joining and counting the whole buffer again at
    every block cost 1.1 CPU-s for a 16 MiB log without a newline).  The CPU of a tail 8 times as
    far back, over that of a short one, each the least of 3 runs in this process: 8 when linear,
    about 64 when quadratic."""
    import time

    def cpu(size):
        path = tmp_path / f"log{size}"
        path.write_bytes(b"x" * size + b"\nend\n")
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            assert last_lines(str(path), 10)[0][-1] == "end"  # 10 lines wanted, 2 there: read to the limit
            best = min(best, time.process_time() - start)
        return best

    small, far = cpu(2 << 20), cpu(follow.MAX_TAIL)
    assert far < 24 * max(small, 1e-4), (small, far)
