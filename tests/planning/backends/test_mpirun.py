"""The ssh config mslaunch writes for mpirun's rsh agent (launcher/planning/backends/mpirun.py):
every path and value in it is read back whole by OpenSSH, or refused in one line (issue 45)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from launcher.errors import PlanError
from launcher.planning.backends.mpirun import rsh_agent
from launcher.planning.inventory.model import Host, SshOptions


def _config(tmp_path, key: str, user: str = "u", include: str = "/c/cfg") -> str:
    hosts = [Host("a", 1, ssh=SshOptions(port=2201)), Host("b", 1, ssh=SshOptions(user=user, key=key))]
    agent, config = rsh_agent(hosts, include, str(tmp_path / "ssh_config"))
    assert agent == f"ssh -F {tmp_path}/ssh_config -o BatchMode=yes" and config is not None
    return config


def test_paths_with_blanks_hashes_and_equals_are_quoted(tmp_path) -> None:
    config = _config(tmp_path, "/keys/my key#1=b", user="deploy user", include=str(tmp_path / "my cfg"))
    assert '    IdentityFile "/keys/my key#1=b"\n' in config
    assert '    User "deploy user"\n' in config
    assert f'    Include "{tmp_path}/my cfg"\n' in config
    assert "    IdentityFile /k/b\n" in _config(tmp_path, "/k/b")  # a plain path is written as it is


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh (ssh -G reads a config, connects nowhere)")
def test_openssh_reads_the_quoted_values_back_whole(tmp_path) -> None:
    (tmp_path / "my cfg").write_text("Host *\n    ConnectTimeout 7\n")
    path = tmp_path / "ssh_config"
    path.write_text(_config(tmp_path, "/keys/my key#1=b", user="deploy user", include=str(tmp_path / "my cfg")))
    out = subprocess.run(
        ["ssh", "-G", "-F", str(path), "b"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 0, out.stderr
    got = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert got["identityfile"] == "/keys/my key#1=b" and got["user"] == "deploy user"
    assert got["connecttimeout"] == "7"  # the Include with a blank in its path was read


@pytest.mark.parametrize("bad", ['/keys/a"b', "/keys/a\nProxyCommand touch x", "/keys/a\\b", "/keys/a\rb", "/k/\0"])
def test_a_path_an_ssh_config_cannot_hold_is_refused_naming_it(bad, tmp_path) -> None:
    with pytest.raises(PlanError) as err:
        _config(tmp_path, bad)
    assert str(err.value).startswith("b: ssh.key: ") and "\n" not in str(err.value) and repr(bad) in str(err.value)
    with pytest.raises(PlanError) as err:
        _config(tmp_path, "/k/b", include=bad)
    assert str(err.value).startswith("--ssh-config: ")
    with pytest.raises(PlanError) as err:
        _config(tmp_path, "/k/b", user=bad)
    assert str(err.value).startswith("b: ssh.user: ")
