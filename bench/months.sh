#!/usr/bin/env bash
# Months benchmark: remote reads over months of data on disk, promtable (embedded store)
# against Prometheus 2.42 answering /api/v1/read from its own blocks, and bytes on disk
# per sample next to VictoriaMetrics.
#
# Data (build/bench/monthgen): $SERIES series under $METRICS metric names, half counters
# of whole numbers, half random-walk gauges using the whole 53-bit mantissa, one sample
# every $STEP_MS ms for $DAYS days ending at the last whole minute. promtable and
# VictoriaMetrics get it as a remote-write 1.0 backfill (oldest window first, $CONNECTIONS
# connections); Prometheus as blocks made by `promtool tsdb create-blocks-from openmetrics`
# from the same values. promtable is then restarted, so every read comes from flushed
# chunks; bytes on disk are measured after each server's graceful stop (`du`, as
# bench/disk.sh does).
#
# Reads: each query of QUERIES, build/bench/readbench on CPU $CLIENT_CPU, each server on
# CPU $SERVER_CPU with the other one stopped (SIGSTOP) meanwhile. Warm: per round and
# server, the query's request count after warm-up requests; reported, the median over
# $ROUNDS rounds of each round's p50 and the server's CPU per returned sample. Cold:
# per round and server, the server stopped, the page cache dropped, the server started
# again and asked once. Every answer of both servers to a query must be equal (series,
# samples, and a digest of every label, timestamp and value bit); a difference fails the
# run.
#
# GAUGE_DECIMALS=D rounds the gauges to D decimals (both VictoriaMetrics, which keeps about
# 13 significant digits, and promtable then store the data exactly); READS=0 stops after
# the bytes on disk of promtable and VictoriaMetrics (no Prometheus blocks, no reads).
#
# Usage: bench/months.sh                     (about 25 minutes on 2 cores at the defaults)
#        SERIES=200 DAYS=7 ROUNDS=1 bench/months.sh      (a quick look)
#        READS=0 GAUGE_DECIMALS=2 bench/months.sh       (disk only, exact on both)
#        REUSE=/tmp/months-bench.XXXX bench/months.sh    (the reads again, on the data a run
#                                 with KEEP=1 left there, with the same settings)
set -u

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
SERIES=${SERIES:-2000}
METRICS=${METRICS:-20}
DAYS=${DAYS:-60}
STEP_MS=${STEP_MS:-60000}
CONNECTIONS=${CONNECTIONS:-2}
ROUNDS=${ROUNDS:-3}
COLD=${COLD:-1}                 # 0: no cold reads
READS=${READS:-1}               # 0: bytes on disk only
GAUGE_DECIMALS=${GAUGE_DECIMALS:-}
CLIENT_CPU=${CLIENT_CPU:-1}
PROMTABLE_ARGS=${PROMTABLE_ARGS:-}
PROMETHEUS=${PROMETHEUS:-prometheus}
PROMTOOL=${PROMTOOL:-promtool}
VM_BIN=${VM_BIN:-$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)}
# promtool cuts blocks of at most this; each block is one pass over the input file
PROM_BLOCK=${PROM_BLOCK:-486h}
export PT_KEEP_TMP=${KEEP:-0}

REUSE=${REUSE:-}
if [[ -n $REUSE ]]; then
    WORK=$REUSE
    [[ -f $WORK/figures ]] || { log "$WORK holds no data of a finished run (KEEP=1)"; exit 2; }
else
    pt_mktemp WORK months-bench
fi
bench_build promtable readbench monthgen
PROMTABLE=$BUILD_DIR/promtable
READBENCH=$BUILD_DIR/bench/readbench
MONTHGEN=$BUILD_DIR/bench/monthgen
for p in "$PROMETHEUS" "$PROMTOOL" "$VM_BIN"; do
    command -v "$p" >/dev/null || { log "no $p (Debian packages prometheus, victoria-metrics)"; exit 1; }
done
((SERIES % METRICS == 0 && SERIES >= 200)) || { log "SERIES: a multiple of METRICS, at least 200"; exit 2; }

END_MS=$(($(date +%s) * 1000 / STEP_MS * STEP_MS))
[[ -n $REUSE ]] && END_MS=$(sed -n 's/^END_MS=//p' "$WORK/figures")
PER_SERIES=$((DAYS * 86400000 / STEP_MS))
FIRST_MS=$((END_MS - (PER_SERIES - 1) * STEP_MS))
TOTAL=$((SERIES * PER_SERIES))
GEN=(--series "$SERIES" --metrics "$METRICS" --days "$DAYS" --step-ms "$STEP_MS" --end-ms "$END_MS")
[[ -n $GAUGE_DECIMALS ]] && GEN+=(--gauge-decimals "$GAUGE_DECIMALS")
DAY=86400000 HOUR=3600000
G0=$((METRICS / 2)) # the first gauge metric
# The newest boundary of the row keys' base timestamps (multiples of 2^32 ms) inside the data.
BOUNDARY=$((END_MS / 4294967296 * 4294967296))
((BOUNDARY - 3 * HOUR >= FIRST_MS)) || BOUNDARY=$((FIRST_MS + 3 * HOUR))

# name;start;end;requests;matchers (readbench syntax, space-separated). Metric m's series
# are instances host-0000..; a job is 200 series.
metric() { if (($1 < G0)); then printf 'bench_counter_%02d_total' "$1"; else printf 'bench_gauge_%02d' "$1"; fi; }
QUERIES=(
    "1 series x $DAYS days (counter);$FIRST_MS;$END_MS;20;__name__=$(metric 0) instance=host-0000:9100"
    "1 series x $DAYS days (gauge);$FIRST_MS;$END_MS;20;__name__=$(metric "$G0") instance=host-0000:9100"
    "1 series x last day;$((END_MS - DAY));$END_MS;200;__name__=$(metric "$G0") instance=host-0001:9100"
    "20 series x 7 days;$((END_MS - 7 * DAY));$END_MS;10;__name__=$(metric $((G0 + 1))) instance=~host-00[01][0-9]:9100"
    "200 series (one job) x 1 day;$((END_MS - DAY));$END_MS;10;job=$(printf 'job-%02d' $((SERIES / 2 / 200)))"
    "$SERIES series x 1 h, 30 days ago;$((END_MS - 30 * DAY - HOUR));$((END_MS - 30 * DAY));10;__name__=~bench_.+"
    "20 series x 6 h across a bucket boundary;$((BOUNDARY - 3 * HOUR));$((BOUNDARY + 3 * HOUR));50;__name__=$(metric 1) instance=~host-00[01][0-9]:9100"
)

PT_PORT='' PROM_PORT='' VM_PORT='' PT_SRV='' PROM_SRV=''
declare -A DISK RATE

start_promtable() {
    # shellcheck disable=SC2086  # PROMTABLE_ARGS is a list of flags
    read_server promtable "$WORK/promtable.data" $PROMTABLE_ARGS
    PT_PORT=$SRV_PORT PT_SRV=$SRV_PID
}

start_prometheus() {
    read_server prometheus "$WORK/prometheus.data" --storage.tsdb.retention.time=3650d
    PROM_PORT=$SRV_PORT PROM_SRV=$SRV_PID
}

# backfill NAME URL: the data through remote write; RATE[NAME] = samples/s.
backfill() {
    local r
    log "+ monthgen ${GEN[*]} --connections $CONNECTIONS write $2"
    r=$(taskset -c "$CLIENT_CPU" "$MONTHGEN" "${GEN[@]}" --connections "$CONNECTIONS" write "$2" \
        2>"$WORK/$1.monthgen.log" | grep '^result:')
    [[ $(field failed "$r") == 0 && $(field samples "$r") == "$TOTAL" ]] ||
        { log "backfill of $1 failed: $r"; tail -n 5 "$WORK/$1.monthgen.log" >&2; exit 1; }
    RATE[$1]=$(field samples_per_s "$r")
    log "$1: $TOTAL samples at ${RATE[$1]}/s"
}

bytes_per_sample() { awk -v b="$(du -sb "$1" | cut -f1)" -v n="$TOTAL" 'BEGIN { printf "%.3f", b / n }'; }

# --- data -------------------------------------------------------------------------------
load_data() {
    log "$SERIES series x $PER_SERIES samples ($TOTAL), $FIRST_MS..$END_MS"
    start_promtable
    backfill promtable "http://127.0.0.1:$PT_PORT/api/v1/write"
    # Its compactions done, then those of what the stop flushes: the reads restart it often.
    wait_idle "$PT_SRV"
    pt_stop "$PT_SRV" 600
    start_promtable
    wait_idle "$PT_SRV"
    pt_stop "$PT_SRV" 600
    DISK[promtable]=$(bytes_per_sample "$WORK/promtable.data")

    pt_free_port VM_PORT
    pt_spawn "$WORK/vm.log" taskset -c "$SERVER_CPU" "$VM_BIN" -httpListenAddr="127.0.0.1:$VM_PORT" \
        -storageDataPath="$WORK/vm.data" -retentionPeriod=100y -search.maxQueryDuration=10m
    VM_SRV=$PT_PID
    pt_wait_http "http://127.0.0.1:$VM_PORT/health" 60 "$VM_SRV" || { log "VictoriaMetrics did not start"; exit 1; }
    backfill victoriametrics "http://127.0.0.1:$VM_PORT/api/v1/write"
    curl -s -o /dev/null "http://127.0.0.1:$VM_PORT/internal/force_flush"
    VM_COUNT=$(curl -s "http://127.0.0.1:$VM_PORT/api/v1/query" --data-urlencode "time=$((END_MS / 1000))" \
        --data-urlencode "query=sum(count_over_time({__name__=~\"bench_.+\"}[$((DAYS + 1))d]))" |
        sed -n 's/.*"value":\[[0-9.]*,"\([0-9]*\)"\].*/\1/p')
    [[ $VM_COUNT == "$TOTAL" ]] || log "VictoriaMetrics answers $VM_COUNT samples, not $TOTAL"
    pt_stop "$VM_SRV" 600
    DISK[victoriametrics]=$(bytes_per_sample "$WORK/vm.data")
    ((READS)) || return 0

    log "+ monthgen ${GEN[*]} openmetrics > data.om; promtool tsdb create-blocks-from --max-block-duration=$PROM_BLOCK openmetrics"
    taskset -c "$CLIENT_CPU" "$MONTHGEN" "${GEN[@]}" openmetrics >"$WORK/data.om" || exit 1
    t0=$(date +%s.%N)
    taskset -c "$SERVER_CPU" "$PROMTOOL" tsdb create-blocks-from --max-block-duration="$PROM_BLOCK" \
        openmetrics "$WORK/data.om" "$WORK/prometheus.data" >"$WORK/promtool.log" 2>&1 ||
        { log "promtool failed"; tail -n 20 "$WORK/promtool.log" >&2; exit 1; }
    RATE[prometheus]=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" -v n="$TOTAL" 'BEGIN { printf "%.0f", n / (t1 - t0) }')
    rm -f "$WORK/data.om"
    DISK[prometheus]=$(bytes_per_sample "$WORK/prometheus.data")
}
if [[ -n $REUSE ]]; then
    # shellcheck disable=SC1091  # written by the run that made the data
    . "$WORK/figures"
else
    load_data
    declare -p DISK RATE | sed 's/^declare -A/declare -gA/' >"$WORK/figures"
    echo "END_MS=$END_MS" >>"$WORK/figures"
fi
if ((!READS)); then
    printf 'bytes on disk per sample: promtable %s, VictoriaMetrics %s\n' "${DISK[promtable]}" \
        "${DISK[victoriametrics]}"
    printf 'result: disk=%s/%s\n' "${DISK[promtable]}" "${DISK[victoriametrics]}"
    exit 0
fi

start_promtable
wait_idle "$PT_SRV" # REUSE of data that a run did not let settle
start_prometheus
# shellcheck disable=SC2016  # expanded at exit: the servers then running
pt_on_exit 'kill -CONT "$PT_SRV" "$PROM_SRV" 2>/dev/null'

# --- reads ------------------------------------------------------------------------------
declare -A P50 CPU COLD_MS COUNT DIGEST
# read_once KEY PORT PID START END N WARM MATCHERS: one readbench run; appends p50 and
# server CPU per sample to P50/CPU[KEY]; returns the result line in R.
read_once() {
    local key=$1 port=$2 pid=$3 start=$4 end=$5 n=$6 warm=$7 sel=$8
    # shellcheck disable=SC2086  # matchers are space-separated
    R=$(taskset -c "$CLIENT_CPU" "$READBENCH" --url "http://127.0.0.1:$port/api/v1/read" \
        --start-ms "$start" --end-ms "$end" --requests "$n" --warmup "$warm" --server-pid "$pid" \
        $sel 2>>"$WORK/readbench.log")
    [[ -n $R ]] || { log "$key: readbench failed: $(tail -n 2 "$WORK/readbench.log")"; exit 1; }
    local c d
    c="$(field series "$R") series, $(field samples "$R") samples"
    d=$(field digest "$R")
    if [[ -n ${DIGEST[${key#*|}]:-} && ${DIGEST[${key#*|}]} != "$d|$c" ]]; then
        log "$key: answers differ: $c ($d) against ${DIGEST[${key#*|}]}"
        exit 1
    fi
    DIGEST[${key#*|}]="$d|$c"
    COUNT[${key#*|}]=$(field samples "$R")
}

warm() {
    local who=$1 port=$2 pid=$3 peer=$4 name=$5 start=$6 end=$7 n=$8 sel=$9
    kill -STOP "$peer"
    read_once "$who|$name" "$port" "$pid" "$start" "$end" "$n" 3 "$sel"
    kill -CONT "$peer"
    P50[$who|$name]+="$(field p50_ms "$R") "
    CPU[$who|$name]+="$(awk -v c="$(field server_cpu_ms_per_request "$R")" -v s="$(field samples "$R")" \
        'BEGIN { printf "%.0f", (s > 0 ? c * 1e6 / s : 0) }') "
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || log "cannot drop the page cache (not root?)"; }

cold() {
    local who=$1 name=$2 start=$3 end=$4 sel=$5 port pid peer
    if [[ $who == promtable ]]; then
        pt_stop "$PT_SRV" 600; drop_caches; start_promtable; port=$PT_PORT pid=$PT_SRV peer=$PROM_SRV
    else
        pt_stop "$PROM_SRV" 600; drop_caches; start_prometheus; port=$PROM_PORT pid=$PROM_SRV peer=$PT_SRV
    fi
    kill -STOP "$peer"
    read_once "cold|$who|$name" "$port" "$pid" "$start" "$end" 1 0 "$sel"
    kill -CONT "$peer"
    COLD_MS[$who|$name]+="$(field p50_ms "$R") "
}

for ((round = 1; round <= ROUNDS; round++)); do
    log "round $round of $ROUNDS"
    for q in "${QUERIES[@]}"; do
        IFS=';' read -r name start end n sel <<<"$q"
        warm promtable "$PT_PORT" "$PT_SRV" "$PROM_SRV" "$name" "$start" "$end" "$n" "$sel"
        warm prometheus "$PROM_PORT" "$PROM_SRV" "$PT_SRV" "$name" "$start" "$end" "$n" "$sel"
        if [[ $COLD == 1 ]]; then
            cold promtable "$name" "$start" "$end" "$sel"
            cold prometheus "$name" "$start" "$end" "$sel"
        fi
    done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
printf '\n%s series x %s samples (%s ms apart, %s days), each server on CPU %s; p50 in ms, ' \
    "$SERIES" "$PER_SERIES" "$STEP_MS" "$DAYS" "$SERVER_CPU"
printf 'medians of %s rounds; every answer equal to Prometheus'"'"'\n\n' "$ROUNDS"
printf '| query | samples | promtable | Prometheus | ratio | server CPU per sample, ns (pt / Prom) | cold promtable | cold Prometheus | cold ratio |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for q in "${QUERIES[@]}"; do
    IFS=';' read -r name _ <<<"$q"
    a=$(median "${P50[promtable|$name]}") b=$(median "${P50[prometheus|$name]}")
    ca=$(median "${COLD_MS[promtable|$name]:-}") cb=$(median "${COLD_MS[prometheus|$name]:-}")
    printf '| %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n' "$name" "${COUNT[$name]}" "$a" "$b" \
        "$(ratio "$a" "$b")" "$(median "${CPU[promtable|$name]}")" "$(median "${CPU[prometheus|$name]}")" \
        "${ca:--}" "${cb:--}" "$(ratio "${ca:-0}" "${cb:-0}")"
done
printf '\nbytes on disk per sample: promtable %s, VictoriaMetrics %s, Prometheus %s\n' \
    "${DISK[promtable]}" "${DISK[victoriametrics]}" "${DISK[prometheus]}"
printf 'backfill, samples/s: promtable %s, VictoriaMetrics %s, promtool %s\n' \
    "${RATE[promtable]}" "${RATE[victoriametrics]}" "${RATE[prometheus]}"
printf 'result: %s\n' "$(for q in "${QUERIES[@]}"; do IFS=';' read -r name _ <<<"$q"
    printf '%s=%s/%s ' "$(tr -c 'a-z0-9\n' _ <<<"$name" | tr -s _)" "$(median "${P50[promtable|$name]}")" \
        "$(median "${P50[prometheus|$name]}")"; done)disk=${DISK[promtable]}/${DISK[victoriametrics]}/${DISK[prometheus]}"
