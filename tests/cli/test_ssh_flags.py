"""The ``--ssh-*`` flags: declared once (cli/ssh_flags.py), shared by run, doctor and ranktable
gen --collect, and handed down as one SSHSettings value (no option dicts)."""

import glob
import os

import pytest
from typer.testing import CliRunner

from launcher.cli.app import _register, app
from launcher.errors import LaunchError, MsLaunchError, PlanError
from launcher.execution.ssh import collect as ssh_collect
from launcher.execution.ssh.settings import SSHSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Stop(LaunchError):
    """Raised by a stand-in once it has seen what the command handed down."""


def invoke(args, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")  # run checks that the script exists
    monkeypatch.delenv("MSLAUNCH_SSH_CONFIG", raising=False)
    _register()
    return CliRunner().invoke(app, args)


def recorder(seen):
    def fake(*args, **kwargs):
        seen.append((args, kwargs))
        raise Stop("stopped by the test")

    return fake


def test_run_hands_one_settings_value_to_the_runner(monkeypatch, tmp_path):
    from launcher.execution import runner

    seen = []
    monkeypatch.setattr(runner, "run_plan", recorder(seen))
    r = invoke(
        [
            "run",
            "--np",
            "1",
            "--cpu-tune",
            "off",
            "--ssh-accept-new",
            "--ssh-connect-timeout",
            "2.5",
            "--ssh-start-timeout",
            "7",
            "x.py",
        ],
        monkeypatch,
        tmp_path,
    )
    assert isinstance(r.exception, Stop), r.output
    ((_, kwargs),) = seen
    assert kwargs["backend_settings"]["ssh"] == SSHSettings(accept_new=True, connect_timeout=2.5, start_timeout=7.0)


def test_run_defaults(monkeypatch, tmp_path):
    from launcher.execution import runner

    seen = []
    monkeypatch.setattr(runner, "run_plan", recorder(seen))
    r = invoke(["run", "--np", "1", "--cpu-tune", "off", "x.py"], monkeypatch, tmp_path)
    assert isinstance(r.exception, Stop), r.output
    assert seen[0][1]["backend_settings"]["ssh"] == SSHSettings()


def test_doctor_gets_the_settings_with_the_jobs_ssh_config(monkeypatch, tmp_path):
    from launcher.execution.checks import doctor

    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  User root\n")
    seen = []
    monkeypatch.setattr(doctor, "run_doctor", recorder(seen))
    r = invoke(
        ["doctor", "-H", "localhost:1", "--no-cpu-probe", "--ssh-config", "ssh_config", "--ssh-connect-timeout", "3"],
        monkeypatch,
        tmp_path,
    )
    assert isinstance(r.exception, Stop), r.output
    ((args, _),) = seen
    assert args[1] == SSHSettings(config=str(config), connect_timeout=3.0)


def test_ranktable_collect_gets_the_settings(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(ssh_collect, "collect_files", recorder(seen))
    r = invoke(
        [
            "ranktable",
            "gen",
            "-H",
            "h1:8",
            "--collect",
            "--ssh-config",
            "cfg",
            "--ssh-accept-new",
            "--ssh-connect-timeout",
            "4",
        ],
        monkeypatch,
        tmp_path,
    )
    assert isinstance(r.exception, Stop), r.output
    ((args, _),) = seen
    assert [h.name for h in args[0]] == ["h1"]
    assert args[1:] == ("/etc/hccn.conf", SSHSettings(config="cfg", accept_new=True, connect_timeout=4.0))


def test_a_start_timeout_that_is_not_positive_is_bad_input(monkeypatch, tmp_path):
    r = invoke(["run", "--np", "1", "--ssh-start-timeout", "0", "x.py"], monkeypatch, tmp_path)
    assert isinstance(r.exception, PlanError)
    assert str(r.exception) == "--ssh-start-timeout: --ssh-start-timeout must be > 0"


@pytest.mark.parametrize("command", [["run"], ["check"], ["doctor"], ["ranktable", "gen"], ["plan"]])
def test_every_ssh_command_shows_the_shared_flags(monkeypatch, tmp_path, command):
    from launcher.cli.ssh_flags import FLAGS

    r = invoke(command + ["--help"], monkeypatch, tmp_path)
    assert r.exit_code == 0, r.output
    shown = {f.flag for f in FLAGS.values() if f.flag in r.output}
    wanted = {
        "run": {"--ssh-config", "--ssh-accept-new", "--ssh-connect-timeout", "--ssh-start-timeout"},
        "doctor": {"--ssh-config", "--ssh-accept-new", "--ssh-connect-timeout"},
        "ranktable": {"--ssh-config", "--ssh-accept-new", "--ssh-connect-timeout"},
    }.get(command[0], {"--ssh-config"})
    assert shown == wanted


def test_the_flags_are_spelled_in_one_module_only():
    spelled = []
    for path in glob.glob(os.path.join(ROOT, "launcher", "cli", "*.py")):
        if os.path.basename(path) == "ssh_flags.py":
            continue
        text = open(path, encoding="utf-8").read()
        spelled += [
            (os.path.basename(path), flag)
            for flag in ('"--ssh-config"', '"--ssh-accept-new"', '"--ssh-connect-timeout"', '"--ssh-start-timeout"')
            if flag in text
        ]
    assert spelled == []


def test_errors_a_user_sees_from_ssh_are_mslaunch_errors():
    import paramiko

    from launcher.execution.ssh.connection import ConnectFailure
    from launcher.execution.ssh.hostkeys import UnknownHostKey

    key = paramiko.RSAKey.generate(1024)
    unknown = UnknownHostKey("10.1.2.3", key)
    assert isinstance(unknown, MsLaunchError) and isinstance(unknown, paramiko.SSHException)
    assert str(unknown) == "unknown host key for 10.1.2.3"
    failure = ConnectFailure("connection refused by h1:22 (is sshd running there?)")
    assert isinstance(failure, MsLaunchError)
    assert str(failure) == "connection refused by h1:22 (is sshd running there?)"
    assert failure.exit_code == 1
