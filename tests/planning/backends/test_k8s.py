"""Kubernetes manifests (launcher/planning/backends/k8s.py) and the commented YAML writer.

* ``indexed``: validated with kubernetes-validate --strict (Kubernetes' published OpenAPI
  schemas, offline) for 1.27 and the newest version the package ships, for 1 and 16 nodes.
* ``volcano``: checked against the fields of the Volcano Job CRD, as published in
  volcano-sh/volcano ``installer/helm/chart/volcano/crd/bases/batch.volcano.sh_jobs.yaml``
  (``spec`` and ``spec.tasks[]`` properties, the ``policies[].event`` enum, ``plugins`` a map of
  string lists), and against the ``svc``/``env`` plugins' source (pkg/controller/job/plugins/:
  pod ``hostname`` = pod name ``<job>-<task>-<index>``, ``subdomain`` = the job's name); the pod
  template is validated as a core/v1 PodTemplate with kubernetes-validate.
* ``ascendjob``: checked against MindCluster's AscendJob documentation (Ascend/mind-cluster
  ``docs/en/scheduling/api/ascend_job.md``, "AscendJob", and the acjob YAML parameter tables):
  ``apiVersion: mindxdl.gitee.com/v1``, label ``framework`` in {mindspore, pytorch, tensorflow},
  ``spec.schedulerName``/``runPolicy.schedulingPolicy.{minAvailable,queue}``/``successPolicy``/
  ``replicaSpecs.{Master,Worker}.{replicas,restartPolicy,template}``, the container named
  ``ascend`` ("do not modify"), ``minAvailable`` = Master + Worker replicas.
"""

from __future__ import annotations

import copy
import os

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import PlanError
from launcher.planning.backends.k8s import K8sJob, build_manifests, check_job, pod_args, render_manifests
from launcher.planning.text.yamlout import Note, render, render_all, scalar, strip_notes
from tests.harness.hypo import examples

kv = pytest.importorskip("kubernetes_validate")
VERSIONS = ("1.27.0", kv.latest_version())


def job(**kw) -> K8sJob:
    base = dict(
        name="demo",
        image="registry.example/ms:2.10",
        nodes=3,
        per_host=2,
        run_args=("--cpu-tune", "off", "train.py", "--lr", "0.1"),
    )
    base.update(kw)
    return K8sJob(**base)


def docs(j: K8sJob):
    text = render_manifests(j)
    parsed = list(yaml.safe_load_all(text))
    assert parsed == strip_notes(build_manifests(j))  # the text says what the builder built
    return parsed, text


# ------------------------------------------------------------------ YAML writer

TRICKY = [
    "yes",
    "no",
    "on",
    "off",
    "y",
    "true",
    "Null",
    "~",
    "",
    " ",
    "1.5",
    ".5",
    "0x1f",
    "1e3",
    "12:30",
    "0o7",
    "+1",
    "-",
    "--worker_num",
    "a: b",
    "a #b",
    "#x",
    "- x",
    "*alias",
    "&a",
    "!tag",
    "%d",
    "@x",
    "`x",
    "'q'",
    '"dq"',
    "x:",
    "$(VAR)",
    "$$(VAR)",
    "é",
    "a\nb",
    "tab\there",
    "[x]",
    "{x}",
    ">",
    "|",
    "?",
    "<<",
    "=",
    "A=1",
    ".inf",
    "NaN",
    "2026-11-25",
    "A\n",
    "x\r",
]


@pytest.mark.parametrize("text", TRICKY)
def test_scalars_read_back_as_the_same_string(text):
    assert yaml.safe_load(f"k: {scalar(text)}\n") == {"k": text}


@settings(max_examples=examples(300), deadline=None)
@given(
    st.recursive(
        st.one_of(st.text(), st.integers(), st.booleans(), st.none()),
        lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(min_size=1), kids, max_size=4)),
        max_leaves=12,
    )
)
def test_any_document_round_trips(value):
    doc = {"root": value}
    assert yaml.safe_load(render(doc)) == doc


def test_notes_are_comments_and_parse_away():
    doc = {"a": Note(1, "one"), "b": Note({"c": [Note("x", "an item"), {"d": Note([], "empty")}]}, "two\nlines")}
    text = render_all([doc, {"e": 2}], header="head")
    assert text == (
        "# head\na: 1  # one\n# two\n# lines\nb:\n  c:\n  # an item\n  - x\n  - d: []  # empty\n---\ne: 2\n"
    )
    assert list(yaml.safe_load_all(text)) == [{"a": 1, "b": {"c": ["x", {"d": []}]}}, {"e": 2}]


# ------------------------------------------------------------------ indexed


@pytest.mark.parametrize("nodes", [1, 16])
@pytest.mark.parametrize(
    "extra",
    [{}, {"cpu": "8", "memory": "64Gi", "device": "ASCEND", "workdir": "/app", "namespace": "ml"}, {"device": "GPU"}],
)
def test_indexed_passes_kubernetes_validate_strict(nodes, extra):
    parsed, _ = docs(job(nodes=nodes, **extra))
    assert [d["kind"] for d in parsed] == ["Service", "Job"]
    for d in parsed:
        for version in VERSIONS:
            kv.validate(d, version, strict=True)


def test_strict_validation_catches_a_wrong_field():
    """The check above can fail: an unknown field, or a wrong type, is refused."""
    parsed, _ = docs(job())
    bad = copy.deepcopy(parsed[1])
    bad["spec"]["template"]["spec"]["containers"][0]["workdir"] = "/x"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[0], strict=True)
    bad = copy.deepcopy(parsed[1])
    bad["spec"]["completions"] = "3"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[-1], strict=True)


def test_indexed_documents_whole():
    parsed, text = docs(job(nodes=16, per_host=8, cpu="8", memory="64Gi", device="ASCEND", workdir="/app"))
    service, jobdoc = parsed
    labels = {"app.kubernetes.io/name": "mslaunch", "app.kubernetes.io/instance": "demo"}
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "demo", "labels": labels},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels,
            "ports": [{"name": "ms-sched", "port": 8118, "targetPort": 8118}],
        },
    }
    spec = jobdoc["spec"]
    assert {k: spec[k] for k in ("completionMode", "completions", "parallelism", "backoffLimit")} == {
        "completionMode": "Indexed",
        "completions": 16,
        "parallelism": 16,
        "backoffLimit": 0,
    }
    assert spec["podFailurePolicy"] == {
        "rules": [
            {
                "action": "FailJob",
                "onPodConditions": [],
                "onExitCodes": {"containerName": "mslaunch", "operator": "NotIn", "values": [0]},
            }
        ]
    }
    assert spec["template"]["metadata"]["labels"] == labels  # what the Service selects
    pod = spec["template"]["spec"]
    assert (pod["subdomain"], pod["restartPolicy"]) == ("demo", "Never")
    assert pod["containers"] == [
        {
            "name": "mslaunch",
            "image": "registry.example/ms:2.10",
            "workingDir": "/app",
            "command": ["mslaunch", "run"],
            "args": [
                "--worker_num",
                "128",
                "--local_worker_num",
                "8",
                "--node_rank",
                "$(JOB_COMPLETION_INDEX)",
                "--master_addr",
                "demo-0.demo",
                "--master_port",
                "8118",
                "--cpu-tune",
                "off",
                "train.py",
                "--lr",
                "0.1",
            ],
            "env": [
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                    },
                }
            ],
            "ports": [{"name": "ms-sched", "containerPort": 8118}],
            "resources": {
                "requests": {"cpu": "8", "memory": "64Gi"},
                "limits": {"cpu": "8", "memory": "64Gi", "huawei.com/Ascend910": 8},
            },
        }
    ]
    assert text.startswith("# Written by 'mslaunch k8s gen' (indexed): 16 pod(s) x 8 rank(s) = 128 ranks;\n")
    assert "# no retries: one failed pod fails the Job" in text


@pytest.mark.parametrize(
    "device, resource", [(None, None), ("CPU", None), ("GPU", "nvidia.com/gpu"), ("ASCEND", "huawei.com/Ascend910")]
)
def test_device_resources_follow_the_device_target(device, resource):
    (_, jobdoc), _ = docs(job(device=device))
    limits = jobdoc["spec"]["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
    assert limits == ({resource: 2} if resource else {})


# ------------------------------------------------------------------ volcano

#: volcano-sh/volcano installer/helm/chart/volcano/crd/bases/batch.volcano.sh_jobs.yaml (v1alpha1)
VOLCANO_SPEC = {
    "maxRetry",
    "minAvailable",
    "minSuccess",
    "networkTopology",
    "plugins",
    "policies",
    "priorityClassName",
    "queue",
    "runningEstimate",
    "schedulerName",
    "tasks",
    "ttlSecondsAfterFinished",
    "volumes",
}
VOLCANO_TASK = {"dependsOn", "maxRetry", "minAvailable", "name", "policies", "replicas", "template", "topologyPolicy"}
VOLCANO_POLICY = {"action", "event", "events", "exitCode", "timeout"}
VOLCANO_EVENTS = {
    "*",
    "PodPending",
    "PodRunning",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "OutOfSync",
    "CommandIssued",
    "JobUpdated",
    "TaskFailed",
}
#: Volcano's job actions (pkg/apis/bus/v1alpha1 Action)
VOLCANO_ACTIONS = {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob", "CompleteJob", "ResumeJob"}


@pytest.mark.parametrize("nodes", [1, 16])
def test_volcano_job_fields_as_the_crd_documents(nodes):
    parsed, _ = docs(job(nodes=nodes, flavor="volcano", device="GPU"))
    (d,) = parsed
    assert (d["apiVersion"], d["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    spec = d["spec"]
    assert set(spec) <= VOLCANO_SPEC
    assert spec["minAvailable"] == nodes and spec["schedulerName"] == "volcano"
    assert set(spec["plugins"]) == {"svc", "env"} and all(
        isinstance(v, list) and all(isinstance(s, str) for s in v) for v in spec["plugins"].values()
    )
    for policy in spec["policies"]:
        assert (
            set(policy) <= VOLCANO_POLICY and policy["event"] in VOLCANO_EVENTS and policy["action"] in VOLCANO_ACTIONS
        )
    (task,) = spec["tasks"]
    assert set(task) <= VOLCANO_TASK and task["replicas"] == nodes and task["name"] == "node"
    container = task["template"]["spec"]["containers"][0]
    # the svc plugin names pod i <job>-<task>-<i>, in the job's subdomain; --node_rank auto reads VC_TASK_INDEX
    args = container["args"]
    assert args[args.index("--master_addr") + 1] == "demo-node-0.demo"
    assert args[args.index("--node_rank") + 1] == "auto"
    assert args[:4] == ["--worker_num", str(2 * nodes), "--local_worker_num", "2"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": task["template"]}
    for version in VERSIONS:
        kv.validate(template, version, strict=True)


# ------------------------------------------------------------------ ascendjob


@pytest.mark.parametrize("nodes", [1, 16])
def test_ascendjob_fields_as_documented(nodes):
    parsed, _ = docs(job(nodes=nodes, flavor="ascendjob", device="ASCEND", per_host=8))
    (d,) = parsed
    assert (d["apiVersion"], d["kind"]) == ("mindxdl.gitee.com/v1", "AscendJob")
    assert d["metadata"]["labels"]["framework"] == "mindspore"
    assert d["metadata"]["labels"]["ring-controller.atlas"] in ("ascend-910", "ascend-910b")
    spec = d["spec"]
    assert set(spec) == {"schedulerName", "runPolicy", "successPolicy", "replicaSpecs"}
    assert set(spec["runPolicy"]["schedulingPolicy"]) == {"minAvailable", "queue"}
    assert spec["successPolicy"] == "AllWorkers"
    replicas = spec["replicaSpecs"]
    assert list(replicas) == (["Master", "Worker"] if nodes > 1 else ["Master"])
    assert (
        spec["runPolicy"]["schedulingPolicy"]["minAvailable"] == sum(r["replicas"] for r in replicas.values()) == nodes
    )
    for role, r in replicas.items():
        assert set(r) == {"replicas", "restartPolicy", "template"} and r["restartPolicy"] == "Never"
        (container,) = r["template"]["spec"]["containers"]
        assert container["name"] == "ascend"
        assert container["args"] == [
            "--worker_num",
            str(8 * nodes),
            "--local_worker_num",
            "8",
            "--node_rank",
            "auto",
            "--cpu-tune",
            "off",
            "train.py",
            "--lr",
            "0.1",
        ]  # the operator gives MS_SCHED_HOST/PORT
        assert container["resources"] == {"limits": {"huawei.com/Ascend910": 8}}
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": r["template"]}
        for version in VERSIONS:
            kv.validate(template, version, strict=True)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "kw, field, words",
    [
        ({"nodes": 0}, "--nodes", "at least 1, got 0"),
        ({"per_host": 0}, "--per-host", "at least 1"),
        ({"name": "Bad_Name"}, "--name", "not a DNS label"),
        ({"name": "-x"}, "--name", "not a DNS label"),
        ({"name": "x" * 62}, "--name", "at most 61 characters"),
        ({"name": "x" * 57, "flavor": "volcano"}, "--name", "at most 56 characters"),
        ({"namespace": "My NS"}, "--namespace", "not a DNS label"),
        ({"image": "reg/ms 2.10"}, "--image", "without blanks"),
        ({"image": ""}, "--image", "without blanks"),
        ({"image": "a\tb"}, "--image", "without blanks"),
        ({"cpu": "2x"}, "--cpu", "not a Kubernetes quantity"),
        ({"memory": "64GB"}, "--memory", "not a Kubernetes quantity"),
        ({"workdir": "app"}, "--workdir", "absolute"),
        ({"flavor": "kubeflow"}, "--flavor", "unknown flavor"),
        ({"run_args": ()}, "SCRIPT", "missing SCRIPT"),
        ({"master_port": 0}, "--master_port", "not a port"),
    ],
)
def test_bad_jobs_are_refused_with_one_line(kw, field, words):
    with pytest.raises(PlanError) as err:
        check_job(job(**kw))
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_longest_names_fit():
    check_job(job(name="x" * 61, nodes=10))  # pod host names x...x-9: 63 characters
    check_job(job(name="x" * 56, nodes=10, flavor="volcano"))  # x...x-node-9
    assert pod_args(job(nodes=1, per_host=1))[:4] == ["--worker_num", "1", "--local_worker_num", "1"]


@pytest.mark.parametrize("flavor", ["indexed", "volcano", "ascendjob"])
@pytest.mark.parametrize("grace, expected", [(5.0, None), (20.0, None), (20.5, 31), (60.0, 70)])
def test_termination_grace_covers_mslaunch_grace(flavor, grace, expected):
    parsed, _ = docs(job(flavor=flavor, grace=grace))
    d = parsed[-1]
    pod = {
        "indexed": lambda: d["spec"]["template"]["spec"],
        "volcano": lambda: d["spec"]["tasks"][0]["template"]["spec"],
        "ascendjob": lambda: d["spec"]["replicaSpecs"]["Master"]["template"]["spec"],
    }[flavor]()
    assert pod.get("terminationGracePeriodSeconds") == expected
    if flavor == "indexed":
        for version in VERSIONS:
            kv.validate(d, version, strict=True)


@pytest.mark.e2e
def test_kubernetes_validate_command_line_strict(tmp_path):
    """The same check as a user runs it: ``kubernetes-validate --strict -k VERSION FILE``."""
    import shutil
    import subprocess
    import sys

    exe = shutil.which("kubernetes-validate", path=os.path.dirname(sys.executable)) or shutil.which(
        "kubernetes-validate"
    )
    assert exe, "kubernetes-validate is in the dev extra"
    _, text = docs(job(nodes=16, cpu="8", memory="64Gi", device="ASCEND", workdir="/app"))
    path = tmp_path / "job.yaml"
    path.write_text(text)
    for version in VERSIONS:
        r = subprocess.run([exe, "--strict", "-k", version, str(path)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.count("INFO") == 2, (r.stdout, r.stderr)
    path.write_text(text.replace("completionMode: Indexed", "completionMode: Indexed\n  completionsTotal: 3"))
    r = subprocess.run([exe, "--strict", "-k", VERSIONS[0], str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0


@pytest.mark.parametrize("flavor", ["indexed", "volcano", "ascendjob"])
def test_metrics_port_annotates_every_pod_template_for_prometheus_and_names_the_port(flavor):
    parsed, text = docs(job(flavor=flavor, metrics_port=9400))
    if flavor == "indexed":
        templates = [parsed[1]["spec"]["template"]]
    elif flavor == "volcano":
        templates = [t["template"] for t in parsed[0]["spec"]["tasks"]]
    else:
        templates = [r["template"] for r in parsed[0]["spec"]["replicaSpecs"].values()]
    assert templates
    for t in templates:
        assert t["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9400",
            "prometheus.io/path": "/metrics",
        }
        ports = t["spec"]["containers"][0]["ports"]
        assert {"name": "metrics", "containerPort": 9400} in ports
    if flavor == "indexed":
        for d in parsed:
            for version in VERSIONS:
                kv.validate(d, version, strict=True)
    _, plain = docs(job(flavor=flavor))
    assert "prometheus.io" not in plain and "name: metrics" not in plain


@pytest.mark.parametrize("port", [0, 70000, 8118])
def test_a_metrics_port_the_pods_cannot_use_is_refused(port):
    with pytest.raises(PlanError) as err:
        check_job(job(metrics_port=port, master_port=8118))
    assert err.value.field == "--metrics-port"
