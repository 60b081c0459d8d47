"""``run --metrics-port / --metrics-addr / --metrics-textfile``: the values they take, and bad ones
refused in one line naming the flag, before anything starts."""

from __future__ import annotations

import os
import socket

import pytest

from launcher.cli.metrics_flags import parse_settings
from launcher.errors import MsLaunchError
from launcher.logs.promsettings import MetricsSettings
from tests.harness.cli import run_cli  # refusals: in this process


@pytest.mark.parametrize(
    "port, addr, want",
    [
        (None, None, MetricsSettings(None, "127.0.0.1", None)),
        ("9400", None, MetricsSettings(9400, "127.0.0.1", None)),
        ("0", None, MetricsSettings(0, "127.0.0.1", None)),
        ("0.0.0.0:9400", None, MetricsSettings(9400, "0.0.0.0", None)),
        ("[::1]:9400", None, MetricsSettings(9400, "::1", None)),
        ("9400", "10.0.0.5", MetricsSettings(9400, "10.0.0.5", None)),
        ("10.0.0.5:9400", "10.0.0.5", MetricsSettings(9400, "10.0.0.5", None)),
    ],
)
def test_port_and_address(port, addr, want):
    assert parse_settings(port, addr, None) == want


def test_the_textfile_folder_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_settings(None, None, "tf").textfile == str(tmp_path / "tf")


@pytest.mark.parametrize(
    "port, addr, textfile, field",
    [
        ("70000", None, None, "--metrics-port"),
        ("-1", None, None, "--metrics-port"),
        ("http", None, None, "--metrics-port"),
        (":9400", None, None, "--metrics-port"),
        ("10.0.0.5:9400", "10.0.0.6", None, "--metrics-addr"),
        (None, "0.0.0.0", None, "--metrics-addr"),
        (None, None, " ", "--metrics-textfile"),
    ],
)
def test_bad_values_name_their_flag(port, addr, textfile, field):
    with pytest.raises(MsLaunchError) as err:
        parse_settings(port, addr, textfile)
    assert err.value.field == field


@pytest.fixture
def script(tmp_path):
    (tmp_path / "train.py").write_text("print('train')\n")
    return tmp_path


def refused(cwd, *flags):
    r = run_cli(
        "run", "--np", "1", "--master-port", "auto", "--log-dir", str(cwd / "job"), *flags, "train.py", cwd=str(cwd)
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not os.path.exists(cwd / "job" / "job.json")  # nothing started
    return lines[0]


def test_a_bad_port_on_the_command_line_is_one_line(script):
    line = refused(script, "--metrics-port", "99999")
    assert line.startswith("mslaunch: error: --metrics-port: '99999' is not a port"), line


def test_a_port_in_use_is_one_line_before_the_job_starts(script):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        line = refused(script, "--metrics-port", str(port))
    assert line.startswith(f"mslaunch: error: --metrics-port: cannot serve on 127.0.0.1:{port}: "), line
    assert "choose another port" in line


def test_a_textfile_folder_that_is_missing_or_not_writable_is_one_line(script):
    line = refused(script, "--metrics-textfile", str(script / "missing"))
    assert line == (
        f"mslaunch: error: --metrics-textfile: {script / 'missing'} is not a directory; create it "
        "(node_exporter's --collector.textfile.directory) or choose another"
    )
    (script / "ro").mkdir(mode=0o500)
    if os.access(script / "ro", os.W_OK):  # root writes anywhere: a file in its place is not a folder
        (script / "ro").rmdir()
        (script / "ro").write_text("")
    line = refused(script, "--metrics-textfile", str(script / "ro"))
    assert line.startswith(f"mslaunch: error: --metrics-textfile: {script / 'ro'} is not "), line


@pytest.mark.e2e
@pytest.mark.cost(3)
def test_per_node_mode_writes_its_nodes_ranks_and_node_rank_in_the_textfile(tmp_path):
    """msrun's per-node mode (what each k8s pod runs): the textfile names the node and counts its ranks."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.harness.cli import run_process
    from tests.harness.paths import REPO

    tf = tmp_path / "tf"
    tf.mkdir()
    prog = os.path.join(REPO, "tests", "scripts", "metricprog.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests", "scripts")]))
    flags = ["--worker_num", "4", "--local_worker_num", "2", "--node_rank", "1", "--master_addr", "127.0.0.1"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    r = run_process(
        "run",
        *flags,
        "--master_port",
        port,
        "--log-dir",
        str(tmp_path / "job"),
        "--tee",
        "none",
        "--metrics-textfile",
        str(tf),
        prog,
        "3",
        "0.1",
        env=env,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    (path,) = tf.iterdir()
    got = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for smp in fam.samples:
            got[(smp.name, smp.labels.get("rank") or smp.labels.get("state") or smp.labels.get("node_rank"))] = (
                smp.value
            )
    assert got[("mslaunch_job_info", "1")] == 1  # node_rank="1"
    assert got[("mslaunch_ranks_planned", None)] == 2  # this node's ranks; the pods' sum is the world
    assert got[("mslaunch_job_state", "succeeded")] == 1
    assert (got[("mslaunch_rank_step", "2")], got[("mslaunch_rank_step", "3")]) == (3, 3)
    assert ("mslaunch_rank_step", "0") not in got  # node 0's ranks are node 0's to tell


@pytest.mark.e2e
def test_detach_refuses_a_port_in_use_before_it_returns(script):
    """--detach: the background run would bind the port; the error is the command's own, and no job starts."""
    from tests.harness.cli import run_process

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = run_process(
            "run",
            "--detach",
            "--np",
            "1",
            "--master-port",
            "auto",
            "--log-dir",
            str(script / "job"),
            "--metrics-port",
            str(port),
            "train.py",
            cwd=str(script),
        )
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.startswith(f"mslaunch: error: --metrics-port: cannot serve on 127.0.0.1:{port}: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not os.path.exists(script / "job" / "job.json")
