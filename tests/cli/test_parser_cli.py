"""Every command that reads a file answers bad input with one line on stderr and exit code 2.

One case per (command, class of bad input) the issue names: the whole stderr is compared, so a
traceback, a second line or a missing ``file:line`` fails.  Nothing is started (``run`` gets
``--dry-run``; the bad input is refused while planning).
"""

from __future__ import annotations

import os
from typing import Dict, List

import pytest

from tests.harness.cli import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FILES: Dict[str, bytes] = {
    "bomb.yaml": (
        b"unused:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + b"".join(b"  a%d: &a%d [" % (i, i) + b", ".join([b"*a%d" % (i - 1)] * 9) + b"]\n" for i in range(1, 9))
        + b"hosts: [localhost]\n"
    ),
    "deep.yaml": b"hosts: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "recursive.yaml": b"hosts: &h [*h]\n",
    "tagkey.yaml": b"hosts:\n  - host: localhost\n    !!float y: 1\n",
    "del.yaml": b"hosts:\n  - host: localhost\n    slots: 1\x7f\n",
    "surrogate.yaml": b'hosts:\n  - host: localhost\n    slots: 1\n    env: {A: "\\ud800"}\n',
    "nul.yaml": b'hosts:\n  - host: localhost\n    slots: 1\n    env: {A: "x\\0y"}\n',
    "huge.txt": b"localhost slots=99999999999999999999\n",
    "big.txt": b"localhost slots=100000000\n",
    "nul.env": b"A=1\nB=x\x00y\n",
    "deep.json": b"[" * 100_000 + b"]" * 100_000,
    "nan.json": b'{"version": "1.0", "server_count": NaN}',
    "dup.json": b'{"version": "1.0", "version": "1.2"}',
    "latin1.json": b'{"version": "1.0",\n "status": "compl\xe9ted"}',
    "surrogate.json": b'{"version": "1.0", "server_list": [{"server_id": "\\ud800"}]}',
}

CASES = [
    (
        ["hostfile", "gen", "--hosts", "bomb.yaml"],
        "bomb.yaml:7: the document expands to more than 300000 YAML nodes (aliases count each time they are used)",
    ),
    (["hostfile", "gen", "--hosts", "huge.txt"], "huge.txt:1: slots must be in 1..1024, got '99999999999999999999'"),
    (["hostfile", "gen", "--hosts", "big.txt"], "big.txt:1: slots must be in 1..1024, got '100000000'"),
    (
        ["hostfile", "gen", "-H", "a:100000000"],
        "-H: slot count of 'a' must be in 1..1024, got '100000000' (write h1:8,h2:8)",
    ),
    (["ranktable", "gen", "--hosts", "deep.yaml"], "deep.yaml:1: nested deeper than 32 levels"),
    (
        ["ranktable", "gen", "--hosts", "recursive.yaml"],
        "recursive.yaml:1: recursive alias *h (it is used inside its own anchor)",
    ),
    (["ranktable", "validate", "deep.json"], "deep.json: invalid rank table: JSON nested deeper than 64 levels"),
    (["ranktable", "validate", "nan.json"], "nan.json: invalid JSON: NaN is not a JSON number"),
    (
        ["ranktable", "show", "latin1.json"],
        "latin1.json:2: not UTF-8 text (invalid continuation byte); is this a rank table file?",
    ),
    (
        ["ranktable", "show", "surrogate.json"],
        "surrogate.json: server_list[0].server_id: string '\\ud800' holds a lone surrogate (not Unicode text)",
    ),
    (["ranktable", "merge", "dup.json", "nan.json"], "dup.json: key 'version' appears twice in one object; keep one"),
    (
        ["plan", "--hosts", "tagkey.yaml", "x.py"],
        "tagkey.yaml:3: invalid YAML value 'y' for tag !!float: could not convert string to float: 'y'",
    ),
    (
        ["plan", "--hosts", "del.yaml", "x.py"],
        "del.yaml:3: invalid YAML: character U+007F is not allowed in YAML (control character)",
    ),
    (
        ["plan", "--np", "99999999999999999999", "x.py"],
        "--np: this machine alone takes 1..1024 ranks, got 99999999999999999999",
    ),
    (
        ["plan", "-H", "a:8", "--np", "99999999999999999999", "x.py"],
        "--np: --np must be in 1..131072, got 99999999999999999999",
    ),
    (
        ["env", "show", "--rank", "0", "--hosts", "nul.yaml", "x.py"],
        "nul.yaml:4: value 'x\\x00y' contains a NUL character",
    ),
    (
        ["env", "show", "--rank", "0", "--env-file", "nul.env", "x.py"],
        "nul.env:2: B: the value contains a NUL character, which no process environment can hold",
    ),
    (
        ["run", "--dry-run", "--env-file", "nul.env", "x.py"],
        "nul.env:2: B: the value contains a NUL character, which no process environment can hold",
    ),
    (
        ["run", "--dry-run", "--hosts", "surrogate.yaml", "x.py"],
        None,
    ),  # libyaml: "invalid ... escape"; pure PyYAML: "surrogate"
    (
        ["run", "--dry-run", "-e", "A=\udcff", "x.py"],
        "--env: A: the value contains a lone surrogate (\\ud800-\\udfff), which is not UTF-8 text",
    ),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bad-input")
    for name, data in FILES.items():
        (path / name).write_bytes(data)
    return str(path)


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(a[:3]) + f"#{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_input_is_one_line_and_exit_2(folder: str, args: List[str], message: str) -> None:
    # in this process (see tests/harness/cli.py); a non-UTF-8 byte on the command line reaches
    # Python as the surrogate escape "\udcff", as the args here have it
    r = run_cli(*args, env=dict(os.environ, COLUMNS="200"), cwd=folder)
    stderr = r.stderr
    assert (r.returncode, r.stdout) == (2, ""), stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    if message is None:
        assert lines[0].startswith("mslaunch: error: surrogate.yaml:4: "), stderr
        assert "surrogate" in lines[0] or "invalid Unicode character escape" in lines[0], stderr
    else:
        assert lines[0] == f"mslaunch: error: {message}"
    assert not os.path.exists(os.path.join(folder, "mslaunch_logs")), "bad input must start nothing"
