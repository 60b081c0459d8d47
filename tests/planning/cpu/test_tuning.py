"""CPU tuning: probe parsing and caching, the ISA decision, cores and threads per rank, --bind-core,
the plan/dry-run output, affinity applied by the local backend, and the real probe on this CPU."""

from __future__ import annotations

import json
import os

import pytest

from launcher.errors import PlanError
from launcher.execution.checks import cpu as cpuprobe
from launcher.planning.build import build_plan
from launcher.planning.cpu.hostcores import format_cpus
from launcher.planning.cpu.probe import ProbeError, isa_advice, parse_probe
from launcher.planning.cpu.tuning import CpuSpec, parse_bind_core, parse_cpu_list, plan_cpu, split_cores
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.spec import JobSpec
from launcher.workloads import cpu_probe
from tests.harness.cli import run_process
from tests.harness.paths import REPO

ROOT = REPO


def probe_json(
    default_conv_ms=5000.0, avx2_conv_ms=73.0, default_impl="jit_uni_ncsp:conv+ref:any", key="k1", ms="2.10.0"
):
    """A probe result shaped as the probe prints it (figures from the issue's AVX-512 EPYC)."""
    flops = cpu_probe.conv_flops()
    return json.dumps(
        {
            "version": 1,
            "key": key,
            "onednn": "3.10.1",
            "onednn_isa": "Intel AVX-512 with bf16",
            "numpy_gflops": 186.0,
            "import_seconds": 1.5,
            "seconds": 4.2,
            "facts": {"host": "h", "cpu_model": "AMD EPYC", "mindspore": ms, "key": key},
            "variants": [
                {
                    "isa": None,
                    "kernels": {
                        "conv": {"impl": default_impl, "ms": default_conv_ms, "gflops": flops / default_conv_ms / 1e6},
                        "matmul": {"impl": "gemm:jit:f32", "ms": 3.0, "gflops": 89.0},
                    },
                },
                {
                    "isa": "AVX2",
                    "kernels": {
                        "conv": {"impl": "x64:gemm:jit", "ms": avx2_conv_ms, "gflops": flops / avx2_conv_ms / 1e6},
                        "matmul": {"impl": "gemm:jit:f32", "ms": 3.1, "gflops": 86.0},
                    },
                },
                {"isa": "AVX512_CORE", "error": "timed out after 60 s"},
            ],
        }
    )


CLIFF = parse_probe(probe_json())
FLAT = parse_probe(probe_json(default_conv_ms=1.2, avx2_conv_ms=1.25, default_impl="x64:gemm:jit"))


# ------------------------------------------------------------------ probe results


def test_parse_probe_reads_every_variant():
    p = CLIFF
    assert (p.key, p.mindspore, p.onednn, p.numpy_gflops, p.seconds) == ("k1", "2.10.0", "3.10.1", 186.0, 4.2)
    assert [v.isa for v in p.variants] == [None, "AVX2", "AVX512_CORE"]
    assert p.default.kernels["conv"].is_reference and not p.variants[1].kernels["conv"].is_reference
    assert p.variants[2].error == "timed out after 60 s" and p.variants[2].kernels == {}


@pytest.mark.parametrize(
    "text, field",
    [
        ("not json", None),
        (json.dumps({"version": 2, "key": "k"}), "version"),
        (json.dumps({"version": 1, "variants": []}), "key"),
        (json.dumps({"version": 1, "key": "k", "variants": []}), "variants"),
        (json.dumps({"version": 1, "key": "k", "variants": [{"isa": None}]}), "variants[0].kernels"),
        (
            json.dumps(
                {"version": 1, "key": "k", "variants": [{"isa": None, "kernels": {"conv": {"ms": -1, "gflops": 1}}}]}
            ),
            "variants[0].kernels.conv.ms",
        ),
        (
            json.dumps(
                {"version": 1, "key": "k", "variants": [{"isa": None, "kernels": {"conv": {"ms": 0, "gflops": 1}}}]}
            ),
            "variants[0].kernels.conv.ms",
        ),
    ],
)
def test_parse_probe_errors_name_the_field(text, field):
    with pytest.raises(ProbeError) as e:
        parse_probe(text, "cache.json")
    assert e.value.path == "cache.json" and e.value.field == field


def test_verbose_lines_give_implementation_and_time():
    text = (
        "onednn_verbose,v1,info,oneDNN v3.10.1 (commit x)\n"
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,convolution,jit_uni_ncsp:conv+ref:any,forward_training,src,,,4.1\n"
        "onednn_verbose,v1,primitive,exec,cpu,convolution,jit_uni_ncsp:conv+ref:any,forward_training,src:f32,,alg,mb4,512.5\n"
        "onednn_verbose,v1,primitive,exec,cpu,matmul,gemm:jit:f32,undef,src:f32,,,512x512:512x512,18.8\n"
    )
    assert cpu_probe.parse_verbose(text) == {
        "convolution": [("jit_uni_ncsp:conv+ref:any", 512.5)],
        "matmul": [("gemm:jit:f32", 18.8)],
    }


def test_candidate_isas_follow_the_cpu_flags():
    assert cpu_probe.candidate_isas(["avx", "avx2", "fma"]) == ["AVX2"]
    assert cpu_probe.candidate_isas(["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"]) == [
        "AVX2",
        "AVX512_CORE",
    ]
    assert cpu_probe.candidate_isas(["sse4_2"]) == []


# ------------------------------------------------------------------ the ISA decision


def test_gain_sets_the_isa_and_says_why():
    a = isa_advice(CLIFF)
    assert a.isa == "AVX2" and a.gain > 1.5
    assert "reference kernel" in a.summary and "ONEDNN_MAX_CPU_ISA=AVX2" in a.summary


def test_no_gain_sets_nothing():
    a = isa_advice(FLAT)
    assert a.isa is None and "gains less than 1.5x" in a.summary


def test_same_implementation_is_no_gain_whatever_the_timing():
    noisy = parse_probe(probe_json(default_conv_ms=4.0, avx2_conv_ms=1.0, default_impl="x64:gemm:jit"))
    assert isa_advice(noisy).isa is None and isa_advice(noisy).gain == 1.0


def test_gain_below_threshold_sets_nothing():
    assert isa_advice(parse_probe(probe_json(default_conv_ms=1.3, avx2_conv_ms=1.0))).isa is None


# ------------------------------------------------------------------ cores and threads


@pytest.mark.parametrize(
    "k, cpus, expected",
    [
        (1, [0, 1], [(0, 1)]),
        (2, [0, 1], [(0,), (1,)]),
        (3, range(8), [(0, 1, 2), (3, 4, 5), (6, 7)]),
        (2, [4, 5, 6, 7], [(4, 5), (6, 7)]),
        (4, [0, 1], [(0,), (1,), (0,), (1,)]),
    ],
)
def test_split_cores(k, cpus, expected):
    assert list(split_cores(k, list(cpus))) == expected


def ms_spec(**kw):
    base = dict(mode="auto", mindspore_cpu=True, local_cpus=(0, 1), probe=CLIFF)
    base.update(kw)
    return CpuSpec(**base)


def test_two_ranks_on_two_cores_get_one_thread_each_and_the_isa_but_no_affinity_by_default():
    p = plan_cpu(ms_spec(), 2, {}, frozenset())
    assert dict(p.cpus) == {}
    for i in (0, 1):
        assert dict(p.env[i]) == {"ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1", "MSLAUNCH_CPU_THREADS": "1"}
    assert p.warnings == ()
    assert any(n.startswith("set ONEDNN_MAX_CPU_ISA=AVX2") for n in p.notes)
    assert (
        "2 local rank(s) on 2 usable core(s): no core binding (the kernel places the threads; --bind-core True pins "
        "each rank to its own range)" in p.notes
    )


def test_bind_core_true_pins_each_rank_to_its_range_with_the_same_threads_and_isa():
    p = plan_cpu(ms_spec(bind_core=True), 2, {}, frozenset())
    assert dict(p.cpus) == {0: (0,), 1: (1,)}
    assert dict(p.env) == plan_cpu(ms_spec(), 2, {}, frozenset()).env
    assert "2 local rank(s) on 2 core(s): local rank 0: cores 0, local rank 1: cores 1" in p.notes


def test_three_ranks_on_eight_cores():
    p = plan_cpu(ms_spec(local_cpus=tuple(range(8))), 3, {}, frozenset())
    assert [p.env[i]["OMP_NUM_THREADS"] for i in range(3)] == ["3", "3", "2"]
    assert dict(p.cpus) == {}
    pinned = plan_cpu(ms_spec(local_cpus=tuple(range(8)), bind_core=True), 3, {}, frozenset())
    assert dict(pinned.cpus) == {0: (0, 1, 2), 1: (3, 4, 5), 2: (6, 7)}
    assert [pinned.env[i]["OMP_NUM_THREADS"] for i in range(3)] == ["3", "3", "2"]


def test_one_rank_is_not_bound_and_gets_every_core():
    p = plan_cpu(ms_spec(local_cpus=(0, 1, 2, 3)), 1, {}, frozenset())
    assert dict(p.cpus) == {} and p.env[0]["OMP_NUM_THREADS"] == "4"


def test_more_ranks_than_cores_warns_and_leaves_balancing_to_the_kernel():
    p = plan_cpu(ms_spec(), 5, {}, frozenset())
    assert dict(p.cpus) == {}  # no affinity: pinned to shared cores, ranks cannot use an idle core
    assert all(
        dict(p.env[i]) == {"ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1", "MSLAUNCH_CPU_THREADS": "1"}
        for i in range(5)
    )
    assert len(p.warnings) == 1 and "5 ranks on 2 usable core(s)" in p.warnings[0] and p.warnings[0] in p.notes
    pinned = plan_cpu(ms_spec(bind_core=True), 5, {}, frozenset())  # asked for: round-robin, as before
    assert [pinned.cpus[i] for i in range(5)] == [(0,), (1,), (0,), (1,), (0,)]
    assert all(pinned.env[i]["OMP_NUM_THREADS"] == "1" for i in range(5)) and len(pinned.warnings) == 1


def test_user_values_win_and_oversubscription_by_the_user_warns():
    p = plan_cpu(ms_spec(), 2, {"OMP_NUM_THREADS": "4"}, frozenset({"ONEDNN_MAX_CPU_ISA"}))
    assert dict(p.env[0]) == {"MSLAUNCH_CPU_THREADS": "1"}
    assert "oneDNN ISA: left as you set it" in p.notes
    assert any("OMP_NUM_THREADS=4 (yours) exceed the 2 usable cores" in w for w in p.warnings)
    p = plan_cpu(ms_spec(), 2, {"DNNL_MAX_CPU_ISA": "AVX2"}, frozenset())
    assert "ONEDNN_MAX_CPU_ISA" not in p.env[0]


def test_no_gain_changes_no_isa_but_still_sizes_threads():
    p = plan_cpu(ms_spec(probe=FLAT), 2, {}, frozenset())
    assert all("ONEDNN_MAX_CPU_ISA" not in p.env[i] for i in (0, 1))
    assert any(n.startswith("oneDNN ISA: unchanged") for n in p.notes)


def test_cpu_tune_off_and_non_mindspore_jobs_change_nothing():
    assert plan_cpu(ms_spec(mode="off"), 2, {}, frozenset()) == plan_cpu(
        ms_spec(mindspore_cpu=False), 2, {}, frozenset()
    )
    empty = plan_cpu(ms_spec(mode="off"), 2, {}, frozenset())
    assert (dict(empty.env), dict(empty.cpus), empty.notes) == ({}, {}, ())
    # --cpu-tune on: tuned whatever the guess
    assert plan_cpu(ms_spec(mode="on", mindspore_cpu=False), 2, {}, frozenset()).env[0]["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_no_probe_result_sets_no_isa():
    p = plan_cpu(ms_spec(probe=None, probe_note="no MindSpore in the ranks' interpreter"), 2, {}, frozenset())
    assert "ONEDNN_MAX_CPU_ISA" not in p.env[0]
    assert "oneDNN ISA: not probed (no MindSpore in the ranks' interpreter); nothing set" in p.notes


# ------------------------------------------------------------------ --bind-core (msrun's)


def test_parse_bind_core_like_msrun():
    assert parse_bind_core(None) is None
    assert parse_bind_core("True") is True and parse_bind_core("false") is False
    assert parse_bind_core('{"device0": ["0-3"], "device1": ["4,6"], "scheduler": ["7"]}') == {
        "device0": (0, 1, 2, 3),
        "device1": (4, 6),
        "scheduler": (7,),
    }
    assert parse_cpu_list(" 0-2, 5") == (0, 1, 2, 5)


@pytest.mark.parametrize(
    "text, part",
    [
        ("maybe", "expected True, False"),
        ('{"gpu0": ["0"]}', "key 'gpu0'"),
        ('{"device0": "0-3"}', "device0: expected a list"),
        ('{"device0": ["3-1"]}', "bad CPU range"),
        ('{"device0": ["a"]}', "bad CPU list"),
        ("{}", "non-empty"),
    ],
)
def test_parse_bind_core_errors(text, part):
    with pytest.raises(PlanError) as e:
        parse_bind_core(text)
    assert part in str(e.value) and e.value.field == "--bind-core"


def test_bind_core_dict_and_false_and_true_for_any_job():
    bind = parse_bind_core('{"device0": ["1"], "device1": ["0"], "scheduler": ["0"]}')
    p = plan_cpu(CpuSpec(bind_core=bind, local_cpus=(0, 1)), 2, {}, frozenset())
    assert dict(p.cpus) == {0: (1,), 1: (0,)} and p.scheduler_cpus == (0,) and dict(p.env) == {0: {}, 1: {}}
    assert dict(plan_cpu(ms_spec(bind_core=False), 2, {}, frozenset()).cpus) == {}
    assert dict(plan_cpu(CpuSpec(bind_core=True, local_cpus=(0, 1)), 2, {}, frozenset()).cpus) == {0: (0,), 1: (1,)}
    with pytest.raises(PlanError, match="CPU 9 is not available"):
        plan_cpu(
            CpuSpec(bind_core=parse_bind_core('{"device0": ["9"], "device1": ["0"]}'), local_cpus=(0, 1)),
            2,
            {},
            frozenset(),
        )
    with pytest.raises(PlanError, match="1 device"):
        plan_cpu(CpuSpec(bind_core=parse_bind_core('{"device0": ["0"]}'), local_cpus=(0, 1)), 2, {}, frozenset())


# ------------------------------------------------------------------ in the plan


def job(**kw):
    base = dict(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/w",
        job_dir="/w/logs/j",
        job_id="j",
        cpu=ms_spec(),
    )
    base.update(kw)
    return JobSpec(**base)


def test_plan_carries_env_cpus_and_notes_and_user_env_wins():
    plan = build_plan(job(env=(("OMP_NUM_THREADS", "2"),)))
    r0, r1 = plan.ranks
    assert (r0.cpus, r1.cpus, plan.scheduler.cpus) == (None, None, None)
    out = plan.to_json()
    assert all("cpus" not in p for p in out["ranks"]) and "no core binding" in " ".join(out["cpu"]["notes"])
    plan = build_plan(job(env=(("OMP_NUM_THREADS", "2"),), cpu=ms_spec(bind_core=True)))
    r0, r1 = plan.ranks
    assert (r0.cpus, r1.cpus, plan.scheduler.cpus) == ((0,), (1,), None)
    assert r0.env_dict()["ONEDNN_MAX_CPU_ISA"] == "AVX2" and r0.env_dict()["OMP_NUM_THREADS"] == "2"
    assert r0.env_dict()["MSLAUNCH_CPU_THREADS"] == "1"
    assert "ONEDNN_MAX_CPU_ISA" not in plan.scheduler.env_dict()
    out = plan.to_json()
    assert out["ranks"][1]["cpus"] == "1" and "cpus" not in out["scheduler"]
    assert out["cpu"]["notes"] == list(plan.cpu_notes) and out["cpu"]["warnings"] == [plan.cpu_notes[-1]]


def test_plan_under_mpirun_sets_threads_but_no_affinity():
    plan = build_plan(job(launcher="mpirun", wrapper="/t/mslaunch-rank.sh"))
    assert all(r.cpus is None for r in plan.ranks)
    assert plan.ranks[0].env_dict()["OMP_NUM_THREADS"] == "1"
    assert not any("cores per rank not applied" in n for n in plan.cpu_notes)  # nothing to bind by default
    plan = build_plan(job(launcher="mpirun", wrapper="/t/mslaunch-rank.sh", cpu=ms_spec(bind_core=True)))
    assert all(r.cpus is None for r in plan.ranks)
    assert (
        "cores per rank not applied: the mpirun launcher starts the ranks (mslaunch passes --bind-to none; "
        "--mpi-arg=--bind-to --mpi-arg=core binds them by mpirun)" in plan.cpu_notes
    )


def test_default_spec_tunes_nothing():
    plan = build_plan(job(cpu=CpuSpec()))
    assert plan.cpu_notes == () and all(r.cpus is None and "OMP_NUM_THREADS" not in r.env_dict() for r in plan.ranks)


# ------------------------------------------------------------------ the cache


class FakeHost:
    """A Runner: answers --facts with ``facts`` and the probe with a canned result; counts probes."""

    def __init__(self, ms="2.10.0"):
        self.ms = ms
        self.probes = 0

    def key(self):
        return f"key-{self.ms}"

    def __call__(self, tail, timeout):
        if tail[:1] == ("--facts",):
            return 0, json.dumps({"mindspore": self.ms, "key": self.key(), "imports_mindspore": True}).encode(), b""
        self.probes += 1
        return 0, (probe_json(key=self.key(), ms=self.ms) + "\n").encode(), b""


def test_cache_hit_and_a_changed_mindspore_version_reprobes(tmp_path):
    host = FakeHost()
    first = cpuprobe.cached_probe(host, str(tmp_path), "h1")
    assert first.probe is not None and not first.cached and host.probes == 1
    assert os.path.basename(first.path) == "h1-key-2.10.0.json" and os.path.isfile(first.path)
    again = cpuprobe.cached_probe(host, str(tmp_path), "h1")
    assert again.cached and host.probes == 1 and again.probe == first.probe
    host.ms = "2.10.1"
    newer = cpuprobe.cached_probe(host, str(tmp_path), "h1")
    assert not newer.cached and host.probes == 2 and newer.probe.mindspore == "2.10.1"
    assert cpuprobe.cached_probe(host, str(tmp_path), "h2").cached is False and host.probes == 3  # per host


@pytest.mark.parametrize(
    "flags,probed",
    [
        (["avx", "avx2", "fma", "sse4_2"], 0),
        (["avx2", "fma"], 0),
        (["sse2"], 0),
        (["avx2", "avx512f", "avx512bw", "fma"], 1),
        (["avx2", "avx_vnni", "fma"], 1),
        (["avx2", "amx_tile"], 1),
    ],
)
def test_a_job_skips_the_probe_where_no_isa_cap_can_change_onednns_kernels(tmp_path, flags, probed):
    host = FakeHost()
    facts = {"mindspore": host.ms, "key": host.key(), "cpu_flags": flags}
    out = cpuprobe.cached_probe(host, str(tmp_path), "h1", facts=facts, needed_only=True)
    assert host.probes == probed and (out.probe is None) == (probed == 0)
    if not probed:
        assert "no ISA above AVX2" in out.note
        assert out.needless
        assert any(
            n.startswith("oneDNN ISA: unchanged: this CPU has no ISA above AVX2") and n.endswith("(not probed)")
            for n in plan_cpu(ms_spec(probe=None, probe_note=out.note, isa_settled=True), 2, {}, frozenset()).notes
        )
    cpuprobe.cached_probe(host, str(tmp_path), "h2", facts=facts)  # doctor: measures anyway
    assert host.probes == probed + 1


def test_cache_survives_a_corrupt_file_and_a_failing_probe(tmp_path):
    host = FakeHost()
    path = cpuprobe.cache_path(str(tmp_path), "h1", host.key())
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("{broken")
    assert cpuprobe.cached_probe(host, str(tmp_path), "h1").probe is not None and host.probes == 1

    def failing(tail, timeout):
        if tail[:1] == ("--facts",):
            return 0, b'{"mindspore": "2.10.0", "key": "x"}\n', b""
        return 1, b"", b"Traceback...\nRuntimeError: boom\n"

    out = cpuprobe.cached_probe(failing, str(tmp_path), "h3")
    assert out.probe is None and "boom" in out.note


def test_facts_key_changes_with_the_mindspore_version(monkeypatch):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "9.9.9" if name == "mindspore" else real(name))
    a = cpu_probe.facts()
    monkeypatch.setattr(metadata, "version", lambda name: "9.9.8" if name == "mindspore" else real(name))
    b = cpu_probe.facts()
    assert a["mindspore"] == "9.9.9" and a["key"] != b["key"]


def test_program_detection(tmp_path):
    (tmp_path / "a.py").write_text("import os\nimport mindspore as ms\n")
    (tmp_path / "b.py").write_text("import os\nprint('mindspore')\n")
    assert cpu_probe.program_imports_mindspore(script=str(tmp_path / "a.py")) is True
    assert cpu_probe.program_imports_mindspore(script=str(tmp_path / "b.py")) is False
    assert cpu_probe.program_imports_mindspore(script=str(tmp_path / "c.py")) is None
    assert cpu_probe.program_imports_mindspore(module="launcher.workloads.resnet50_cifar10") is True
    # the launcher reads a script itself (no facts step for a script without MindSpore): the same answers
    from launcher.execution.checks.cpu import IMPORTS_MINDSPORE_RE, script_imports_mindspore

    assert (
        IMPORTS_MINDSPORE_RE.pattern == cpu_probe._IMPORT_RE.pattern
        and IMPORTS_MINDSPORE_RE.flags == cpu_probe._IMPORT_RE.flags
    )
    for name in ("a.py", "b.py", "c.py"):
        assert script_imports_mindspore(str(tmp_path / name)) is cpu_probe.program_imports_mindspore(
            script=str(tmp_path / name)
        )


# ------------------------------------------------------------------ CLI and processes


def cli(*args, cwd=None, timeout=300):
    """The CLI in a launching env without thread/ISA settings (``import mindspore`` in this
    test process, e.g. by another test, sets OMP_NUM_THREADS, which would count as the user's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "MSLAUNCH_CPU_THREADS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
    }
    return run_process(*args, cwd=cwd or ROOT, timeout=timeout, env=env)


@pytest.mark.e2e
def test_dry_run_of_a_non_mindspore_job_has_no_cpu_settings(tmp_path):
    r = cli(
        "run", "--dry-run", "--json", "--np", "2", "--log-dir", str(tmp_path / "j"), "tests/scripts/rankprog.py", "ok"
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "cpu" not in out and all("cpus" not in p and "OMP_NUM_THREADS" not in p["env"] for p in out["ranks"])


@pytest.mark.e2e
def test_bind_core_applies_affinity_at_start_for_any_job(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 cores")
    bind = json.dumps({"device0": [str(cores[1])], "device1": [str(cores[0])]})
    r = cli(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--bind_core",
        bind,
        "--log-dir",
        str(tmp_path / "j"),
        "--tee",
        "none",
        "tests/scripts/rankprog.py",
        "env",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    logs = [(tmp_path / "j" / f"worker_{i}.log").read_text().splitlines() for i in (0, 1)]
    assert f"cpus={cores[1]}" in logs[0] and f"cpus={cores[0]}" in logs[1]
    assert not any(line.startswith(("OMP_NUM_THREADS=", "MSLAUNCH_CPU_THREADS=")) for line in logs[0] + logs[1])
    assert "mslaunch: cpu: cores per rank from --bind-core" in r.stderr
    r = cli("run", "--np", "2", "--bind-core", "bogus", "tests/scripts/rankprog.py", "env")
    assert r.returncode == 2 and "--bind-core" in r.stderr


@pytest.mark.mindspore
def test_real_probe_on_this_cpu_and_what_the_plan_does_with_it(tmp_path):
    """The probe on this machine, then the trainer's plan: ONEDNN_MAX_CPU_ISA is set exactly when
    the measured gain is >= 1.5x (on an AVX2-only CPU: no gain, nothing set)."""
    r = cli(
        "doctor", "--json", "-H", "localhost:2", "--master-port", "auto", "-m", "launcher.workloads.resnet50_cifar10"
    )
    assert r.returncode == 0, r.stderr
    cpu = json.loads(r.stdout)["hosts"][0]["cpu"]
    assert cpu["probed"] and cpu["onednn"] and cpu["variants"][0]["isa"] is None
    conv = cpu["variants"][0]["kernels"]["conv"]
    assert conv["impl"] and conv["ms"] > 0
    r = cli("plan", "--json", "--np", "2", "-m", "launcher.workloads.resnet50_cifar10", "--data-path", str(tmp_path))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    envs = [p["env"] for p in plan["ranks"]]
    if cpu["set"]:
        assert all(e["ONEDNN_MAX_CPU_ISA"] == cpu["set"]["ONEDNN_MAX_CPU_ISA"] for e in envs)
    else:
        assert all("ONEDNN_MAX_CPU_ISA" not in e for e in envs)
        assert any(n.startswith("oneDNN ISA: unchanged") for n in plan["cpu"]["notes"])
    n = len(os.sched_getaffinity(0))
    assert plan["cpu"]["notes"], plan
    assert "OMP_NUM_THREADS" in envs[0], (plan["cpu"], envs[0])
    assert all(e["OMP_NUM_THREADS"] == e["MSLAUNCH_CPU_THREADS"] == str(max(1, n // 2)) for e in envs)
    assert all("cpus" not in p for p in plan["ranks"])  # no affinity by default
    if n >= 2:
        pinned = json.loads(
            cli(
                "plan", "--json", "--np", "2", "--bind-core", "True", "-m", "launcher.workloads.resnet50_cifar10"
            ).stdout
        )
        assert [p["cpus"] for p in pinned["ranks"]] == [
            format_cpus(c) for c in split_cores(2, sorted(os.sched_getaffinity(0)))
        ]
    off = json.loads(
        cli("plan", "--json", "--np", "2", "--cpu-tune", "off", "-m", "launcher.workloads.resnet50_cifar10").stdout
    )
    assert "cpu" not in off and all("OMP_NUM_THREADS" not in p["env"] for p in off["ranks"])
