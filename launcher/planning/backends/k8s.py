"""Kubernetes manifests for a multi-node job (pure): what ``mslaunch k8s gen`` writes.

Every pod runs ``mslaunch run`` in per-node mode (one pod per node, ``per_host`` ranks in it); the
pod of node 0 also runs MindSpore's scheduler, and every other pod finds it by a DNS name.  Three
flavors:

* ``indexed`` (plain Kubernetes >= 1.27, no operator): a headless Service and a ``batch/v1``
  Job with ``completionMode: Indexed``.  Pod ``i`` is ``<name>-<i>.<name>`` in DNS and gets
  ``JOB_COMPLETION_INDEX=i``; its command carries ``--node_rank $(JOB_COMPLETION_INDEX)`` and
  ``--master_addr <name>-0.<name>``.  Any failed pod fails the Job (``backoffLimit: 0`` and a
  ``podFailurePolicy``), and the Job controller then deletes the other pods.
* ``volcano``: a ``batch.volcano.sh/v1alpha1`` Job with one task of N replicas; its ``svc``
  plugin makes the headless Service and the names ``<name>-node-<i>.<name>``, its ``env``
  plugin sets ``VC_TASK_INDEX`` (read by ``--node_rank auto``); a failed pod ends the job.
* ``ascendjob``: an ``AscendJob`` (``mindxdl.gitee.com/v1``) for MindCluster's Ascend
  Operator, a Master replica spec (node 0) and a Worker one (the others); the operator injects
  ``MS_SCHED_HOST``/``MS_SCHED_PORT``/``MS_NODE_RANK``... and the command relies on them
  (``--node_rank auto``).

:func:`build_manifests` returns the documents (dicts, with :class:`~launcher.planning.text.yamlout.Note`
comments); :func:`render_manifests` the YAML text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from launcher.errors import PlanError
from launcher.planning.text.yamlout import Note, render_all

FLAVORS = ("indexed", "volcano", "ascendjob")
#: Extended resource per device target (the device plugins' names), K per pod.
DEVICE_RESOURCES = {"ASCEND": "huawei.com/Ascend910", "GPU": "nvidia.com/gpu"}
#: The container's name (the Ascend Operator requires ``ascend`` for AscendJob pods).
CONTAINER = "mslaunch"
ASCEND_CONTAINER = "ascend"
#: The Volcano task's name: pods are ``<job>-node-<i>``.
VOLCANO_TASK = "node"
#: The downward-API field the Job controller fills with the completion index.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: The command every pod runs (``mslaunch`` must be on the image's PATH).
POD_COMMAND = ("mslaunch", "run")

#: Kubernetes' default ``terminationGracePeriodSeconds``, and what mslaunch needs beyond ``--grace``
#: to end its ranks and write the summary.
DEFAULT_TERMINATION_GRACE = 30
GRACE_MARGIN = 10

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


@dataclass(frozen=True)
class K8sJob:
    """What to generate.

    Attributes:
        name: the job's name (a DNS label); also the headless Service's and the pods' prefix.
        image: the container image (must have ``mslaunch`` on its PATH and the program).
        nodes: pods (one per node).
        per_host: ranks per pod (``--local_worker_num``); the world size is ``nodes * per_host``.
        run_args: ``mslaunch run`` options as the user gave them (those this module sets are
            left out: world size, per-node count, node rank, master address/port), then SCRIPT
            and its ARGS.
        flavor: one of :data:`FLAVORS`.
        namespace: ``metadata.namespace``, or None (kubectl's current one).
        master_port: the scheduler's port (``--master_port``).
        workdir: the container's working directory (relative SCRIPT paths resolve there), or
            None (the image's).
        cpu, memory: Kubernetes quantities for requests and limits, or None.
        device: the job's device target as mslaunch determines it (``--device-target`` /
            ``DEVICE_TARGET``), upper case, or None: ``ASCEND``/``GPU`` add ``per_host`` devices
            per pod (:data:`DEVICE_RESOURCES`).
        grace: ``mslaunch run --grace`` (seconds between SIGTERM and SIGKILL of the ranks); a pod
            being deleted gets it plus :data:`GRACE_MARGIN` when that exceeds Kubernetes' 30 s.
        metrics_port: the port each pod serves its Prometheus metrics on (``run --metrics-port``, bound
            to the pod's every address), or None; with a port, the pod template gets Prometheus'
            ``prometheus.io/*`` scrape annotations and a ``metrics`` container port.
        secrets: names of the secret variables: each pod's container takes them from the
            Kubernetes Secret :attr:`secret_name` (``valueFrom.secretKeyRef``), and ``run_args``
            name them with ``--secret-env NAME`` only; no value is in the manifests.
    """

    name: str
    image: str
    nodes: int
    per_host: int
    run_args: Tuple[str, ...]
    flavor: str = "indexed"
    namespace: Optional[str] = None
    master_port: int = 8118
    workdir: Optional[str] = None
    cpu: Optional[str] = None
    memory: Optional[str] = None
    device: Optional[str] = None
    grace: float = 25.0  # mslaunch run's default --grace (launcher.execution.settings.SuperviseOptions)
    metrics_port: Optional[int] = None
    secrets: Tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_host

    @property
    def secret_name(self) -> str:
        """The Kubernetes Secret holding the secret variables' values (one key per name)."""
        return f"{self.name}-secrets"


def _dns_label(value: str, field: str, room: int = 0) -> None:
    if not _DNS_LABEL.match(value) or len(value) + room > 63:
        extra = (
            f" and at most {63 - room} characters (pod names add a suffix)" if room else " and at most 63 characters"
        )
        raise PlanError(
            f"{value!r} is not a DNS label: use lower-case letters, digits and '-', starting and ending with a letter "
            "or digit,"
            f"{extra}",
            field=field,
        )


def check_job(job: K8sJob) -> None:
    """Refuse what Kubernetes (or the pods) would refuse.

    Raises:
        PlanError: one line naming the option: nodes or per-host below 1, a name or namespace
            that is not a DNS label (or too long for the pods' host names), an empty image or
            one with blanks, a bad quantity, a relative working dir, a port out of range, an
            unknown flavor, no program.
    """
    if job.flavor not in FLAVORS:
        raise PlanError(f"unknown flavor {job.flavor!r}; use one of {', '.join(FLAVORS)}", field="--flavor")
    if job.nodes < 1:
        raise PlanError(f"--nodes must be at least 1, got {job.nodes}", field="--nodes")
    if job.per_host < 1:
        raise PlanError(f"--per-host must be at least 1, got {job.per_host}", field="--per-host")
    suffix = len(str(job.nodes - 1)) + 1 + (len(VOLCANO_TASK) + 1 if job.flavor == "volcano" else 0)
    if job.flavor == "ascendjob":
        suffix = len("-worker-") + len(str(job.nodes))
    _dns_label(job.name, "--name", suffix)
    if job.namespace is not None:
        _dns_label(job.namespace, "--namespace")
    if not job.image or any(c.isspace() or not c.isprintable() for c in job.image):
        raise PlanError(
            f"--image {job.image!r} must be one image reference without blanks, e.g. registry/mslaunch:1.0",
            field="--image",
        )
    for flag, value in (("--cpu", job.cpu), ("--memory", job.memory)):
        if value is not None and not _QUANTITY.match(value):
            raise PlanError(f"{flag} {value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)", field=flag)
    if job.workdir is not None and (not job.workdir.startswith("/") or "\n" in job.workdir):
        raise PlanError(f"--workdir {job.workdir!r} must be an absolute path in the image", field="--workdir")
    if not 1 <= job.master_port <= 65535:
        raise PlanError(f"--master_port {job.master_port} is not a port number", field="--master_port")
    if job.metrics_port is not None and (not 1 <= job.metrics_port <= 65535 or job.metrics_port == job.master_port):
        raise PlanError(
            f"--metrics-port {job.metrics_port}: the pods need a port number of their own (1..65535, not the "
            "scheduler's)",
            field="--metrics-port",
        )
    if not job.run_args:
        raise PlanError("missing SCRIPT: mslaunch k8s gen [options] [run options] SCRIPT [ARGS]", field="SCRIPT")


def master_addr(job: K8sJob) -> Optional[str]:
    """Node 0's DNS name as the other pods resolve it, or None (ascendjob: the operator's
    ``MS_SCHED_HOST``)."""
    if job.flavor == "indexed":
        return f"{job.name}-0.{job.name}"
    if job.flavor == "volcano":
        return f"{job.name}-{VOLCANO_TASK}-0.{job.name}"
    return None


def pod_args(job: K8sJob) -> List[str]:
    """The arguments of :data:`POD_COMMAND` in every pod (``$(VAR)`` is expanded by the kubelet)."""
    args = ["--worker_num", str(job.world_size), "--local_worker_num", str(job.per_host)]
    if job.flavor == "indexed":
        args += ["--node_rank", "$(JOB_COMPLETION_INDEX)"]
    else:
        args += ["--node_rank", "auto"]
    addr = master_addr(job)
    if addr is not None:
        args += ["--master_addr", addr, "--master_port", str(job.master_port)]
    return args + list(job.run_args)


def _labels(job: K8sJob) -> Dict[str, str]:
    return {"app.kubernetes.io/name": "mslaunch", "app.kubernetes.io/instance": job.name}


def _metadata(job: K8sJob, labels: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": job.name}
    if job.namespace is not None:
        meta["namespace"] = job.namespace
    meta["labels"] = dict(labels if labels is not None else _labels(job))
    return meta


def _resources(job: K8sJob) -> Optional[Dict[str, Any]]:
    amounts: Dict[str, Any] = {}
    if job.cpu is not None:
        amounts["cpu"] = job.cpu
    if job.memory is not None:
        amounts["memory"] = job.memory
    limits: Dict[str, Any] = dict(amounts)
    device = DEVICE_RESOURCES.get((job.device or "").upper())
    if device is not None:
        limits[device] = Note(job.per_host, f"one device per rank (device target {job.device})")
    if not limits:
        return None
    out: Dict[str, Any] = {}
    if amounts:
        out["requests"] = amounts
    out["limits"] = (
        Note(limits, "requests = limits: the pod is not throttled below what it asked for") if amounts else limits
    )
    return out


def _container(job: K8sJob, name: str) -> Dict[str, Any]:
    container: Dict[str, Any] = {"name": name, "image": job.image}
    if job.workdir is not None:
        container["workingDir"] = Note(job.workdir, "relative SCRIPT paths resolve here")
    container["command"] = list(POD_COMMAND)
    args = pod_args(job)
    container["args"] = Note(
        args,
        {
            "indexed": "per-node mode: this pod runs ranks JOB_COMPLETION_INDEX*per_host .. +per_host-1; pod 0 also "
            "runs\n"
            "the scheduler (its name resolves to its own address) and every other pod waits for that name",
            "volcano": "per-node mode: --node_rank auto reads VC_TASK_INDEX (Volcano's env plugin); pod 0 also runs "
            "the scheduler",
            "ascendjob": "per-node mode: --node_rank auto reads the Ascend Operator's MS_NODE_RANK, MS_SCHED_HOST and "
            "MS_SCHED_PORT",
        }[job.flavor],
    )
    env: List[Any] = []
    if job.flavor == "indexed":
        env.append(
            Note(
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}},
                },
                "the Job controller sets it too; declared here so that $(JOB_COMPLETION_INDEX) in args always expands",
            )
        )
    for i, key in enumerate(job.secrets):
        ref = {"name": key, "valueFrom": {"secretKeyRef": {"name": job.secret_name, "key": key}}}
        env.append(
            Note(ref, f"secrets: from the Secret {job.secret_name} (mslaunch k8s gen --secret-manifest writes it)")
            if i == 0
            else ref
        )
    if env:
        container["env"] = env
    ports: List[Any] = []
    if job.flavor != "ascendjob":
        ports.append(Note({"name": "ms-sched", "containerPort": job.master_port}, "MindSpore's scheduler (pod 0)"))
    if job.metrics_port is not None:
        ports.append(Note({"name": "metrics", "containerPort": job.metrics_port}, "mslaunch run --metrics-port"))
    if ports:
        container["ports"] = ports
    resources = _resources(job)
    if resources is not None:
        container["resources"] = resources
    return container


def _template_metadata(job: K8sJob, labels: Dict[str, str]) -> Dict[str, Any]:
    """The pod template's metadata: its labels; with ``metrics_port``, the annotations Prometheus'
    Kubernetes service discovery reads (the common ``prometheus.io/*`` relabelling)."""
    meta: Dict[str, Any] = {"labels": labels}
    if job.metrics_port is not None:
        meta["annotations"] = Note(
            {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(job.metrics_port),
                "prometheus.io/path": "/metrics",
            },
            "each pod's mslaunch serves the metrics of its node's ranks (docs/watching.md#prometheus)",
        )
    return meta


def _pod_spec(job: K8sJob, container: str) -> Dict[str, Any]:
    spec: Dict[str, Any] = {}
    if job.flavor == "indexed":
        spec["subdomain"] = Note(job.name, "the headless Service above: pod i is <job>-i.<service> in DNS")
    spec["restartPolicy"] = Note(
        "Never", "a failed pod is not restarted in place: its ranks cannot rejoin a running cluster"
    )
    _termination_grace(job, spec)
    spec["containers"] = [_container(job, container)]
    return spec


def _termination_grace(job: K8sJob, spec: Dict[str, Any]) -> None:
    """``terminationGracePeriodSeconds`` when ``--grace`` needs more than Kubernetes' default."""
    need = int(math.ceil(job.grace)) + GRACE_MARGIN
    if need > DEFAULT_TERMINATION_GRACE:
        spec["terminationGracePeriodSeconds"] = Note(
            need, f"--grace {job.grace:g} s for the ranks, then mslaunch's summary"
        )


def _indexed(job: K8sJob) -> List[Any]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job),
        "spec": {
            "clusterIP": Note("None", "headless: DNS answers with the pods' own addresses"),
            "publishNotReadyAddresses": Note(
                True, "names resolve as soon as a pod has an address (no readiness probe needed)"
            ),
            "selector": _labels(job),
            "ports": [{"name": "ms-sched", "port": job.master_port, "targetPort": job.master_port}],
        },
    }
    jobdoc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job),
        "spec": {
            "completionMode": Note(
                "Indexed", "each pod gets JOB_COMPLETION_INDEX 0..N-1 and the host name <job>-<index>"
            ),
            "completions": job.nodes,
            "parallelism": Note(job.nodes, "every node at once: the cluster forms only when all pods run"),
            "backoffLimit": Note(0, "no retries: one failed pod fails the Job, which then deletes the other pods"),
            "podFailurePolicy": Note(
                {
                    "rules": [
                        {
                            "action": "FailJob",
                            "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
                            "onPodConditions": Note(
                                [], "empty (this rule matches exit codes); the published schemas require the field"
                            ),
                        }
                    ]
                },
                "fail the whole Job at the first non-zero exit (mslaunch exits with the failing rank's code)",
            ),
            "template": {
                "metadata": _template_metadata(job, _labels(job)),
                "spec": _pod_spec(job, CONTAINER),
            },
        },
    }
    return [service, jobdoc]


def _volcano(job: K8sJob) -> List[Any]:
    return [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": _metadata(job),
            "spec": {
                "schedulerName": "volcano",
                "minAvailable": Note(job.nodes, "gang scheduling: all pods start together or none does"),
                "plugins": Note(
                    {
                        "svc": ["--publish-not-ready-addresses=true"],
                        "env": [],
                    },
                    "svc: a headless Service <job> and host names <job>-<task>-<i>; env: VC_TASK_INDEX in every pod",
                ),
                "policies": Note(
                    [
                        {"event": "PodFailed", "action": "TerminateJob"},
                        {"event": "PodEvicted", "action": "TerminateJob"},
                    ],
                    "one failed or evicted pod ends the job: its ranks cannot rejoin a running cluster",
                ),
                "tasks": [
                    {
                        "name": VOLCANO_TASK,
                        "replicas": job.nodes,
                        "template": {
                            "metadata": _template_metadata(job, _labels(job)),
                            "spec": _pod_spec(job, CONTAINER),
                        },
                    }
                ],
            },
        }
    ]


def _ascendjob(job: K8sJob) -> List[Any]:
    labels = {"framework": "mindspore"}
    if (job.device or "").upper() == "ASCEND":
        labels["ring-controller.atlas"] = "ascend-910b"
    labels.update(_labels(job))

    def _ascend_pod_spec() -> Dict[str, Any]:
        spec: Dict[str, Any] = {}
        _termination_grace(job, spec)
        spec["containers"] = [_container(job, ASCEND_CONTAINER)]
        return spec

    def replica(count: int) -> Dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "metadata": _template_metadata(job, dict(labels)),
                "spec": _ascend_pod_spec(),
            },
        }

    specs: Dict[str, Any] = {"Master": Note(replica(1), "node 0: MS_NODE_RANK=0, runs the scheduler")}
    if job.nodes > 1:
        specs["Worker"] = Note(replica(job.nodes - 1), "nodes 1..N-1")
    meta = _metadata(job, labels)
    meta["labels"] = Note(
        labels,
        "ring-controller.atlas: ascend-910b for Atlas A2 training servers, ascend-910 for Atlas 800"
        if "ring-controller.atlas" in labels
        else "framework: which variables the operator injects",
    )
    return [
        {
            "apiVersion": "mindxdl.gitee.com/v1",
            "kind": "AscendJob",
            "metadata": meta,
            "spec": {
                "schedulerName": Note("volcano", "with the operator's gang scheduling on"),
                "runPolicy": {
                    "schedulingPolicy": {
                        "minAvailable": Note(job.nodes, "Master + Worker replicas"),
                        "queue": "default",
                    }
                },
                "successPolicy": "AllWorkers",
                "replicaSpecs": specs,
            },
        }
    ]


def build_manifests(job: K8sJob) -> List[Any]:
    """The documents for ``job`` (after :func:`check_job`), with comments as notes.

    Raises:
        PlanError: see :func:`check_job`.
    """
    check_job(job)
    return {"indexed": _indexed, "volcano": _volcano, "ascendjob": _ascendjob}[job.flavor](job)


def render_secret(job: K8sJob, values: Mapping[str, str]) -> str:
    """The ``v1`` Secret :attr:`K8sJob.secret_name` holding ``values`` (``stringData``), for
    ``--secret-manifest`` (a file of its own, 0600: the job's manifests hold no value)."""
    meta = _metadata(job)
    meta["name"] = job.secret_name
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": dict(values)}
    header = (
        f"Written by 'mslaunch k8s gen --secret-manifest': the secret variables of {job.name}.\n"
        "Apply it before the job's manifests; keep this file private (it holds the values)."
    )
    return render_all([doc], header)


def render_manifests(job: K8sJob) -> str:
    """The multi-document YAML, with a header saying what it runs and how to use it."""
    docs = build_manifests(job)
    header = (
        f"Written by 'mslaunch k8s gen' ({job.flavor}): {job.nodes} pod(s) x {job.per_host} rank(s) = {job.world_size} "
        "ranks;\n"
        f"every pod runs 'mslaunch run' in per-node mode and prints its ranks' lines (kubectl logs).\n"
        f"Apply with: kubectl apply -f <this file>"
    )
    return render_all(docs, header)
