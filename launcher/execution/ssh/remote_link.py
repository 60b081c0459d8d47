"""The link between the launcher and a host's agent (:mod:`launcher.execution.ssh.remote_agent`):
the bootstrap command, the frame format both sides use, the agent's batched frame writer, and
waiting on many descriptors.  Sent to the host with the agent's source (see
:func:`launcher.execution.probes.program_source`), so: standard library only, Python >= 3.6,
no imports from ``launcher``, no annotations.  The protocol is described in
:mod:`launcher.execution.ssh.agent`.
"""

import json
import os
import select
import struct
import time

__all__ = ["BATCH", "BOOTSTRAP", "FLUSH_DELAY", "HEADER", "MAGIC", "OUT_LIMIT", "Outbox", "poll_fds", "set_nonblocking"]

#: Written once before the first frame: whatever a login shell printed to stdout before the
#: agent started comes before it and is not taken for frames.
MAGIC = b"@@mslaunch-agent-frames\n"

#: Header of an agent -> launcher frame: kind (1 byte), rank id, payload length.
HEADER = struct.Struct("!cII")

#: Python code given to ``python -c``: read the length line and the payload, run main.
BOOTSTRAP = (
    "import os,json\n"
    "def r(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(0,n-len(b))\n"
    "  if not c:os._exit(3)\n"
    "  b+=c\n"
    " return b\n"
    "h=b''\n"
    "while h[-1:]!=b'\\n':h+=r(1)\n"
    "c=json.loads(r(int(h)).decode('utf-8'))\n"
    "g={'__name__':'mslaunch_agent'};exec(compile(c['src'],'mslaunch_agent','exec'),g);g['main'](c['cfg'])\n"
)

#: Stop reading the ranks' pipes while this much output waits for the link.
OUT_LIMIT = 8 << 20
#: Output waits at most this long (or until BATCH bytes are queued) before it is written, so
#: that many ranks' lines leave in few SSH packets.
FLUSH_DELAY = 0.02
BATCH = 64 << 10


class Outbox(object):
    """Frames queued for a non-blocking descriptor (the agent's stdout), written in batches:
    once :data:`BATCH` bytes wait or the oldest has waited :data:`FLUSH_DELAY` s."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()
        self.since = 0.0

    def __len__(self):
        return len(self.buf)

    def raw(self, data):
        if not self.buf:
            self.since = time.monotonic()
        self.buf += data

    def frame(self, kind, rid, data):
        """Queue one frame: :data:`HEADER` (kind, rank id, length), then ``data``."""
        self.raw(HEADER.pack(kind, rid, len(data)) + data)

    def message(self, obj):
        """Queue a JSON message frame (kind ``M``; its id is the message's ``id``, else 0)."""
        self.frame(b"M", int(obj.get("id", 0) or 0), json.dumps(obj).encode("utf-8"))

    def due(self, now):
        """Queued output is big enough or old enough to be written."""
        return bool(self.buf) and (len(self.buf) >= BATCH or now - self.since >= FLUSH_DELAY)

    def deadline(self):
        """When the oldest queued byte is due (monotonic)."""
        return self.since + FLUSH_DELAY

    def flush(self):
        """Write what the descriptor takes now; False when the link is broken (the queue is dropped)."""
        while self.buf:
            try:
                n = os.write(self.fd, bytes(self.buf[: 1 << 20]))
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                self.buf = bytearray()
                return False
            del self.buf[:n]
        return True


def poll_fds(rlist, wlist, timeout):
    """``select`` without its 1024-descriptor limit: (readable, writable) sets of fds."""
    poller = select.poll()
    for fd in rlist:
        poller.register(fd, select.POLLIN)
    for fd in wlist:
        poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(timeout * 1000.0)
    except (OSError, ValueError):
        return set(), set()
    readable, writable = set(), set()
    for fd, ev in events:
        if fd in wlist:
            writable.add(fd)
        if ev & (select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLNVAL) and fd in rlist:
            readable.add(fd)
    return readable, writable


def set_nonblocking(fd):
    """``O_NONBLOCK`` on ``fd``."""
    import fcntl

    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
