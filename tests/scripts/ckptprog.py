"""A stand-in data-parallel trainer with checkpoints (no MindSpore), for fault streams.

    ckptprog.py DIR STEPS EVERY CKPT_EVERY [cpu]

Every worker trains global steps 1..STEPS in lockstep with the others (after each step it waits,
over TCP through the scheduler, until every rank of its attempt has done it, as a gradient
AllReduce makes it: a rank that is stopped, gone or cut off holds the others), sleeping EVERY s
per step (with ``cpu``: computing EVERY s of CPU time, so a rank whose host is under a CPU quota
is slow, and waits for a CPU as a trainer does) and printing the trainer's
``epoch: 1 step: <s>, loss is <x>`` once the step is done (the trainer prints a step's loss after
its AllReduce: a logged step is one every rank did, so a save on SIGTERM keeps it); every
CKPT_EVERY steps it saves its checkpoint
(``DIR/ckpt/rank<r>``: the step, written atomically).  A restart (any attempt) resumes from the
newest step every rank has saved, as the reference trainer's ``--resume`` does, and says
``resume: global step <s>``.  The scheduler role (MS_ROLE=MS_SCHED) serves the barrier on
MS_SCHED_PORT until it is ended.

Like the reference trainer in a job smaller than planned (``MSLAUNCH_PLANNED_WORLD_SIZE``), each
rank r also saves the checkpoints of the missing ranks r + n, r + 2n, ...; and on SIGTERM, unless
mslaunch's ``MSLAUNCH_STOPPING_FILE`` says it stops the ranks after a fault, it saves the last step
every rank did before it ends (by the signal).
"""

import os
import select
import signal
import socket
import sys
import time

world = int(os.environ.get("MS_WORKER_NUM") or os.environ.get("RANK_SIZE") or 1)

if os.environ.get("MS_ROLE") == "MS_SCHED":  # the barrier: "go <s>" once every rank said it did step s
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    srv.listen(64)
    conns, done, sent = {}, {}, -1
    while True:
        readable, _, _ = select.select([srv, *conns], [], [])
        for sock in readable:
            if sock is srv:
                conn, _ = srv.accept()
                conns[conn] = b""
                continue
            data = sock.recv(4096)
            if not data:
                del conns[sock]
                continue
            conns[sock] += data
            while b"\n" in conns[sock]:
                line, conns[sock] = conns[sock].split(b"\n", 1)
                r, step = map(int, line.split())
                done[r] = step
        if len(done) == world and min(done.values()) > sent:
            sent = min(done.values())
            for conn in list(conns):
                try:
                    conn.sendall(b"go %d\n" % sent)
                except OSError:
                    del conns[conn]

folder, steps, every, ckpt_every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
compute = sys.argv[5:6] == ["cpu"]
rank = int(os.environ["RANK_ID"])
planned = max(world, int(os.environ.get("MSLAUNCH_PLANNED_WORLD_SIZE") or world))
ckpt = os.path.join(folder, "ckpt")
os.makedirs(ckpt, exist_ok=True)
done_step = 0  # the last step every rank did (its barrier passed)


def write(path: str, value: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(str(value))
    os.replace(tmp, path)


def save(step: int) -> None:
    t0 = time.perf_counter()
    for r in range(rank, planned, world):  # this rank's, and the missing ranks' it keeps
        write(os.path.join(ckpt, f"rank{r}"), step)
    print('MSLAUNCH_METRIC {"ckpt_ms": %.3f}' % ((time.perf_counter() - t0) * 1000.0), flush=True)


def on_sigterm(signum, frame):  # noqa: ANN001  (a signal handler)
    why = os.environ.get("MSLAUNCH_STOPPING_FILE")
    try:
        with open(why or "") as fh:
            after_fault = fh.read().strip() in ("failed", "hung")
    except OSError:
        after_fault = False
    if done_step and not after_fault:
        save(done_step)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


signal.signal(signal.SIGTERM, on_sigterm)


def read(path: str) -> int:
    try:
        with open(path) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


peer = None
for _ in range(600):  # the scheduler starts with the ranks: try for a minute
    try:
        peer = socket.create_connection((os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])), timeout=5)
        break
    except OSError:
        time.sleep(0.1)
assert peer is not None, "no scheduler"
peer.settimeout(None)
inbox = b""


def barrier(step: int) -> None:
    """Tell the scheduler this rank did ``step``; wait until every rank did (the AllReduce)."""
    global inbox
    peer.sendall(b"%d %d\n" % (rank, step))
    while True:
        while b"\n" in inbox:
            line, inbox = inbox.split(b"\n", 1)
            if int(line.split()[1]) >= step:
                return
        data = peer.recv(4096)
        if not data:
            sys.exit("the scheduler is gone")
        inbox += data


start = min(read(os.path.join(ckpt, f"rank{r}")) for r in range(world))
if os.environ.get("MSLAUNCH_CKPT_INTERVAL_STEPS"):  # the interval mslaunch offers after a fault
    print(f"offered checkpoint interval: {os.environ['MSLAUNCH_CKPT_INTERVAL_STEPS']} steps", flush=True)
if start:
    print(f"resume: global step {start}", flush=True)
barrier(start)
done_step = start
for step in range(start + 1, steps + 1):
    if compute:
        until = time.process_time() + every
        while time.process_time() < until:
            sum(range(1000))
    else:
        time.sleep(every)
    barrier(step)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the line and done_step go together
    done_step = step
    print(f"epoch: 1 step: {step}, loss is {1.0 / step:.4f}", flush=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if step % ckpt_every == 0:
        save(step)
