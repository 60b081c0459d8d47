"""``mslaunch k8s gen``: the CLI around launcher/planning/backends/k8s.py (options in either order, the run
options parsed by run's own parser and planned against stand-in hosts, bad input refused with
one line, exit 2 and nothing written)."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.harness.cli import run_cli

BASE = ["k8s", "gen", "--nodes", "2", "--per-host", "2", "--image", "reg/ms:1"]


def gen(*args: str):
    """``mslaunch ARGS``'s exit code, stdout and stderr (in this process: k8s gen starts nothing)."""
    r = run_cli(*args)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def container(text: str) -> dict:
    jobdoc = [d for d in yaml.safe_load_all(text) if d["kind"] == "Job"][0]
    return jobdoc["spec"]["template"]["spec"]["containers"][0]


def test_options_in_either_order_and_run_options_passed_through():
    code, out, err = gen(
        "k8s",
        "gen",
        "--nodes",
        "3",
        "--env",
        "A=$(HOME)",
        "--per-host",
        "2",
        "--master_port",
        "9000",
        "--image",
        "reg/ms:1",
        "--cpu-tune",
        "off",
        "--cpu",
        "4",
        "train.py",
        "--lr",
        "0.1",
        "--image",
        "not-gen's",
    )
    assert (code, err) == (0, "")
    c = container(out)
    assert c["image"] == "reg/ms:1" and c["resources"]["limits"]["cpu"] == "4"
    assert c["args"] == [
        "--worker_num",
        "6",
        "--local_worker_num",
        "2",
        "--node_rank",
        "$(JOB_COMPLETION_INDEX)",
        "--master_addr",
        "train-0.train",
        "--master_port",
        "9000",
        "--env",
        "A=$$(HOME)",
        "--cpu-tune",
        "off",  # '$' doubled: the kubelet gives back A=$(HOME)
        "train.py",
        "--lr",
        "0.1",
        "--image",
        "not-gen's",
    ]  # SCRIPT's own arguments are its own


def test_module_and_np_equal_and_device_target():
    code, out, err = gen(
        *BASE, "--np", "4", "--name", "ar", "-m", "launcher.workloads.allreduce_smoke", "--device-target", "GPU"
    )
    assert code == 0, err
    c = container(out)
    assert c["args"][-4:] == ["-m", "launcher.workloads.allreduce_smoke", "--device-target", "GPU"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 2}}


@pytest.mark.parametrize("flavor", ["volcano", "ascendjob"])
def test_other_flavors(flavor):
    code, out, err = gen(*BASE, "--flavor", flavor, "--env", "DEVICE_TARGET=Ascend", "train.py")
    assert code == 0, err
    (doc,) = list(yaml.safe_load_all(out))
    assert doc["kind"] == {"volcano": "Job", "ascendjob": "AscendJob"}[flavor]
    assert "huawei.com/Ascend910: 2" in out


def test_output_file_written_atomically(tmp_path):
    code, out, err = gen(*BASE, "-o", "job.yaml", "train.py")
    assert (code, out) == (0, "")
    assert err == "wrote job.yaml: indexed, 2 pod(s) x 2 rank(s)\n"
    assert len(list(yaml.safe_load_all((tmp_path / "job.yaml").read_text()))) == 2
    assert sorted(os.listdir(tmp_path)) == ["job.yaml"]  # no temporary file, no job dir


def test_the_manifests_holding_env_values_are_written_0600_under_umask_022(tmp_path):
    """The pods' env holds the --env values: the -o file is 0600 (it was 0644)."""
    old = os.umask(0o022)
    try:
        code, out, err = gen(*BASE, "--env", "MY_SETTING=not_secret", "-o", "job.yaml", "train.py")
    finally:
        os.umask(old)
    assert code == 0, err
    assert "not_secret" in (tmp_path / "job.yaml").read_text()
    assert oct(os.stat(tmp_path / "job.yaml").st_mode & 0o777) == "0o600"


def test_secrets_come_from_a_kubernetes_secret_written_apart_0600(tmp_path, monkeypatch):
    """A secret (by the default patterns, or --secret-env from this environment) is no value in the
    manifests: the container takes it from the Secret <job>-secrets (secretKeyRef), the pods' run
    names it with --secret-env; --secret-manifest writes that Secret, 0600 under umask 022."""
    monkeypatch.setenv("CRED", "cred: 'x' \"y\"\n")
    old = os.umask(0o022)
    try:
        code, out, err = gen(
            *BASE,
            "--env",
            "HF_TOKEN=hf_secret",
            "--secret-env",
            "CRED",
            "--env",
            "PLAIN=1",
            "--secret-manifest",
            "secret.yaml",
            "-o",
            "job.yaml",
            "train.py",
        )
    finally:
        os.umask(old)
    assert code == 0, err
    text = (tmp_path / "job.yaml").read_text()
    assert "hf_secret" not in text and "cred:" not in text
    job = [d for d in yaml.safe_load_all(text) if d["kind"] == "Job"][0]
    container = job["spec"]["template"]["spec"]["containers"][0]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {n: {"name": "train-secrets", "key": n} for n in ("HF_TOKEN", "CRED")}
    args = container["args"]
    assert "PLAIN=1" in args and [args[i + 1] for i, a in enumerate(args) if a == "--secret-env"] == [
        "HF_TOKEN",
        "CRED",
    ]
    (secret,) = yaml.safe_load_all((tmp_path / "secret.yaml").read_text())
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", "train-secrets")
    assert secret["stringData"] == {"HF_TOKEN": "hf_secret", "CRED": "cred: 'x' \"y\"\n"}
    assert oct(os.stat(tmp_path / "secret.yaml").st_mode & 0o777) == "0o600"


def test_a_secret_manifest_without_a_known_value_is_refused_in_one_line(tmp_path, monkeypatch):
    """A --secret-env unknown here is fine for the manifests (the pods take it from the Secret),
    but --secret-manifest cannot write its value: refused, one line, nothing written."""
    monkeypatch.delenv("CRED", raising=False)
    code, out, err = gen(*BASE, "--secret-env", "CRED", "-o", "job.yaml", "train.py")
    assert code == 0 and "secretKeyRef" in (tmp_path / "job.yaml").read_text(), err
    for args, needle in ((["--secret-env", "CRED"], "CRED set nowhere here"), ([], "no secret variable")):
        code, out, err = gen(
            *BASE, *args, "--env", "PLAIN=1", "--secret-manifest", "s.yaml", "-o", "j2.yaml", "train.py"
        )
        assert code == 2 and "--secret-manifest" in err and needle in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "s.yaml").exists()
        assert not (tmp_path / "j2.yaml").exists()  # nothing half-written


@pytest.mark.parametrize(
    "args, words",
    [
        (["--nodes", "0"], "--nodes must be at least 1, got 0"),
        (["--per-host", "0"], "--per-host must be at least 1"),
        (["--name", "My_Job"], "is not a DNS label"),
        (["--namespace", "a.b"], "is not a DNS label"),
        (["--image", "reg/ms 1"], "without blanks"),
        (["--np", "5"], "--np 5 is not --nodes x --per-host = 2 x 2 = 4"),
        (["--flavor", "kubeflow"], "unknown flavor"),
        (["--cpu", "lots"], "not a Kubernetes quantity"),
        (["--bogus", "3"], "no such option '--bogus'"),
        (["--method", "nonsense"], "unknown method 'nonsense'"),
        (["--method", "ranktable"], "per-node mode"),
        (["--master_port", "auto"], "cannot work across pods"),
        (["--node_rank", "1"], "--node_rank is set by mslaunch k8s gen"),
        (["--master-addr", "x"], "--master-addr is set by mslaunch k8s gen"),
        (["-H", "a:2"], "-H is set by mslaunch k8s gen"),
        (["--launcher", "ssh"], "--launcher is set by mslaunch k8s gen"),
        (["--detach"], "--detach is set by mslaunch k8s gen"),
        (["--join", "False"], "--join False would end the pod"),
        (["--tee", "loud"], "unknown --tee mode 'loud'"),
        (["--sim_level", "9"], "--sim_level must be 0, 1, 2 or 3"),
        (["--job-id", "a/b"], "job id"),
        (["--cpu-tune", "max"], "unknown --cpu-tune"),
        (["--grace", "soon"], "run option:"),
        (["--grace", "-1"], "--grace must be >= 0"),
        (["--max-restarts", "-1"], "--max-restarts must be >= 0"),
        (["--nodes", "2", "--nodes", "3", "--env", "A=1", "--nodes", "4"], "given twice"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, args, words):
    (tmp_path / "job.yaml").write_text("old\n")
    code, out, err = gen(*BASE, "-o", "job.yaml", *args, "train.py")
    assert code == 2, (out, err)
    assert (
        out == "" and err.count("\n") == 1 and err.startswith("mslaunch: error: ") and words.lower() in err.lower()
    ), err
    assert (tmp_path / "job.yaml").read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["job.yaml"]


def test_missing_image_and_script():
    code, _, err = gen("k8s", "gen", "--nodes", "2", "--per-host", "1", "train.py")
    assert code == 2 and "missing --image" in err and err.count("\n") == 1
    code, _, err = gen(*BASE)
    assert code == 2 and "missing SCRIPT" in err and err.count("\n") == 1


def test_metrics_port_binds_every_address_of_the_pod_and_port_0_is_refused():
    code, out, err = gen(*BASE, "--metrics-port", "9400", "train.py")
    assert code == 0, err
    args = container(out)["args"]
    assert args[-3:] == ["--metrics-port", "0.0.0.0:9400", "train.py"]  # Prometheus scrapes the pod's IP
    code, out, err = gen(*BASE, "--metrics-port", "9400", "--metrics-addr", "10.1.2.3", "train.py")
    assert code == 0, err
    assert container(out)["args"][-3:] == ["--metrics-port", "10.1.2.3:9400", "train.py"]
    code, out, err = gen(*BASE, "--metrics-port", "0", "train.py")
    assert (code, out) == (2, "")
    assert err == (
        "mslaunch: error: --metrics-port: port 0 cannot be scraped in a pod (the annotation names the port); "
        "give a port number\n"
    )
