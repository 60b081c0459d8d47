"""Reading tracebacks, faulthandler dumps and native stacks from a log's tail (pure)."""

from __future__ import annotations

import pytest

from launcher.logs.tracebacks import PyFrame, exception_chain, is_user_file, native_crash, strip_ansi

CHAINED = """\
Traceback (most recent call last):
  File "/job/train.py", line 11, in load_config
    return json.loads(text)
           ^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/json/__init__.py", line 346, in loads
    return _default_decoder.decode(s)
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/job/train.py", line 22, in <module>
    main()
  File "/job/train.py", line 14, in load_config
    raise ConfigError("bad config") from exc
train.ConfigError: bad config
[WARNING] ME(1,7f,python):2026-11-26-07:40:11.498.210 [x.cc:1] f] unrelated record after the traceback
""".splitlines()


def test_a_chain_oldest_first_the_last_ended_the_process():
    chain = exception_chain(CHAINED)
    assert [(e.type, e.name, e.message) for e in chain] == [
        ("json.decoder.JSONDecodeError", "JSONDecodeError", "Expecting value: line 1 column 1 (char 0)"),
        ("train.ConfigError", "ConfigError", "bad config"),
    ]
    last = chain[-1]
    assert last.frames == (PyFrame("/job/train.py", 22, "<module>"), PyFrame("/job/train.py", 14, "load_config"))
    assert last.details == () and last.line == "train.ConfigError: bad config"
    assert str(last.user_frame()) == "/job/train.py:14 (load_config)"
    assert chain[0].user_frame() == PyFrame(
        "/job/train.py", 11, "load_config"
    )  # json's frame is the standard library's


def test_unchained_tracebacks_are_separate():
    lines = CHAINED[:7] + ["retrying", "step 2"] + CHAINED[10:]
    assert [e.name for e in exception_chain(lines)] == ["ConfigError"]


def test_a_tail_that_cut_the_header_still_gives_the_exception():
    chain = exception_chain(CHAINED[12:])
    assert [e.name for e in chain] == ["ConfigError"] and chain[0].frames[-1].line == 14


def test_no_traceback():
    assert exception_chain(["epoch: 1 step: 3, loss is 2.1", "done"]) == []
    assert exception_chain([]) == []


def test_mindspores_sections_are_the_messages_not_frames():
    lines = [
        "Traceback (most recent call last):",
        '  File "/job/train.py", line 9, in <module>',
        "    init()",
        "RuntimeError: Ascend collective communication initialization failed.",
        "",
        "-" * 52,
        "- Ascend Error Message:",
        "-" * 52,
        "EJ0001: Failed to initialize the HCCP process.",
        "        Solution: Wait for 10s.",
        "",
        "-" * 52,
        "- C++ Call Stack: (For framework developers)",
        "-" * 52,
        "mindspore/ccsrc/plugin/device/ascend/hal/hccl_adapter/hccl_adapter.cc:402 InitKernelInfoStore",
        "",
        "",
    ]
    exc = exception_chain(lines)[-1]
    assert exc.message == "Ascend collective communication initialization failed."
    assert exc.sections() == {
        "Ascend Error Message": ("EJ0001: Failed to initialize the HCCP process.", "Solution: Wait for 10s."),
        "C++ Call Stack": (
            "mindspore/ccsrc/plugin/device/ascend/hal/hccl_adapter/hccl_adapter.cc:402 InitKernelInfoStore",
        ),
    }
    assert exc.details[-1].startswith("mindspore/ccsrc")  # trailing blanks dropped
    assert "EJ0001" in exc.text


@pytest.mark.parametrize(
    "entry,frame",
    [
        ('File "/job/net.py", line 23, in construct', PyFrame("/job/net.py", 23, "construct")),
        ("# 0 In file /job/net.py:23, 15~27", PyFrame("/job/net.py", 23)),
    ],
)
def test_a_python_call_stack_section_names_the_user_frame(entry, frame):
    lines = [
        "Traceback (most recent call last):",
        '  File "/job/train.py", line 40, in <module>',
        "    model.train()",
        "RuntimeError: compile failed",
        "",
        "-" * 52,
        "- Python Call Stack:",
        "-" * 52,
        'File "/opt/venv/lib/python3.9/site-packages/mindspore/nn/cell.py", line 700, in __call__',
        entry,
    ]
    assert exception_chain(lines)[-1].user_frame() == frame


@pytest.mark.parametrize(
    "path,user",
    [
        ("/job/train.py", True),
        ("train.py", True),
        ("/home/u/mindspore-models/resnet/train.py", True),
        ("/home/u/mindspore/my_net.py", True),
        ("/opt/venv/lib/python3.11/site-packages/mindspore/nn/cell.py", False),
        ("/usr/lib/python3/dist-packages/numpy/core.py", False),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/json/decoder.py", False),
        ("/usr/lib64/python3.9/threading.py", False),
        ("<frozen importlib._bootstrap>", False),
        ("/src/mindspore/mindspore/train/model.py", False),
    ],
)
def test_user_files(path, user):
    assert is_user_file(path) is user


def test_faulthandler_dump():
    lines = [
        "step 1",
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x00007f00aaaa (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
        "",
        "Current thread 0x00007f18d2c1ab80 (most recent call first):",
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at',
        '  File "/job/native.py", line 9 in native_step',
        '  File "/job/native.py", line 13 in <module>',
        "",
        "Extension modules: numpy.core._multiarray_umath (total: 1)",
    ]
    crash = native_crash(lines)
    assert crash.error == "Fatal Python error: Segmentation fault"
    assert (
        crash.frame == "/usr/lib/python3.11/ctypes/__init__.py:519 (string_at)"
        and crash.caller == "/job/native.py:9 (native_step)"
    )


def test_faulthandler_innermost_in_the_users_file_has_no_separate_caller():
    lines = [
        "Fatal Python error: Aborted",
        "",
        "Current thread 0x1 (most recent call first):",
        '  File "/job/t.py", line 3 in f',
    ]
    assert native_crash(lines).frame == "/job/t.py:3 (f)" and native_crash(lines).caller is None


def test_the_last_native_stack_counts():
    lines = [
        "#0  0x1 in old_crash () from /x/liba.so",
        "restarted",
        "#0  0x2 in raise () from /lib/x86_64-linux-gnu/libc.so.6",
        "#1  0x3 in abort () from /lib/x86_64-linux-gnu/libc.so.6",
        "#2  0x4 in mindspore::Run() at run.cc:12",
    ]
    assert native_crash(lines).frame == "#2 mindspore::Run() at run.cc:12"
    only_libc = ["#0  0x2 in raise () from /lib/x86_64-linux-gnu/libc.so.6"]
    assert native_crash(only_libc).frame == "#0 raise () from /lib/x86_64-linux-gnu/libc.so.6"


def test_nothing_native():
    crash = native_crash(["step 1", "step 2"])
    assert crash.error is None and crash.frame is None and crash.caller is None


def test_strip_ansi():
    assert strip_ansi("\x1b[31mKeyError: 'x'\x1b[0m  \r") == "KeyError: 'x'"
    assert (
        exception_chain(
            [
                strip_ansi(x)
                for x in [
                    "\x1b[1mTraceback (most recent call last):\x1b[0m",
                    '  File "/a.py", line 1, in f',
                    "    f()",
                    "\x1b[31mKeyError: 'x'\x1b[0m",
                ]
            ]
        )[-1].name
        == "KeyError"
    )
