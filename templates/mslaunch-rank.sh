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
#                        (launcher.planning.job.layout.worker_log_template; e.g. worker_{rank}.log)
#   MSLAUNCH_METHOD      dynamic | ranktable | mpi
#   MSLAUNCH_CWD_PREFIX  ranktable: the rank runs in <prefix><rank>/ and dumps env there
#   MSLAUNCH_THREADS     remote hosts: the thread variables to set (e.g. OMP_NUM_THREADS,MSLAUNCH_CPU_THREADS)
#   MSLAUNCH_HOST        with MSLAUNCH_THREADS: the host's name in the plan
#   MSLAUNCH_VARS        the names of the processes' own variables (comma-separated); no value is
#                        on mpirun's command line: each travels in mpirun's environment under a
#                        carrier, MSLAUNCH_V<ctx base>_<NAME> (this context's own value) or
#                        MSLAUNCH_V_<NAME> (shared), forwarded by a bare -x (see import_vars)
#   MSLAUNCH_SECRETS     names of secret variables: shown as NAME=<secret> in env<rank>.log
#   MSLAUNCH_SAMPLER     worker: the host's Python, which samples the rank for the straggler watch
#                        (see start_sampler)
#   MSLAUNCH_COLONS      indices of the program's arguments that are ":" (mpirun's context
#                        separator: written as mslaunch-colon on its command line)
# and the wrapper exports RANK_ID, DEVICE_ID, LOCAL_RANK (and MS_NODE_ID for dynamic), the
# thread variables (see set_threads), then runs the program with its output in the rank's log.
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
    (umask 077 && : >"$log")   # 0600 whatever mpirun's umask: a rank may print its environment
    [ -z "$notes" ] || printf '%s\n' "$notes" >>"$log"
    "$@" >>"$log" 2>&1 </dev/null &
    child=$!
    tell_pid "$child"
    start_sampler "$child"
    wait "$child"
    rc=$?
    reap_group
    if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
        sig=$((rc - 128))
        trap - "$sig" 2>/dev/null || true
        kill -s "$sig" $$ 2>/dev/null || true   # (killed by signal N) as orted would have seen it
    fi
    exit "$rc"
}

tell_pid() {
    # The program's pid on this host, for mslaunch status: <log's folder>/rank-pids/<pid_name>, written
    # whole (a temporary name, then mv); see launcher/execution/process/rankpids.py.  Best effort.
    d="$(dirname "$log")/rank-pids"
    (umask 077 && mkdir -p "$d" && printf '%s\n' "$1" >"$d/.$pid_name.$$" && mv -f "$d/.$pid_name.$$" "$d/$pid_name") \
        2>/dev/null || true
}

start_sampler() {
    # A worker's scheduler figures (CPU and run-delay seconds, TCP send queues) for mslaunch's
    # straggler watch: <log's folder>/rank-figures/<pid_name>, rewritten every 2 s by
    # `$MSLAUNCH_SAMPLER -m launcher.execution.process.rankfigures PID FILE` (that host's Python),
    # which ends once the program is gone (and with this group: reap_group).  Best effort.
    [ -n "${MSLAUNCH_SAMPLER:-}" ] && [ "$pid_name" != scheduler ] || return 0
    d="$(dirname "$log")/rank-figures"
    (umask 077 && mkdir -p "$d") 2>/dev/null || return 0
    # Only PATH and PYTHONPATH: not the rank's variables (its secrets among them).
    if [ -n "${PYTHONPATH:-}" ]; then
        env -i PATH="${PATH:-/usr/bin:/bin}" PYTHONPATH="$PYTHONPATH" \
            "$MSLAUNCH_SAMPLER" -m launcher.execution.process.rankfigures "$1" "$d/$pid_name" </dev/null >/dev/null 2>&1 &
    else
        env -i PATH="${PATH:-/usr/bin:/bin}" \
            "$MSLAUNCH_SAMPLER" -m launcher.execution.process.rankfigures "$1" "$d/$pid_name" </dev/null >/dev/null 2>&1 &
    fi
    return 0
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

count_cpus() {
    # The number of CPUs in a cpu list such as 0-3,6 (Cpus_allowed_list of /proc/<pid>/status).
    awk -F, '{ n = 0; for (i = 1; i <= NF; i++) { if (split($i, r, "-") == 2) n += r[2] - r[1] + 1; else if ($i != "") n++ } print n }'
}

cpus_of() {
    # Cpus_allowed_list of process $1 (empty when it is gone).
    awk '$1 == "Cpus_allowed_list:" { print $2 }' "/proc/$1/status" 2>/dev/null || true
}

cgroup_quota() {
    # "<cores> <source>" of the tightest CPU quota of this process's cgroup and its ancestors
    # (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), nothing without one: the
    # reading of launcher/execution/probes/host_cores.py's cgroup_quota, in awk.  $1, $2: the
    # mountinfo and cgroup files (default this process's).
    awk -v cgfile="${2:-/proc/self/cgroup}" '
    function rd(path,   line, ok) { line = ""; ok = (getline line < path); close(path); return ok > 0 ? line : "" }
    BEGIN {
        while ((getline l < cgfile) > 0) {
            i1 = index(l, ":"); rest = substr(l, i1 + 1); i2 = index(rest, ":")
            ctl = substr(rest, 1, i2 - 1); path = substr(rest, i2 + 1)
            if (ctl == "") v2path = path
            nc = split(ctl, cs, ",")
            for (j = 1; j <= nc; j++) if (cs[j] == "cpu") v1path = path
        }
        close(cgfile); best = -1
    }
    {
        sep = index($0, " - "); if (!sep) next
        nl = split(substr($0, 1, sep - 1), left, " "); nt = split(substr($0, sep + 3), tail, " ")
        if (nl < 5 || nt < 3) next
        if (tail[1] == "cgroup2") { ver = 2; path = v2path; have = (v2path != "") }
        else if (tail[1] == "cgroup") {
            ver = 1; path = v1path; have = 0; nc = split(tail[3], cs, ",")
            for (j = 1; j <= nc; j++) if (cs[j] == "cpu") have = (v1path != "")
        } else next
        if (!have) next
        root = left[4]; mnt = left[5]; rel = path; r = root; sub(/\/+$/, "", r)
        if (root != "/" && root != "" && (path == root || substr(path, 1, length(r) + 1) == r "/")) rel = substr(path, length(r) + 1)
        gsub(/^\/+|\/+$/, "", rel)
        np = (rel == "") ? 0 : split(rel, parts, "/")
        for (i = np; i >= 0; i--) {
            sub_ = ""; for (j = 1; j <= i; j++) sub_ = sub_ "/" parts[j]
            dir = mnt sub_; q = -1
            if (ver == 1) {
                qs = rd(dir "/cpu.cfs_quota_us"); ps = rd(dir "/cpu.cfs_period_us")
                if (qs ~ /^[0-9]+$/ && ps ~ /^[0-9]+$/ && qs + 0 > 0 && ps + 0 > 0) q = qs / ps
                name = "cgroup v1 cpu.cfs_quota_us"
            } else {
                split(rd(dir "/cpu.max"), m, " "); if (m[2] == "") m[2] = 100000
                if (m[1] ~ /^[0-9]+$/ && m[2] ~ /^[0-9]+$/ && m[1] + 0 > 0 && m[2] + 0 > 0) q = m[1] / m[2]
                name = "cgroup v2 cpu.max"
            }
            if (q > 0 && (best < 0 || q < best)) { best = q; src = name " " (sub_ == "" ? "/" : sub_) }
        }
    }
    END { if (best > 0) printf "%g %s\n", int(best * 1000 + 0.5) / 1000, src }
    ' "${1:-/proc/self/mountinfo}"
}

set_threads() {
    # Remote hosts (MSLAUNCH_THREADS): the thread variables of this rank from its host's usable
    # cores, by launcher/planning/cpu/hostcores.py's rule: usable = the cpuset (this host's, as its
    # mpirun daemon, the wrapper's parent, has it) capped by the cgroup quota rounded down, at
    # least 1; k ranks here get usable / k each, the first usable % k one more, at least 1; a
    # rank mpirun bound to fewer CPUs (a binding the user asked for) gets at most those.  A
    # variable already set here (the host's own environment) wins.  Local rank 0 notes what it
    # decided (and warns when the ranks outnumber the cores) at the top of its log, and records it
    # in <log dir>/host-threads/<host>.json.
    [ -n "${MSLAUNCH_THREADS:-}" ] || return 0
    k=$(printf '%s\n' "$MSLAUNCH_DEVICES" | awk -F, '{ print NF }')
    own_list=$(cpus_of $$)
    host_list=$(cpus_of "$PPID")
    [ -n "$host_list" ] || host_list=$own_list
    [ -n "$own_list" ] || return 0
    own=$(printf '%s\n' "$own_list" | count_cpus)
    usable=$(printf '%s\n' "$host_list" | count_cpus)
    cpus_n=$usable
    quota=$(cgroup_quota)
    q=; src=
    if [ -n "$quota" ]; then
        q=${quota%% *}
        src=${quota#* }
        qi=${q%%.*}
        [ "$qi" -ge 1 ] 2>/dev/null || qi=1
        [ "$qi" -lt "$usable" ] && usable=$qi
    fi
    if [ "$usable" -le "$k" ]; then
        n=1; sizes=1
    else
        n=$((usable / k + (idx < usable % k ? 1 : 0)))
        sizes=$((usable / k))
        [ $((usable % k)) = 0 ] || sizes="$sizes/$((usable / k + 1))"
    fi
    if [ "$own" -lt "$cpus_n" ] && [ "$own" -lt "$n" ]; then n=$own; fi
    set_list=
    # MSLAUNCH_THREADS can come from the user (--env): only names of shell variables are ever
    # given to eval; anything else is skipped with one line on stderr (set -f: no globbing of it).
    set -f
    for v in $(printf '%s\n' "$MSLAUNCH_THREADS" | tr ',' ' '); do
        case $v in
            [!A-Za-z_]* | *[!A-Za-z0-9_]*)
                printf 'mslaunch: warning: %s: MSLAUNCH_THREADS: skipped %s (not a variable name)\n' \
                    "${MSLAUNCH_HOST:-?}" "$v" >&2
                continue
                ;;
        esac
        if eval "[ -z \"\${$v+x}\" ]"; then
            eval "$v=$n; export $v"
            set_list="${set_list:+$set_list, }$v"
        fi
    done
    set +f
    [ "$idx" = 0 ] || return 0
    if [ -n "$q" ]; then how="$src: $q core(s)"; else how="no cgroup CPU quota"; fi
    bound=
    [ "$own" -lt "$cpus_n" ] && bound=" (rank 0 bound by mpirun to CPUs $own_list)"
    notes="mslaunch: cpu: ${MSLAUNCH_HOST}: threads per rank $sizes (${set_list:-yours: nothing set}): $k rank(s) on $usable usable core(s) (cpuset $host_list, $how; read by the rank wrapper on ${MSLAUNCH_HOST})$bound"
    warning=
    if [ "$k" -gt "$usable" ]; then
        warning="${MSLAUNCH_HOST}: $k ranks on $usable usable core(s): several ranks share each core (oversubscribed; expect each rank to run slower)"
    elif [ -n "${OMP_NUM_THREADS:-}" ] && ! printf '%s' "$set_list" | grep -q OMP_NUM_THREADS \
            && [ "$OMP_NUM_THREADS" -eq "$OMP_NUM_THREADS" ] 2>/dev/null && [ $((k * OMP_NUM_THREADS)) -gt "$usable" ]; then
        warning="${MSLAUNCH_HOST}: $k ranks x OMP_NUM_THREADS=$OMP_NUM_THREADS (yours) exceed its $usable usable core(s) (oversubscribed)"
    fi
    [ -z "$warning" ] || notes="$notes
mslaunch: warning: $warning"
    mkdir -p "$MSLAUNCH_LOG_DIR/host-threads"
    esc() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
    note=${notes%%
*}
    note=${note#mslaunch: cpu: }
    # written whole, then renamed: mslaunch reads the folder while the job runs
    printf '{"host": "%s", "cpus": "%s", "quota": %s, "quota_source": %s, "usable": %s, "ranks": %s, "threads": "%s", "set": "%s", "bound_rank0": "%s", "warning": %s, "learned": "the rank wrapper on %s", "notes": ["%s"], "warnings": [%s]}\n' \
        "$(esc "$MSLAUNCH_HOST")" "$host_list" "${q:-null}" "$( [ -n "$src" ] && printf '"%s"' "$(esc "$src")" || printf null)" \
        "$usable" "$k" "$sizes" "$set_list" "$own_list" "$( [ -n "$warning" ] && printf '"%s"' "$(esc "$warning")" || printf null)" \
        "$(esc "$MSLAUNCH_HOST")" "$(esc "$note")" "$( [ -n "$warning" ] && printf '"%s"' "$(esc "$warning")")" \
        >"$MSLAUNCH_LOG_DIR/host-threads/.$MSLAUNCH_HOST.json.$$" \
        && mv -f "$MSLAUNCH_LOG_DIR/host-threads/.$MSLAUNCH_HOST.json.$$" "$MSLAUNCH_LOG_DIR/host-threads/$MSLAUNCH_HOST.json"
}

import_vars() {
    # Each name of MSLAUNCH_VARS from its carrier (this context's own, else the shared one), then
    # every carrier unset (mpirun hands its whole environment to the processes it starts on its
    # own host: other contexts' carriers too).  Only names of shell variables reach eval; the
    # values are never part of its text.
    case ${MSLAUNCH_CTX_BASE:-} in '' | *[!0-9]*) return 0 ;; esac
    set -f
    for v in $(printf '%s\n' "${MSLAUNCH_VARS:-}" | tr ',' ' '); do
        case $v in [!A-Za-z_]* | *[!A-Za-z0-9_]*) continue ;; esac
        if eval "[ -n \"\${MSLAUNCH_V${MSLAUNCH_CTX_BASE}_$v+x}\" ]"; then
            eval "$v=\$MSLAUNCH_V${MSLAUNCH_CTX_BASE}_$v"
        elif eval "[ -n \"\${MSLAUNCH_V_$v+x}\" ]"; then
            eval "$v=\$MSLAUNCH_V_$v"
        else
            continue
        fi
        export "$v"
    done
    for c in $(awk 'BEGIN { for (k in ENVIRON) if (k ~ /^MSLAUNCH_V[0-9]*_[A-Za-z0-9_]+$/) print k }'); do
        unset "$c"
    done
    set +f
}

dump_env() {
    # The full environment into $1 (0600), each secret's value shown as <secret>.
    (
        umask 077
        rm -f "$1"
        set -f
        secrets=$(printf '%s\n' "${MSLAUNCH_SECRETS:-}" | tr ',' ' ')
        for s in $secrets; do
            case $s in [!A-Za-z_]* | *[!A-Za-z0-9_]*) continue ;; esac
            unset "$s"
        done
        unset MSLAUNCH_SECRETS
        env >"$1"
        for s in $secrets; do
            case $s in [!A-Za-z_]* | *[!A-Za-z0-9_]*) continue ;; esac
            printf '%s=<secret>\n' "$s" >>"$1"
        done
    )
}

import_vars
if [ -n "${MSLAUNCH_COLONS:-}" ]; then
    # The program's arguments with those at MSLAUNCH_COLONS' indices turned back into ":".
    n=$#
    i=0
    while [ "$i" -lt "$n" ]; do
        a=$1
        shift
        case ",$MSLAUNCH_COLONS," in *",$i,"*) a=: ;; esac
        set -- "$@" "$a"
        i=$((i + 1))
    done
fi
notes=
idx=$((OMPI_COMM_WORLD_RANK - MSLAUNCH_CTX_BASE))
if [ "$MSLAUNCH_ROLE" = scheduler ]; then
    pid_name=scheduler
    (umask 077 && mkdir -p "$(dirname "$MSLAUNCH_LOG")")
    run_and_reap "$MSLAUNCH_LOG" "$@"
fi
set_threads
rank=$((MSLAUNCH_FIRST_RANK + idx))
pid_name=rank$rank
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
    dump_env "env$rank.log"
fi
# The log name: MSLAUNCH_LOG_NAME with its last {rank} replaced by the rank.
log_name="${MSLAUNCH_LOG_NAME%"{rank}"*}$rank${MSLAUNCH_LOG_NAME##*"{rank}"}"
run_and_reap "$MSLAUNCH_LOG_DIR/$log_name" "$@"
