"""How the ssh agent starts a rank: its working directory, its environment dump, then a plain
process or a fork from the host's warm zygote (:mod:`launcher.execution.ssh.remote_zygote`).

Sent to the host with the agent (:mod:`launcher.execution.ssh.remote_agent`), so: standard library
only, no imports from ``launcher`` (guarded), no annotations.
"""

import os
import subprocess
import time

try:  # in the launcher; sent to a host, the agent's source comes first
    from launcher.execution.ssh.remote_zygote import ZygoteLink
except ImportError:
    pass


class StartError(Exception):
    """A rank cannot be started (its message is sent as the rank's "error")."""


def prepare_cwd(cfg, host):
    """The rank's working directory (created first when it lies under the job directory)."""
    cwd = cfg.get("cwd") or None
    if cwd is None:
        return None
    if cfg.get("mkdir"):
        try:
            os.makedirs(cwd, 0o700, exist_ok=True)
        except OSError as exc:
            raise StartError("cannot create working directory %s on %s: %s" % (cwd, host, exc.strerror or exc))
    if not os.path.isdir(cwd):
        raise StartError(
            "working directory %s does not exist on %s; run from a folder that exists on every host" % (cwd, host)
        )
    return cwd


def write_env_dump(path, env, secrets, host):
    """The rank's whole environment in ``path`` (ranktable method), secrets shown as ``<secret>``."""
    if not path:
        return
    env = dict(env)
    env.update((str(k), "<secret>") for k in secrets if k in env)  # never written in clear
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join("%s=%s\n" % (k, v) for k, v in env.items()))
    except OSError as exc:
        raise StartError("cannot write %s on %s: %s" % (path, host, exc.strerror or exc))


def plain_process(argv, env, cwd, child_setup):
    """Start ``argv`` as its own session with stdout and stderr on one new pipe: (popen, read end)."""
    rfd, wfd = os.pipe()
    try:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=wfd,
            stderr=wfd,
            start_new_session=True,
            close_fds=True,
            preexec_fn=child_setup,
        )
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    return popen, rfd


def start_failure(exc, argv, host):
    """The one-line reason a rank's process could not start."""
    if isinstance(exc, FileNotFoundError):
        return "cannot run %r on %s: no such file; check the program path (or python: in the inventory)" % (
            argv[0],
            host,
        )
    if isinstance(exc, PermissionError):
        return "cannot run %r on %s: permission denied (is it executable?)" % (argv[0], host)
    return "cannot start %r on %s: %s" % (argv[0] if argv else "?", host, getattr(exc, "strerror", None) or exc)


def zygote_request(current, op, base_env):
    """The zygote a ``zygote`` request asks for: ``current`` when it imported the same under the
    same environment (asked whether it is still fit), else a new one (``current`` ended).

    ``op``: ``{"op": "zygote", "python": P, "preload": [...], "env": {...}, "src": S}``, the
    environment on top of the agent's own; ``"preload"`` empty: no zygote from now on.
    """
    env = dict(base_env)
    env.update(dict((str(k), str(v)) for k, v in (op.get("env") or {}).items()))
    env.pop("MS_ROLE", None)
    python, preload = str(op.get("python") or "python3"), [str(m) for m in op.get("preload") or ()]
    if current is not None and preload and current.same(python, preload, env):
        current.check()
        return current
    if current is not None:
        current.end("the new attempt asks for another one")
        current.close()
        current.discard()
    if not preload or not op.get("src"):
        return None
    z = ZygoteLink(python, preload, env, str(op["src"]))
    z.begin(time.monotonic())
    return z
