#!/usr/bin/env bash
# Shared helpers for promtable's shell tests (bash). Source it, do not run it:
#
#   . "$(dirname "$0")/lib.sh"
#
# It lives next to the tests, so `prove --exec '' tests/e2e/*.sh` runs it too: run as a
# program it only reports itself skipped.
# TAP output          tap_plan N | tap_ok DESC | tap_not_ok DESC | tap_check DESC CMD...
#                     tap_is GOT WANT DESC | tap_skip DESC REASON | tap_diag MSG...
#                     tap_diag_file FILE [MAXLINES] | tap_skip_all REASON | tap_bail REASON
#                     tap_done  (prints the plan if none was given; returns 1 if a test failed)
# processes           pt_spawn LOG CMD...   (sets PT_PID; killed on exit)
#                     pt_stop PID [SECONDS] (TERM, then KILL; returns the exit status)
#                     pt_alive PID
#                     pt_sleep SECONDS      (a sleep that INT/TERM interrupt at once)
# ports, readiness    pt_free_port VAR      (stores a free loopback TCP port in VAR)
#                     pt_wait_http URL SECONDS [PID] [CURL ARGS...]
#                     pt_serve PIDVAR URLVAR LOG FLAG... ($PROMTABLE on a free port; 1
#                                            when it does not become ready)
#                     pt_start_promtable LOG PORT FLAG... ($PROMTABLE on PORT, ready; sets
#                                            PT_PID; bails out when it does not start)
# metrics             pt_metric_sum FILE NAME [SUBSTRING...] (sum of a metric in text format)
#                     pt_wait_remote_sent PORT T SECONDS (a Prometheus on PORT has remote-
#                                            written every sample up to time T; sets
#                                            PT_SENT_TS)
# temp dirs, cleanup  pt_mktemp VAR [NAME]  (new dir under ${TMPDIR:-/tmp} into VAR; removed
#                                            on exit unless PT_KEEP_TMP=1)
#                     pt_on_exit CMD        (runs CMD, via eval, at exit before the kills)
#                     pt_require CMD...     (skips the whole file when a command is missing)
#                     pt_built PROGRAM...   (bails out when a program the build makes is missing)
#                     pt_programs VAR=PATH... (each VAR = $PT_BUILD/PATH; bails if not built)
#                     pt_tools [VAR=PATH...] (PROMTABLE, LOADGEN, READBENCH and the VARs, as
#                                            pt_programs)
# set on sourcing     PT_ROOT (the checkout), PT_BUILD (PT_BUILD_DIR, else $PT_ROOT/build)
# Prometheus          pt_start_prometheus DIR NAME PORT (DIR/NAME.yml, data in DIR/NAME-data,
#                                           log DIR/NAME.log; sets PT_PID; 1 if not ready
#                                           within 30 s)
#                     pt_start_exporter LOG MODE PORT (tests/tools/exporter, ready)
#                     pt_start_writer DIR PROMPORT JOB EXPORT_PORT PTPORT SEND FEATURE
#                     pt_wait_writer SECONDS WHAT CMD... (polls CMD; bails out when the
#                                            writer dies or time runs out)
# Bigtable emulator   pt_cbtemulator_found  (0 when $PT_CBTEMULATOR, default the gcloud SDK's
#                                            cbtemulator, is executable)
#                     pt_start_cbtemulator VAR LOG [PORT]
#                                           (starts it on PORT, or on a free port stored in
#                                            VAR; sets PT_EMU_PID; killed on exit; pinned
#                                            to the CPUs in $PT_EMU_CPUS when set)
#                     pt_kill_cbtemulator   (SIGKILL: the emulator keeps data in memory only)
#                     pt_bigtable_store DIR NAME PREFIX (the emulator started, BT set to
#                                            promtable's flags for it, the tables made)
# raw samples         pt_samples_normalize LO_MS HI_MS (stdin: labels, ts, value lines)
#                     pt_writer_samples PORT T0 T OUT (a Prometheus' raw samples in (T0, T])
#                     pt_compare_read WHO URL T0 T WANT DIR (a promtable's remote read of
#                                            everything in (T0, T] equals WANT; needs PTDUMP)
#                     pt_self_writer_config JOBS PORT URL [LINE...] (a self-scraping writer)
#                     pt_writer_drained WHO PORT T SECONDS METRICS (sent past T, no sample
#                                            failed or dropped: three TAP lines)
#
# The library installs its own EXIT/INT/TERM traps; a test that needs extra cleanup uses
# pt_on_exit instead of setting another trap (which would replace the library's).
# Nothing here uses `set -e`: a failing check must print `not ok`, not abort the file.

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "1..0 # SKIP library for the shell tests, not a test"
    exit 0
fi

PT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PT_BUILD=${PT_BUILD_DIR:-$PT_ROOT/build}

# ---------------------------------------------------------------------------------- TAP

TAP_N=0
TAP_FAILED=0
TAP_PLANNED=

tap_plan() {
    TAP_PLANNED=$1
    echo "1..$1"
}

tap_ok() {
    TAP_N=$((TAP_N + 1))
    echo "ok $TAP_N - $*"
}

tap_not_ok() {
    TAP_N=$((TAP_N + 1))
    TAP_FAILED=$((TAP_FAILED + 1))
    echo "not ok $TAP_N - $*"
}

# tap_check DESC CMD... : ok when CMD exits 0.
tap_check() {
    local desc=$1
    shift
    if "$@"; then tap_ok "$desc"; else tap_not_ok "$desc"; return 1; fi
}

# tap_is GOT WANT DESC : string equality, with both values in the diagnostics on failure.
tap_is() {
    if [ "$1" = "$2" ]; then
        tap_ok "$3"
    else
        tap_not_ok "$3"
        tap_diag "  got:      '$1'"
        tap_diag "  expected: '$2'"
        return 1
    fi
}

tap_skip() {
    TAP_N=$((TAP_N + 1))
    echo "ok $TAP_N - $1 # SKIP ${2:-}"
}

# Diagnostics go to stdout as TAP comments so they stay next to the failing line.
tap_diag() {
    local line
    printf '%s\n' "$*" | while IFS= read -r line; do printf '# %s\n' "$line"; done
}

tap_diag_file() {
    local f=$1 max=${2:-60}
    if [ -s "$f" ]; then
        tap_diag "---- last $max lines of $f"
        tail -n "$max" "$f" | while IFS= read -r line; do printf '#   %s\n' "$line"; done
    else
        tap_diag "---- $f is empty or missing"
    fi
}

tap_skip_all() {
    echo "1..0 # SKIP $*"
    exit 0
}

tap_bail() {
    echo "Bail out! $*"
    exit 255
}

tap_done() {
    [ -n "$TAP_PLANNED" ] || echo "1..$TAP_N"
    [ "$TAP_FAILED" -eq 0 ]
}

# ------------------------------------------------------------------ processes and cleanup

PT_PIDS=()
PT_TMPDIRS=()
PT_EXIT_CMDS=()

pt_alive() {
    kill -0 "$1" 2>/dev/null
}

# pt_spawn LOG CMD... : runs CMD in the background with stdin from /dev/null and stdout and
# stderr into LOG; sets PT_PID. Not meant for $(...) (the PID would be lost in the subshell).
pt_spawn() {
    local log=$1
    shift
    "$@" </dev/null >"$log" 2>&1 &
    PT_PID=$!
    PT_PIDS+=("$PT_PID")
}

# pt_stop PID [SECONDS] : SIGTERM, wait up to SECONDS (default 10) for a graceful exit, then
# SIGKILL. Returns the process's exit status (128+signal when killed, 0 when not running or
# not a child of this shell).
pt_stop() {
    local pid=$1 secs=${2:-10} i rc=0
    if pt_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < secs * 10; i++)); do
            pt_alive "$pid" || break
            sleep 0.1
        done
        if pt_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    wait "$pid" 2>/dev/null
    rc=$?
    # Forget it so the exit trap does not signal a recycled PID.
    local keep=() p
    for p in "${PT_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    PT_PIDS=("${keep[@]}")
    return "$rc"
}

# Bash runs a trap only after the foreground command returns, so a plain `sleep 30` would hold
# off Ctrl-C and the cleanup for 30 s; `wait` returns as soon as a signal arrives.
pt_sleep() {
    sleep "$1" &
    PT_SLEEP_PID=$!
    wait "$PT_SLEEP_PID"
    PT_SLEEP_PID=
}

pt_on_exit() {
    PT_EXIT_CMDS+=("$1")
}

pt__cleanup() {
    local rc=$? c p d i
    trap - EXIT INT TERM
    for c in "${PT_EXIT_CMDS[@]}"; do eval "$c"; done
    [ -n "${PT_SLEEP_PID:-}" ] && kill "$PT_SLEEP_PID" 2>/dev/null
    for p in "${PT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    # Give everyone a moment together, then force.
    for ((i = 0; i < 50; i++)); do
        local any=
        for p in "${PT_PIDS[@]}"; do pt_alive "$p" && any=1; done
        [ -n "$any" ] || break
        sleep 0.1
    done
    for p in "${PT_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    if [ "${PT_KEEP_TMP:-0}" = 1 ]; then
        for d in "${PT_TMPDIRS[@]}"; do echo "# kept $d"; done
    else
        for d in "${PT_TMPDIRS[@]}"; do rm -rf -- "$d"; done
    fi
    exit "$rc"
}
trap pt__cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# pt_mktemp VAR [NAME] : creates a directory under ${TMPDIR:-/tmp} and stores its path in VAR
# (not printed: a $(...) subshell could not register it for removal).
pt_mktemp() {
    local pt__d
    pt__d=$(mktemp -d "${TMPDIR:-/tmp}/${2:-pt}.XXXXXX") || tap_bail "mktemp failed"
    PT_TMPDIRS+=("$pt__d")
    printf -v "$1" '%s' "$pt__d"
}

pt_require() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || tap_skip_all "$c not installed"
    done
}

# pt_built PROGRAM... : every build makes these, so one that is missing is a broken build
# or a wrong PT_BUILD_DIR: the test bails out (a failure) rather than reporting a skip that
# would read as a pass.
pt_built() {
    local x
    for x in "$@"; do
        [ -x "$x" ] || tap_bail "$x is not built (PT_BUILD_DIR=${PT_BUILD_DIR:-unset})"
    done
}

# pt_programs VAR=PATH... : each VAR set to $PT_BUILD/PATH, a program of the build tree; the
# test bails out when one is not built.
pt_programs() {
    local a v
    for a in "$@"; do
        v=${a%%=*}
        printf -v "$v" '%s' "$PT_BUILD/${a#*=}"
        pt_built "${!v}"
    done
}

# pt_tools [VAR=PATH...] : PROMTABLE, LOADGEN and READBENCH, then the VARs, as pt_programs.
pt_tools() {
    pt_programs PROMTABLE=promtable LOADGEN=bench/loadgen READBENCH=bench/readbench "$@"
}

# -------------------------------------------------------------------------- ports, HTTP

PT_PORTS_GIVEN=" "

# A port is taken when it appears as a local port in /proc/net/tcp{,6} (any state, so
# TIME_WAIT and bound-but-not-listening count too). Ports are drawn below the kernel's
# ephemeral range so outgoing connections do not grab them between check and bind, and a
# port is never handed out twice by one test.
pt__port_used() {
    local hex
    hex=$(printf ':%04X ' "$1")
    if [ -r /proc/net/tcp ]; then
        cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{print $2" "}' | grep -q -- "$hex" &&
            return 0
        return 1
    fi
    # No /proc: fall back to "does something accept connections there".
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pt_free_port VAR : stores a free loopback port in VAR.
pt_free_port() {
    local lo=20000 hi=32000 tries p eph
    if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
        read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
        [ "$eph" -gt 11000 ] && hi=$((eph - 1)) && lo=$((hi - 12000))
    fi
    for ((tries = 0; tries < 200; tries++)); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
        case $PT_PORTS_GIVEN in *" $p "*) continue ;; esac
        pt__port_used "$p" && continue
        PT_PORTS_GIVEN="$PT_PORTS_GIVEN$p "
        printf -v "$1" '%s' "$p"
        return 0
    done
    tap_bail "no free loopback port found"
}

# pt_wait_http URL SECONDS [PID] [CURL ARGS...] : polls URL until it answers 2xx. Fails early
# when PID (if not empty) has exited. Returns 0 when ready, 1 on timeout or death.
pt_wait_http() {
    local url=$1 secs=$2 pid=${3:-} deadline
    shift 2
    [ $# -gt 0 ] && shift
    deadline=$((SECONDS + secs))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if [ -n "$pid" ] && ! pt_alive "$pid"; then
            return 1
        fi
        curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# pt_serve PIDVAR URLVAR LOG FLAG... : starts $PROMTABLE on a free loopback port with FLAGs,
# its output in LOG, its pid in PIDVAR and its base URL in URLVAR; waits (up to 30 s) until
# it is ready; returns 1, with the end of LOG as a diagnostic, when it is not.
pt_serve() {
    local pt__port='' pt__log=$3
    pt_free_port pt__port
    printf -v "$2" '%s' "http://127.0.0.1:$pt__port"
    pt_spawn "$pt__log" "$PROMTABLE" --web.listen-address="127.0.0.1:$pt__port" "${@:4}"
    printf -v "$1" '%s' "$PT_PID"
    pt_wait_http "http://127.0.0.1:$pt__port/-/ready" 30 "$PT_PID" ||
        { tap_diag_file "$pt__log" 5; return 1; }
}

# pt_start_promtable LOG PORT FLAG... : starts $PROMTABLE listening on 127.0.0.1:PORT with
# FLAGs, its output in LOG, and waits (up to 30 s) until it is ready; sets PT_PID; bails out
# with the end of LOG when it does not become ready.
pt_start_promtable() {
    local log=$1 port=$2
    shift 2
    pt_spawn "$log" "$PROMTABLE" --web.listen-address="127.0.0.1:$port" "$@"
    pt_wait_http "http://127.0.0.1:$port/-/ready" 30 "$PT_PID" ||
        tap_bail "promtable did not start: $(tail -n 3 "$log")"
}

# -------------------------------------------------------------------------- Prometheus

pt_start_prometheus() {
    local dir=$1 name=$2 port=$3
    pt_spawn "$dir/$name.log" prometheus --config.file="$dir/$name.yml" \
        --storage.tsdb.path="$dir/$name-data" --web.listen-address="127.0.0.1:$port"
    pt_wait_http "http://127.0.0.1:$port/-/ready" 30 "$PT_PID"
}

# pt_start_exporter LOG MODE PORT : starts $EXPORTER (tests/tools/exporter) serving MODE's
# metrics on 127.0.0.1:PORT, its output in LOG, and waits (up to 10 s) until it is ready;
# sets PT_PID; bails out with LOG when it does not become ready.
pt_start_exporter() {
    pt_spawn "$1" "$EXPORTER" "$2" "$3"
    pt_wait_http "http://127.0.0.1:$3/ready" 10 "$PT_PID" ||
        tap_bail "exporter did not start: $(cat "$1")"
}

# pt_start_writer DIR PROMPORT JOB EXPORT_PORT PTPORT SEND FEATURE : a writer Prometheus
# (config DIR/prom.yml, TSDB DIR/data, log DIR/prom.log) scraping 127.0.0.1:EXPORT_PORT
# every second as job JOB and remote-writing to promtable on PTPORT with `SEND: true` in
# its remote_write entry, started with --enable-feature=FEATURE; sets PROM_PID, bails out
# when it does not become ready.
pt_start_writer() {
    local dir=$1 port=$2 job=$3 target=$4 ptport=$5 send=$6 feature=$7
    cat >"$dir/prom.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: $job
    static_configs:
      - targets: ['127.0.0.1:$target']
remote_write:
  - url: http://127.0.0.1:$ptport/api/v1/write
    $send: true
    queue_config:
      batch_send_deadline: 1s
      min_backoff: 100ms
      max_backoff: 1s
EOF
    pt_spawn "$dir/prom.log" prometheus --config.file="$dir/prom.yml" \
        --storage.tsdb.path="$dir/data" --web.listen-address="127.0.0.1:$port" \
        --enable-feature="$feature"
    PROM_PID=$PT_PID
    PT_WRITER_LOG=$dir/prom.log
    pt_wait_http "http://127.0.0.1:$port/-/ready" 30 "$PROM_PID" ||
        tap_bail "prometheus did not start: $(tail -n 3 "$dir/prom.log")"
}

# pt_wait_writer SECONDS WHAT CMD... : runs CMD every half second until it succeeds; bails
# out when the writer of pt_start_writer dies or SECONDS pass first ("the writer did not
# WHAT in time", after the end of its log).
pt_wait_writer() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do
        pt_alive "$PROM_PID" || tap_bail "prometheus died: $(tail -n 3 "$PT_WRITER_LOG")"
        [ "$SECONDS" -lt "$deadline" ] || {
            tap_diag_file "$PT_WRITER_LOG" 20
            tap_bail "the writer did not $what in time"
        }
        sleep 0.5
    done
}

# ------------------------------------------------------------------- Bigtable emulator

PT_CBTEMULATOR=${PT_CBTEMULATOR:-/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator}
PT_EMU_PID=

pt_cbtemulator_found() {
    [ -x "$PT_CBTEMULATOR" ]
}

# pt__port_open PORT : something accepts TCP connections on 127.0.0.1:PORT.
pt__port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pt_start_cbtemulator VAR LOG [PORT] : starts the Bigtable emulator on 127.0.0.1:PORT, or on
# a free port that is stored in VAR, and waits (up to 15 s) until it accepts connections.
# Giving PORT restarts it where clients already point (after pt_kill_cbtemulator); the
# emulator's Go listener sets SO_REUSEADDR, so the port is free again at once. Sets
# PT_EMU_PID (also registered with pt_spawn, so it is killed on exit). Returns 1 when the
# binary is missing or it does not come up; LOG then says why.
pt_start_cbtemulator() {
    local var=$1 log=$2 port=${3:-} i
    pt_cbtemulator_found || { echo "$PT_CBTEMULATOR not found" >"$log"; return 1; }
    if [ -z "$port" ]; then
        pt_free_port "$var"
        port=${!var}
    else
        printf -v "$var" '%s' "$port"
    fi
    local pin=()
    [ -n "${PT_EMU_CPUS:-}" ] && pin=(taskset -c "$PT_EMU_CPUS")
    pt_spawn "$log" "${pin[@]}" "$PT_CBTEMULATOR" -host 127.0.0.1 -port "$port"
    PT_EMU_PID=$PT_PID
    for ((i = 0; i < 150; i++)); do
        pt_alive "$PT_EMU_PID" || { PT_EMU_PID=; return 1; }
        # The log line comes after the listener is bound; the connect proves it.
        grep -q 'emulator running' "$log" 2>/dev/null && pt__port_open "$port" && return 0
        sleep 0.1
    done
    pt_stop "$PT_EMU_PID" 2
    PT_EMU_PID=
    return 1
}

# pt_kill_cbtemulator : SIGKILL the emulator started last (an outage: every table and cell
# it held is gone, it keeps nothing on disk) and reap it.
pt_kill_cbtemulator() {
    [ -n "$PT_EMU_PID" ] || return 0
    # With stderr closed, bash's "Killed" job notice does not land in the TAP stream.
    {
        kill -KILL "$PT_EMU_PID"
        pt_stop "$PT_EMU_PID" 1
    } 2>/dev/null
    PT_EMU_PID=
    return 0
}

# pt_bigtable_store DIR NAME PREFIX : starts the Bigtable emulator (log DIR/emulator.log),
# sets EMU_PORT and BT, the flags that point promtable at it (project and instance NAME,
# table prefix PREFIX, no write-back buffer: a test that wants one adds
# --storage.bigtable.buffer-path=DIR after them), and creates the tables with
# `$PROMTABLE init` (log DIR/init.log); bails out when either fails.
pt_bigtable_store() {
    local dir=$1 name=$2 prefix=$3
    EMU_PORT=''
    pt_start_cbtemulator EMU_PORT "$dir/emulator.log" ||
        tap_bail "the Bigtable emulator did not start"
    BT=(--storage.backend=bigtable --storage.bigtable.project="$name"
        --storage.bigtable.instance="$name" --storage.bigtable.table-prefix="$prefix"
        --storage.bigtable.endpoint="127.0.0.1:$EMU_PORT" --storage.bigtable.buffer-path=)
    "$PROMTABLE" init "${BT[@]}" >"$dir/init.log" 2>&1 ||
        tap_bail "promtable init: $(tail -n 3 "$dir/init.log")"
}

# --------------------------------------------------------------------------------- metrics

# pt_metric_sum FILE NAME [SUBSTRING...] : sum of the samples of metric NAME in FILE
# (Prometheus text format) whose line contains every SUBSTRING (e.g. 'code="204"'); prints 0
# when there is none.
pt_metric_sum() {
    local file=$1 name=$2
    shift 2
    awk -v name="$name" -v filters="$(printf '%s\n' "$@")" '
        BEGIN { nf = split(filters, f, "\n"); sum = 0 }
        /^#/ { next }
        {
            n = $1; sub(/\{.*/, "", n)
            if (n != name) next
            for (i = 1; i <= nf; i++) if (f[i] != "" && index($0, f[i]) == 0) next
            sum += $NF
        }
        END { printf "%.17g\n", sum }' "$file"
}

# pt_wait_remote_sent PORT T SECONDS : waits up to SECONDS until the Prometheus on
# 127.0.0.1:PORT has remote-written everything up to unix time T. It sends in WAL order, so
# once a sample 2 s younger than T has gone out (and the caller lets one more batch deadline
# pass), every sample up to T is in the remote storage. Sets PT_SENT_TS to the highest sent
# timestamp seen; returns 1 on timeout.
pt_wait_remote_sent() {
    local port=$1 t=$2 deadline=$((SECONDS + $3)) m
    m=$(mktemp "${TMPDIR:-/tmp}/pt-metrics.XXXXXX") || return 1
    PT_SENT_TS=0
    while :; do
        curl -sS --max-time 5 -o "$m" "http://127.0.0.1:$port/metrics" 2>/dev/null
        PT_SENT_TS=$(pt_metric_sum "$m" \
            prometheus_remote_storage_queue_highest_sent_timestamp_seconds)
        awk -v s="$PT_SENT_TS" -v t="$t" 'BEGIN { exit !(s >= t + 2) }' && break
        [ "$SECONDS" -lt "$deadline" ] || { rm -f "$m"; return 1; }
        sleep 0.5
    done
    rm -f "$m"
    return 0
}

# ------------------------------------------------------------ raw samples, compared exactly

# pt_samples_normalize LO_MS HI_MS : lines "labels<TAB>ts<TAB>value" on stdin, those with ts
# in (LO_MS, HI_MS], NaN left out, values printed %.17g after one parse (so "0.1" and
# "0.10000000000000001" agree), infinities spelt alike, sorted.
pt_samples_normalize() {
    awk -F'\t' -v lo="$1" -v hi="$2" '
        $2 > lo && $2 <= hi {
            v = tolower($3)
            if (v ~ /nan/) next
            if (v ~ /inf/) v = (v ~ /^-/) ? "-Inf" : "+Inf"; else v = sprintf("%.17g", $3 + 0)
            print $1 "\t" $2 "\t" v
        }' | LC_ALL=C sort
}

# pt_writer_samples PORT T0 T OUT : the raw samples of the Prometheus on 127.0.0.1:PORT in
# (T0, T] (unix seconds; a range selector evaluated at T), normalized, into OUT.
pt_writer_samples() {
    local port=$1 t0=$2 t=$3 out=$4
    curl -sS --max-time 120 -G "http://127.0.0.1:$port/api/v1/query" \
        --data-urlencode "query={__name__=~\".+\"}[$((t - t0 + 2))s]" \
        --data-urlencode "time=$t" -o "$out.json"
    jq -r '.data.result[] |
        ("{" + (.metric | to_entries | sort_by(.key) | map("\(.key)=\"\(.value)\"") |
                join(", ")) + "}") as $l | .values[] | "\($l)\t\((.[0] * 1000) | round)\t\(.[1])"' \
        "$out.json" | pt_samples_normalize "$((t0 * 1000))" "$((t * 1000))" >"$out"
}

# pt_post_write URL BODY [OUT] : POSTs BODY (a snappy remote-write 1.0 request) to
# URL/api/v1/write, the answer into OUT (default: discarded); prints the status code.
pt_post_write() {
    curl -sS --max-time 30 -o "${3:-/dev/null}" -w '%{http_code}' \
        -H 'Content-Encoding: snappy' -H 'Content-Type: application/x-protobuf' \
        -H 'X-Prometheus-Remote-Write-Version: 0.1.0' \
        --data-binary "@$2" "$1/api/v1/write" 2>/dev/null
}

# pt_compare_read WHO URL T0 T WANT DIR : one remote read of every series in (T0, T] from
# the promtable at URL (decoded by $PTDUMP; files in DIR), compared with the normalized
# samples in WANT: three TAP lines (the answer is 200, no sample doubled, all identical).
pt_compare_read() {
    local who=$1 url=$2 t0=$3 t=$4 want=$5 dir=$6 code n_w n_p dups
    "$READBENCH" --request-out "$dir/read.req" --start-ms "$((t0 * 1000))" \
        --end-ms "$((t * 1000))" '__name__=~.+' >/dev/null 2>&1
    code=$(curl -sS --max-time 120 -o "$dir/read.answer" -w '%{http_code}' \
        -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
        -H 'X-Prometheus-Remote-Read-Version: 0.1.0' --data-binary @"$dir/read.req" \
        "$url/api/v1/read")
    tap_is "$code" 200 "$who: remote read of everything since T0 answers 200"
    "$PTDUMP" answer "$dir/read.answer" |
        awk 'match($0, / [^ ]+ [^ ]+$/) {
                 split(substr($0, RSTART + 1), f, " ")
                 print substr($0, 1, RSTART - 1) "\t" f[1] "\t" f[2] }' |
        pt_samples_normalize "$((t0 * 1000))" "$((t * 1000))" >"$dir/promtable.txt"
    n_w=$(wc -l <"$want")
    n_p=$(wc -l <"$dir/promtable.txt")
    dups=$(cut -f1,2 "$dir/promtable.txt" | uniq -d | wc -l)
    tap_is "$dups" 0 "$who: no sample is doubled (same series and timestamp twice)"
    if cmp -s "$want" "$dir/promtable.txt"; then
        tap_ok "$who: every sample of the writer's TSDB reads back identically ($n_w = $n_p)"
    else
        tap_not_ok "$who: samples differ from the writer's ($n_w writer, $n_p promtable)"
        tap_diag "missing: $(comm -23 "$want" "$dir/promtable.txt" | wc -l)," \
            "only in promtable: $(comm -13 "$want" "$dir/promtable.txt" | wc -l)"
        tap_diag "$(diff "$want" "$dir/promtable.txt" | head -n 10 | cut -c1-200)"
    fi
}

# pt_self_writer_config JOBS PORT URL [LINE...] : on stdout, the configuration of a
# Prometheus on 127.0.0.1:PORT that scrapes itself under JOBS job names (self0, self1, ...)
# every second and remote-writes to URL; each LINE goes into the remote_write entry as it
# is, indented under it ("remote_timeout: 5s", "queue_config:", "  max_shards: 1").
pt_self_writer_config() {
    local jobs=$1 port=$2 url=$3 j l
    shift 3
    printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n'
    for ((j = 0; j < jobs; j++)); do
        printf '  - job_name: self%d\n    static_configs:\n      - targets: [127.0.0.1:%d]\n' \
            "$j" "$port"
    done
    printf 'remote_write:\n  - url: %s\n' "$url"
    for l in "$@"; do
        printf '    %s\n' "$l"
    done
}

# pt_writer_drained WHO PORT T SECONDS METRICS : waits (up to SECONDS) until the Prometheus
# on 127.0.0.1:PORT has remote-written everything up to T, saves its /metrics in METRICS,
# and checks that it counts no failed and no dropped sample: three TAP lines, WHO first.
pt_writer_drained() {
    local who=$1 port=$2 t=$3 m
    if pt_wait_remote_sent "$port" "$t" "$4"; then
        tap_ok "$who: the writer has sent everything up to T (highest sent $PT_SENT_TS)"
    else
        tap_not_ok "$who: the writer did not get past T=$t within $4 s" \
            "(highest sent $PT_SENT_TS)"
    fi
    curl -sS "http://127.0.0.1:$port/metrics" -o "$5"
    for m in prometheus_remote_storage_samples_failed_total \
        prometheus_remote_storage_samples_dropped_total; do
        tap_is "$(pt_metric_sum "$5" "$m")" 0 "$who: writer: $m is 0"
    done
}
