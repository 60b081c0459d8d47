"""``mslaunch k8s gen``: Kubernetes manifests that run a job with one ``mslaunch run`` per pod.

The grammar is ``mslaunch k8s gen [gen options] [run options] SCRIPT [ARGS]``; a gen option
(``--nodes``, ``--image``...) is the command's own wherever it stands before SCRIPT.  The run
options are parsed by ``mslaunch run``'s own parser and the job is planned here, per-node mode
against stand-in hosts (this machine, for node 0 and the last node), so every error ``run`` would
give inside a pod is given now, one line, exit 2, and nothing is written.  What only the image
can tell (the program, ``--env-file`` files) is left to the pods.

The manifests are built by :mod:`launcher.planning.backends.k8s` (pure); ``-o FILE`` is written atomically.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import typer

from launcher.cli.options import PROGRAM_CONTEXT, JobOptions, job_options
from launcher.errors import PlanError
from launcher.planning.backends.k8s import FLAVORS, K8sJob, render_manifests

app = typer.Typer(help="Kubernetes: manifests whose pods run mslaunch in per-node mode.", no_args_is_help=True)
CONTEXT = dict(PROGRAM_CONTEXT, allow_extra_args=True)

#: run options the manifest sets itself (per pod), refused when given.
_SET_BY_GEN = {
    "--node_rank": "the pods' node rank comes from the job (JOB_COMPLETION_INDEX, VC_TASK_INDEX or the operator)",
    "--master_addr": "the scheduler's address is node 0's DNS name (or the operator's MS_SCHED_HOST)",
    "--hosts": "each pod runs its own node's ranks",
    "--host_list": "each pod runs its own node's ranks",
    "--include": "each pod runs its own node's ranks",
    "--exclude": "each pod runs its own node's ranks",
    "--launcher": "each pod starts its ranks itself (local)",
    "--dry-run": "the pods would plan and exit",
    "--detach": "a pod ends when its main process returns",
}
#: run options whose value the manifest carries itself (taken out of the pass-through arguments).
_MASTER_PORT = ("--master_port", "--master-port")
_METRICS = ("--metrics-port", "--metrics-addr")


def _metrics(params: Dict[str, Any], groups: List[List[str]]) -> Tuple[Optional[int], List[List[str]]]:
    """``--metrics-port`` in a pod: its port (for the scrape annotations) and the run options with
    ``--metrics-port ADDR:PORT`` bound to every address of the pod (or the ``--metrics-addr`` given):
    Prometheus scrapes the pod's IP, not its loopback.

    Raises:
        MsLaunchError: a bad value; port 0 (Prometheus needs the port in the annotation).
    """
    from launcher.cli.metrics_flags import parse_settings

    settings = parse_settings(params.get("metrics_port"), params.get("metrics_addr"), params.get("metrics_textfile"))
    if settings.port is None:
        return None, groups
    if settings.port == 0:
        raise PlanError(
            "port 0 cannot be scraped in a pod (the annotation names the port); give a port number",
            field="--metrics-port",
        )
    given = params.get("metrics_addr") is not None or ":" in str(params.get("metrics_port"))
    addr = settings.addr if given else "0.0.0.0"
    host = f"[{addr}]" if ":" in addr else addr
    kept = [g for g in groups if g[0].partition("=")[0] not in _METRICS]
    return settings.port, kept + [["--metrics-port", f"{host}:{settings.port}"]]


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="k8s")


def _run_command(ctx: Any) -> Any:
    root = ctx.find_root()
    command = root.command.get_command(root, "run")
    if command is None:  # pragma: no cover - run is always registered
        raise PlanError("the run command is missing", field="run")
    return command


def _names(command: Any) -> Tuple[Dict[str, Any], FrozenSet[str]]:
    """Option name -> parameter, and the names that take no value (flags, counts, --x/--no-x)."""
    by_name: Dict[str, Any] = {}
    flags = set()
    for param in command.params:
        if param.param_type_name != "option":
            continue
        names = list(param.opts) + list(param.secondary_opts)
        for n in names:
            by_name[n] = param
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            flags.update(names)
    return by_name, frozenset(flags)


def split_args(
    args: List[str], gen: Tuple[Dict[str, Any], FrozenSet[str]], run: Tuple[Dict[str, Any], FrozenSet[str]]
) -> Tuple[List[str], List[List[str]], List[str]]:
    """Split what follows the first run option into gen options, run options (one list of tokens
    per option) and SCRIPT with its ARGS.  An option is gen's if gen has that name, else run's;
    whether it takes a value is read from its owner's parameter."""
    gen_tokens: List[str] = []
    run_groups: List[List[str]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return gen_tokens, run_groups, args[i + 1 :]
        if not a.startswith("-") or a == "-":
            return gen_tokens, run_groups, args[i:]
        name, eq, _ = a.partition("=")
        by_name, flags = gen if name in gen[0] else run
        group = [a]
        i += 1
        if not eq and name in by_name and name not in flags and i < len(args):
            group.append(args[i])
            i += 1
        if by_name is gen[0]:
            gen_tokens += group
        else:
            run_groups.append(group)
        if name in ("-m", "--module") and by_name is run[0]:  # the module's own arguments follow
            return gen_tokens, run_groups, args[i:]
    return gen_tokens, run_groups, []


def _from_command_line(ctx: Any, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", None) == "COMMANDLINE"


def _make_context(command: Any, info_name: str, args: List[str], parent: Any, field: str) -> Any:
    """``command``'s parser on ``args`` (typer's click, vendored or not): a usage error becomes
    one line (PlanError), ``--help`` prints the help and exits 0."""
    try:
        return command.make_context(info_name, args, parent=parent)
    except Exception as exc:  # click's exceptions, whichever copy of click typer uses
        if type(exc).__name__ == "Exit":
            raise typer.Exit(getattr(exc, "exit_code", 0)) from None
        if hasattr(exc, "format_message"):
            prefix = "run option: " if info_name == "run" else ""
            raise PlanError(prefix + exc.format_message(), field=field) from None
        raise


def _merge_moved(ctx: Any, tokens: List[str]) -> Dict[str, Any]:
    """``ctx.params`` plus the gen options that stood among the run options."""
    params = dict(ctx.params)
    if not tokens:
        return params
    sub = _make_context(ctx.command, ctx.info_name or "gen", list(tokens), ctx.parent, "k8s gen")
    for name, value in sub.params.items():
        if not _from_command_line(sub, name):
            continue
        if _from_command_line(ctx, name):
            raise PlanError(f"--{name.replace('_', '-')} is given twice", field=f"--{name.replace('_', '-')}")
        params[name] = value
    return params


def _parse_run(ctx: Any, groups: List[List[str]], program: List[str]) -> Tuple[JobOptions, Dict[str, Any]]:
    """The run options through ``mslaunch run``'s own parser: (job options, every run parameter)."""
    run = _run_command(ctx)
    tokens = [t for g in groups for t in g]
    rctx = _make_context(run, "run", tokens + program, ctx.find_root(), "run options")
    return job_options(rctx.params), dict(rctx.params)


def _check_run(opts: JobOptions, params: Dict[str, Any], groups: List[List[str]], run_names: Dict[str, Any]) -> int:
    """Refuse run options a pod cannot use; return the scheduler port."""
    for group in groups:
        name = group[0].partition("=")[0]
        param = run_names.get(name)
        if param is None:
            continue
        for own, why in _SET_BY_GEN.items():
            if (
                own in param.opts
                or own in param.secondary_opts
                or (param.name and own.lstrip("-").replace("-", "_") == param.name)
            ):
                raise PlanError(f"{name} is set by mslaunch k8s gen: {why}; drop it", field=name)
    from launcher.cli.run import TEE_MODES
    from launcher.execution.settings import SuperviseOptions

    SuperviseOptions(
        grace=params["grace"],
        timeout=params["timeout"],
        start_timeout=params["start_timeout"],
        max_restarts=params["max_restarts"],
    )  # run's own checks of these
    if params.get("tee") is not None and params["tee"] not in TEE_MODES:
        raise PlanError(f"unknown --tee mode {params['tee']!r}; use one of {', '.join(TEE_MODES)}", field="--tee")
    if opts.join is not None:
        from launcher.cli.msrun_flags import parse_msrun_bool

        if not parse_msrun_bool(opts.join, "--join"):
            raise PlanError("--join False would end the pod at once; drop it", field="--join")
    from launcher.planning.job.kinds import Method

    if opts.method != Method.DYNAMIC and opts.method in tuple(m.value for m in Method):
        raise PlanError(
            f"--method {opts.method}: the pods run MindSpore's dynamic cluster (per-node mode); drop --method",
            field="--method",
        )
    if opts.master_port.strip().lower() == "auto":
        raise PlanError(
            "--master_port auto cannot work across pods (each would pick its own); give a port number",
            field="--master_port",
        )
    try:
        return int(opts.master_port)
    except ValueError:
        raise PlanError(
            f"--master-port must be a port number, got {opts.master_port!r}", field="--master-port"
        ) from None


def _plan_stand_ins(opts: JobOptions, nodes: int, per_host: int) -> None:
    """Plan node 0 and the last node as ``mslaunch run`` in their pods would (this machine as
    the stand-in host): the errors of the run options come out here, not in the pods."""
    from launcher.cli.spec import build_spec
    from launcher.planning.build import build_plan
    from launcher.planning.cpu.tuning import CPU_TUNE_MODES

    if opts.cpu_tune.strip().lower() not in CPU_TUNE_MODES:  # the stand-ins plan with it off (no probe of this machine)
        raise PlanError(
            f"unknown --cpu-tune {opts.cpu_tune!r}; use one of {', '.join(CPU_TUNE_MODES)}", field="--cpu-tune"
        )
    for node in sorted({0, nodes - 1}):
        stand_in = replace(
            opts,
            np=nodes * per_host,
            per_host=per_host,
            node_rank=str(node),
            master_addr=None,
            cpu_tune="off",
            env_file=(),
            secret_env=(),  # the pods take them from the job's Secret
            secret_env_file=(),  # in the image
            rank_table_file=None,
        )
        build_plan(build_spec(stand_in))


def _secrets_out_of_the_args(
    groups: List[List[str]], opts: JobOptions
) -> Tuple[List[List[str]], Tuple[str, ...], Dict[str, str]]:
    """The pass-through option groups without the values of secret variables, the secret names
    the pods take from the job's Secret, and the values known here (for ``--secret-manifest``).

    A secret ``--env NAME=VALUE`` becomes ``--secret-env NAME`` (its value in the Secret); a
    ``--secret-env NAME`` stays, its value taken from this environment when set here.
    """
    from launcher.cli.secretflags import take_secret_env_args
    from launcher.planning.job.secrets import DEFAULT_PATTERNS

    patterns = (() if opts.no_secret_patterns else DEFAULT_PATTERNS) + tuple(opts.secret_pattern)
    out: List[List[str]] = []
    values: Dict[str, str] = {}
    for group in groups:
        kept, taken = take_secret_env_args(group, opts.secret_env, patterns)
        if kept:
            out.append(kept)
        for name, value in taken:
            values[name] = value
            if name not in opts.secret_env:
                out.append(["--secret-env", name])
    for name in opts.secret_env:
        if name not in values and name in os.environ:
            values[name] = os.environ[name]
    names = tuple(dict.fromkeys(list(values) + list(opts.secret_env)))
    return out, names, values


def _write_secret_manifest(path: str, job: K8sJob, values: Dict[str, str]) -> None:
    """``--secret-manifest FILE``: the job's Secret, written atomically, 0600 whatever the umask.

    Raises:
        PlanError: the job has no secret, or one whose value is not known here.
    """
    missing = [n for n in job.secrets if n not in values]
    if not job.secrets or missing:
        why = f"{', '.join(missing)} set nowhere here" if missing else "the job has no secret variable"
        raise PlanError(f"{why}: give the value with --env NAME=VALUE or export it", field="--secret-manifest")
    from launcher.jobs.files import write_atomic
    from launcher.planning.backends.k8s import render_secret

    write_atomic(path, render_secret(job, values))
    sys.stderr.write(f"wrote {path}: Secret {job.secret_name} ({len(values)} key(s)); apply it first\n")


def _default_name(program: List[str], module: Optional[str]) -> str:
    base = module or (os.path.splitext(os.path.basename(program[0]))[0] if program else "")
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:40].strip("-")
    return name or "mslaunch-job"


def _escape(arg: str) -> str:
    """``arg`` as the kubelet gives it back: ``$`` doubled, so ``$(X)`` is not expanded."""
    return arg.replace("$", "$$")


@app.command("gen", context_settings=CONTEXT)
def gen_cmd(
    ctx: typer.Context,
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Pods, one per node (required)."),
    per_host: Optional[int] = typer.Option(
        None, "--per-host", "--local-worker-num", "--local_worker_num", help="Ranks per pod (required)."
    ),
    np: Optional[int] = typer.Option(
        None, "--np", "-n", "--worker-num", "--worker_num", help="Total ranks: must be nodes x per-host (the default)."
    ),
    image: Optional[str] = typer.Option(
        None, "--image", help="Container image with mslaunch and the program (required)."
    ),
    name: Optional[str] = typer.Option(None, "--name", help="Job name, a DNS label (default: from SCRIPT)."),
    namespace: Optional[str] = typer.Option(
        None, "--namespace", help="metadata.namespace (default: kubectl's current)."
    ),
    flavor: str = typer.Option(
        "indexed",
        "--flavor",
        help="indexed (plain Kubernetes >= 1.27) | volcano | ascendjob (MindCluster's Ascend Operator).",
    ),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write here (atomically) instead of stdout."),
    cpu: Optional[str] = typer.Option(None, "--cpu", help="CPU per pod (requests = limits), e.g. 8 or 7500m."),
    memory: Optional[str] = typer.Option(None, "--memory", help="Memory per pod (requests = limits), e.g. 64Gi."),
    workdir: Optional[str] = typer.Option(
        None, "--workdir", help="The container's working directory (default: the image's)."
    ),
    secret_manifest: Optional[str] = typer.Option(
        None, "--secret-manifest", help="Write the Secret of the job's secret variables here (0600)."
    ),
) -> None:
    """Write the manifests of a job whose pods each run 'mslaunch run' for one node.

    Give --nodes N --per-host K --image IMAGE and the options below, then any 'mslaunch run' options, then SCRIPT and
    its ARGS.

    The run options are checked now: a bad one is refused here, not in the pods. Device resources (huawei.com/Ascend910
    or nvidia.com/gpu, K per pod)
    follow the job's --device-target or DEVICE_TARGET.
    """
    gen_names = _names(ctx.command)
    run_cmd = _run_command(ctx)
    run_names = _names(run_cmd)
    moved, groups, program = split_args(list(ctx.args), gen_names, run_names)
    params = _merge_moved(ctx, moved)
    for flag, key in (("--nodes", "nodes"), ("--per-host", "per_host"), ("--image", "image")):
        if params[key] is None:
            raise PlanError(
                f"missing {flag}: mslaunch k8s gen --nodes N --per-host K --image IMAGE [run options] SCRIPT",
                field=flag,
            )
    nodes_n, per, img = int(params["nodes"]), int(params["per_host"]), str(params["image"])
    if params["flavor"] not in FLAVORS:
        raise PlanError(f"unknown flavor {params['flavor']!r}; use one of {', '.join(FLAVORS)}", field="--flavor")
    if nodes_n < 1:
        raise PlanError(f"--nodes must be at least 1, got {nodes_n}", field="--nodes")
    if per < 1:
        raise PlanError(f"--per-host must be at least 1, got {per}", field="--per-host")
    if params["np"] is not None and params["np"] != nodes_n * per:
        raise PlanError(
            f"--np {params['np']} is not --nodes x --per-host = {nodes_n} x {per} = {nodes_n * per}; drop --np or fix "
            "it",
            field="--np",
        )
    opts, run_params = _parse_run(ctx, groups, program)
    port = _check_run(opts, run_params, groups, run_names[0])
    if not opts.program and not opts.module:
        raise PlanError("missing SCRIPT: mslaunch k8s gen [options] [run options] SCRIPT [ARGS]", field="SCRIPT")
    from launcher.cli.cpuspec import device_target
    from launcher.planning.job import envs

    env_pairs = dict(envs.parse_env_assignment(e) for e in opts.env)
    device = device_target(((opts.module,) if opts.module else ()) + opts.program, env_pairs)
    # pass-through run options: as given, minus the scheduler port (the manifest carries it)
    metrics_port, groups = _metrics(run_params, groups)
    keep = (
        [g for g in groups if g[0].partition("=")[0] not in _MASTER_PORT] if params["flavor"] != "ascendjob" else groups
    )
    keep, secret_names, secret_values = _secrets_out_of_the_args(keep, opts)
    job = K8sJob(
        name=params["name"] if params["name"] is not None else _default_name(program, opts.module),
        image=img,
        nodes=nodes_n,
        per_host=per,
        run_args=tuple(_escape(t) for t in [t for g in keep for t in g] + program),
        flavor=params["flavor"],
        namespace=params["namespace"],
        master_port=port,
        workdir=params["workdir"],
        cpu=params["cpu"],
        memory=params["memory"],
        device=device.upper() if device else None,
        grace=float(run_params["grace"]),
        metrics_port=metrics_port,
        secrets=secret_names,
    )
    text = render_manifests(job)  # checks the job's own fields (name, image, quantities...)
    _plan_stand_ins(opts, nodes_n, per)
    if params["secret_manifest"] is not None:
        _write_secret_manifest(params["secret_manifest"], job, secret_values)
    path = params["output"]
    if path is None:
        sys.stdout.write(text)
        return
    from launcher.jobs.files import write_atomic

    write_atomic(path, text)  # 0600: the manifests hold the --env / --env-file values
    sys.stderr.write(f"wrote {path}: {job.flavor}, {job.nodes} pod(s) x {job.per_host} rank(s)\n")
