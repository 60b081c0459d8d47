"""The launcher's side of the host agent protocol (:mod:`launcher.execution.ssh.remote_agent`).

One agent runs per host, sent as source text over the channel's stdin (the remote host needs
only a Python 3; ``python:`` in the inventory, else ``python3``).  The one remote command line is
``exec <python> -S -u -c <bootstrap>`` (:func:`agent_command`, every piece ``shlex.quote``-d);
the agent's source and its settings follow on stdin (:func:`bootstrap_payload`), then one JSON
line per request: ``start`` a rank (:meth:`AgentConfig.start_op`: argv, env and cwd travel as
JSON and never meet a shell), ``ping``, ``term``/``kill`` one rank or every rank.  The agent
answers with frames on stdout (:class:`FrameReader`): each rank's output, and messages
(``ready``, ``hb``, ``started``, ``error``, ``exit`` with the exit's time).

Protocol.  Launcher -> agent (stdin): one JSON object per line::

    {"op": "start", "id": K, "cfg": {"argv": [...], "env": {...}, "cwd": D, "mkdir": B, "env_dump": P}}
    {"op": "ping"}
    {"op": "term", "id": K}   SIGTERM to rank K's process group ("id" null or absent: every rank)
    {"op": "kill", "id": K}   SIGKILL to rank K's group and every process attributed to it (null: all)
    {"op": "zygote", "python": P, "preload": [M...], "env": {...}, "src": S}
                              fork the Python ranks of later "start" requests with "zygote": true from
                              one P that imported M... (launcher.execution.ssh.remote_zygote); kept
                              while a later request asks for the same
    EOF                       the launcher is gone: end every rank

Agent -> launcher (stdout): :data:`MAGIC`, then frames of a 9-byte header ``struct.pack("!cII", kind, id, length)``
then ``length`` bytes::

    b"O"  output of rank ``id`` (its stdout and stderr, one pipe: the kernel's order is kept)
    b"M"  a JSON message: {"ev": "ready", "pid": P, "time": EPOCH} (first frame), {"ev": "hb", "time": EPOCH,
          "stopped": [ID, ...], "sched": {"ID": [T, CPU_S, DELAY_S, SEND_QUEUED, BUSIEST_LINK_S], ...}}
          (the ranks stopped by a signal; every few seconds, each running rank's tree's seconds on a
          CPU and waiting for one at the agent's monotonic time T, the bytes in its TCP send queues,
          and the seconds its busiest TCP connection had data in flight, cumulative),
          {"ev": "started", "id": K, "pid": P}, {"ev": "error", "id": K, "msg": S},
          {"ev": "note", "msg": S} (a line for the console: the zygote's fallback to plain processes),
          {"ev": "exit", "id": K, "rc": RC, "time": EPOCH}  (RC negative: killed by that signal;
          the last frame of rank K: every byte of its output comes before it)

The agent's stderr carries nothing of the protocol (only what Python itself might print).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from typing import AbstractSet, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from launcher.execution.ssh.settings import PING_INTERVAL
from launcher.planning.job.spec import ProcPlan

#: Exit code of a rank whose host was lost (OpenSSH's for a failed connection).
LOST_RC = 255

_AGENT_SOURCE: Optional[str] = None


def agent_source() -> str:
    """The source text the host runs: :mod:`launcher.execution.process.proctree`,
    :mod:`launcher.execution.probes.host_cores` (the host's cores, in its "ready" message), then
    :mod:`launcher.execution.ssh.remote_agent` (see :func:`launcher.execution.probes.program_source`).
    Read once."""
    global _AGENT_SOURCE
    if _AGENT_SOURCE is None:
        from launcher.execution.probes import program_source

        _AGENT_SOURCE = program_source(
            "launcher.execution.probes.host_cores",
            "launcher.execution.ssh.remote_link",
            "launcher.execution.process.fastjoin",
            "launcher.execution.ssh.remote_zygote",
            "launcher.execution.ssh.remote_start",
            "launcher.execution.ssh.remote_agent",
        )
    return _AGENT_SOURCE


_ZYGOTE_SOURCE: Optional[str] = None


def zygote_source() -> str:
    """The source text of a host's zygote (:mod:`launcher.execution.local.zygote_server` with the
    child's side before it), run as ``<python> -c <source> MODULE...``.  Read once."""
    global _ZYGOTE_SOURCE
    if _ZYGOTE_SOURCE is None:
        from launcher.execution.probes import program_source

        _ZYGOTE_SOURCE = program_source(
            "launcher.execution.local.zygote_libs",
            "launcher.execution.process.fastjoin",
            "launcher.execution.local.zygote_child",
            "launcher.execution.local.zygote_server",
        )
    return _ZYGOTE_SOURCE


def zygote_op(python: str, preload: Sequence[str], env: Mapping[str, str]) -> bytes:
    """The ``zygote`` request: fork this host's Python ranks from one ``python`` that imported
    ``preload`` under the agent's environment plus ``env`` (kept when the host's last zygote
    imported the same; ``preload`` empty: none)."""
    return op_line(
        "zygote",
        None,
        python=python,
        preload=list(preload),
        env=dict(env),
        src=zygote_source() if preload else "",
    )


def agent_command(python: str) -> str:
    """The remote command line that starts the agent under ``python`` (every piece quoted)."""
    from launcher.execution.ssh.remote_link import BOOTSTRAP

    return "exec " + " ".join(shlex.quote(p) for p in (python, "-S", "-u", "-c", BOOTSTRAP))


def bootstrap_payload(
    host: str, ping_timeout: float, heartbeat: float = PING_INTERVAL, sched_every: Optional[float] = None
) -> bytes:
    """What the bootstrap reads first: a decimal length line, then ``{"src", "cfg"}`` as JSON.

    Args:
        host: the host's name (for the agent's messages).
        ping_timeout: seconds without a ping after which the agent ends every rank.
        heartbeat: seconds between the agent's heartbeats.
        sched_every: seconds between its samples of the ranks' scheduler figures (None: the agent's
            default, ``SCHED_EVERY``).
    """
    cfg: Dict[str, Any] = {"host": host, "ping_timeout": ping_timeout, "heartbeat": heartbeat}
    if sched_every is not None:
        cfg["sched_every"] = sched_every
    body = json.dumps({"src": agent_source(), "cfg": cfg}).encode("utf-8")
    return str(len(body)).encode("ascii") + b"\n" + body


def op_line(op: str, rank_id: Optional[int] = None, **extra: Any) -> bytes:
    """One request line: ``{"op": op, "id": rank_id, ...}`` (``id`` None: every rank)."""
    obj: Dict[str, Any] = {"op": op}
    if op != "ping":
        obj["id"] = rank_id
    obj.update(extra)
    return json.dumps(obj).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class AgentConfig:
    """What the agent is told about one rank (the ``cfg`` of its ``start`` request).

    Attributes:
        argv: the rank's argv (never given to a shell).
        env: variables set on top of the login environment.
        cwd: working directory.
        mkdir: create ``cwd`` first (it lies under the job directory).
        env_dump: where the agent writes the rank's full environment (ranktable method), or None.
        host: the host's name as the inventory gives it (for messages).
        secrets: names whose values the env dump shows as ``<secret>`` (the values travel only
            in this request, over the ssh channel).
        zygote: fork it from the host's zygote when the agent has one that can run it (else it
            starts as a plain process).
    """

    argv: Tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    mkdir: bool
    env_dump: Optional[str]
    host: str
    secrets: Tuple[str, ...] = ()
    zygote: bool = False

    @classmethod
    def for_rank(
        cls, proc: ProcPlan, cwd: str, job_dir: str, secrets: AbstractSet[str] = frozenset(), zygote: bool = False
    ) -> "AgentConfig":
        """The config of ``proc`` run in ``cwd`` (created by the agent when under ``job_dir``)."""
        under_job = cwd == job_dir or cwd.startswith(job_dir.rstrip("/") + "/")
        return cls(
            argv=tuple(proc.argv),
            env=dict(proc.env),
            cwd=cwd,
            mkdir=under_job,
            env_dump=posixpath.join(cwd, posixpath.basename(proc.env_dump)) if proc.env_dump else None,
            host=proc.host,
            secrets=tuple(sorted(k for k, _ in proc.env if k in secrets)),
            zygote=zygote,
        )

    def to_json(self) -> Dict[str, Any]:
        """The JSON object the agent's ``start`` request carries."""
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "cwd": self.cwd,
            "mkdir": self.mkdir,
            "env_dump": self.env_dump,
            "secrets": list(self.secrets),
            **({"zygote": True} if self.zygote else {}),
        }

    def start_op(self, rank_id: int) -> bytes:
        """The ``start`` request line for this rank under id ``rank_id``."""
        return op_line("start", rank_id, cfg=self.to_json())


#: A decoded agent frame: ``("O", rank_id, bytes)`` output, or ``("M", rank_id, dict)`` a message.
Frame = Tuple[str, int, Any]

#: Largest frame the agent ever sends (its output frames hold one 64 KiB pipe read, its messages
#: a few hundred bytes); a larger length means the stream is not the agent's frames.
MAX_FRAME = 1 << 20


class FrameError(ValueError):
    """The agent's stdout is not a frame stream (an unknown kind, or an impossible length)."""


class FrameReader:
    """Incremental decoder of the agent's stdout (see :mod:`launcher.execution.ssh.remote_agent`).

    :meth:`feed` takes bytes as they arrive and yields whole frames; a partial frame waits for
    the rest.  A message that is not JSON becomes ``{"ev": "garbled"}``.  A header of an unknown
    kind or a length over :data:`MAX_FRAME` raises :class:`FrameError` (so a stream that is not
    the agent's never makes the reader buffer gigabytes waiting for a frame's end).
    """

    def __init__(self) -> None:
        from launcher.execution.ssh.remote_link import HEADER

        self._header = HEADER
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[Frame]:
        self._buf += data
        size = self._header.size
        pos = 0
        buf = self._buf
        try:
            while len(buf) - pos >= size:
                kind, rid, length = self._header.unpack_from(buf, pos)
                if kind not in (b"O", b"M") or length > MAX_FRAME:
                    raise FrameError(f"frame kind {kind!r}, length {length}")
                if len(buf) - pos - size < length:
                    break
                body = bytes(buf[pos + size : pos + size + length])
                pos += size + length
                if kind == b"O":
                    yield "O", rid, body
                else:
                    try:
                        msg = json.loads(body.decode("utf-8"))
                    except ValueError:
                        msg = {"ev": "garbled"}
                    yield "M", rid, msg if isinstance(msg, dict) else {"ev": "garbled"}
        finally:
            del buf[:pos]

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame still waiting."""
        return len(self._buf)


def split_lines(buf: bytes) -> Tuple[List[str], bytes]:
    """Whole lines of ``buf`` (decoded, without newlines) and the incomplete rest."""
    *lines, rest = buf.split(b"\n")
    return [line.decode("utf-8", "replace") for line in lines], rest
