"""A host's memory records: the kernel's OOM-killer lines and the cgroup's counters (v1 and v2)."""

from __future__ import annotations

import os

import pytest

from launcher.logs.hostmem import (
    KernelKill,
    cgroup_memory,
    format_bytes,
    kernel_kills,
    oom_kill_count,
    read_cgroup_files,
)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "causes", "oom_cgroup_v1")


def test_the_recorded_cgroup_v1_kill():
    with open(os.path.join(DATA, "kernel.log"), encoding="utf-8") as fh:
        kills = kernel_kills(fh.read().splitlines())
    assert len(kills) == 1
    k = kills[0]
    assert (k.pid, k.name, k.usage, k.limit) == (8132, "python3", 64 << 20, 64 << 20)
    assert k.line.startswith("Memory cgroup out of memory: Killed process 8132 (python3) total-vm:82116kB")
    assert k.summary == "Memory cgroup out of memory: Killed process 8132 (python3), anon-rss:65280kB"
    files = read_cgroup_files(DATA)
    assert sorted(files) == ["memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control"]
    assert oom_kill_count(files) == 1 and oom_kill_count(read_cgroup_files(os.path.join(DATA, "before"))) == 0
    assert cgroup_memory(files) == (64 << 20, 64 << 20)


@pytest.mark.parametrize(
    "lines,expected",
    [
        (
            ["[ 99.1] Out of memory: Killed process 1234 (python3) total-vm:9000kB, anon-rss:8000kB"],
            [(1234, "python3")],
        ),
        (
            [
                "Out of memory: Kill process 77 (python) score 900 or sacrifice child",
                "Killed process 77 (python) total-vm:1kB",
            ],
            [(77, "python")],
        ),
        (
            [
                "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task=train,pid=5,uid=0"
            ],
            [(5, "train")],
        ),
        (
            ["Memory cgroup out of memory: Killed process 1 (a)", "Memory cgroup out of memory: Killed process 2 (b)"],
            [(1, "a"), (2, "b")],
        ),
        (["EXT4-fs (vda): mounted filesystem", "python3 invoked oom-killer: gfp_mask=0xcc0"], []),
    ],
)
def test_kernel_kill_lines(lines, expected):
    assert [(k.pid, k.name) for k in kernel_kills(lines)] == expected
    assert all(isinstance(k, KernelKill) and k.usage is None for k in kernel_kills(lines))
    assert all(f"({k.name})" in k.summary or f"task={k.name}" in k.summary for k in kernel_kills(lines))


@pytest.mark.parametrize(
    "files,count",
    [
        ({"memory.events": "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"}, 2),
        ({"memory.events": "low 0\noom_group_kill 3\n"}, None),
        ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n"}, 4),
        ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"}, None),  # kernels before 4.13 do not count
        ({}, None),
    ],
)
def test_oom_kill_count(files, count):
    assert oom_kill_count(files) == count


@pytest.mark.parametrize(
    "files,expected",
    [
        ({"memory.peak": "123\n", "memory.max": "max\n"}, (123, None)),
        ({"memory.peak": "123\n", "memory.max": "4096\n", "memory.max_usage_in_bytes": "9\n"}, (123, 4096)),
        ({"memory.max_usage_in_bytes": "500\n", "memory.limit_in_bytes": "9223372036854771712\n"}, (500, None)),
        ({}, (None, None)),
    ],
)
def test_cgroup_memory(files, expected):
    assert cgroup_memory(files) == expected


@pytest.mark.parametrize(
    "n,text",
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (64 << 20, "64.0 MiB"),
        (2_000_000_000, "1.9 GiB"),
        (5 << 40, "5.0 TiB"),
        (5 << 50, "5120.0 TiB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_read_cgroup_files_skips_what_is_missing(tmp_path):
    (tmp_path / "memory.events").write_text("oom_kill 1\n")
    (tmp_path / "memory.stat").write_text("anon 1\n")
    assert read_cgroup_files(str(tmp_path)) == {"memory.events": "oom_kill 1\n"}
    assert read_cgroup_files(str(tmp_path / "nowhere")) == {}


def test_kill_cgroups_names_each_killed_pids_memcg():
    from launcher.logs.hostmem import kill_cgroups

    lines = [
        "[ 5.0] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=python3,pid=81,uid=0",  # noqa: E501 - kept whole: a literal line as the program sees it
        "[ 6.0] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=x,pid=9,uid=0",  # noqa: E501 - kept whole: a literal line as the program sees it
        "[ 7.0] Memory cgroup out of memory: Killed process 81 (python3) total-vm:1kB",
        "[ 8.0] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/c,task_memcg=/c,task=python3,pid=81,uid=0",
    ]
    assert kill_cgroups(lines) == {81: "/c", 9: "/"}
    assert kill_cgroups(["Out of memory: Killed process 5 (x)"]) == {}


def test_kernel_since_keeps_stamped_lines_from_then_and_their_continuations():
    from launcher.logs.hostmem import kernel_since

    lines = ["[   99.900000] old", "  continued old", "[  100.000000] new", "  continued new", "[ 1000.5] later"]
    assert kernel_since(lines, 100.0) == ["[  100.000000] new", "  continued new", "[ 1000.5] later"]
    assert kernel_since(["no stamp", "at all"], 5.0) == ["no stamp", "at all"]
    assert kernel_since(lines, 2000.0) == []


@pytest.mark.parametrize(
    "text,folder",
    [
        ("12:memory:/job/a\n0::/\n", "/r/memory/job/a"),  # cgroup v1
        ("4:cpu,memory:/x\n", "/r/memory/x"),
        ("0::/system.slice/a.service\n", "/r/system.slice/a.service"),  # v2 only
        ("3:cpu:/x\n", None),
        ("", None),
    ],
)
def test_memory_cgroup_of_proc_cgroup(text, folder):
    from launcher.logs.hostmem import memory_cgroup

    assert memory_cgroup(text, "/r") == folder
