# shellcheck shell=bash
# shellcheck disable=SC2004,SC2034  # RATE, CMD, FAILED, ... are the caller's (associative arrays)
# Shared by the benchmark scripts (sourced): building, starting and stopping a server,
# medians over rounds, the rounds loop over the targets, and the header naming versions and
# host. Uses
# the caller's ROUNDS, TARGETS, PROMTABLE, VM_BIN and SRV.

log() { printf '%s\n' "$*" >&2; }

# Set on sourcing (a caller's environment wins): the checkout ROOT, the benchmarks' Release
# build BUILD_DIR (SKIP_BUILD=1: use the binaries already there), and the CPUs the server and
# the load generator are pinned to.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
SKIP_BUILD=${SKIP_BUILD:-0}
SERVER_CPU=${SERVER_CPU:-0}
LOADGEN_CPU=${LOADGEN_CPU:-1}

# bench_build TARGET...: unless SKIP_BUILD is 1, configures BUILD_DIR (a Release build of
# ROOT) and builds the TARGETs, the output in $WORK/build.log; exits with the end of that log
# when a step fails.
bench_build() {
    [[ ${SKIP_BUILD:-0} == 1 ]] && return 0
    log "+ cmake -S $ROOT -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release &&" \
        "cmake --build $BUILD_DIR -j2 --target $*"
    { cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release &&
        cmake --build "$BUILD_DIR" -j2 --target "$@"; } >"$WORK/build.log" 2>&1 ||
        { tail -n 30 "$WORK/build.log" >&2; exit 1; }
}

# bench_need FILE...: exits when a program the benchmark runs is missing.
bench_need() {
    local f
    for f in "$@"; do
        [[ -x $f ]] || { log "missing $f"; exit 1; }
    done
}

# bench_work NAME: a fresh work directory WORK, removed at exit unless KEEP is 1, and an
# exit trap that first stops a server still running.
bench_work() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    SERVER_PID=
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
bench_cleanup() {
    if [[ -n $SERVER_PID ]]; then stop_server; fi
    if [[ ${KEEP:-0} == 1 ]]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}

# median LIST: the median of whitespace-separated numbers (the lower middle for an even
# count).
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# cpu_s PID: utime + stime in seconds (fields after the last ')' of /proc/PID/stat).
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' \
        "/proc/$1/stat"
}

# wait_idle PID [SECONDS]: until the process has used under 5 % of a core for three seconds
# in a row (a store's background compactions done), at most SECONDS (default 600). A
# server stopped meanwhile drops the compaction it runs, and the next start begins it
# again: benchmarks that restart servers let them settle first, as one left running would.
wait_idle() {
    local pid=$1 secs=${2:-600} quiet=0 t=0 a b
    while ((quiet < 3 && t < secs)); do
        a=$(cpu_s "$pid" 2>/dev/null) || return 0
        sleep 1
        b=$(cpu_s "$pid" 2>/dev/null) || return 0
        if awk -v a="$a" -v b="$b" 'BEGIN { exit !(b - a < 0.05) }'; then
            quiet=$((quiet + 1))
        else
            quiet=0
        fi
        t=$((t + 1))
    done
}

# The running server's peak resident memory (VmHWM), MiB; SERVER_PID is the caller's.
peak_rss_mib() { awk '/^VmHWM:/ {printf "%d", $2 / 1024}' "/proc/$SERVER_PID/status" 2>/dev/null || echo -; }

# run_rounds FIGURE...: ROUNDS rounds, each running bench_<target> for every target in
# TARGETS in turn (so a slow spell of the host hits all of them); sets FAILED=1 when one
# fails. Each FIGURE names an associative array of per-target figures; with several rounds
# it ends holding their medians, and ROUND_VALUES["FIGURE|target"] every round's value.
declare -A ROUND_VALUES
run_rounds() {
    local round t v
    for ((round = 1; round <= ROUNDS; round++)); do
        for t in $TARGETS; do
            log ""
            log "=== $t (round $round of $ROUNDS)"
            if declare -F "bench_$t" >/dev/null; then
                "bench_$t" || FAILED=1
            else
                log "unknown target $t"
                FAILED=1
            fi
            for v in "$@"; do
                local -n fig=$v
                ROUND_VALUES[$v|$t]+=" ${fig[$t]:-}"
                unset -n fig
            done
        done
    done
    ((ROUNDS > 1)) || return 0
    for t in $TARGETS; do
        for v in "$@"; do
            local -n fig=$v
            fig[$t]=$(median "${ROUND_VALUES[$v|$t]}")
            unset -n fig
        done
    done
}

# print_header WORDS...: a blank line, the description (one line), the versions of
# promtable and VictoriaMetrics, the host and the CPUs used, a blank line.
print_header() {
    local vm pt commit cpu
    # The Debian build prints an empty -version; the package version says it.
    vm=$("$VM_BIN" -version 2>/dev/null | head -n 1 || true)
    [[ -n $vm ]] || vm=$(dpkg-query -W -f '${Version}' victoria-metrics 2>/dev/null || echo unknown)
    pt=$("$PROMTABLE" --version 2>/dev/null || echo "promtable (not built)")
    commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
    echo
    echo "$*"
    echo "$pt (commit $commit), VictoriaMetrics $vm"
    echo "host: $(nproc) CPUs ($cpu), $(uname -sr); server on CPU $SERVER_CPU," \
        "load generator on CPU $LOADGEN_CPU"
    echo
}

# print_table FMT FIRST KEYS LABEL=ARRAY...: a table in the printf format FMT: a header of
# FIRST and the LABELs, then a row for each word of KEYS: the word and each ARRAY's value
# for it, "-" where it has none (in the last column, the check, nothing).
print_table() {
    local fmt=$1 first=$2 keys=$3 k c i
    shift 3
    local -a row=("$first")
    for c in "$@"; do row+=("${c%%=*}"); done
    # shellcheck disable=SC2059  # the format is a variable on purpose
    printf "$fmt" "${row[@]}"
    for k in $keys; do
        row=("$k")
        i=0
        for c in "$@"; do
            i=$((i + 1))
            local -n col=${c#*=}
            if ((i < $#)); then row+=("${col[$k]:--}"); else row+=("${col[$k]:-}"); fi
            unset -n col
        done
        # shellcheck disable=SC2059
        printf "$fmt" "${row[@]}"
    done
}

# field NAME LINE: the value of NAME=... in a loadgen result line.
field() { sed -n "s/.*[ :]$1=\([^ ]*\).*/\1/p" <<<"$2"; }

# run_load NAME URL: runs the load generator ($LOADGEN with LOADGEN_ARGS, pinned to
# LOADGEN_CPU, told the server's SERVER_PID) against URL. Sets RESULT to its result line
# and, for target NAME, the caller's RATE, P99, ERRS, UTIL and OTHER, plus each
# ARRAY=field of the caller's LOAD_FIGURES; CMD[NAME] is the command.
run_load() {
    local name=$1 url=$2 rc f
    local args=(--url "$url" "${LOADGEN_ARGS[@]}" --server-pid "$SERVER_PID")
    CMD[$name]="taskset -c $LOADGEN_CPU $LOADGEN ${args[*]}"
    log "+ ${CMD[$name]}"
    # stdout (the result line) to a file, progress to the terminal and a log.
    set +e
    taskset -c "$LOADGEN_CPU" "$LOADGEN" "${args[@]}" 2>&1 >"$WORK/$name.result" |
        tee "$WORK/$name.loadgen.log" >&2
    rc=${PIPESTATUS[0]}
    set -e
    RESULT=$(grep '^result:' "$WORK/$name.result" || true)
    if [[ -z $RESULT ]]; then
        log "$name: the load generator failed (exit $rc)"
        return 1
    fi
    RATE[$name]=$(field samples_per_sec "$RESULT")
    P99[$name]=$(field p99_ms "$RESULT")
    ERRS[$name]=$(field errors "$RESULT")
    UTIL[$name]=$(field server_cpu_util "$RESULT")
    OTHER[$name]=$(field other_cpu_util "$RESULT")
    for f in "${LOAD_FIGURES[@]}"; do
        # shellcheck disable=SC2178  # a nameref to an array
        local -n fig=${f%%=*}
        fig[$name]=$(field "${f#*=}" "$RESULT")
        unset -n fig
    done
    return 0
}

# print_footer FIGURE LABEL: the promtable / VictoriaMetrics ratio of samples/s and of the
# per-target FIGURE (an associative array, called LABEL), a warning for each run that other
# processes disturbed, and the commands that were run.
print_footer() {
    # shellcheck disable=SC2178  # a nameref to an array
    local -n second=$1
    local t
    if [[ -n ${RATE[promtable]:-} && -n ${RATE[victoriametrics]:-} ]]; then
        awk -v a="${RATE[promtable]}" -v b="${RATE[victoriametrics]}" -v l="$2" \
            -v c="${second[promtable]:-0}" -v d="${second[victoriametrics]:-0}" 'BEGIN {
            if (b > 0) printf "\nratio promtable/VictoriaMetrics: %.2f (samples/s)", a / b
            if (c > 0 && d > 0) printf ", %.2f (%s)", c / d, l
            print ""
        }'
    fi
    for t in $TARGETS; do
        if awk -v o="${OTHER[$t]:-0}" 'BEGIN {exit !(o > 0.1)}'; then
            echo "warning: other processes kept ${OTHER[$t]} CPUs busy during the $t run;" \
                "its figures are disturbed"
        fi
    done
    echo
    echo "commands:"
    for t in $TARGETS; do
        if [[ -n ${SRV[$t]:-} ]]; then echo "  $t server: ${SRV[$t]}"; fi
        if [[ -n ${CMD[$t]:-} ]]; then echo "  $t load:   ${CMD[$t]}"; fi
    done
}

# finish_target NAME DIR: stops the server, sets DISK[NAME] to the MiB of its data
# directory DIR, and returns 0 when CHECK[NAME] says ok.
finish_target() {
    stop_server
    DISK[$1]=$(du -sm "$2" | cut -f1)
    [[ ${CHECK[$1]} == ok* ]]
}

# load_check NAME: request errors, or a run that outran the load generator's pool (old
# timestamps sent again: rewrites rather than ingest, which a store handles differently),
# fail target NAME whatever its store holds: sets CHECK[NAME] and returns 1 then.
load_check() {
    if [[ ${ERRS[$1]} != 0 ]]; then
        CHECK[$1]="FAILED: ${ERRS[$1]} request errors"
    elif awk -v p="$(field pool_passes "$RESULT")" 'BEGIN {exit !(p > 1)}'; then
        CHECK[$1]="FAILED: the run outran the pool ($(field pool_passes "$RESULT") passes); raise POOL_MB"
    else
        return 0
    fi
    return 1
}

# vm_check SENT SERIES: once the load ran against VictoriaMetrics (vm_load), makes what it
# took searchable and sets CHECK[victoriametrics]: ok when it holds SERIES series, none of
# their rows ignored, and a query sees the SENT samples; then load_check's verdict.
vm_check() {
    local sent=$1 want=$2 series samples ignored
    curl -s -o /dev/null "$VM_BASE/internal/force_flush"
    curl -s "$VM_BASE/api/v1/series/count" >"$WORK/vm.count"
    curl -s "$VM_BASE/api/v1/query" --data-urlencode "time=$(date +%s)" \
        --data-urlencode 'query=sum(count_over_time({__name__=~".+"}[3d]))' >"$WORK/vm.query"
    series=$(sed -n 's/.*"data":\[\([0-9]*\)\].*/\1/p' "$WORK/vm.count")
    samples=$(sed -n 's/.*"value":\[[0-9.]*,"\([0-9]*\)"\].*/\1/p' "$WORK/vm.query")
    ignored=$(curl -s "$VM_BASE/metrics" |
        awk '/^vm_rows_ignored_total[ {]/ {s += $NF} END {printf "%.0f", s}')
    if [[ -z $series || -z $samples ]]; then
        CHECK[victoriametrics]="FAILED: could not count stored data"
        log "  VictoriaMetrics' answers: $(head -c 300 "$WORK/vm.count"); $(head -c 300 "$WORK/vm.query")"
    elif [[ $series -ne $want || $ignored -ne 0 ]]; then
        CHECK[victoriametrics]="FAILED: $series series stored (want $want), $ignored rows ignored"
    elif [[ $samples -ne $sent ]]; then
        CHECK[victoriametrics]="FAILED: $samples samples queryable, sent $sent"
    else
        CHECK[victoriametrics]="ok: $series series, $samples samples queryable, sent $sent"
    fi
    load_check victoriametrics || true
}

# vm_load PORT MAX_SERIES: starts VictoriaMetrics ($VM_BIN with VM_ARGS) on PORT and a fresh
# $WORK/vm-data, its query limits raised (MAX_SERIES, 10 minutes a query) only so that a
# check can count every series (ingest flags stay at their defaults), and runs the load
# against it. Sets VM_BASE (its URL) and VM_DIR; returns 1 with CHECK[victoriametrics] set
# when either fails.
vm_load() {
    VM_BASE=http://127.0.0.1:$1
    VM_DIR=$WORK/vm-data
    if [[ ! -x $VM_BIN ]]; then
        CHECK[victoriametrics]="not installed ($VM_BIN)"
        return 1
    fi
    rm -rf "$VM_DIR"
    # shellcheck disable=SC2086  # VM_ARGS is a list of flags
    start_server victoriametrics "$VM_BASE/health" "$VM_BIN" -httpListenAddr="127.0.0.1:$1" \
        -storageDataPath="$VM_DIR" -search.maxUniqueTimeseries="$2" \
        -search.maxQueryDuration=10m $VM_ARGS ||
        { CHECK[victoriametrics]="did not start"; return 1; }
    run_load victoriametrics "$VM_BASE/api/v1/write" ||
        { stop_server; CHECK[victoriametrics]="no result"; return 1; }
}

# A free loopback port: bash's /dev/tcp fails to connect when nothing listens.
free_port() {
    # Below the kernel's ephemeral range, so no client connection (the load generator's
    # hundreds) can hold the port between this check and the server's bind.
    local p lo=20000 hi=32000 eph
    if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
        read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
        [ "$eph" -gt 11000 ] && hi=$((eph - 1)) && lo=$((hi - 12000))
    fi
    for _ in $(seq 100); do
        p=$((lo + RANDOM % (hi - lo)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    log "no free port found"
    return 1
}

# start_server NAME URL-TO-POLL CMD... ; sets SERVER_PID, returns 1 if it never got ready.
start_server() {
    local name=$1 ready=$2
    shift 2
    SRV[$name]="taskset -c $SERVER_CPU $*"
    log "+ ${SRV[$name]}"
    taskset -c "$SERVER_CPU" "$@" >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 300); do
        if [[ $(curl -s -o /dev/null -w '%{http_code}' "$ready" 2>/dev/null) == 200 ]]; then
            return 0
        fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            log "$name exited before it was ready; its log:"
            tail -n 20 "$WORK/$name.log" >&2 || true
            wait "$SERVER_PID" 2>/dev/null || true
            SERVER_PID=
            return 1
        fi
        sleep 0.1
    done
    log "$name not ready after 30 s ($ready)"
    return 1
}

# Graceful stop (SIGTERM: both servers flush), then SIGKILL after 60 s.
stop_server() {
    local pid=$SERVER_PID
    SERVER_PID=
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 600); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# read_server KIND DIR [FLAGS...]: starts promtable (KIND promtable: its embedded store in
# DIR, read limits off) or Prometheus (KIND prometheus: its TSDB in DIR) with FLAGS, on CPU
# $SERVER_CPU and a free port, for remote-read benchmarks; sets SRV_PORT and SRV_PID, exits
# when it does not get ready. Needs tests/e2e/lib.sh, WORK, and PROMTABLE or PROMETHEUS.
read_server() {
    local kind=$1 dir=$2
    shift 2
    pt_free_port SRV_PORT
    if [[ $kind == promtable ]]; then
        pt_spawn "$WORK/promtable.log" taskset -c "$SERVER_CPU" "$PROMTABLE" \
            --web.listen-address="127.0.0.1:$SRV_PORT" --storage.embedded.path="$dir" \
            --read.max-samples=0 --read.max-series=0 "$@"
    else
        printf 'global: {scrape_interval: 1h}\n' >"$WORK/prometheus.yml"
        pt_spawn "$WORK/prometheus.log" taskset -c "$SERVER_CPU" "$PROMETHEUS" \
            --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$dir" \
            --web.listen-address="127.0.0.1:$SRV_PORT" "$@"
    fi
    SRV_PID=$PT_PID
    pt_wait_http "http://127.0.0.1:$SRV_PORT/-/ready" 300 "$SRV_PID" ||
        { log "$kind did not start"; tail -n 20 "$WORK/$kind.log" >&2; exit 1; }
}
