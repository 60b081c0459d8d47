"""The failure classifier (pure): each rule of the table on its own, the table's precedence, the
restart rule's "same cause", and what the console and JUnit show."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.logs.causerules import EVIDENCE_MAX, TAIL_LINES, Failure, signal_of
from launcher.logs.causes import (
    KINDS,
    RESTART_PROOF,
    RULES,
    Cause,
    classify,
    console_lines,
    junit_message,
    repeated_unfixable,
    same_unfixable,
)
from launcher.logs.hostmem import HostRecords
from tests.harness.hypo import examples


def tb(*frames: str, exc: str, details: tuple = ()) -> tuple:
    """A traceback's lines: frames as ``file:line:function``."""
    out = ["Traceback (most recent call last):"]
    for f in frames:
        file, line, func = f.split(":")
        out += [f'  File "{file}", line {line}, in {func}', "    some_code()"]
    return tuple(out) + (exc,) + tuple(details)


SITE = "/opt/venv/lib/python3.11/site-packages"


def fail(tail=(), rc=1, **kw) -> Failure:
    return Failure(
        name=kw.pop("name", "rank 2"),
        host=kw.pop("host", "node2"),
        returncode=rc,
        tail=tuple(tail),
        log="/job/rank_2.log",
        **kw,
    )


# ---------------------------------------------------------------- the table


def test_the_table_covers_every_kind_the_docs_name():
    assert set(KINDS) == {
        "lost_host",
        "collective_timeout",
        "hang",
        "oom",
        "address_in_use",
        "device_error",
        "disk_full",
        "native_crash",
        "missing_module",
        "missing_file",
        "python_exception",
        "unknown",
    }
    assert KINDS[-1] == "unknown" and set(RESTART_PROOF) <= set(KINDS)
    assert all(r.hint and "\n" not in r.hint for r in RULES)


def test_signal_of_reads_both_conventions():
    assert [signal_of(rc) for rc in (-9, 137, 139, 1, 0, 128, None, 255)] == [9, 9, 11, None, None, None, None, None]


# ---------------------------------------------------------------- one test per rule


def test_lost_host_names_the_host_and_how():
    c = classify(fail(("epoch: 1 step: 3, loss is 2.1",), rc=255, lost="connection to node2 lost (no answer for 30 s)"))
    assert c.kind == "lost_host"
    assert c.evidence == "rank 2 on node2: connection to node2 lost (no answer for 30 s)"
    assert "node2" in c.hint and "spare-hosts" in c.hint


HANG = {
    "kind": "no_progress",
    "limit_s": 60.0,
    "derived": "auto: the 60 s floor",
    "idle_s": 61.2,
    "stacks_dir": "/job/attempt_1/stacks",
    "culprit": {"rank": 1, "evidence": "its last step is behind the others' (step 3 < step 4)"},
    "ranks": [{"rank": 0, "host": "node1"}, {"rank": 1, "host": "node2"}],
}


def test_hang_names_the_culprit_its_host_and_the_stacks():
    c = classify(fail(rc=-15, hang=HANG))
    assert c.kind == "hang"
    assert c.evidence == (
        "no rank made progress for 61.2 s (limit 60.0 s, auto: the 60 s floor); likely culprit rank 1 on node2: "
        "its last step is behind the others' (step 3 < step 4)"
    )
    assert (
        c.hint == "start with rank 1 on node2 (stacks in /job/attempt_1/stacks); if a step can take this long, raise "
        "--hang-timeout"
    )


def test_hang_without_a_culprit_says_so():
    c = classify(fail(rc=-15, hang=dict(HANG, culprit=None)))
    assert (
        c.kind == "hang"
        and "no rank stands out" in c.evidence
        and "compare the ranks' stacks in /job/attempt_1/stacks" in c.hint
    )


def test_collective_timeout_from_the_hang_report():
    report = dict(
        HANG,
        kind="collective_timeout",
        timed_out={"rank": 0, "line": "Ring AllReduce wait receiving failed"},
        culprit={"rank": 1, "evidence": "its main thread is outside the collective"},
    )
    c = classify(fail(rc=1, hang=report))
    assert c.kind == "collective_timeout"
    assert c.evidence.startswith(
        "rank 0's collective timed out waiting for the others (Ring AllReduce wait receiving failed); "
        "likely culprit rank 1 on node2"
    )
    assert c.hint.startswith("start with rank 1 on node2")


KERNEL = (
    "[  626.051445] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "[  626.051785] memory: usage 2097152kB, limit 2097152kB, failcnt 88",
    "[  626.051878] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job,task_memcg=/job,task=python3,pid=4242,uid=0",  # noqa: E501 - kept whole: a literal line as the program sees it
    "[  626.051894] Memory cgroup out of memory: Killed process 4242 (python3) total-vm:82116kB, anon-rss:65280kB, "
    "file-rss:6652kB",
)


@pytest.mark.parametrize("rc", [-9, 137])
def test_oom_from_a_kernel_line_naming_the_process(rc):
    c = classify(
        fail(("step 9",), rc=rc, records=HostRecords(kernel=KERNEL), pids=(4200, 4242), peak_rss=2_000_000_000)
    )
    assert c.kind == "oom"
    assert "Memory cgroup out of memory: Killed process 4242 (python3)" in c.evidence
    assert c.evidence.endswith("peak RSS 1.9 GiB; limit 2.0 GiB")
    assert c.hint == "node2 ran out of memory: run fewer ranks per host or use a smaller batch"


def test_oom_from_the_cgroup_count_going_up():
    rec = HostRecords(
        cgroup={
            "memory.events": "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\noom_group_kill 0\n",
            "memory.peak": "1073741824\n",
            "memory.max": "1073741824\n",
        },
        cgroup_before={"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\noom_group_kill 0\n"},
    )
    c = classify(fail(rc=-9, records=rec))
    assert c.kind == "oom"
    assert (
        c.evidence
        == "killed by SIGKILL; the cgroup's oom_kill count went from 1 to 2; peak memory 1.0 GiB (cgroup); limit 1.0 "
        "GiB"
    )


@pytest.mark.parametrize(
    "records,pids",
    [
        (HostRecords(), ()),  # no evidence at all
        (HostRecords(kernel=KERNEL), (777,)),  # the kernel killed another process
        (
            HostRecords(
                cgroup={"memory.oom_control": "oom_kill 1\n"}, cgroup_before={"memory.oom_control": "oom_kill 1\n"}
            ),
            (),
        ),  # no new kill
    ],
)
def test_sigkill_without_evidence_is_not_oom(records, pids):
    c = classify(fail(("step 9",), rc=-9, records=records, pids=pids))
    assert c.kind == "unknown"
    assert c.evidence == "killed by SIGKILL; the log ends: step 9" and "dmesg" in c.hint
    read = bool(records.kernel or records.cgroup)
    assert ("no OOM record was found" in c.hint) == read and ("there are no host records from " in c.hint) == (not read)


def test_oom_needs_sigkill():
    assert classify(fail(("step 9",), rc=1, records=HostRecords(kernel=KERNEL), pids=(4242,))).kind == "unknown"


def test_address_in_use_in_the_schedulers_log_names_port_and_host():
    sched = (
        "[WARNING] DISTRIBUTED(41187,7f6a,python):2026-11-26-07:40:11.498.210 [meta_server_node.cc:64] Initialize] "
        "Start the meta server",
        "[ERROR] DISTRIBUTED(41187,7f6a,python):2026-11-26-07:40:11.512.003 [socket_operation.cc:281] Listen] Failed "
        "to call bind, url: tcp://10.0.0.1:8118",
    )
    c = classify(
        fail(("Worker failed to connect to the scheduler",), rc=1, scheduler_tail=sched, scheduler_host="node1")
    )
    assert c.kind == "address_in_use"
    assert c.evidence == "the scheduler's log: Failed to call bind, url: tcp://10.0.0.1:8118 (on node1)"
    assert c.hint == "port 8118 is taken on node1: run with --master-port auto (or free the port)"


@pytest.mark.parametrize(
    "line,port",
    [
        ("OSError: [Errno 98] Address already in use", ""),
        ("RuntimeError: Failed to bind the server on 10.0.0.3:29500", "29500"),
        ("[ERROR] bind port 6000 failed: EADDRINUSE", "6000"),
    ],
)
def test_address_in_use_lines(line, port):
    c = classify(fail(("x", line), rc=1))
    assert c.kind == "address_in_use" and c.evidence.endswith("(on node2)")
    assert ("port " + port in c.hint) if port else c.hint.startswith("a port is taken on node2")
    assert "--master-port auto" in c.hint


def test_a_list_of_possible_reasons_naming_a_port_is_not_address_in_use():
    exc = (
        "RuntimeError: Failed to initialize distributed job cluster ... It may be one of the following reasons:",
        "1.Spawned worker process number is not as expected.",
        "2.Configured scheduler port MS_SCHED_PORT is occupied by other processes.",
    )
    c = classify(fail(tb("/job/train.py:12:<module>", exc=exc[0], details=exc[1:])))
    assert c.kind == "python_exception"


@pytest.mark.parametrize(
    "line,evidence,hint",
    [
        ("EE9999: Inner Error!", "EE9999: Inner Error!", "look up EE9999"),
        (
            "[ERROR] RUNTIME(1,python):2023-01-10 [stream.cc:1044] GetError:report error module_type=7, "
            "module_name=EZ9999",
            "module_name=EZ9999",
            "look up EZ9999",
        ),
        (
            "EI0006: Getting socket times out. Reason: 1. The remote does not initiate a connect request.",
            "EI0006: Getting socket times out",
            "HCCL_CONNECT_TIMEOUT",
        ),
        (
            "RuntimeError: Malloc device memory failed, size[32212254720], ret[207001]",
            "Malloc device memory failed",
            "device ran out of memory",
        ),
        (
            "[ERROR] HCCL(1,python):2022 [hcom.cc:94] hcom init failed, rankNum[8]",
            "hcom init failed",
            "HCCL could not start on node2",
        ),
        (
            "node2:51773:51810 [0] misc/socket.cc:484 NCCL WARN Net : Connect to 10.0.0.1<43761> failed",
            "NCCL WARN",
            "NCCL could not set up on node2",
        ),
        (
            "RuntimeError: ncclCommInitRank failed: unhandled system error",
            "ncclCommInitRank failed",
            "NCCL_SOCKET_IFNAME",
        ),
    ],
)
def test_device_errors(line, evidence, hint):
    c = classify(fail(("epoch: 1 step: 3, loss is 2.1", line), rc=1))
    assert c.kind == "device_error" and evidence in c.evidence and hint in c.hint


@pytest.mark.parametrize("text", ["E10000 images", "step E12345 done", "ERROR1234: not a code"])
def test_words_that_look_like_codes_are_not_device_errors(text):
    assert classify(fail((text,), rc=1)).kind == "unknown"


def test_collective_timeout_in_the_log_without_a_report():
    line = "[ERROR] DEVICE(1,7f,python):2026 [ring.cc:12] Run] Ring AllReduce wait receiving failed, timeout 30 s"
    c = classify(fail(("step 3", line), rc=1))
    assert c.kind == "collective_timeout" and c.evidence == "Ring AllReduce wait receiving failed, timeout 30 s"


@pytest.mark.parametrize(
    "tail,path",
    [
        (
            tb("/job/train.py:40:save", exc="OSError: [Errno 28] No space left on device: '/ckpt/resnet-3_100.ckpt'"),
            "/ckpt/resnet-3_100.ckpt",
        ),
        (("[ERROR] ME(1,python):2026 [checkpoint.cc:9] Save] write failed: No space left on device",), None),
        (("tee: /logs/rank_0.log: ENOSPC",), None),
    ],
)
def test_disk_full(tail, path):
    c = classify(fail(tail, rc=1))
    assert c.kind == "disk_full"
    assert (
        (path in c.evidence and f"where {path} is written" in c.hint)
        if path
        else c.hint.startswith("free space on node2")
    )


def test_native_crash_with_a_faulthandler_dump():
    tail = (
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x00007f18d2c1ab80 (most recent call first):",
        f'  File "{SITE}/mindspore/common/api.py", line 1211 in _exec_pip',
        '  File "/job/train.py", line 33 in step',
        '  File "/job/train.py", line 50 in <module>',
    )
    c = classify(fail(tail, rc=-11))
    assert c.kind == "native_crash"
    assert c.evidence == (
        f"SIGSEGV; Fatal Python error: Segmentation fault; in {SITE}/mindspore/common/api.py:1211 (_exec_pip), "
        "called from /job/train.py:33 (step)"
    )
    assert "not the script" in c.hint


@pytest.mark.parametrize("rc,name", [(-6, "SIGABRT"), (-7, "SIGBUS"), (-4, "SIGILL"), (-8, "SIGFPE"), (139, "SIGSEGV")])
def test_native_crash_signals(rc, name):
    c = classify(fail(("epoch: 1 step: 3, loss is 2.1",), rc=rc))
    assert c.kind == "native_crash" and c.evidence == f"{name}; the log ends: epoch: 1 step: 3, loss is 2.1"


#: MindSpore 2.10's scheduler log of a 2-rank job whose workers both left the cluster (shortened).
SCHED_LEFT = (
    "[WARNING] DISTRIBUTED(26170,7fde92ba06c0,python):2026-11-29-22:35:39.363.400 [mindspore/ccsrc/cluster/topology/"
    "meta_server_node.cc:254] ProcessRegister] The new node: {n0}(role: MS_WORKER), rank id: 0, device id: 0, "
    "hostname: vm, ip: 127.0.0.1 is registered successfully. Currently registered node number: 1",
    "[WARNING] DISTRIBUTED(26170,7fde92ba06c0,python):2026-11-29-22:35:39.429.944 [mindspore/ccsrc/cluster/topology/"
    "meta_server_node.cc:254] ProcessRegister] The new node: {n1}(role: MS_WORKER), rank id: 1, device id: 1, "
    "hostname: vm, ip: 127.0.0.1 is registered successfully. Currently registered node number: 2",
    "[WARNING] DISTRIBUTED(26170,7fde92ba06c0,python):2026-11-29-22:35:42.427.931 [mindspore/ccsrc/cluster/topology/"
    "meta_server_node.cc:323] ProcessUnregister] Node {n0} has unregistered.",
    "[WARNING] DISTRIBUTED(26170,7fde92ba06c0,python):2026-11-29-22:35:42.447.807 [mindspore/ccsrc/cluster/topology/"
    "meta_server_node.cc:323] ProcessUnregister] Node {n1} has unregistered.",
)
EXIT_TAIL = (
    "main code done",
    "[INFO] DISTRIBUTED(26179,7fde7bfff6c0,python):2026-11-29-22:35:42.327.505 [mindspore/ccsrc/cluster/rpc/core/"
    "communicator/tcp_server.cc:314] Start] Event base dispatch success!",
)


@pytest.mark.parametrize("nodes", [("0", "1"), ("a1f3", "77c0")])  # MS_NODE_ID = rank, or MindSpore's own ids
def test_a_native_crash_after_the_rank_left_the_cluster_says_its_program_had_ended(nodes):
    sched = tuple(x.format(n0=nodes[0], n1=nodes[1]) for x in SCHED_LEFT)
    c = classify(fail(EXIT_TAIL, rc=-11, name="rank 1", scheduler_tail=sched, scheduler_host="node1"))
    assert c.kind == "native_crash"
    assert c.evidence.startswith(
        f"SIGSEGV; after it left the cluster (the scheduler's log: Node {nodes[1]} has "
        "unregistered.); the log ends: [INFO] DISTRIBUTED("
    ), c.evidence
    assert c.hint.startswith("it crashed in the framework's exit cleanup, after its program had ended"), c.hint


@pytest.mark.parametrize(
    "name, unregistered",
    [
        ("rank 1", ()),  # nobody left yet: a crash while it ran
        ("rank 1", (2,)),  # the other rank left, not this one
        ("rank 0", (3,)),
        ("scheduler", (2, 3)),
    ],
)
def test_a_native_crash_before_the_rank_left_is_a_crash_of_its_run(name, unregistered):
    sched = SCHED_LEFT[:2] + tuple(SCHED_LEFT[i] for i in unregistered)
    sched = tuple(x.format(n0="0", n1="1") for x in sched)
    c = classify(fail(EXIT_TAIL, rc=-11, name=name, scheduler_tail=sched))
    assert c.kind == "native_crash" and "left the cluster" not in c.evidence and "not the script" in c.hint


def test_native_crash_names_the_first_frame_outside_the_c_runtime():
    tail = (
        "terminate called after throwing an instance of 'std::runtime_error'",
        "  what():  The pointer[stream] is null.",
        "#0  0x00007f3c2a49e9fc in __pthread_kill_implementation () from /lib/x86_64-linux-gnu/libc.so.6",
        "#1  0x00007f3c2a44a476 in raise () from /lib/x86_64-linux-gnu/libc.so.6",
        "#2  0x00007f3c1b2a3b9e in mindspore::Foo::Bar(int) () from /x/libmindspore_backend.so",
    )
    c = classify(fail(tail, rc=-6))
    assert c.evidence == (
        "SIGABRT; terminate called after throwing an instance of 'std::runtime_error': The pointer[stream] is null.; "
        "in #2 mindspore::Foo::Bar(int) () from /x/libmindspore_backend.so"
    )


@pytest.mark.parametrize(
    "exc,module",
    [
        ("ModuleNotFoundError: No module named 'mindspore'", "mindspore"),
        ("ModuleNotFoundError: No module named 'mindformers.models'", "mindformers.models"),
        (
            "ImportError: cannot import name 'set_auto_parallel_context' from 'mindspore' (/x/mindspore/__init__.py)",
            "mindspore",
        ),
        (
            "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
            "libcudart.so.11.0",
        ),
    ],
)
def test_missing_module(exc, module):
    c = classify(fail(tb("/job/train.py:3:<module>", exc=exc)))
    assert c.kind == "missing_module"
    assert c.evidence == f"{exc} at /job/train.py:3 (<module>) (on node2)"
    assert (
        c.hint == f"install {module} on node2 for the Python the ranks run there (or set --python to one that has it)"
    )
    assert c.key == ("missing_module", module)


def test_missing_module_without_a_traceback():
    c = classify(fail(("/usr/bin/python3: No module named launcher_train",), rc=1))
    assert c.kind == "missing_module" and "launcher_train" in c.hint


@pytest.mark.parametrize(
    "tail,path",
    [
        (
            tb(
                "/job/train.py:9:restore",
                exc="FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/a b.ckpt'",
            ),
            "/ckpt/a b.ckpt",
        ),
        (
            tb(
                "/job/train.py:9:restore",
                exc='FileNotFoundError: [Errno 2] No such file or directory: "/data/it\'s.bin"',
            ),
            "/data/it's.bin",
        ),
        (
            tb(
                "/job/train.py:9:load",
                f"{SITE}/mindspore/dataset/core/validator_helpers.py:560:check_dir",
                exc="ValueError: The folder /data/cifar does not exist or is not a directory or permission denied!",
            ),
            "/data/cifar",
        ),
        (
            tb(
                "/job/train.py:9:load",
                exc="RuntimeError: Invalid file, failed to open file: /data/train.mindrecord, please check",
            ),
            "/data/train.mindrecord",
        ),
        (
            ("/opt/venv/bin/python3: can't open file '/job/train.py': [Errno 2] No such file or directory",),
            "/job/train.py",
        ),
    ],
)
def test_missing_file(tail, path):
    c = classify(fail(tail, rc=2 if len(tail) == 1 else 1))
    assert c.kind == "missing_file" and path in c.evidence and c.evidence.endswith("(on node2)")
    assert c.hint == f"make {path} exist on node2 (copy it there or use a shared filesystem), or fix the path"
    assert c.key == ("missing_file", path)


@pytest.mark.parametrize(
    "line",
    [
        "bash: line 1: /opt/venv/bin/python3: No such file or directory",
        "bash: python3.9: command not found",
        "env: 'python3': No such file or directory",
        # the agent's failure as mslaunch writes it into the rank's log
        "mslaunch: the mslaunch agent on h3 exited with status 127: bash: line 1: /no/such/python3: No such file or "
        "directory",
    ],
)
def test_a_missing_interpreter_points_at_python(line):
    c = classify(fail((line,), rc=127))
    assert c.kind == "missing_file" and "--python" in c.hint


def test_python_exception_names_type_message_and_the_users_innermost_frame():
    tail = tb(
        "/job/train.py:50:<module>",
        "/job/model/net.py:12:construct",
        f"{SITE}/mindspore/nn/cell.py:700:__call__",
        "/usr/lib/python3.11/json/decoder.py:337:decode",
        exc="KeyError: 'batch_size'",
    )
    c = classify(fail(tail))
    assert c.kind == "python_exception"
    assert c.evidence == "KeyError: 'batch_size' at /job/model/net.py:12 (construct)"
    assert c.hint == "the script raised KeyError at /job/model/net.py:12 (construct): fix it there (a restart will not)"


def test_python_exception_takes_the_last_of_a_chain():
    first = tb(
        "/job/train.py:11:load_config", exc="json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"
    )
    second = tb("/job/train.py:22:<module>", "/job/train.py:14:load_config", exc="KeyError: 'batch_size'")
    tail = first + ("", "During handling of the above exception, another exception occurred:", "") + second
    c = classify(fail(tail))
    assert c.evidence == "KeyError: 'batch_size' at /job/train.py:14 (load_config)"


def test_python_exception_in_mindspores_wrapper_reads_its_sections():
    details = (
        "",
        "-" * 52,
        "- Python Call Stack:",
        "-" * 52,
        'File "/job/net.py", line 23, in construct',
        "",
        "-" * 52,
        "- C++ Call Stack: (For framework developers)",
        "-" * 52,
        "mindspore/ccsrc/pipeline/jit/ps/parse/parse.cc:12 Parse",
    )
    tail = tb(
        "/job/train.py:40:<module>",
        f"{SITE}/mindspore/common/api.py:1211:_exec_pip",
        exc="RuntimeError: The graph failed to compile.",
        details=details,
    )
    c = classify(fail(tail))
    assert c.kind == "python_exception"
    assert c.evidence == "RuntimeError: The graph failed to compile. at /job/net.py:23 (construct)"


def test_python_exception_without_a_user_frame_says_so():
    c = classify(fail(tb(f"{SITE}/mindspore/train/model.py:715:train", exc="RuntimeError: boom")))
    assert c.kind == "python_exception" and "no frame of the script's own files" in c.hint


def test_unknown_is_the_last_non_empty_line():
    c = classify(fail(("starting", "epoch: 1 step: 3, loss is 2.1", "", "  "), rc=3))
    assert c == Cause(
        "unknown", "epoch: 1 step: 3, loss is 2.1", "no known cause matched: read the end of /job/rank_2.log"
    )
    assert classify(fail((), rc=3)).evidence == "(empty log)"


# ---------------------------------------------------------------- precedence


def test_a_native_crash_after_an_unrelated_python_warning_is_a_native_crash():
    tail = (
        "/job/train.py:5: UserWarning: this warning has nothing to do with the crash",
        '  warnings.warn("...")',
        "step 1",
    )
    assert classify(fail(tail, rc=-11)).kind == "native_crash"


def test_a_traceback_in_the_log_of_a_process_killed_by_a_signal_did_not_end_it():
    tail = tb("/job/train.py:9:step", exc="KeyError: 'x'") + ("retrying", "step 2")
    assert classify(fail(tail, rc=-11)).kind == "native_crash"
    assert classify(fail(tail, rc=-9)).kind == "unknown"
    logged = tb("/job/train.py:9:load", exc="FileNotFoundError: [Errno 2] No such file or directory: '/data/x'") + (
        "retrying",
        "step 2",
    )
    assert classify(fail(logged, rc=-9)).kind == "unknown" and classify(fail(logged, rc=1)).kind == "missing_file"


def test_an_exception_that_is_really_a_missing_module():
    first = tb("/job/train.py:3:<module>", exc="ModuleNotFoundError: No module named 'mindspore'")
    second = tb("/job/train.py:5:<module>", exc="RuntimeError: MindSpore is not installed")
    tail = first + ("", "During handling of the above exception, another exception occurred:", "") + second
    c = classify(fail(tail))
    assert c.kind == "missing_module" and c.key == ("missing_module", "mindspore")


def test_an_oserror_that_is_really_a_full_disk_or_a_taken_port():
    assert classify(fail(tb("/job/a.py:1:f", exc="OSError: [Errno 28] No space left on device"))).kind == "disk_full"
    assert (
        classify(fail(tb("/job/a.py:1:f", exc="OSError: [Errno 98] Address already in use"))).kind == "address_in_use"
    )


def test_a_device_error_before_the_abort_it_caused():
    tail = (
        "EJ0001: Failed to initialize the HCCP process. Reason: Maybe the last training process is running.",
        "terminate called after throwing an instance of 'std::runtime_error'",
    )
    assert classify(fail(tail, rc=-6)).kind == "device_error"


def test_judged_causes_come_first():
    tail = tb("/job/train.py:9:step", exc="KeyError: 'x'")
    assert classify(fail(tail, lost="connection to node2 lost (closed)", hang=HANG)).kind == "lost_host"
    assert classify(fail(tail, rc=-15, hang=HANG)).kind == "hang"
    assert classify(fail(tail, rc=-9, records=HostRecords(kernel=KERNEL), pids=(4242,))).kind == "oom"


def test_only_the_tail_is_read():
    tail = tb("/job/train.py:9:step", exc="OSError: [Errno 28] No space left on device") + ("x",) * TAIL_LINES
    assert classify(fail(tail, rc=3)).kind == "unknown"


# ---------------------------------------------------------------- the restart rule's "same cause"


def _exc(message="'batch_size'", where="/job/train.py:14:load_config", kind="KeyError"):
    return classify(fail(tb("/job/train.py:22:<module>", where, exc=f"{kind}: {message}")))


def test_same_unfixable_for_the_same_exception_at_the_same_place():
    assert same_unfixable(_exc(), _exc())
    assert same_unfixable(
        _exc("object at 0x7f3a11211b80"), _exc("object at 0x7f3a2222aaaa")
    )  # addresses differ run to run
    assert not same_unfixable(_exc(), _exc(message="'lr'"))
    assert not same_unfixable(_exc(), _exc(where="/job/train.py:15:load_config"))
    assert not same_unfixable(_exc(), _exc(kind="ValueError"))


def test_same_unfixable_for_modules_and_files_on_any_host():
    a = classify(fail(tb("/job/t.py:3:<module>", exc="ModuleNotFoundError: No module named 'mindspore'"), host="node1"))
    b = classify(fail(tb("/job/t.py:3:<module>", exc="ModuleNotFoundError: No module named 'mindspore'"), host="node4"))
    other = classify(fail(tb("/job/t.py:3:<module>", exc="ModuleNotFoundError: No module named 'numpy'")))
    assert same_unfixable(a, b) and not same_unfixable(a, other)
    f1 = classify(fail(("python3: can't open file '/job/t.py': [Errno 2] No such file or directory",), rc=2))
    assert same_unfixable(f1, f1) and not same_unfixable(f1, a)


def test_causes_a_restart_may_fix_are_never_the_same():
    oom = classify(fail(rc=-9, records=HostRecords(kernel=KERNEL)))
    crash = classify(fail(("step 1",), rc=-11))
    assert oom.kind == "oom" and not same_unfixable(oom, oom)
    assert not same_unfixable(crash, crash) and not same_unfixable(None, crash)


def test_same_unfixable_on_causes_read_back_from_json():
    a, b = _exc(), _exc(message="'lr'")
    assert Cause.from_json(a.to_json()) == a and Cause.from_json(a.to_json()).key is None
    assert same_unfixable(Cause.from_json(a.to_json()), a)
    assert not same_unfixable(Cause.from_json(a.to_json()), Cause.from_json(b.to_json()))
    assert Cause.from_json({"kind": "oom"}) is None and Cause.from_json(None) is None


def test_the_line_that_stops_the_restarts():
    missing = classify(fail(tb("/job/t.py:3:<module>", exc="ModuleNotFoundError: No module named 'mindspore'")))
    crash = classify(fail(("step 1",), rc=-11))
    assert repeated_unfixable([(0, missing), (1, missing)]) == (
        "attempts 0 and 1 failed the same way (missing_module: ModuleNotFoundError: No module named 'mindspore' at "
        "/job/t.py:3 (<module>) "
        "(on node2)), which a restart cannot fix: not restarting"
    )
    assert repeated_unfixable([(3, _exc()), (4, missing), (5, _exc())]) is None  # not the last two
    assert repeated_unfixable([(0, crash), (1, crash)]) is None and repeated_unfixable([(0, missing)]) is None
    assert repeated_unfixable([(0, missing), (1, None)]) is None and repeated_unfixable([]) is None


# ---------------------------------------------------------------- rendering


def test_to_json_console_and_junit():
    c = Cause("disk_full", "OSError: [Errno 28] No space left on device", "free space on node2")
    assert c.to_json() == {
        "kind": "disk_full",
        "evidence": "OSError: [Errno 28] No space left on device",
        "hint": "free space on node2",
    }
    assert console_lines(c) == [
        "cause: disk_full: OSError: [Errno 28] No space left on device",
        "hint: free space on node2",
    ]
    assert junit_message(c) == "disk_full: OSError: [Errno 28] No space left on device (hint: free space on node2)"
    assert (
        junit_message(c, "exit code 1")
        == "exit code 1; disk_full: OSError: [Errno 28] No space left on device (hint: free space on node2)"
    )


def test_evidence_is_one_bounded_line():
    c = classify(fail(tb("/job/t.py:1:f", exc="ValueError: " + "x" * 2000, details=("second line",))))
    assert len(c.evidence) <= EVIDENCE_MAX and c.evidence.endswith("...") and "\n" not in c.evidence


_line = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
_tails = st.lists(
    st.one_of(
        _line,
        st.sampled_from(
            [
                "Traceback (most recent call last):",
                '  File "/job/t.py", line 3, in f',
                "    f()",
                "KeyError: 'x'",
                "OSError: [Errno 28] No space left on device",
                "EI0006: Getting socket times out.",
                "Fatal Python error: Segmentation fault",
                "#0  0x0 in raise ()",
                "During handling of the above exception, another exception occurred:",
                "ModuleNotFoundError: No module named 'x'",
                "Failed to call bind, url: tcp://1.2.3.4:8118",
                "",
            ]
        ),
    ),
    max_size=30,
)


@settings(max_examples=examples(300), deadline=None)
@given(tail=_tails, rc=st.one_of(st.none(), st.integers(-64, 255)))
def test_classify_always_gives_one_known_kind_with_one_line_evidence_and_hint(tail, rc):
    c = classify(fail(tail, rc=rc))
    assert c.kind in KINDS
    assert c.evidence and c.hint and "\n" not in c.evidence and "\n" not in c.hint
    assert len(c.evidence) <= EVIDENCE_MAX
    if signal_of(rc) == signal.SIGKILL:
        assert c.kind != "oom"  # never without host records


# ---------------------------------------------------------------- other shapes of the same causes


def test_a_syntax_error_names_its_file_and_line():
    tail = (
        "Traceback (most recent call last):",
        '  File "/job/run.py", line 5, in <module>',
        "    import train",
        '  File "/job/train.py", line 3',
        "    foo(",
        "       ^",
        "SyntaxError: '(' was never closed",
    )
    c = classify(fail(tail))
    assert c.kind == "python_exception" and c.evidence == "SyntaxError: '(' was never closed at /job/train.py:3"


def test_a_traceback_with_a_prefix_on_every_line():
    tail = tuple("[rank1]: " + x for x in tb("/job/train.py:9:step", exc="ValueError: bad shape")) + (
        "[rank1]: exiting",
    )
    c = classify(fail(tail))
    assert c.kind == "python_exception" and c.evidence == "ValueError: bad shape at /job/train.py:9 (step)"
    missing = tuple(
        "[rank1]: " + x for x in tb("/job/train.py:1:<module>", exc="ModuleNotFoundError: No module named 'mindspore'")
    )
    assert classify(fail(missing)).kind == "missing_module"


def test_a_logger_prefixed_traceback_header():
    tail = (
        ("2026-11-26 07:00:00,123 ERROR train failed",)
        + ("2026-11-26 07:00:00,124 ERROR Traceback (most recent call last):",)
        + tb("/job/train.py:9:step", exc="ValueError: bad shape")[1:]
    )
    assert classify(fail(tail)).evidence == "ValueError: bad shape at /job/train.py:9 (step)"


def test_a_missing_module_line_without_a_traceback():
    assert classify(fail(("[rank1]: ModuleNotFoundError: No module named 'mindspore'",))).kind == "missing_module"


def test_a_full_disk_path_with_spaces():
    c = classify(
        fail(tb("/job/t.py:4:save", exc="OSError: [Errno 28] No space left on device: '/mnt/my ckpts/a.ckpt'"))
    )
    assert c.kind == "disk_full" and "where /mnt/my ckpts/a.ckpt is written" in c.hint


def test_a_taken_port_in_pythons_address_tuple():
    exc = "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8118): address already in use"
    c = classify(fail(tb(f"{SITE}/aiohttp/web.py:10:start", exc=exc)))
    assert c.kind == "address_in_use" and c.hint.startswith("port 8118 is taken on node2")
