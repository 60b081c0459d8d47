"""The one reader of job files: any bytes give a validated object or a one-line CorruptJobFile."""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.jobs.jobdir import job_info
from launcher.jobs.jobfile import SCHEMAS, CorruptJobFile, parse_job_file, read_job_file
from tests.harness.hypo import examples

KINDS = sorted(SCHEMAS)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
# objects with the fields the schemas name, holding values of any JSON type
field_objects = st.fixed_dictionaries({}, optional={k: json_values for kind in KINDS for k in SCHEMAS[kind]})


def assert_reads_or_corrupt(data: bytes, kind: str) -> None:
    try:
        obj = parse_job_file(data, kind, "/j/" + kind)
    except CorruptJobFile as exc:
        text = str(exc)
        assert text.startswith(f"/j/{kind}: ") and "\n" not in text, text
        return
    assert isinstance(obj, dict)
    for key, (check, required) in SCHEMAS[kind].items():
        assert (key in obj) or not required
        if key in obj:
            assert check(obj[key]) is None


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KINDS), st.binary(max_size=200))
def test_any_bytes(kind, data):
    assert_reads_or_corrupt(data, kind)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KINDS), field_objects | json_values)
def test_any_json(kind, value):
    assert_reads_or_corrupt(json.dumps(value).encode(), kind)


def test_bombs_and_edges():
    for data in (
        b"[" * 100000,
        b'{"a":' * 50000,
        b"9" * 5000,
        b'{"status": "x", "exit_code": Infinity}',
        b"\xef\xbb\xbf{}",
        b"\x00",
        b'{"status": "ok"}' + b" " * 10 + b"x",
        b'{"job_id": "a", "job_id": "../b", "world_size": 1}',
    ):
        for kind in KINDS:
            assert_reads_or_corrupt(data, kind)


def test_job_info_never_raises_on_files(tmp_path):
    """Every file kind, damaged in the job dir itself, ends as `corrupt` with the file named."""
    for name in ("plan.json", "job.json", "summary.json"):
        d = tmp_path / name.replace(".", "_")
        d.mkdir()
        (d / name).write_bytes(b"\xff")
        info = job_info(str(d))
        assert info.state == "corrupt" and info.problem == f"{d / name}: not UTF-8 text (byte 0)"
    assert read_job_file(str(tmp_path / "missing.json"), "plan.json") is None
    assert read_job_file(str(tmp_path / "plan_json" / "plan.json" / "below"), "plan.json") is None  # a file as a folder
    os.symlink("/dev/zero", tmp_path / "zero.json")
    try:
        read_job_file(str(tmp_path / "zero.json"), "summary.json")
    except CorruptJobFile as exc:
        assert "is a symbolic link" in str(exc)
    else:
        raise AssertionError("a symlink was read")


def test_a_summarys_root_cause_may_carry_a_cause_of_strings():
    head = {
        "status": "failed",
        "root_cause": {"name": "rank 0", "host": "h1", "reason": "exit code 1", "log": "/l", "tail": []},
    }
    good = dict(
        head["root_cause"], cause={"kind": "missing_module", "evidence": "No module named 'x'", "hint": "install x"}
    )
    assert (
        parse_job_file(json.dumps(dict(head, root_cause=good)).encode(), "summary.json", "/j/s")["root_cause"]["cause"][
            "kind"
        ]
        == "missing_module"
    )
    assert parse_job_file(json.dumps(dict(head, root_cause=dict(good, cause=None))).encode(), "summary.json", "/j/s")
    assert parse_job_file(json.dumps(head).encode(), "summary.json", "/j/s")  # written before causes existed
    for bad in ("oom", {"kind": "oom", "evidence": 3, "hint": "h"}, {"kind": "oom", "hint": "h"}):
        try:
            parse_job_file(json.dumps(dict(head, root_cause=dict(good, cause=bad))).encode(), "summary.json", "/j/s")
        except CorruptJobFile as exc:
            assert "'cause'" in str(exc) and "root_cause" in str(exc), str(exc)
        else:
            raise AssertionError(f"accepted {bad!r}")
