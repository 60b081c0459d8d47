#!/bin/sh
# mslaunch per-rank wrapper: mpirun starts it once per process of an app context.
#
# mslaunch passes, per context (mpirun -x):
#   MSLAUNCH_ROLE        scheduler | worker
#   MSLAUNCH_CTX_BASE    MPI rank (OMPI_COMM_WORLD_RANK) of the context's first process
#   MSLAUNCH_LOG         scheduler: its log file
#   MSLAUNCH_FIRST_RANK  worker: mslaunch rank of the context's first process
#   MSLAUNCH_DEVICES     worker: device ids of the context's processes, comma-separated
#   MSLAUNCH_LOG_DIR     worker: the folder of the ranks' logs (the job dir, or an attempt dir)
#   MSLAUNCH_LOG_NAME    worker: the log file name, with {rank} standing for the rank
#                        (launcher.planning.layout.worker_log_template; e.g. worker_{rank}.log)
#   MSLAUNCH_METHOD      dynamic | ranktable | mpi
#   MSLAUNCH_CWD_PREFIX  ranktable: the rank runs in <prefix><rank>/ and dumps env there
# and the wrapper exports RANK_ID, DEVICE_ID, LOCAL_RANK (and MS_NODE_ID for dynamic),
# then runs the program with its output in the rank's log.
#
# orted makes each process it starts (this wrapper) a process group leader and signals whole
# groups at teardown; but when a rank exits by itself, whatever it left running in its group
# would outlive the job on that host.  So the wrapper stays the program's parent, and once the
# program has exited it SIGKILLs the rest of its group, then exits with the program's status
# (re-raising the signal if the program was killed by one).
set -eu

run_and_reap() {
    log=$1
    shift
    set +e
    "$@" >"$log" 2>&1 </dev/null &
    wait $!
    rc=$?
    reap_group
    if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
        sig=$((rc - 128))
        trap - "$sig" 2>/dev/null || true
        kill -s "$sig" $$ 2>/dev/null || true   # (killed by signal N) as orted would have seen it
    fi
    exit "$rc"
}

reap_group() {
    # SIGKILL every other member of this wrapper's process group (only if it leads one).
    { read -r self </proc/$$/stat; } 2>/dev/null || return 0
    self=${self##*) }
    set -- $self
    [ "$3" = "$$" ] || return 0
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        [ "$p" = "$$" ] && continue
        { read -r st <"$d/stat"; } 2>/dev/null || continue
        st=${st##*) }
        set -- $st
        if [ "$3" = "$$" ]; then kill -KILL "$p" 2>/dev/null || true; fi
    done
    return 0
}

idx=$((OMPI_COMM_WORLD_RANK - MSLAUNCH_CTX_BASE))
if [ "$MSLAUNCH_ROLE" = scheduler ]; then
    mkdir -p "$(dirname "$MSLAUNCH_LOG")"
    run_and_reap "$MSLAUNCH_LOG" "$@"
fi
rank=$((MSLAUNCH_FIRST_RANK + idx))
device=$(printf '%s\n' "$MSLAUNCH_DEVICES" | cut -d, -f$((idx + 1)))
RANK_ID=$rank
DEVICE_ID=$device
LOCAL_RANK=$idx
export RANK_ID DEVICE_ID LOCAL_RANK
if [ "$MSLAUNCH_METHOD" = dynamic ]; then
    MS_NODE_ID=$rank
    export MS_NODE_ID
fi
mkdir -p "$MSLAUNCH_LOG_DIR"
if [ -n "${MSLAUNCH_CWD_PREFIX:-}" ]; then
    # As the local backend: device<rank>/ 0700, env<rank>.log (the full environment) 0600.
    mkdir -p "$MSLAUNCH_CWD_PREFIX$rank"
    chmod 700 "$MSLAUNCH_CWD_PREFIX$rank"
    cd "$MSLAUNCH_CWD_PREFIX$rank"
    (umask 077 && rm -f "env$rank.log" && env >"env$rank.log")
fi
# The log name: MSLAUNCH_LOG_NAME with its last {rank} replaced by the rank.
log_name="${MSLAUNCH_LOG_NAME%"{rank}"*}$rank${MSLAUNCH_LOG_NAME##*"{rank}"}"
run_and_reap "$MSLAUNCH_LOG_DIR/$log_name" "$@"
