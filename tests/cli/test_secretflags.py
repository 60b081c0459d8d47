"""launcher.cli.secretflags: the secret flags' layers and names, secret env files (JSON or K=V),
and the ``--env`` assignments of secrets taken out of a run's options (sbatch, k8s gen)."""

from __future__ import annotations

import json

import pytest

from launcher.cli.secretflags import FROM_ENVIRONMENT, read_secret_file, secret_inputs, take_secret_env_args
from launcher.errors import MsLaunchError, PlanError
from launcher.planning.job.secrets import DEFAULT_PATTERNS


def _no_file(path):
    raise AssertionError(path)


def test_a_secret_env_value_comes_from_the_other_layers_else_this_environment():
    got = secret_inputs(["GIVEN", "FROM_ENV"], [], ["*_CRED"], False, ["GIVEN"], {"FROM_ENV": " v\n"}, _no_file)
    assert got.env_files == ((FROM_ENVIRONMENT, (("FROM_ENV", " v\n"),)),)
    assert got.named == {"GIVEN", "FROM_ENV"} and got.patterns == DEFAULT_PATTERNS + ("*_CRED",)
    assert secret_inputs([], [], [], True, [], {}, _no_file).patterns == ()


@pytest.mark.parametrize(
    "names, patterns, needle, field",
    [
        (["NOWHERE"], [], "NOWHERE is set nowhere: export it before running mslaunch", "--secret-env"),
        (["1X"], [], "invalid variable name", "--secret-env"),
        ([], [""], "an empty pattern matches nothing", "--secret-pattern"),
    ],
)
def test_bad_secret_flags_are_refused_naming_the_flag(names, patterns, needle, field):
    with pytest.raises(PlanError) as err:
        secret_inputs(names, [], patterns, False, [], {}, _no_file)
    assert needle in str(err.value) and err.value.field == field and "\n" not in str(err.value)


def test_a_secret_env_file_is_json_or_k_v_lines(tmp_path):
    js = tmp_path / "s.json"
    js.write_text(json.dumps({"A": " any\nvalue ", "B": ""}))
    assert read_secret_file(str(js)) == (("A", " any\nvalue "), ("B", ""))
    kv = tmp_path / "s.env"
    kv.write_text("# c\nA=1\nexport B='2'\n")
    assert read_secret_file(str(kv)) == (("A", "1"), ("B", "2"))
    for text, needle in (("{1: 2", "not a JSON object"), ('{"A": 1}', "'A': the value must be a string")):
        js.write_text(text)
        with pytest.raises(MsLaunchError, match=needle):
            read_secret_file(str(js))
    with pytest.raises(MsLaunchError, match="no such secret env file"):
        read_secret_file(str(tmp_path / "none"))
    got = secret_inputs([], [str(kv)], [], False, [], {}, read_secret_file)
    assert got.named == {"A", "B"} and got.env_files == ((str(kv), (("A", "1"), ("B", "2"))),)


def test_every_form_of_a_secrets_env_assignment_is_taken_out_and_the_rest_kept():
    run = ["--env", "HF_TOKEN=a b", "-eAPI_KEY=k", "--env=MINE=m", "-e", "PLAIN=p", "--env-file", "x.env", "--np", "2"]
    kept, taken = take_secret_env_args(run, ["MINE"], DEFAULT_PATTERNS)
    assert kept == ["-e", "PLAIN=p", "--env-file", "x.env", "--np", "2"]
    assert taken == [("HF_TOKEN", "a b"), ("API_KEY", "k"), ("MINE", "m")]
