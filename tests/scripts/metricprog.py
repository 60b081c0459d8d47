"""A stand-in training rank printing real-format metric lines (no MindSpore).

    metricprog.py STEPS STEP_SECONDS [--format lossmonitor|mindformers|mslaunch]
                  [--straggler RANK] [--silent RANK] [--silent-for SECONDS] [--nan-at STEP] [--fail-once RANK]
                  [--fail-at STEP] [--ckpt-dir DIR --ckpt-every N]

Every worker prints ``MSLAUNCH_METRIC {"batch_size": 32, "total_steps": STEPS}`` first, then one
line per step in the chosen format with loss ``2.0 / step``; the straggler rank sleeps 0.5 s
more per step; the silent rank prints nothing after step 2 for ``--silent-for`` seconds (then
goes on); ``--nan-at`` makes rank 0 print a NaN loss at that step and exit 1; ``--fail-once R``
makes rank R exit 3 at step ``--fail-at`` (3) the first time (a marker file in $PIDDIR remembers it).
With ``--ckpt-dir``, every rank saves its step there (``rank<r>``) every ``--ckpt-every`` steps, and
a restart resumes after the newest step every rank saved (``resume: global step <s>``), as a
trainer resumes from its checkpoint.  At the end:
``Train epoch time: ... ms, per step time: ... ms`` (TimeMonitor's format).  The scheduler role
listens on MS_SCHED_PORT like MindSpore's and exits once every worker connected to say it is done.  Pids go to
``$PIDDIR/<name>.pids``.
"""

import argparse
import json
import os
import sys
import time

from sched_done import serve_until_done, tell_done

p = argparse.ArgumentParser()
p.add_argument("steps", type=int)
p.add_argument("step_s", type=float)
p.add_argument("--format", default="lossmonitor")
p.add_argument("--straggler", type=int, default=-1)
p.add_argument("--silent", type=int, default=-1)
p.add_argument("--silent-for", type=float, default=600.0)
p.add_argument("--nan-at", type=int, default=0)
p.add_argument(
    "--fail-once",
    type=int,
    default=-1,
    help="this rank exits 3 at step 3 unless $PIDDIR/failed-once exists (creates it)",
)
p.add_argument("--fail-at", type=int, default=3, help="the step --fail-once fails at")
p.add_argument("--ckpt-dir", default=None, help="save the step here; a restart resumes from the newest common one")
p.add_argument("--ckpt-every", type=int, default=2)
args = p.parse_args()

role = os.environ.get("MS_ROLE", "")
rank = int(os.environ.get("RANK_ID", "0")) if role != "MS_SCHED" else -1
name = "scheduler" if role == "MS_SCHED" else f"rank{rank}"
piddir = os.environ.get("PIDDIR")
if piddir:
    with open(os.path.join(piddir, f"{name}.pids"), "w") as fh:
        fh.write(f"{os.getpid()}\n")

if role == "MS_SCHED":
    serve_until_done()
    sys.exit(0)

print("MSLAUNCH_METRIC " + json.dumps({"batch_size": 32, "total_steps": args.steps}), flush=True)


def saved(r: int) -> int:
    try:
        with open(os.path.join(args.ckpt_dir, f"rank{r}")) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


start = 0
if args.ckpt_dir:
    os.makedirs(args.ckpt_dir, exist_ok=True)
    start = min(saved(r) for r in range(int(os.environ.get("MS_WORKER_NUM") or 1)))
    if start:
        print(f"resume: global step {start}", flush=True)
t_start = time.time()
for step in range(start + 1, args.steps + 1):
    time.sleep(args.step_s + (0.5 if rank == args.straggler else 0.0))
    if rank == args.silent and step == 3:
        time.sleep(args.silent_for)
    loss = 2.0 / step
    if (
        rank == args.fail_once
        and step == args.fail_at
        and not os.path.exists(os.path.join(piddir or ".", "failed-once"))
    ):
        open(os.path.join(piddir or ".", "failed-once"), "w").close()
        print("RuntimeError: rank fails once", file=sys.stderr, flush=True)
        sys.exit(3)
    if rank == 0 and step == args.nan_at:
        print(f"epoch: 1 step: {step}, loss is nan", flush=True)
        print(
            f"ValueError: In epoch: 1 step: {step}, loss is NAN or INF, training process cannot continue, terminating "
            "training.",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)
    if args.format == "mindformers":
        print(
            "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - "
            f"{{ Epoch:[  1/  1], step:[{step:5d}/{args.steps:5d}], "
            f"loss: {loss:5.3f}, per_step_time: {int((args.step_s) * 1000)}ms, lr: 0.0, overflow cond: False, "
            "loss_scale: 1.0, global_norm: [1.2]",
            flush=True,
        )
    elif args.format == "mslaunch":
        print("MSLAUNCH_METRIC " + json.dumps({"step": step, "loss": loss}), flush=True)
    else:
        print(f"epoch: 1 step: {step}, loss is {loss:.7g}", flush=True)
    if args.ckpt_dir and step % args.ckpt_every == 0:
        tmp = os.path.join(args.ckpt_dir, f".rank{rank}.{os.getpid()}")
        with open(tmp, "w") as fh:
            fh.write(str(step))
        os.replace(tmp, os.path.join(args.ckpt_dir, f"rank{rank}"))
elapsed = (time.time() - t_start) * 1000
print(f"Train epoch time: {elapsed:5.3f} ms, per step time: {elapsed / max(1, args.steps - start):5.3f} ms", flush=True)
if os.environ.get("MS_SCHED_PORT"):
    tell_done()
