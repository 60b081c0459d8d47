"""A stand-in data-parallel trainer that computes (no MindSpore), for the straggler watch.

    dploop.py WORK STOP [MAX_STEPS [PAYLOAD]]

Every worker runs steps in lockstep: WORK iterations of arithmetic (its forward and backward),
then a barrier over TCP through the scheduler (its gradient AllReduce: a rank starved of CPU holds
the others, which wait blocked in ``recv``), printing ``epoch: 1 step: <s>, loss is <x>``.  The
scheduler role (MS_ROLE=MS_SCHED) serves the barrier on MS_SCHED_PORT; once the file STOP exists
(or after MAX_STEPS, default 100000) it answers ``end`` and every rank exits 0.  With PAYLOAD,
each rank sends that many bytes with each step's barrier message (its gradients: a rank behind a
slow link keeps its send queue full).
"""

import os
import select
import socket
import sys

work, stop = int(sys.argv[1]), sys.argv[2]
max_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
payload = int(sys.argv[4]) if len(sys.argv) > 4 else 0
world = int(os.environ.get("MS_WORKER_NUM") or os.environ.get("RANK_SIZE") or 1)
addr = (os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"]))

if os.environ.get("MS_ROLE") == "MS_SCHED":  # "go <s>" once every rank did step s; "end" when told
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(addr)
    srv.listen(64)
    conns, done, sent, skip = {}, {}, 0, {}
    while True:
        readable, _, _ = select.select([srv, *conns], [], [])
        for sock in readable:
            if sock is srv:
                conn = srv.accept()[0]
                conns[conn], skip[conn] = b"", (None, 0)
                continue
            data = sock.recv(1 << 20)
            if not data:
                del conns[sock]
                continue
            conns[sock] += data
            while True:  # lines "<rank> <step> <n>", each followed by n bytes of payload: then the step is done
                if skip[sock][1]:
                    gone = min(skip[sock][1], len(conns[sock]))
                    conns[sock], skip[sock] = conns[sock][gone:], (skip[sock][0], skip[sock][1] - gone)
                    if skip[sock][1]:
                        break
                if skip[sock][0] is not None:
                    r, step = skip[sock][0]
                    done[r], skip[sock] = step, (None, 0)
                if b"\n" not in conns[sock]:
                    break
                line, conns[sock] = conns[sock].split(b"\n", 1)
                r, step, n = map(int, line.split())
                skip[sock] = ((r, step), n)
        if len(done) == world and min(done.values()) > sent:
            sent = min(done.values())
            word = b"end\n" if os.path.exists(stop) or sent >= max_steps else b"go\n"
            for conn in list(conns):
                try:
                    conn.sendall(word)
                except OSError:
                    del conns[conn]
            if word == b"end\n":
                sys.exit(0)

import time  # noqa: E402  (workers only)

rank = int(os.environ["RANK_ID"])
peer = None
for _ in range(600):  # the scheduler starts with the ranks: try for a minute
    try:
        peer = socket.create_connection(addr, timeout=5)
        break
    except OSError:
        time.sleep(0.1)
assert peer is not None, "no scheduler"
peer.settimeout(None)
reader = peer.makefile("rb")
step, x = 0, 1.0
while True:
    step += 1
    for i in range(work):  # the step's compute
        x = (x * 1.000001 + i) % 1000.0
    print(f"epoch: 1 step: {step}, loss is {1.0 / step:.4f}", flush=True)
    peer.sendall(b"%d %d %d\n" % (rank, step, payload) + b"g" * payload)
    answer = reader.readline()
    if answer != b"go\n":
        sys.exit(0 if answer == b"end\n" else "the scheduler is gone")
