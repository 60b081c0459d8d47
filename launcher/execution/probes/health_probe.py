"""The health check's probe program, sent to every host as ``python -c <this source> CFG``
(:func:`launcher.execution.checks.health.probe_source`).

Standard library plus numpy (MindSpore with the ``mindspore`` kernel).  It speaks JSON lines:
one command per line on stdin, one answer per line on stdout:

=================================================  ==========================================
command                                            answer
=================================================  ==========================================
``{"op": "start", "kernel", "n"}``                 ``{"port", "pid"}``: its TCP sink listens on
                                                   ``port``; the kernel is imported and warm
``{"op": "compute", "window", "repeats", "delay"}``  ``{"gflops"}``: best window of the kernel
``{"op": "send", "addr", "port", "seconds",         ``{"mbps"}``: MB/s sent to that sink
"delay"}``
``{"op": "devices", "commands", "limit",          ``{"outcomes": [...]}``: the device checks'
"output_limit"}``                                   commands run (:mod:`~.device_runner`)
``{"op": "quit"}``                                 none: the program exits
=================================================  ==========================================

With ``connect: [addr, port]`` in ``CFG`` (Slurm: one ``srun`` step per node) the lines go over a
TCP connection to that address instead, which starts with ``{"hello": CFG's name, "key": the
check's token, "addr": the probe's own address on that connection}``.

The check's token (``secrets.token_hex``, new for every check) is never on a command line: it
comes in ``start``'s ``token`` (over the channel), or for the connection back in the
environment (:data:`TOKEN_ENV`, which srun passes on).  The sink listens only on ``CFG``'s
``bind`` (the address its peers use; 127.0.0.1 when empty), and a peer must send the token and a
newline first (``send`` does): any other connection is closed unread, and its address is listed
in ``refused`` of the probe's next answer.  A failed command answers ``{"error": "..."}``.  The program exits at the end
of its stdin, on
``quit``, and in any case ``lifetime`` seconds after it started (``CFG``'s ``lifetime``), so
nothing is left running on a host whatever happens to the launching machine.  BLAS runs on
one thread (the environment is set by the caller), so hosts compare fairly.
"""

import hmac
import json
import os
import socket
import struct
import sys
import threading
import time

try:
    from launcher.execution.probes.device_runner import run_order
except ImportError:  # sent to a host: defined above (probe_source)
    pass

__all__ = ["THREAD_ENV", "main"]

#: Environment of the probe: one BLAS / OpenMP thread.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: The variable that hands the check's token to a probe started by srun (never its command line).
TOKEN_ENV = "MSLAUNCH_PROBE_TOKEN"
#: Addresses whose connection to the sink was refused (a bad token), until the next answer.
REFUSED: "list[str]" = []


def _lines(cfg):
    """The command channel: stdin/stdout, or a TCP connection back to ``cfg["connect"]``
    (greeted with ``{"hello": name, "key": the check's token, "addr": our address}``)."""
    if not cfg.get("connect"):
        return sys.stdin, sys.stdout
    cs = socket.create_connection((cfg["connect"][0], int(cfg["connect"][1])), timeout=30)
    cs.settimeout(None)
    rd, wr = cs.makefile("r", encoding="utf-8"), cs.makefile("w", encoding="utf-8")
    hello = {"hello": cfg.get("name"), "key": os.environ.get(TOKEN_ENV, ""), "addr": cs.getsockname()[0]}
    wr.write(json.dumps(hello) + "\n")
    wr.flush()
    return rd, wr


def sink(c, peer, lifetime, token):
    """Check the peer's token, then read and drop what it sends, until it closes or ``lifetime``
    s pass; a peer without the token is closed unread and listed in :data:`REFUSED`."""
    want = (token + "\n").encode()
    try:
        c.settimeout(10.0)
        got = b""
        while len(got) < len(want):
            chunk = c.recv(len(want) - len(got))
            if not chunk:
                break
            got += chunk
        if not token or not hmac.compare_digest(got, want):
            REFUSED.append(peer[0])
            return
        c.settimeout(lifetime)
        while c.recv(1 << 20):
            pass
    except OSError:
        pass
    finally:
        c.close()


def serve(srv, lifetime, token):
    """Accept peers on ``srv`` and sink each one in its own thread."""
    while True:
        try:
            c, peer = srv.accept()
        except OSError:
            return
        threading.Thread(target=sink, args=(c, peer, lifetime, token), daemon=True).start()


def setup(kernel, n):
    """The compute kernel (an ``n``x``n`` matmul of numpy, or of MindSpore), warmed once."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    if kernel == "mindspore":
        import mindspore as ms
        from mindspore import Tensor, ops

        ms.set_context(device_target="CPU")
        ta, tb = Tensor(a.astype(np.float32)), Tensor(b.astype(np.float32))

        def run():
            ops.matmul(ta, tb).asnumpy()
    else:

        def run():
            np.dot(a, b)

    run()
    return run


def compute(run, n, window, repeats, delay):
    """GFLOPS of the best of ``repeats`` windows of ``window`` s, after ``delay`` s."""
    time.sleep(delay)
    flops, best = 2.0 * n**3, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        end, k = t0 + window, 0
        while True:
            run()
            k += 1
            t1 = time.perf_counter()
            if t1 >= end:
                break
        best = max(best, k * flops / (t1 - t0) / 1e9)
    return best


def send(addr, port, seconds, delay, token):
    """MB/s sent to a peer's sink for ``seconds`` s, after ``delay`` s (the token first)."""
    time.sleep(delay)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 17)
    s.settimeout(seconds + 3.0)
    try:
        s.connect((addr, port))
        s.sendall((token + "\n").encode())
        buf, sent = b"\0" * 65536, 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            sent += s.send(buf)
        el = time.perf_counter() - t0
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    return sent / el / 1e6


def main(cfg_text):
    """Serve commands until the end of the channel, ``quit``, or the lifetime; then exit."""
    cfg = json.loads(cfg_text)
    lifetime = float(cfg.get("lifetime", 60))
    timer = threading.Timer(lifetime, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    rd, wr = _lines(cfg)
    token = os.environ.pop(TOKEN_ENV, "")  # not passed on to the device checks' commands

    def reply(obj):
        if REFUSED:
            obj["refused"] = [REFUSED.pop(0) for _ in range(len(REFUSED))]
        wr.write(json.dumps(obj) + "\n")
        wr.flush()

    run, srv, n = None, None, 256
    while True:
        line = rd.readline()
        if not line:
            break
        try:
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "quit":
                break
            if op == "start":
                token = cmd.get("token") or token
                bind = cfg.get("bind") or "127.0.0.1"
                srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    srv.bind((bind, 0))
                except OSError as exc:
                    raise OSError("cannot listen on %s (the address its peers use): %s" % (bind, exc)) from None
                srv.listen(64)
                threading.Thread(target=serve, args=(srv, lifetime, token), daemon=True).start()
                n = int(cmd.get("n", 256))
                run = setup(cmd.get("kernel", "numpy"), n)
                reply({"port": srv.getsockname()[1], "pid": os.getpid()})
            elif op == "compute":
                reply(
                    {"gflops": compute(run, n, float(cmd["window"]), int(cmd["repeats"]), float(cmd.get("delay", 0)))}
                )
            elif op == "send":
                reply(
                    {
                        "mbps": send(
                            cmd["addr"], int(cmd["port"]), float(cmd["seconds"]), float(cmd.get("delay", 0)), token
                        )
                    }
                )
            elif op == "devices":
                reply(run_order(cmd))
            else:
                reply({"error": "unknown command %r" % op})
        except Exception as exc:
            reply({"error": "%s: %s" % (type(exc).__name__, exc)})
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
