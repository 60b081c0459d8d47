"""The mpirun rank wrapper's variables (templates/mslaunch-rank.sh, import_vars), run for real by sh
with what the planner gives mpirun (launcher.planning.backends.mpirun): each variable from its
carrier, byte for byte (this context's own value over the shared one), every carrier gone, no
value ever run by the shell, the program's ``:`` arguments back, and a secret shown as
``<secret>`` in the env dump."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.planning.backends.mpirun import COLON_STAND_IN, make_context, mpirun_launch
from launcher.planning.job.mpirun_options import MpiOptions
from tests.harness.hypo import examples
from tests.harness.paths import REPO

WRAPPER = os.path.join(REPO, "templates", "mslaunch-rank.sh")
PROG = (sys.executable, "-c", "import json, os, sys; print(json.dumps([dict(os.environ), sys.argv[1:]]))")


def _context_settings(argv, index):
    """The ``-x K=V`` settings of app context ``index`` of an mpirun argv."""
    contexts, cur = [], []
    for a in argv:
        if a == ":":
            contexts.append(cur)
            cur = []
        else:
            cur.append(a)
    contexts.append(cur)
    ctx = contexts[index]
    return dict(ctx[i + 1].split("=", 1) for i, a in enumerate(ctx) if a == "-x" and "=" in ctx[i + 1])


def test_values_come_from_their_carriers_byte_for_byte_and_nothing_is_run(tmp_path):
    hostile = "$(touch pwned) `touch pwned` 'q' \"d\"\n, : = -x é\n"
    program = (*PROG, ":", "a b", ":")
    common = {"SHARED": hostile, "EMPTY": "", "HF_TOKEN": "tok " + hostile}
    contexts = [
        make_context("h1", 1, {**common, "DIFF": "one"}, program, {"ctx_base": "0", "role": "scheduler", "log": "x"}),
        make_context(
            "h2",
            2,
            {**common, "DIFF": "two\n"},
            program,
            {
                "ctx_base": "1",
                "role": "worker",
                "first_rank": "0",
                "devices": "0,1",
                "log_dir": str(tmp_path),
                "log_name": "worker_{rank}.log",
                "method": "ranktable",
                "cwd_prefix": str(tmp_path / "device"),
                "secrets": "HF_TOKEN",
            },
        ),
    ]
    argv, carried = mpirun_launch(contexts, MpiOptions())
    assert not any("touch" in a or "two" in a for a in argv)  # no value on mpirun's command line
    assert argv.count(COLON_STAND_IN) == 4 and argv.count(":") == 1  # the program's ':' are not separators
    assert carried["MSLAUNCH_V1_DIFF"] == "two\n" and carried["MSLAUNCH_V_SHARED"] == hostile
    # rank 1 (MPI rank 2) of context 1, on mpirun's own host: every carrier is in its environment
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSLAUNCH_")}
    env.update(carried, **_context_settings(argv, 1), OMPI_COMM_WORLD_RANK="2")
    wrapped = [a for a in argv[argv.index(":") + 1 :] if a != "-x"][-len(program) :]
    done = subprocess.run(
        ["sh", WRAPPER, *wrapped], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rank_env, args = json.loads((tmp_path / "worker_1.log").read_text().splitlines()[-1])
    assert (rank_env["SHARED"], rank_env["EMPTY"], rank_env["DIFF"]) == (hostile, "", "two\n")
    assert rank_env["HF_TOKEN"] == "tok " + hostile and rank_env["RANK_ID"] == "1"
    assert [k for k in rank_env if k.startswith("MSLAUNCH_V")] == ["MSLAUNCH_VARS"]  # no carrier left
    assert args == [":", "a b", ":"]
    assert not list(tmp_path.rglob("pwned"))
    dump = (tmp_path / "device1" / "env1.log").read_text()
    assert "HF_TOKEN=<secret>\n" in dump and "tok " not in dump and f"SHARED={hostile}" in dump
    assert oct(os.stat(tmp_path / "device1" / "env1.log").st_mode & 0o777) == "0o600"


NAMES = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True).filter(lambda n: not n.startswith("MSLAUNCH"))
VALUES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40)


@pytest.mark.e2e
@pytest.mark.cost(6)
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(NAMES, st.tuples(VALUES, VALUES), min_size=1, max_size=4), st.lists(VALUES, max_size=3))
def test_no_value_on_mpiruns_command_line_and_every_value_byte_for_byte_at_the_rank(tmp_path, pairs, args):
    first = {k: a for k, (a, _) in pairs.items()}
    second = {k: b for k, (_, b) in pairs.items()}  # differing values: each context's own carrier
    prog = [sys.executable, "-c", "import json, os, sys; print(json.dumps([dict(os.environ), sys.argv[1:]]))", *args]
    settings_ = dict(role="worker", first_rank="0", log_dir=str(tmp_path), log_name="w{rank}.log", method="mpi")
    contexts = [
        make_context("h1", 1, first, prog, dict(settings_, ctx_base="0", devices="0")),
        make_context("h2", 1, second, prog, dict(settings_, ctx_base="1", first_rank="1", devices="0")),
    ]
    argv, carried = mpirun_launch(contexts, MpiOptions())
    for value in list(first.values()) + list(second.values()):
        if len(value) >= 3:
            assert not any(value in a for a in argv if not a.startswith(sys.executable)), (value, argv)
    tail = argv[argv.index(":") + 1 :]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSLAUNCH_") and k not in pairs}
    env.update(carried, OMPI_COMM_WORLD_RANK="1")
    env.update(dict(tail[i + 1].split("=", 1) for i, a in enumerate(tail) if a == "-x" and "=" in tail[i + 1]))
    done = subprocess.run(["sh", WRAPPER, *tail[-len(prog) :]], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rank_env, rank_args = json.loads((tmp_path / "w1.log").read_text().splitlines()[-1])
    assert {k: rank_env.get(k) for k in second} == second
    assert rank_args == args
