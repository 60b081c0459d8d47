"""``junit_xml``: one testcase per process, failures with their reason and log tail, skipped
for torn-down processes, escaping of every text, and always well-formed XML (parsed back)."""

import xml.etree.ElementTree as ET

from launcher.execution.results import JobResult, ProcResult
from launcher.execution.runner import junit_xml

T0 = 1_700_000_000.0


def proc(name, rank, log, returncode=0, torn_down=False, reason=None, started=T0, ended=T0 + 2.5):
    return ProcResult(
        name=name,
        rank=rank,
        host="h1",
        returncode=returncode,
        started=started,
        ended=ended,
        log=str(log),
        torn_down=torn_down,
        reason=reason,
    )


def job(*processes, job_id="20240101-000000-abcd"):
    return JobResult(
        job_id=job_id,
        job_dir="/j",
        status="failed",
        exit_code=1,
        started=T0,
        ended=T0 + 4.0,
        attempts=1,
        processes=tuple(processes),
    )


def parse(text):
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    return ET.fromstring(text.encode("utf-8"))


def test_suite_counts_cases_failures_and_times(tmp_path):
    ok = proc("rank 0", 0, tmp_path / "w0.log")
    bad = proc("rank 1", 1, tmp_path / "w1.log", returncode=3, ended=T0 + 1.25)
    torn = proc("scheduler", None, tmp_path / "s.log", returncode=-15, torn_down=True)
    suite = parse(junit_xml(job(ok, bad, torn)))
    assert suite.tag == "testsuite"
    assert suite.attrib == {"name": "mslaunch 20240101-000000-abcd", "tests": "3", "failures": "1", "time": "4.000"}
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name"), c.get("time")) for c in cases] == [
        ("mslaunch.20240101-000000-abcd", "rank 0", "2.500"),
        ("mslaunch.20240101-000000-abcd", "rank 1", "1.250"),
        ("mslaunch.20240101-000000-abcd", "scheduler", "2.500"),
    ]
    assert list(cases[0]) == []
    assert [e.tag for e in cases[1]] == ["failure"]
    assert cases[1].find("failure").get("message") == "exit code 3"
    assert [(e.tag, e.get("message")) for e in cases[2]] == [
        ("skipped", "ended by mslaunch after another process failed")
    ]


def test_failure_carries_the_reason_and_the_last_20_log_lines(tmp_path):
    log = tmp_path / "w1.log"
    log.write_text("".join(f"line {i}\n" for i in range(30)))
    lost = proc("rank 1", 1, log, returncode=255, reason="connection to h1 lost (no answer for 6 s)")
    killed = proc("rank 2", 2, tmp_path / "missing.log", returncode=-9)
    cases = parse(junit_xml(job(lost, killed))).findall("testcase")
    failure = cases[0].find("failure")
    assert failure.get("message") == "connection to h1 lost (no answer for 6 s)"
    assert failure.text == "\n".join(f"line {i}" for i in range(10, 30))
    assert cases[1].find("failure").get("message") == "killed by SIGKILL"
    assert cases[1].find("failure").text is None  # no log: an empty failure body


def test_markup_in_names_reasons_and_logs_is_escaped(tmp_path):
    log = tmp_path / "w0.log"
    nasty = "a <b> & \"c\" 'd' ]]> </failure></testcase>"
    log.write_text(nasty + "\n")
    p = proc('rank "0" <&>', 0, log, returncode=1, reason=nasty)
    text = junit_xml(job(p, job_id='id"<&>'))
    suite = parse(text)
    assert suite.get("name") == 'mslaunch id"<&>'
    case = suite.find("testcase")
    assert case.get("name") == 'rank "0" <&>'
    assert case.get("classname") == 'mslaunch.id"<&>'
    assert case.find("failure").get("message") == nasty
    assert case.find("failure").text == nasty


def test_control_characters_in_a_log_still_give_well_formed_xml(tmp_path):
    log = tmp_path / "w0.log"
    log.write_bytes(b"\x1b[31mred error\x1b[0m\n\x00nul \x07bell\tok\n\xff\xfe bad utf-8\n")
    suite = parse(junit_xml(job(proc("rank 0", 0, log, returncode=1))))
    body = suite.find("testcase").find("failure").text
    assert body.splitlines() == ["[31mred error[0m", "nul bell\tok", "\ufffd\ufffd bad utf-8"]


def test_the_root_cause_process_carries_its_cause(tmp_path):
    from launcher.execution.results import RootCause
    from launcher.logs.causes import Cause

    bad = proc("rank 1", 1, tmp_path / "w1.log", returncode=1)
    other = proc("rank 2", 2, tmp_path / "w2.log", returncode=1)
    cause = Cause("missing_module", "ModuleNotFoundError: No module named 'x' (on h1)", "install x on h1")
    result = job(bad, other)
    result = type(result)(**{**result.__dict__, "root_cause": RootCause(bad, (), cause)})
    cases = parse(junit_xml(result)).findall("testcase")
    assert (
        cases[0].find("failure").get("message")
        == "exit code 1; missing_module: ModuleNotFoundError: No module named 'x' (on h1) (hint: install x on h1)"
    )
    assert cases[1].find("failure").get("message") == "exit code 1"  # only the root cause's process has it
