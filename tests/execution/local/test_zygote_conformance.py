"""Differential conformance: a program forked from the zygote observes exactly what it observes
as a plain ``python script.py`` process.

Each case of ``tests/scripts/conformance.py`` runs both ways from the same plan (argv, env, cwd,
log): as a plain process (:func:`launcher.execution.process.spawn.start_local`, what ``--no-zygote``
and every other backend start) and forked from one zygote that imported ``mindspore`` and
``mindspore.communication`` (the default's preload).  The exit status, the whole log (after
replacing each run's own pid) and the files the case writes are compared.  What cannot agree is
listed in ``docs/cpu-performance.md`` ("What a forked rank sees"), and tested here as a
difference, so that the list stays true.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from launcher.execution.local.zygote import PRELOAD, ZygoteBackend, ZygoteProcess
from launcher.execution.process.spawn import LocalProcess, start_local
from launcher.planning.job.spec import ProcPlan
from tests.harness.paths import REPO

pytestmark = pytest.mark.mindspore

ROOT = REPO
PROG = os.path.join(ROOT, "tests", "scripts", "conformance.py")
#: What every rank of a job shares and the zygote imports under (as ``shared_env`` gives it).
COMMON = {"GLOG_v": "3", "CONFORMANCE": "1"}
WAIT = 120


# Each setting's tests are one group (tests/harness/order.py): they run on one worker, so its
# zygote imports MindSpore there once, not on every worker that takes one of its tests.
@pytest.fixture(
    scope="module",
    params=[
        pytest.param("unbuffered", marks=pytest.mark.cost(2, group="unbuffered")),
        pytest.param("buffered", marks=pytest.mark.cost(2, group="buffered")),
    ],
)
def zygote(request):
    """The default's zygote, under ``PYTHONUNBUFFERED=1`` (mslaunch's default for ranks) and
    without it (``--env PYTHONUNBUFFERED=`` or a user's own choice): stdio differs between the
    two, and each must match a plain process under the same setting."""
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "unbuffered":
            mp.setenv("PYTHONUNBUFFERED", "1")
        else:
            mp.delenv("PYTHONUNBUFFERED", raising=False)
        z = ZygoteBackend(preload=PRELOAD, warm=True, preload_env=COMMON)
        z.unbuffered = request.param == "unbuffered"
        yield z
        z.close()


def plan(argv, env, cwd):
    return ProcPlan(
        name="rank 0",
        role="worker",
        host="localhost",
        rank=0,
        local_rank=0,
        node_rank=0,
        device_id=0,
        argv=tuple(argv),
        env=tuple(sorted(env.items())),
        cwd=cwd,
        log="",
    )


def wait(handle, limit=WAIT):
    deadline = time.monotonic() + limit
    while handle.poll() is None:
        assert time.monotonic() < deadline, f"{handle.pid} still running after {limit} s"
        time.sleep(0.05)
    return handle.poll()


class Run:
    """One run of a case: its handle, exit status, log text (its pid replaced) and OUT files."""

    def __init__(self, handle, log, out):
        self.handle, self.log_path, self.out = handle, log, out
        self.rc = None

    def finish(self, limit=WAIT):
        self.rc = wait(self.handle, limit)
        return self

    @property
    def log(self):
        with open(self.log_path, errors="replace") as f:
            text = f.read()
        return re.sub(rf"\b{self.handle.pid}\b", "<pid>", text)

    def files(self):
        return {n: open(os.path.join(self.out, n)).read() for n in sorted(os.listdir(self.out))}


def start_both(zygote, tmp_path, args, env=None, cwd=None, script=PROG):
    """Start the case as a plain process and forked from the zygote (same plan); both runs."""
    runs = []
    for how in ("plain", "forked"):
        out = tmp_path / how
        out.mkdir()
        penv = dict(COMMON, OUT=str(out), **(env or {}))
        proc = plan([sys.executable, script, *args], penv, str(cwd or tmp_path))
        log = str(tmp_path / f"{how}.log")
        handle = start_local(proc, log) if how == "plain" else zygote.start(proc, log, proc.cwd)
        assert isinstance(handle, LocalProcess if how == "plain" else ZygoteProcess)
        runs.append(Run(handle, log, str(out)))
    return runs


def run_both(zygote, tmp_path, args, **kw):
    plain, forked = start_both(zygote, tmp_path, args, **kw)
    return plain.finish(), forked.finish()


# ---------------------------------------------------------------- the process as the program sees it


def test_the_process_a_program_sees_is_a_plain_pythons(zygote, tmp_path):
    """Main module, argv, sys.path, flags, environment, cwd, umask, limits, signal dispositions
    and mask, stdio objects and stdin, session, descriptors, cores, threads, gc, warnings,
    hooks, title and the names native code uses, atexit handlers: all equal."""
    plain, forked = run_both(zygote, tmp_path, ["process"])
    assert plain.rc == forked.rc == 0, (plain.log, forked.log)
    a, b = json.loads(plain.log), json.loads(forked.log)
    for d in (a, b):
        (
            d["environ"].pop("OUT"),
            d.pop("native_threads"),
        )  # OpenBLAS's pool: stopped at the fork, back at the first BLAS call (docs)
    assert a == b
    # and what that means, spelled out where a regression would hide
    assert a["argv"] == [PROG, "process"] and a["main"]["__name__"] == "__main__" and a["main"]["__file__"] == PROG
    assert a["path"][0] == os.path.dirname(PROG) and a["stdin_read"] == "" and a["own_session"]
    # Python's own SIGINT handler, unless the suite was started with SIGINT ignored (`make test &`)
    sigint = "SIG_IGN" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "default_int_handler"
    assert a["signals"][str(int(signal.SIGPIPE))] == "SIG_IGN" and a["signals"][str(int(signal.SIGINT))] == sigint
    assert a["title"] == f"{sys.executable} {PROG} process" and a["program_invocation_short_name"] == os.path.basename(
        sys.executable
    )
    assert a["stdout"]["write_through"] is zygote.unbuffered and a["stderr"]["line_buffering"] is not zygote.unbuffered


# How the script is named (argv, __main__, sys.path) does not touch stdio: the buffered zygote's
# stdio is compared whole by the test above, so these run under the default (unbuffered) only.
@pytest.mark.parametrize("zygote", ["unbuffered"], indirect=True)
@pytest.mark.cost(2, group="unbuffered")
def test_a_relative_script_a_symlinked_one_and_a_module(zygote, tmp_path):
    """``argv[0]`` as typed, ``__file__`` absolute, ``sys.path[0]`` the real folder of the script
    (through a symlink), and ``python -m pkg.mod`` / ``-m pkg`` (a package's ``__main__``)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "prog.py").write_text(open(PROG).read())
    os.symlink(real / "prog.py", tmp_path / "link.py")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("import sys\nsys.argv[1:1] = ['process']\nexec(open(%r).read())\n" % PROG)
    (pkg / "__main__.py").write_text(
        "import sys, json\nprint(json.dumps({'name': __name__, 'spec': __spec__.name, 'argv0': sys.argv[0], "
        "'path0': sys.path[0], 'file': __file__, 'package': __package__}))\n"
    )
    for case, args in (("relative", ["link.py", "process"]), ("module", ["-m", "pkg.mod"]), ("package", ["-m", "pkg"])):
        sub = tmp_path / case
        sub.mkdir()
        plain, forked = start_both(zygote, sub, args[1:], cwd=tmp_path, script=args[0])
        plain.finish(), forked.finish()
        assert plain.rc == forked.rc == 0, (case, plain.log, forked.log)
        a, b = json.loads(plain.log), json.loads(forked.log)
        for d in (a, b):
            d.get("environ", {}).pop("OUT", None), d.pop("native_threads", None)
        assert a == b, case
        if case == "relative":
            assert (
                a["argv"][0] == "link.py"
                and a["main"]["__file__"] == str(tmp_path / "link.py")
                and a["path"][0] == str(real)
            )
        elif case == "module":
            assert a["main"]["__name__"] == "__main__" and a["spec"] == "pkg.mod" and a["path"][0] == str(tmp_path)
        else:
            assert a["spec"] == "pkg.__main__" and a["argv0"] == str(pkg / "__main__.py")


# ---------------------------------------------------------------- how a program ends


def _exit_both_ways(zygote, tmp_path, kind, rc):
    plain, forked = run_both(zygote, tmp_path, ["exit", kind])
    assert plain.rc == forked.rc == rc, (plain.log, forked.log)
    assert plain.log == forked.log
    if kind == "raise":
        assert plain.log.count("Traceback (most recent call last):") == 2 and "zygote" not in forked.log
        assert (
            f'  File "{PROG}", line'
            in forked.log.splitlines()[forked.log.splitlines().index("Traceback (most recent call last):") + 1]
        )
    if kind == "hook":
        assert "my hook: RuntimeError: through the hook frames=['<module>', 'case_exit', 'deep']" in forked.log


@pytest.mark.parametrize(
    "kind,rc",
    [
        ("str", 1),
        ("raise", 1),
        ("os_exit", 7),
        ("signal", -signal.SIGUSR1),
        ("interrupt", -signal.SIGINT),
    ],
)
def test_exit_status_and_last_words(zygote, tmp_path, kind, rc):
    """Exit status as python's, and the same last lines, under either stdio setting: a message
    of ``sys.exit`` and a traceback (from the program's own first frame, chained) after the
    buffered output, output lost to ``os._exit`` and to a signal lost in both, an uncaught
    KeyboardInterrupt (the output flushed, then death by SIGINT)."""
    _exit_both_ways(zygote, tmp_path, kind, rc)


# The other ways to end go through the same end of the interpreter (stdout flushed, then the exit
# status) as "str" and "raise" above: their status and lines are compared under the default only.
@pytest.mark.parametrize("zygote", ["unbuffered"], indirect=True)
@pytest.mark.parametrize(
    "kind,rc",
    [
        ("int", 3),
        ("none", 0),
        ("big", 7),
        ("obj", 1),
        ("hook", 1),
        ("thread_raise", 0),
    ],
)
@pytest.mark.cost(2, group="unbuffered")
def test_exit_status_of_every_sys_exit_argument_and_hook(zygote, tmp_path, kind, rc):
    """Exit status as python's for ``sys.exit`` with an int, None, a large int, an object, and
    the same last lines: the program's ``sys.excepthook``, a thread's exception."""
    _exit_both_ways(zygote, tmp_path, kind, rc)


def test_a_script_that_cannot_be_read_or_compiled(zygote, tmp_path):
    """A missing script is python's one line and exit 2; a SyntaxError is shown as python shows
    it (the error, no traceback) and exit 1."""
    (tmp_path / "bad.py").write_text("print('never')\ndef broken(:\n    pass\n")
    for name, rc in (("missing.py", 2), ("bad.py", 1)):
        sub = tmp_path / name.split(".")[0]
        sub.mkdir()
        plain, forked = start_both(zygote, sub, [], cwd=tmp_path, script=str(tmp_path / name))
        plain.finish(), forked.finish()
        assert plain.rc == forked.rc == rc, (plain.log, forked.log)
        assert plain.log == forked.log and "zygote" not in forked.log
    assert "SyntaxError" in forked.log and "Traceback" not in forked.log


def test_what_reaches_the_log_at_the_end_and_in_which_order(zygote, tmp_path):
    """Buffered stdout, atexit handlers in order, a non-daemon thread that outlives the main code
    (and the file it writes), a global's ``__del__``, ``weakref.finalize``, a file never closed."""
    plain, forked = run_both(zygote, tmp_path, ["ending"])
    assert plain.rc == forked.rc == 0
    assert plain.log == forked.log
    assert (
        plain.files()
        == forked.files()
        == {
            "thread_file.txt": "written by a non-daemon thread after main returned\n",
            "unclosed.txt": "buffered in a file the program never closes\n",
        }
    )
    lines = forked.log.splitlines()
    assert (
        lines.index("thread: done after main returned")
        < lines.index("atexit: second registered (runs first)")
        < lines.index("atexit: first registered")
    )
    assert "__del__ of a global at shutdown" in lines and "weakref.finalize at shutdown" in lines


def test_a_sigterm_handler_runs_on_terminate(zygote, tmp_path):
    """The launcher's stop (SIGTERM to the rank's group) runs the program's own handler."""
    runs = start_both(zygote, tmp_path, ["term"])
    for r in runs:
        deadline = time.monotonic() + WAIT
        while not os.path.exists(r.log_path) or "ready" not in r.log:
            assert time.monotonic() < deadline and r.handle.poll() is None, r.log
            time.sleep(0.05)
        r.handle.terminate()
    plain, forked = (r.finish() for r in runs)
    assert plain.rc == forked.rc == 0
    assert plain.log == forked.log == "ready\nhandler: got SIGTERM\n"
    assert plain.files() == forked.files() == {"term.txt": "saved on SIGTERM\n"}


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_multiprocessing_and_pickling_main(zygote, tmp_path, method):
    """Pools under every start method run functions of ``__main__``; its classes pickle."""
    plain, forked = run_both(zygote, tmp_path, ["multiprocessing", method])
    assert plain.rc == forked.rc == 0, (plain.log, forked.log)
    assert (
        plain.log
        == forked.log
        == (f"pickle: True __main__\n{method} [0, 1, 4, 9, 16]\n{method} process: __main__ True 0\n")
    )


# ---------------------------------------------------------------- random state


@pytest.fixture(scope="module")
def plain_draws(tmp_path_factory):
    """What two plain processes draw (the ``random`` case): the premise of the test below."""
    runs = []
    for n in range(2):
        out = tmp_path_factory.mktemp(f"plain-random-{n}")
        proc = plan([sys.executable, PROG, "random"], dict(COMMON, OUT=str(out)), str(out))
        runs.append(Run(start_local(proc, str(out / "plain.log")), str(out / "plain.log"), str(out)))
    draws = []
    for r in runs:
        r.finish()
        assert r.rc == 0, r.log
        draws.append(json.loads(r.log.splitlines()[-1]))
    return draws


# How a child's generators are reseeded does not touch stdio (and the plain draws are taken by two
# plain processes that import MindSpore): this runs under the default (unbuffered) zygote only.
@pytest.mark.parametrize("zygote", ["unbuffered"], indirect=True)
@pytest.mark.cost(2, group="unbuffered")
def test_every_generator_seeded_at_import_is_fresh_in_each_child(zygote, plain_draws, tmp_path):
    """Two plain processes draw different numbers from every generator a new process seeds with
    entropy (numpy's legacy global state, ``random``, MindSpore's); so must two forked children.
    Generators are also found by type and compared by state, so one that a future import adds
    is caught: a generator whose state differs between two plain processes differs between two
    children too."""
    runs = []
    for n in range(2):
        out = tmp_path / str(n)
        out.mkdir()
        proc = plan([sys.executable, PROG, "random"], dict(COMMON, OUT=str(out)), str(out))
        log = str(tmp_path / f"forked{n}.log")
        runs.append(Run(zygote.start(proc, log, proc.cwd), log, str(out)))
    for r in runs:
        r.finish()
        assert isinstance(r.handle, ZygoteProcess) and r.rc == 0, r.log
    (p0, p1), (f0, f1) = plain_draws, (json.loads(r.log.splitlines()[-1]) for r in runs)
    for key in ("numpy", "random", "numpy_default_rng", "mindspore"):
        assert p0[key] != p1[key], key  # the premise: a new process draws anew
        assert f0[key] != f1[key], key
        assert f0[key] != p0[key] and f1[key] != p1[key], key
    for gen, states in p0["generators"].items():
        fresh = set(states) - set(p1["generators"].get(gen, []))  # seeded anew in every process
        if fresh:
            assert set(f0["generators"].get(gen, [])) != set(f1["generators"].get(gen, [])), gen


# ---------------------------------------------------------------- interpreter settings


def test_python_variables_of_a_rank_that_differ_from_the_zygotes_start_it_plainly(zygote, tmp_path):
    """``PYTHON*`` variables are read once, when an interpreter starts (hash seed, paths,
    warnings, bytecode): a rank whose own differ from the zygote's starts as a plain process, so
    ``--env PYTHONHASHSEED=...`` holds for it; with the zygote's own, the fork is taken."""
    proc = plan([sys.executable, PROG, "hash"], dict(COMMON, PYTHONHASHSEED="123"), str(tmp_path))
    handle = zygote.start(proc, str(tmp_path / "z.log"), str(tmp_path))
    assert isinstance(handle, LocalProcess) and wait(handle) == 0
    want = subprocess.run(
        [sys.executable, PROG, "hash"], env=dict(os.environ, PYTHONHASHSEED="123"), capture_output=True, text=True
    )
    assert (tmp_path / "z.log").read_text() == want.stdout and want.stdout.endswith(" 1\n")


#: Prints ``hash()`` of a str (PYTHONHASHSEED decides it), then ``ready``, then waits to be killed.
HASH_AND_WAIT = (
    "import sys, time\n"
    'print(hash("conformance"), sys.flags.hash_randomization)\n'
    'print("ready", flush=True)\n'
    "time.sleep(120)\n"
)


def test_what_still_differs_is_what_the_docs_list(zygote, tmp_path):
    """The differences docs/cpu-performance.md lists, checked so the list stays true: the hash
    seed is the zygote's in every child (two children agree, two plain processes do not), and
    ``/proc/PID/environ`` does not show the rank's own variables."""
    script = tmp_path / "hash_and_wait.py"
    script.write_text(HASH_AND_WAIT)
    seen = {}
    for how in ("plain", "forked"):
        got = []
        for n in range(2):
            proc = plan([sys.executable, str(script)], dict(COMMON, RANK_ID=str(n)), str(tmp_path))
            log = str(tmp_path / f"{how}{n}.log")
            h = start_local(proc, log) if how == "plain" else zygote.start(proc, log, proc.cwd)
            assert isinstance(h, LocalProcess if how == "plain" else ZygoteProcess)
            deadline = time.monotonic() + WAIT
            while not os.path.exists(log) or "ready" not in open(log).read():
                assert time.monotonic() < deadline and h.poll() is None
                time.sleep(0.05)
            environ = open(f"/proc/{h.pid}/environ", "rb").read()
            got.append((b"RANK_ID=" + str(n).encode() in environ.split(b"\0"), open(log).read().splitlines()[0]))
            h.kill()
            wait(h)
        seen[how] = got
    assert [shown for shown, _ in seen["plain"]] == [True, True]
    assert [shown for shown, _ in seen["forked"]] == [False, False]
    assert seen["plain"][0][1] != seen["plain"][1][1]  # a new process hashes with a new seed
    assert seen["forked"][0][1] == seen["forked"][1][1]  # every child with the zygote's
    assert all(line.endswith(" 1") for how in seen for _, line in seen[how]), seen  # hash randomization on
