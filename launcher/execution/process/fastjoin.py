"""Quick polls for MindSpore's collective addresses: a zygote's ranks find each other's in well under a second, not 3 s.

On CPU, MindSpore 2.10's ``init()`` ends by each rank putting its collective node's address into
the scheduler's metadata and reading every other rank's (``ms_collective_node.cc``; the ring's
next rank in ``ms_collective_topo.cc``).  A rank that finds one missing calls ``sleep(3)`` before
it looks again, and ranks leave the cluster's join up to 0.5 s apart (its readiness is polled every
0.5 s), so nearly every start of a job, and every restart, waits those 3 s on one rank while
the others wait for it in their first collective (docs/long-jobs.md measures it).

The cure here is a tiny shared library (:data:`C_SOURCE`, built once per host with the system's
C compiler and kept in ``$MSLAUNCH_HOME/cache``) that the zygote process starts with in
``LD_PRELOAD``.  Its ``sleep`` changes only the calls made from ``libmindspore_cpu.so`` (every
one of them is such a poll; ``objdump`` finds three call sites, each ``sleep(3)``): the first
nine polls of a thread wait 0.1, 0.1, 0.1, 0.2, 0.2, 0.4, 0.4, 0.8 and 0.8 s (3.1 s, where
MindSpore waits 3 s once), and the time they did not wait is added back to the polls after them
(at most doubling each), so MindSpore's deadline stays what it was from its 17th poll on (the
shortest of its loops has 19).  Every other ``sleep`` call, the program's own and other
libraries', goes to the C library untouched, and the ranks forked from the zygote get the
planned environment without ``LD_PRELOAD`` (``zygote_child``): a rank's program sees nothing of
it but the library among its mappings (``/proc/self/maps``), inherited through the fork as the
zygote's imports are.

Off with ``MSLAUNCH_FAST_JOIN=0`` in the ranks' environment (``--env``); without a C compiler
on a host the zygote starts as before there.  Ranks started as plain processes (``--no-zygote``,
non-Python programs, ``--cold-restarts``, mpirun, Slurm) do not get it.

Like :mod:`~.proctree`, this module is also sent to hosts as source text (before the remote
zygote's): the standard library only, Python >= 3.6, nothing from ``launcher``, no annotations.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile

__all__ = ["C_SOURCE", "OFF_VAR", "SHIM_PREFIX", "build_shim", "drop_shim", "shim_loaded", "zygote_env"]

#: ``MSLAUNCH_FAST_JOIN=0`` in the ranks' environment: start the zygote without the shim.
OFF_VAR = "MSLAUNCH_FAST_JOIN"
#: The built library's file name starts so (how the zygote finds it in ``LD_PRELOAD``).
SHIM_PREFIX = "mslaunch-fastjoin-"
#: Seconds the compiler may take (it takes about 0.1 s here): a host's agent builds it in its
#: event loop, which must answer the launcher's pings (5 s), so a slow build is given up.
BUILD_TIMEOUT = 3.0

C_SOURCE = r"""
/* mslaunch fastjoin: quicker polls in libmindspore_cpu.so's sleep(N) retry loops. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#define TARGET "libmindspore_cpu.so"
#define QUICK 9U
static const unsigned long long quick_ms[QUICK] = {100, 100, 100, 200, 200, 400, 400, 800, 800};

static __thread unsigned quick;             /* quick polls this thread made */
static __thread unsigned long long debt_ms; /* what they did not wait, owed to the later ones */

static int from_target(void *ret) {
    Dl_info info;
    const char *base;
    if (!dladdr(ret, &info) || info.dli_fname == NULL) return 0;
    base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, TARGET, sizeof(TARGET) - 1) == 0;
}

unsigned int sleep(unsigned int seconds) {
    static unsigned int (*real)(unsigned int);
    if (seconds > 0 && from_target(__builtin_return_address(0))) {
        unsigned long long want = seconds * 1000ULL, ms;
        struct timespec ts, rem;
        if (quick < QUICK) {
            ms = quick_ms[quick] < want ? quick_ms[quick] : want;
            quick++;
            debt_ms += want - ms;
        } else {
            unsigned long long extra = debt_ms < want ? debt_ms : want;
            ms = want + extra;
            debt_ms -= extra;
        }
        ts.tv_sec = (time_t)(ms / 1000ULL);
        ts.tv_nsec = (long)(ms % 1000ULL) * 1000000L;
        if (nanosleep(&ts, &rem) != 0 && errno == EINTR)
            return (unsigned int)rem.tv_sec + (rem.tv_nsec > 0 ? 1U : 0U);
        return 0;
    }
    if (real == NULL) real = (unsigned int (*)(unsigned int))dlsym(RTLD_NEXT, "sleep");
    return real != NULL ? real(seconds) : 0;
}
"""


def _cache_dir(environ):
    home = environ.get("MSLAUNCH_HOME") or os.path.join(os.path.expanduser("~"), ".mslaunch")
    return os.path.join(home, "cache")


def _compiler(environ):
    for name in (environ.get("CC") or "", "cc", "gcc", "clang"):
        if name and shutil.which(name, path=environ.get("PATH")):
            return name
    return None


def build_shim(environ=None):
    """The shim's path, built on first use (``$MSLAUNCH_HOME/cache/mslaunch-fastjoin-<hash>.so``,
    written whole or not at all); ``(path, None)``, or ``(None, why)`` when it cannot be built."""
    environ = os.environ if environ is None else environ
    # The machine's kind in the name too: a home folder shared by hosts of two kinds keeps both.
    digest = hashlib.sha256((os.uname().machine + "\n" + C_SOURCE).encode("utf-8")).hexdigest()[:12]
    folder = _cache_dir(environ)
    path = os.path.join(folder, SHIM_PREFIX + digest + ".so")
    if os.path.isfile(path):
        return path, None
    cc = _compiler(environ)
    if cc is None:
        return None, "no C compiler (cc, gcc or clang) on the PATH"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".fastjoin-", dir=folder)
    except OSError as exc:
        return None, "cannot write %s: %s" % (folder, exc.strerror or exc)
    try:
        src = os.path.join(work, "fastjoin.c")
        out = os.path.join(work, "fastjoin.so")
        with open(src, "w") as fh:
            fh.write(C_SOURCE)
        rc, said = _compile([cc, "-O2", "-shared", "-fPIC", "-o", out, src, "-ldl"], environ)
        if rc != 0 or not os.path.isfile(out):
            return None, "%s %s: %s" % (cc, "exited %d" % rc if rc is not None else "failed", said)
        os.replace(out, path)
        return path, None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile(argv, environ):
    """Run the compiler in a session of its own (its cc1, as and ld too), ended whole after
    :data:`BUILD_TIMEOUT`: (exit code or None, its last line or why it failed)."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(environ),
            start_new_session=True,
        )
    except OSError as exc:
        return None, str(exc.strerror or exc)
    try:
        output = proc.communicate(timeout=BUILD_TIMEOUT)[0]
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return None, "no answer in %g s" % BUILD_TIMEOUT
    last = output.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
    return proc.returncode, last[0]


def zygote_env(env):
    """The environment to start a zygote under: ``(a copy of env with the shim first in
    LD_PRELOAD, None)`` when it is wanted and built, else ``(a copy of env, why not)``."""
    if env.get(OFF_VAR, "").strip() == "0":
        return dict(env), "%s=0" % OFF_VAR
    path, why = build_shim(env)
    if path is None:
        return dict(env), why
    out = dict(env)
    rest = out.get("LD_PRELOAD", "")
    out["LD_PRELOAD"] = path + (":" + rest if rest else "")
    return out, None


def drop_shim(environ):
    """Take the shim out of ``environ["LD_PRELOAD"]`` (in the zygote, at its start: it is in the
    process already, and nothing it starts should inherit it): the first entry, where
    :func:`zygote_env` put it; the variable goes when it held nothing else."""
    value = environ.get("LD_PRELOAD")
    if value is None:
        return
    first, _, rest = value.partition(":")
    if not os.path.basename(first).startswith(SHIM_PREFIX):
        return
    if rest:
        environ["LD_PRELOAD"] = rest
    else:
        del environ["LD_PRELOAD"]


def shim_loaded():
    """Whether this process has the shim mapped (read from ``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps") as fh:
            return any(SHIM_PREFIX in line for line in fh)
    except OSError:
        return False
