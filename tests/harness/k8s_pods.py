"""Run an Indexed Job's pods as a kubelet would, on a namespace cluster (no API server here).

Reads the manifests ``mslaunch k8s gen --flavor indexed`` wrote (a headless Service and a
``batch/v1`` Job) and plays the parts of the Job controller, the cluster DNS and the kubelet:

* **Job controller**: pod ``i`` gets the annotation and label
  ``batch.kubernetes.io/job-completion-index: i``, the host name ``<job>-<i>`` and, unless the
  container declares it, ``JOB_COMPLETION_INDEX`` (a downward-API env entry), as Kubernetes does
  for ``completionMode: Indexed``.  When a pod fails, ``backoffLimit`` and ``podFailurePolicy``
  (``FailJob`` on exit codes) decide whether the Job fails; a failed Job terminates every other
  pod (SIGTERM to the container's main process, ``terminationGracePeriodSeconds`` (default 30),
  then SIGKILL).
* **DNS**: the headless Service must select the pod template's labels and be the pods'
  ``subdomain``; then, from the moment a pod exists (``publishNotReadyAddresses``), its name
  ``<host>.<subdomain>`` (and the ``.<ns>.svc.cluster.local`` form) resolves to its address in
  every pod.  Each pod's ``/etc/hosts`` is ``/etc/netns/<netns>/hosts``, which ``ip netns exec``
  bind-mounts over ``/etc/hosts``; it is rewritten in place (same inode) as pods appear, so a
  pod started before pod 0 sees pod 0's name resolve late, as with a real cluster DNS.
* **kubelet**: each pod runs in its own network namespace (one host of the cluster: its own
  address) and UTS namespace (``hostname`` is the pod's), with the container's env built as a
  kubelet builds it: the image's env, the service variables (``KUBERNETES_SERVICE_HOST``...),
  then ``env`` entries in order (``value`` with ``$(VAR)`` expansion, ``valueFrom.fieldRef``
  from the pod's fields); ``command``/``args`` with ``$(VAR)`` expanded (``$$`` is a literal
  ``$``); started in ``workingDir``.  stdout and stderr go to ``<logdir>/<pod>.log``
  (``kubectl logs``).  When the main process ends, whatever is left in the pod is recorded
  (:attr:`Pod.leftovers`) and killed, as a container runtime ends a container.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from tests.harness.netns_cluster import NamespaceCluster

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
#: What the kubelet adds for the API server's Service (nothing here connects to it).
SERVICE_ENV = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "KUBERNETES_PORT": "tcp://10.96.0.1:443",
}


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: ``$(NAME)`` -> its value if defined (else left as is),
    ``$$`` -> ``$``, any other ``$`` kept."""
    out: List[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


_FIELD_RE = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


@dataclass
class Pod:
    index: int
    name: str
    hostname: str
    netns: str
    ip: str
    annotations: Dict[str, str]
    labels: Dict[str, str]
    uid: str
    env: Dict[str, str] = field(default_factory=dict)
    argv: List[str] = field(default_factory=list)
    cwd: str = "/"
    log: str = ""
    proc: Optional[subprocess.Popen] = None
    returncode: Optional[int] = None
    terminated: bool = False
    leftovers: List[int] = field(default_factory=list)
    started_at: Optional[float] = None  #: time.monotonic() when its container started
    ended_at: Optional[float] = None  #: when the harness saw its main process end

    def field_value(self, path: str, namespace: str) -> str:
        simple = {
            "metadata.name": self.name,
            "metadata.namespace": namespace,
            "metadata.uid": self.uid,
            "status.podIP": self.ip,
            "status.podIPs": self.ip,
            "status.hostIP": self.ip,
            "spec.nodeName": self.hostname,
            "spec.serviceAccountName": "default",
        }
        if path in simple:
            return simple[path]
        m = _FIELD_RE.match(path)
        if m:
            return (self.labels if m.group(1) == "labels" else self.annotations).get(m.group(2), "")
        raise ValueError(f"fieldRef {path!r} is not a downward-API field this harness knows")

    def output(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()


class IndexedJobPods:
    """The pods of one Indexed Job on ``cluster`` (pod ``i`` on host ``i``).

    Args:
        cluster: a :class:`NamespaceCluster` with at least ``completions`` hosts.
        manifest: the YAML text (a Service and a Job, in any order).
        image_env: the image's own env (``ENV`` lines of its Dockerfile), e.g. PATH.
        logdir: where each pod's log goes.
        namespace: the Kubernetes namespace (``metadata.namespace`` wins).
    """

    def __init__(
        self,
        cluster: NamespaceCluster,
        manifest: str,
        image_env: Mapping[str, str],
        logdir: str,
        namespace: str = "default",
    ) -> None:
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        services = [d for d in docs if d.get("kind") == "Service"]
        jobs = [d for d in docs if d.get("kind") == "Job" and d.get("apiVersion") == "batch/v1"]
        if len(services) != 1 or len(jobs) != 1:
            raise ValueError(f"expected one Service and one batch/v1 Job, got kinds {[d.get('kind') for d in docs]}")
        self.service, self.job = services[0], jobs[0]
        self.cluster = cluster
        self.image_env = dict(image_env)
        self.logdir = logdir
        self.namespace = self.job["metadata"].get("namespace", namespace)
        spec = self.job["spec"]
        if spec.get("completionMode") != "Indexed":
            raise ValueError("not an Indexed Job")
        self.completions = int(spec["completions"])
        if int(spec.get("parallelism", 1)) < self.completions:
            raise ValueError("parallelism < completions: the pods would not all run at once")
        if self.completions > len(cluster.hosts):
            raise ValueError(f"{self.completions} pods need as many hosts, the cluster has {len(cluster.hosts)}")
        self.template = spec["template"]
        pod_spec = self.template["spec"]
        if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
            raise ValueError("a Job's pods need restartPolicy Never or OnFailure")
        self.grace = float(pod_spec.get("terminationGracePeriodSeconds", 30))
        self.backoff_limit = int(spec.get("backoffLimit", 6))
        self.failure_rules = (spec.get("podFailurePolicy") or {}).get("rules", [])
        self.subdomain = pod_spec.get("subdomain")
        self.publishes = self._service_publishes()
        self.pods: Dict[int, Pod] = {}
        self.failed = 0
        self.status: Optional[str] = None  # "Complete" | "Failed"
        self._hosts_files: List[str] = []
        self._made_dirs: List[str] = []
        self.job_name = self.job["metadata"]["name"]
        for i in range(self.completions):
            self._write_hosts(i)

    # ---------------------------------------------------------------- DNS

    def _service_publishes(self) -> bool:
        """Whether the Service gives the pods DNS names (headless, selecting the pods, named as their subdomain)."""
        s = self.service["spec"]
        labels = self.template.get("metadata", {}).get("labels", {})
        selector = s.get("selector") or {}
        return (
            s.get("clusterIP") == "None"
            and self.service["metadata"]["name"] == self.subdomain
            and bool(selector)
            and all(labels.get(k) == v for k, v in selector.items())
        )

    def _records(self) -> List[str]:
        lines = []
        for pod in self.pods.values():
            if self.publishes:
                short = f"{pod.hostname}.{self.subdomain}"
                lines.append(f"{pod.ip}\t{short}.{self.namespace}.svc.cluster.local {short}")
        return lines

    def _hosts_path(self, index: int) -> str:
        return os.path.join("/etc/netns", self.cluster.host(index).netns, "hosts")

    def _write_hosts(self, index: int) -> None:
        """Pod ``index``'s /etc/hosts: localhost, its own entry (as the kubelet writes it) and the
        DNS records of the pods that exist (in place: ``ip netns exec`` bind-mounted this inode)."""
        path = self._hosts_path(index)
        folder = os.path.dirname(path)
        for d in (os.path.dirname(folder), folder):  # /etc/netns may not exist yet either
            if not os.path.isdir(d):
                os.mkdir(d)
                self._made_dirs.append(d)
        lines = ["127.0.0.1\tlocalhost"]
        pod = self.pods.get(index)
        if pod is not None:
            own = f"{pod.hostname}.{self.subdomain}.{self.namespace}.svc.cluster.local " if self.subdomain else ""
            lines.append(f"{pod.ip}\t{own}{pod.hostname}")
        lines += self._records()
        mode = "r+" if os.path.exists(path) else "w"
        with open(path, mode) as f:
            f.seek(0)
            f.write("\n".join(lines) + "\n")
            f.truncate()
        if path not in self._hosts_files:
            self._hosts_files.append(path)

    # ---------------------------------------------------------------- pods

    def _make_pod(self, index: int) -> Pod:
        host = self.cluster.host(index)
        meta = self.template.get("metadata", {})
        labels = dict(meta.get("labels", {}), **{INDEX_KEY: str(index), "job-name": self.job_name})
        annotations = dict(meta.get("annotations", {}), **{INDEX_KEY: str(index)})
        name = f"{self.job_name}-{index}-{secrets.token_hex(3)[:5]}"
        return Pod(
            index=index,
            name=name,
            hostname=f"{self.job_name}-{index}",
            netns=host.netns,
            ip=host.ip,
            annotations=annotations,
            labels=labels,
            uid=str(uuid.uuid4()),
        )

    def _container_env(self, pod: Pod, container: Dict[str, Any]) -> Tuple[Dict[str, str], Dict[str, str]]:
        """(the process's whole env, the variables ``$(VAR)`` may refer to: service variables and ``env`` entries)."""
        entries = list(container.get("env") or [])
        if not any(e["name"] == "JOB_COMPLETION_INDEX" for e in entries):  # the Job controller adds it
            entries.append(
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}},
                }
            )
        defined: Dict[str, str] = dict(SERVICE_ENV)  # what $(VAR) may refer to
        for e in entries:
            if "value" in e:
                defined[e["name"]] = expand(str(e["value"]), defined)
            elif "valueFrom" in e and "fieldRef" in e["valueFrom"]:
                defined[e["name"]] = pod.field_value(e["valueFrom"]["fieldRef"]["fieldPath"], self.namespace)
            else:
                raise ValueError(f"env entry {e!r}: only value and valueFrom.fieldRef are emulated")
        env = dict(self.image_env)
        env["HOSTNAME"] = pod.hostname
        env.update(defined)
        return env, defined

    def start(self, index: int) -> Pod:
        """Create pod ``index`` (its DNS record appears in every pod) and start its container."""
        if index in self.pods:
            raise ValueError(f"pod {index} exists")
        pod = self._make_pod(index)
        self.pods[index] = pod
        for i in range(self.completions):
            self._write_hosts(i)
        spec = self.template["spec"]
        (container,) = spec["containers"]
        env, defined = self._container_env(pod, container)
        argv = [expand(a, defined) for a in list(container.get("command") or []) + list(container.get("args") or [])]
        if not container.get("command"):
            raise ValueError("the container has no command (the image's entrypoint is not emulated)")
        pod.env, pod.argv = env, argv
        pod.cwd = container.get("workingDir") or self.image_env.get("WORKDIR", "/")
        pod.log = os.path.join(self.logdir, f"{pod.name}.log")
        out = open(pod.log, "wb")
        wrapped = [
            "ip",
            "netns",
            "exec",
            pod.netns,
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            pod.hostname,
        ] + argv
        try:
            pod.proc = subprocess.Popen(
                wrapped,
                cwd=pod.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()
        pod.started_at = time.monotonic()
        return pod

    def wait_output(self, index: int, pattern: str, timeout: float) -> bool:
        """Wait until pod ``index``'s log matches ``pattern`` (regex); False if it ends or times out first."""
        pod = self.pods[index]
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if rx.search(pod.output()):
                return True
            if pod.proc is not None and pod.proc.poll() is not None:
                return bool(rx.search(pod.output()))
            time.sleep(0.05)
        return False

    def _reap(self, pod: Pod) -> None:
        """The container's main process ended: record what was left in the pod, then kill it."""
        assert pod.proc is not None
        pod.returncode = pod.proc.returncode
        pod.ended_at = time.monotonic()
        deadline = time.monotonic() + 3.0
        left = self.cluster.pids_in(pod.index)
        while left and time.monotonic() < deadline:  # exiting children get a moment to go
            time.sleep(0.05)
            left = self.cluster.pids_in(pod.index)
        pod.leftovers = left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _fails_job(self, pod: Pod) -> bool:
        name = self.template["spec"]["containers"][0]["name"]
        for rule in self.failure_rules:
            req = rule.get("onExitCodes")
            if not req or req.get("containerName", name) != name:
                continue
            codes = set(req["values"])
            hit = pod.returncode in codes if req["operator"] == "In" else pod.returncode not in codes
            if hit:
                return rule["action"] == "FailJob"
        return self.failed > self.backoff_limit

    def _terminate_all(self) -> None:
        """Delete every running pod at once: SIGTERM to each main process, the grace period, then SIGKILL."""
        running = [p for p in self.pods.values() if p.proc is not None and p.proc.poll() is None]
        for pod in running:
            pod.terminated = True
            pod.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + self.grace
        for pod in running:
            try:
                pod.proc.wait(max(0.0, deadline - time.monotonic()))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                os.killpg(pod.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
                pod.proc.wait()  # type: ignore[union-attr]

    def run(self, timeout: float) -> str:
        """Play the Job controller until the Job completes or fails (every pod must be started).

        Returns:
            ``"Complete"`` or ``"Failed"``.
        Raises:
            TimeoutError: neither within ``timeout`` seconds (every pod is then killed).
        """
        deadline = time.monotonic() + timeout
        done: set = set()
        while True:
            for i, pod in self.pods.items():
                if i in done or pod.proc is None or pod.proc.poll() is None:
                    continue
                done.add(i)
                self._reap(pod)
                if pod.returncode != 0 and self.status is None:
                    self.failed += 1
                    if self._fails_job(pod):
                        self.status = "Failed"
                        self._terminate_all()
            if len(done) == self.completions and len(self.pods) == self.completions:
                if self.status is None:
                    self.status = "Complete" if all(p.returncode == 0 for p in self.pods.values()) else "Failed"
                return self.status
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"the job did not end within {timeout:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        """Kill every pod still running and remove the /etc/netns files this made."""
        for pod in self.pods.values():
            if pod.proc is not None and pod.proc.poll() is None:
                os.killpg(pod.proc.pid, signal.SIGKILL)
                pod.proc.wait()
            for pid in self.cluster.pids_in(pod.index):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for path in self._hosts_files:
            if os.path.exists(path):
                os.remove(path)
        for folder in reversed(self._made_dirs):
            try:
                os.rmdir(folder)
            except OSError:  # not empty: another cluster's files (e.g. /etc/netns shared with another test)
                pass
        self._hosts_files, self._made_dirs = [], []

    def __enter__(self) -> "IndexedJobPods":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
