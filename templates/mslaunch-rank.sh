#!/bin/sh
# mslaunch per-rank wrapper: mpirun starts it once per process of an app context.
#
# mslaunch passes, per context (mpirun -x):
#   MSLAUNCH_ROLE        scheduler | worker
#   MSLAUNCH_CTX_BASE    MPI rank (OMPI_COMM_WORLD_RANK) of the context's first process
#   MSLAUNCH_LOG         scheduler: its log file
#   MSLAUNCH_FIRST_RANK  worker: mslaunch rank of the context's first process
#   MSLAUNCH_DEVICES     worker: device ids of the context's processes, comma-separated
#   MSLAUNCH_LOG_DIR     worker: the job dir (logs are worker_<rank>.log in it)
#   MSLAUNCH_METHOD      dynamic | ranktable | mpi
#   MSLAUNCH_CWD_PREFIX  ranktable: the rank runs in <prefix><rank>/ and dumps env there
# and the wrapper exports RANK_ID, DEVICE_ID, LOCAL_RANK (and MS_NODE_ID for dynamic),
# then execs the program with its output in the rank's log.
set -eu
idx=$((OMPI_COMM_WORLD_RANK - MSLAUNCH_CTX_BASE))
if [ "$MSLAUNCH_ROLE" = scheduler ]; then
    mkdir -p "$(dirname "$MSLAUNCH_LOG")"
    exec "$@" >"$MSLAUNCH_LOG" 2>&1 </dev/null
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
    mkdir -p "$MSLAUNCH_CWD_PREFIX$rank"
    cd "$MSLAUNCH_CWD_PREFIX$rank"
    env >"env$rank.log"
fi
exec "$@" >"$MSLAUNCH_LOG_DIR/worker_$rank.log" 2>&1 </dev/null
