#!/usr/bin/env bash
# shellcheck disable=SC2034  # figures print_table (bench/lib.sh) reads by name
# Bigtable benchmark: promtable on the Bigtable emulator next to promtable on its embedded
# store, for two figures:
#
#   (a) ingest: promtable's own CPU time per sample while remote-write load goes into the
#       store. promtable runs alone on CPU $PROMTABLE_CPU; the emulator and the load
#       generator share CPU $OTHER_CPU, so the emulator's CPU is not in the figure (it is
#       reported apart). build/bench/loadgen reads promtable's CPU time from /proc/PID/stat
#       (--server-pid) over the timed phase only. samples/s on the emulator is the
#       emulator's limit, not promtable's: it is an in-memory Go test server.
#   (b) remote_read latency: $READ_SERIES series with a sample every 15 s over 1 h (240
#       samples each) written with loadgen into a fresh store, then build/bench/readbench
#       sends the same ReadRequest ({__name__=~".+"} over that hour: every series)
#       $READ_REQUESTS times, one at a time on one keep-alive connection, and reports
#       p50/p99 and the series and samples of every answer (each must be complete), for
#       SAMPLES and STREAMED_XOR_CHUNKS answers.
#   (c) Bigtable traffic, from the backend's counters on promtable's /metrics (each
#       promtable starts on a fresh emulator, so they count this phase only): after (a),
#       row mutations, cells and MutateRows bytes sent per sample written (warm-up
#       included); over each read loop of (b), ReadRows rows and cells delivered per
#       sample returned, and the emulator's CPU per remote read. Each figure for the
#       points table (the samples) and, after a slash, for both tables (index included).
#
# Backends: embedded, bigtable (every write straight to Bigtable) and bigtable-buffered
# (storage.bigtable.buffer_path set, everything else at its default). The buffered one
# writes to Bigtable when its buffer flushes, so its traffic comes from the line promtable
# logs when it stops, after the stop flushed everything ("bigtable writes"): in (a), the
# whole run's; in (b), the read set is loaded as two halves of 30 minutes of samples, with
# a stop (flush) after each, as the default flush_interval of 30 minutes flushes a steady
# load, and (c) reports the write traffic of that loading too. Its reads then find every
# sample in Bigtable, none in the buffer.
#
# Usage: bench/bigtable.sh        (environment variables below change the load)
#
# Processes, ports and the emulator come from tests/e2e/lib.sh (everything it starts is
# stopped on exit). No `set -e`: those helpers report failure by status, checked here.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
BACKENDS=${BACKENDS:-"embedded bigtable bigtable-buffered"}
PROMTABLE_CPU=${PROMTABLE_CPU:-0}
OTHER_CPU=${OTHER_CPU:-1}
# (a) ingest
SERIES=${SERIES:-20000}
CONNECTIONS=${CONNECTIONS:-8}
DURATION=${DURATION:-20}                 # seconds, timed phase
WARMUP=${WARMUP:-5}                      # seconds, at least one pass over all series
SAMPLES_PER_REQUEST=${SAMPLES_PER_REQUEST:-2000}
# Samples per TimeSeries entry, a divisor of SAMPLES_PER_REQUEST: 1 as Prometheus sends
# them; more puts consecutive scrapes of a series in one entry (one chunk cell on Bigtable).
SAMPLES_PER_SERIES=${SAMPLES_PER_SERIES:-1}
LABELS=${LABELS:-10}
# (b) read
READ_SERIES=${READ_SERIES:-1000}
READ_REQUESTS=${READ_REQUESTS:-30}
READ_WARMUP=${READ_WARMUP:-3}
# Samples per TimeSeries entry in (b)'s load, a divisor of 2000: 1 as Prometheus sends
# them; 80 writes each series' hour in three entries of 20 minutes (a backfill, or what a
# write-back buffer flushes), which Bigtable stores as one chunk cell each.
READ_SAMPLES_PER_SERIES=${READ_SAMPLES_PER_SERIES:-1}
# Read by lib.sh: keep the work directory (logs, data); pin the emulator.
# shellcheck disable=SC2034
{
    [[ ${KEEP:-0} == 1 ]] && PT_KEEP_TMP=1
    PT_EMU_CPUS=$OTHER_CPU
}

pt_mktemp WORK promtable-btbench
SRV_PID=''
EMU_PID=''

stop_all() {
    if [[ -n $SRV_PID ]]; then stop_promtable >/dev/null; fi
    if [[ -n $EMU_PID ]]; then pt_stop "$EMU_PID" 5; fi
    SRV_PID=''
    EMU_PID=''
}

# field NAME LINE: the value of NAME=... in a result line.
# start NAME BACKEND: starts promtable (and for bigtable a fresh emulator + init) on a new
# store; sets SRV_PID, EMU_PID, URL.
start() {
    local name=$1 backend=$2 port eport store=()
    pt_free_port port
    URL=http://127.0.0.1:$port
    if [[ $backend == bigtable* ]]; then
        if ! pt_start_cbtemulator eport "$WORK/$name.emulator.log"; then
            log "the emulator did not start: $(tail -n 3 "$WORK/$name.emulator.log")"
            return 1
        fi
        EMU_PID=$PT_EMU_PID
        CMDS+=("$name emulator: taskset -c $OTHER_CPU $PT_CBTEMULATOR -host 127.0.0.1 -port $eport")
        store=(--storage.backend=bigtable --storage.bigtable.project=bench
            --storage.bigtable.instance=bench "--storage.bigtable.endpoint=127.0.0.1:$eport")
        CMDS+=("$name init: $PROMTABLE init ${store[*]}")
        "$PROMTABLE" init "${store[@]}" >"$WORK/$name.init.log" 2>&1 || {
            log "promtable init failed:"
            cat "$WORK/$name.init.log" >&2
            return 1
        }
        if [[ $backend == bigtable-buffered ]]; then
            store+=(--storage.bigtable.buffer-path="$WORK/$name.buffer")
        else
            store+=(--storage.bigtable.buffer-path=)
        fi
    else
        mkdir -p "$WORK/$name.data"
        store=(--storage.embedded.path="$WORK/$name.data")
    fi
    SRV_ARGS=(--web.listen-address="127.0.0.1:$port" "${store[@]}")
    SRV_LOG=$WORK/$name.log
    CMDS+=("$name server: taskset -c $PROMTABLE_CPU $PROMTABLE ${SRV_ARGS[*]}")
    spawn_server
}

# spawn_server: promtable with SRV_ARGS, output appended to SRV_LOG; sets SRV_PID.
spawn_server() {
    pt_spawn "$SRV_LOG.tmp" taskset -c "$PROMTABLE_CPU" "$PROMTABLE" "${SRV_ARGS[@]}"
    SRV_PID=$PT_PID
    pt_wait_http "$URL/-/ready" 30 "$SRV_PID" && return 0
    log "promtable did not start:"
    tail -n 20 "$SRV_LOG.tmp" >&2
    return 1
}

# stop_promtable: SIGTERM (a buffered promtable flushes everything), its log appended to
# SRV_LOG. Prints the points and both tables' "bigtable writes" figures it logged, as
# "rows cells bytes" twice (points, then both tables); nothing when there is no such line.
stop_promtable() {
    pt_stop "$SRV_PID" 120 >/dev/null
    SRV_PID=''
    cat "$SRV_LOG.tmp" >>"$SRV_LOG"
    grep 'msg="bigtable writes"' "$SRV_LOG.tmp" | tail -n 1 | awk '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        print v["points_rows"], v["points_cells"], v["points_bytes"], v["rows"], v["cells"], v["bytes"] }'
}

# add_traffic A B: the sum of two stop_promtable lines (either may be empty).
add_traffic() {
    awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); split(b, y, " ")
        if (n == 0) { print b; exit } if (b == "") { print a; exit }
        for (i = 1; i <= 6; i++) printf "%s%.0f", (i > 1 ? " " : ""), x[i] + y[i]; print "" }'
}

# stop_per_sample TRAFFIC SAMPLES: "points/all" rows, cells and bytes per sample from a
# stop_promtable line, into the arrays named by $3 $4 $5 under key $6.
stop_per_sample() {
    local -a t
    read -ra t <<<"$1"
    if [[ ${#t[@]} != 6 ]]; then
        printf -v "$3[$6]" '%s' -
        printf -v "$4[$6]" '%s' -
        printf -v "$5[$6]" '%s' -
        return
    fi
    printf -v "$3[$6]" '%s' "$(ratio "${t[0]}" "$2" 4)/$(ratio "${t[3]}" "$2" 4)"
    printf -v "$4[$6]" '%s' "$(ratio "${t[1]}" "$2" 4)/$(ratio "${t[4]}" "$2" 4)"
    printf -v "$5[$6]" '%s' "$(ratio "${t[2]}" "$2" 1)/$(ratio "${t[5]}" "$2" 1)"
}

# metric NAME: the sum of NAME's series on promtable's /metrics, empty when it has none.
metric() {
    curl -s "$URL/metrics" | awk -v m="$1" '
        index($0, m) == 1 && substr($0, length(m) + 1, 1) ~ /[ {]/ { s += $NF; n++ }
        END { if (n) printf "%.0f", s }'
}

samples_received() { metric promtable_samples_received_total; }

# ratio A B [DIGITS]: A / B, or "-" when either is missing or B is 0.
ratio() {
    awk -v a="${1:-}" -v b="${2:-}" -v d="${3:-3}" \
        'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.*f", d, a / b }'
}

# traffic NAME: "points/all" values of promtable_bigtable_[points_]NAME_total, one line.
traffic() {
    echo "$(metric "promtable_bigtable_points_$1_total") $(metric "promtable_bigtable_$1_total")"
}

# per_sample NAME BEFORE AFTER SAMPLES: "points/all" per sample between two traffic lines.
per_sample() {
    local -a x0 x1
    read -ra x0 <<<"$2"
    read -ra x1 <<<"$3"
    [[ ${#x0[@]} == 2 && ${#x1[@]} == 2 ]] || { echo -; return; }
    echo "$(ratio $((x1[0] - x0[0])) "$4" "${TRAFFIC_DIGITS[$1]}")/$(ratio \
        $((x1[1] - x0[1])) "$4" "${TRAFFIC_DIGITS[$1]}")"
}

# ---------------------------------------------------------------------------------------
bench_build promtable loadgen readbench
PROMTABLE=$BUILD_DIR/promtable
LOADGEN=$BUILD_DIR/bench/loadgen
READBENCH=$BUILD_DIR/bench/readbench
bench_need "$PROMTABLE" "$LOADGEN" "$READBENCH"
if [[ " $BACKENDS " == *" bigtable"* ]] && ! pt_cbtemulator_found; then
    log "the Bigtable emulator is not installed ($PT_CBTEMULATOR): bigtable left out"
    BACKENDS=embedded
fi
[[ $(nproc) -ge 2 ]] || log "warning: fewer than 2 CPUs; everything shares one core"

declare -A RATE PERCPU NSPS P99 ERRS EMUCPU CHECK
declare -A RD_P50 RD_P99 RD_MEAN RD_SERIES RD_SAMPLES RD_CPU RD_BYTES RD_EMU
declare -A W_ROWS W_CELLS W_BYTES RD_CELLS RD_ROWS L_ROWS L_CELLS L_BYTES
declare -A TRAFFIC_DIGITS=([rows_mutated]=4 [cells_written]=4 [write_bytes]=1 [rows_read]=4 [cells_read]=4)
CMDS=()
FAILED=0

# (a) ---------------------------------------------------------------------------------
ingest() {
    local b=$1 name="ingest-$1" args result emu0=0 emu1=0
    start "$name" "$b" || return 1
    args=(--url "$URL/api/v1/write" --series "$SERIES" --connections "$CONNECTIONS"
        --duration "$DURATION" --warmup "$WARMUP" --samples-per-request "$SAMPLES_PER_REQUEST"
        --samples-per-series "$SAMPLES_PER_SERIES" --labels "$LABELS" --server-pid "$SRV_PID")
    CMDS+=("$name load: taskset -c $OTHER_CPU $LOADGEN ${args[*]}")
    log "+ taskset -c $OTHER_CPU $LOADGEN ${args[*]}"
    [[ -n $EMU_PID ]] && emu0=$(cpu_s "$EMU_PID")
    taskset -c "$OTHER_CPU" "$LOADGEN" "${args[@]}" >"$WORK/$name.result" 2>"$WORK/$name.loadgen.log" || true
    [[ -n $EMU_PID ]] && emu1=$(cpu_s "$EMU_PID")
    result=$(grep '^result:' "$WORK/$name.result" || true)
    if [[ -z $result ]]; then
        tail -n 20 "$WORK/$name.loadgen.log" >&2
        CHECK[$b]="loadgen failed"
        stop_all
        return 1
    fi
    RATE[$b]=$(field samples_per_sec "$result")
    PERCPU[$b]=$(field samples_per_server_cpu_s "$result")
    NSPS[$b]=$(awk -v r="${PERCPU[$b]}" 'BEGIN { if (r > 0) printf "%.0f", 1e9 / r }')
    P99[$b]=$(field p99_ms "$result")
    ERRS[$b]=$(field errors "$result")
    # Emulator CPU over warm-up + timed phase, per sample sent in both.
    if [[ -n $EMU_PID ]]; then
        EMUCPU[$b]=$(awk -v a="$emu0" -v b="$emu1" 'BEGIN { printf "%.1f", b - a }')
    fi
    local sent got
    sent=$(field total_ok_samples "$result")
    got=$(samples_received)
    # Traffic to Bigtable per sample written, warm-up included, as the counters run.
    W_ROWS[$b]=$(per_sample rows_mutated "0 0" "$(traffic rows_mutated)" "$got")
    W_CELLS[$b]=$(per_sample cells_written "0 0" "$(traffic cells_written)" "$got")
    W_BYTES[$b]=$(per_sample write_bytes "0 0" "$(traffic write_bytes)" "$got")
    # Buffered: what the run sent, the flush at the stop included.
    [[ $b == bigtable-buffered ]] && stop_per_sample "$(stop_promtable)" "$got" W_ROWS W_CELLS W_BYTES "$b"
    if [[ ${ERRS[$b]} != 0 ]]; then
        CHECK[$b]="FAILED: ${ERRS[$b]} request errors"
    elif [[ -n $got && $got -ge $sent ]]; then
        CHECK[$b]="ok: $got samples stored, $sent acknowledged"
    else
        CHECK[$b]="FAILED: promtable_samples_received_total=$got < $sent acknowledged"
    fi
    stop_all
    [[ ${CHECK[$b]} == ok* ]]
}

# (b) ---------------------------------------------------------------------------------
read_latency() {
    local b=$1 name="read-$1" start_ms args result type
    start "$name" "$b" || return 1
    # 240 scrapes of every series, 15 s apart, ending in the past: [start, start + 1 h).
    start_ms=$((($(date +%s) - 3600 - 300) * 1000))
    # Buffered: two halves of 30 minutes, each flushed by a stop, as the default
    # flush_interval does under a steady load.
    local halves=1 h flushed=''
    [[ $b == bigtable-buffered ]] && halves=2
    for ((h = 0; h < halves; h++)); do
        args=(--url "$URL/api/v1/write" --series "$READ_SERIES" --labels "$LABELS"
            --samples-per-request 2000 --samples-per-series "$READ_SAMPLES_PER_SERIES"
            --connections 2 --warmup 0 --start-ms $((start_ms + h * 3600000 / halves))
            --requests $((READ_SERIES * 240 / 2000 / halves)))
        CMDS+=("$name load: $LOADGEN ${args[*]}")
        log "+ $LOADGEN ${args[*]}"
        "$LOADGEN" "${args[@]}" >"$WORK/$name.load.result" 2>"$WORK/$name.load.log" || {
            tail -n 20 "$WORK/$name.load.log" >&2
            stop_all
            return 1
        }
        if [[ $b == bigtable-buffered ]]; then
            flushed=$(add_traffic "$flushed" "$(stop_promtable)")
            spawn_server || return 1
        fi
    done
    [[ $b == bigtable-buffered ]] &&
        stop_per_sample "$flushed" $((READ_SERIES * 240)) L_ROWS L_CELLS L_BYTES "$b"
    for type in samples streamed; do
        args=(--url "$URL/api/v1/read" --start-ms "$start_ms"
            --end-ms $((start_ms + 3600000 - 1)) --requests "$READ_REQUESTS"
            --warmup "$READ_WARMUP" --server-pid "$SRV_PID")
        [[ $type == streamed ]] && args+=(--streamed)
        args+=('__name__=~.+')
        CMDS+=("$name $type: taskset -c $OTHER_CPU $READBENCH ${args[*]}")
        log "+ taskset -c $OTHER_CPU $READBENCH ${args[*]}"
        local emu0=0 emu1=0 cells0 rows0 cells1 rows1
        cells0=$(traffic cells_read)
        rows0=$(traffic rows_read)
        [[ -n $EMU_PID ]] && emu0=$(cpu_s "$EMU_PID")
        result=$(taskset -c "$OTHER_CPU" "$READBENCH" "${args[@]}" 2>"$WORK/$name.$type.log" |
            grep '^result:' || true)
        [[ -n $EMU_PID ]] && emu1=$(cpu_s "$EMU_PID")
        cells1=$(traffic cells_read)
        rows1=$(traffic rows_read)
        # Warm-up requests included: the emulator's CPU over all of them, per request.
        [[ -n $EMU_PID ]] && RD_EMU[$b.$type]=$(awk -v a="$emu0" -v b="$emu1" \
            -v n=$((READ_REQUESTS + READ_WARMUP)) 'BEGIN { printf "%.0f", (b - a) * 1000 / n }')
        if [[ -z $result ]]; then
            tail -n 5 "$WORK/$name.$type.log" >&2
            stop_all
            return 1
        fi
        RD_P50[$b.$type]=$(field p50_ms "$result")
        RD_P99[$b.$type]=$(field p99_ms "$result")
        RD_MEAN[$b.$type]=$(field mean_ms "$result")
        RD_SERIES[$b.$type]=$(field series "$result")
        RD_SAMPLES[$b.$type]=$(field samples "$result")
        RD_BYTES[$b.$type]=$(field answer_bytes "$result")
        RD_CPU[$b.$type]=$(field server_cpu_ms_per_request "$result")
        # Per sample returned: every request's answer holds the same samples.
        local returned=$((${RD_SAMPLES[$b.$type]:-0} * (READ_REQUESTS + READ_WARMUP)))
        RD_CELLS[$b.$type]=$(per_sample cells_read "$cells0" "$cells1" "$returned")
        RD_ROWS[$b.$type]=$(per_sample rows_read "$rows0" "$rows1" "$returned")
    done
    stop_all
    local want=$((READ_SERIES * 240))
    for type in samples streamed; do
        if [[ ${RD_SERIES[$b.$type]} != "$READ_SERIES" || ${RD_SAMPLES[$b.$type]} != "$want" ]]; then
            log "$b $type: answers hold ${RD_SERIES[$b.$type]} series, ${RD_SAMPLES[$b.$type]}" \
                "samples; expected $READ_SERIES, $want"
            return 1
        fi
    done
}

log "work directory: $WORK"
for b in $BACKENDS; do
    log ""
    log "=== $b: ingest"
    ingest "$b" || FAILED=1
    log "=== $b: read"
    read_latency "$b" || FAILED=1
done

PT_VERSION=$("$PROMTABLE" --version 2>/dev/null || echo "promtable ?")
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)
DIRTY=
if git -C "$ROOT" status --porcelain 2>/dev/null | grep -q .; then DIRTY=+changes; fi
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo
echo "$PT_VERSION (commit $COMMIT$DIRTY), build $BUILD_DIR"
echo "host: $(nproc) CPUs ($CPU_MODEL), $(uname -sr); promtable on CPU $PROMTABLE_CPU," \
    "emulator and clients on CPU $OTHER_CPU"
echo
echo "(a) ingest: $SERIES series, $LABELS labels, $SAMPLES_PER_REQUEST samples/request," \
    "$CONNECTIONS connections, ${WARMUP}s warm-up + ${DURATION}s timed"
FMT='%-18s %11s %14s %15s %8s %6s %13s  %s\n'
print_table "$FMT" backend "$BACKENDS" samples/s=RATE samples/CPU-s=PERCPU \
    "promtable ns/sample=NSPS" "p99 ms=P99" errors=ERRS "emulator CPU-s=EMUCPU" check=CHECK
echo
echo "(b) remote_read: {__name__=~\".+\"} over 1 h = $READ_SERIES series x 240 samples," \
    "$READ_REQUESTS requests after $READ_WARMUP warm-up, one at a time, keep-alive HTTP/1.1"
FMT='%-18s %-9s %9s %9s %9s %8s %9s %12s %17s %16s\n'
# shellcheck disable=SC2059
printf "$FMT" backend answer "p50 ms" "p99 ms" "mean ms" series samples "answer bytes" \
    "promtable CPU ms" "emulator CPU ms"
for b in $BACKENDS; do
    for type in samples streamed; do
        # shellcheck disable=SC2059
        printf "$FMT" "$b" "$type" "${RD_P50[$b.$type]:--}" "${RD_P99[$b.$type]:--}" \
            "${RD_MEAN[$b.$type]:--}" "${RD_SERIES[$b.$type]:--}" "${RD_SAMPLES[$b.$type]:--}" \
            "${RD_BYTES[$b.$type]:--}" "${RD_CPU[$b.$type]:--}" "${RD_EMU[$b.$type]:--}"
    done
done
for bt in bigtable bigtable-buffered; do
    [[ " $BACKENDS " == *" $bt "* ]] || continue
    echo
    echo "(c) $bt traffic: points table / both tables"
    echo "writes in (a), per sample written (warm-up included):" \
        "${W_ROWS[$bt]:--} row mutations, ${W_CELLS[$bt]:--} cells," \
        "${W_BYTES[$bt]:--} bytes"
    [[ $bt == bigtable-buffered ]] &&
        echo "writes of (b)'s read set, two 30-minute halves each flushed, per sample:" \
            "${L_ROWS[$bt]:--} row mutations, ${L_CELLS[$bt]:--} cells, ${L_BYTES[$bt]:--} bytes"
    FMT='%-9s %24s %24s %16s\n'
    # shellcheck disable=SC2059
    printf "$FMT" answer "cells read/sample ret." "rows read/sample ret." "emulator CPU ms"
    for type in samples streamed; do
        # shellcheck disable=SC2059
        printf "$FMT" "$type" "${RD_CELLS[$bt.$type]:--}" "${RD_ROWS[$bt.$type]:--}" \
            "${RD_EMU[$bt.$type]:--}"
    done
    # The same on one line, for collecting runs.
    echo "traffic $bt: rows_mutated_per_sample=${W_ROWS[$bt]:--}" \
        "cells_written_per_sample=${W_CELLS[$bt]:--}" \
        "write_bytes_per_sample=${W_BYTES[$bt]:--}" \
        "load_rows_mutated_per_sample=${L_ROWS[$bt]:--}" \
        "load_write_bytes_per_sample=${L_BYTES[$bt]:--}" \
        "cells_read_per_sample=${RD_CELLS[$bt.samples]:--}" \
        "rows_read_per_sample=${RD_ROWS[$bt.samples]:--}" \
        "emulator_cpu_ms_per_read=${RD_EMU[$bt.samples]:--}" \
        "streamed_cells_read_per_sample=${RD_CELLS[$bt.streamed]:--}" \
        "streamed_emulator_cpu_ms_per_read=${RD_EMU[$bt.streamed]:--}" \
        "read_cpu_ms=${RD_CPU[$bt.samples]:--}"
done
echo
echo "commands:"
for c in "${CMDS[@]}"; do echo "  $c"; done
exit "$FAILED"
