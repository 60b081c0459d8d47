"""Allocates and touches memory, STEP_MB at a time, up to MB (then exits 0).

    oom.py MB [STEP_MB]

Under a cgroup memory limit below MB the kernel's OOM killer ends it with SIGKILL.  Each step
prints ``allocated N MB``.
"""
import sys

limit = int(sys.argv[1])
step = int(sys.argv[2]) if len(sys.argv) > 2 else 16
chunks = []
total = 0
while total < limit:
    chunks.append(b"\x01" * (step << 20))  # filled: every page is touched
    total += step
    print(f"allocated {total} MB", flush=True)
print("done", flush=True)
