#!/usr/bin/env bash
# Remote-read benchmark: promtable (embedded store) against Prometheus 2.42 answering
# /api/v1/read from its own TSDB, on the same data.
#
# Both servers run on CPU $SERVER_CPU (one core each, the clients on $CLIENT_CPU; during
# promtable's rounds after its restart Prometheus is stopped with SIGSTOP, see query_rounds).
# The same
# load generator writes $SERIES series with a sample every 15 s for $SAMPLES scrapes (the
# last $SAMPLES x 15 s up to now) into each through remote_write, one connection, so every
# series gets its samples in time order (Prometheus refuses older ones). Then
# build/bench/readbench sends each query of QUERIES $REQUESTS times, one at a time on one
# keep-alive connection, to each server in turn for $ROUNDS rounds; every answer must hold
# the same series and samples as the first, and both servers must return the same counts.
# Reported: the median over the rounds of each round's p50 and p99, and the ratio.
#
# promtable is measured twice: with the data still in its in-memory head, and after a
# graceful restart (the head flushed into RocksDB, the log empty).
#
# Usage: bench/read.sh          (environment variables below change the load)
#        SERIES=500000 SAMPLES=61 bench/read.sh
set -u

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
SERIES=${SERIES:-50000}
SAMPLES=${SAMPLES:-240}         # scrapes per series, 15 s apart
REQUESTS=${REQUESTS:-20}        # timed requests per large query (whole store), server and round
SMALL_REQUESTS=${SMALL_REQUESTS:-200} # the same for the small ones (p50s of a few requests are
                                # noise at 0.1 ms), after 20 warm-up requests
ROUNDS=${ROUNDS:-3}
CLIENT_CPU=${CLIENT_CPU:-1}
PROMTABLE_ARGS=${PROMTABLE_ARGS:-}
PROMETHEUS=${PROMETHEUS:-prometheus}
STREAMED=${STREAMED:-0}         # 1: promtable also answers STREAMED_XOR_CHUNKS (column)
export PT_KEEP_TMP=${KEEP:-0}

# name;window;matchers[;large] (readbench syntax: name=value, name!=value, name=~re,
# name!~re, separated by spaces). window: "1h" (the last hour), "all" (every sample),
# "instant" (the last 5 minutes, the lookback Prometheus asks for at one instant). A large
# query is sent REQUESTS times, the others SMALL_REQUESTS times.
QUERIES=(
    '20 series x 1 h;1h;__name__=node_cpu_seconds_total instance=10.1.0.2:9100 cpu=~[0-3] mode=~idle|user|system|iowait|irq'
    'one node (166 series) x 1 h;1h;instance=10.1.0.2:9100 job=node-exporter'
    'five nodes (815 series) x 1 h;1h;__name__=~node_.+ instance=~10\.1\.0\.[2-6]:9100'
    '1 series, every sample;all;__name__=node_cpu_seconds_total instance=10.1.0.2:9100 cpu=0 mode=idle'
    'every series at one instant;instant;__name__=~.+;large'
    'job and regex, no __name__;1h;job=kubelet namespace=~shop|payments;large'
)

pt_mktemp WORK read-bench
bench_build promtable loadgen readbench
PROMTABLE=$BUILD_DIR/promtable
LOADGEN=$BUILD_DIR/bench/loadgen
READBENCH=$BUILD_DIR/bench/readbench
command -v "$PROMETHEUS" >/dev/null || { log "no $PROMETHEUS (Debian package prometheus)"; exit 1; }

INTERVAL=15000
# loadgen only sends scrapes that ended a whole interval ago: start one interval earlier.
END_MS=$(( $(date +%s) * 1000 / 60000 * 60000 ))
START_MS=$((END_MS - (SAMPLES + 1) * INTERVAL))
REQS=$(((SERIES * SAMPLES + 1999) / 2000))

PT_PORT='' PROM_PORT='' PT_SRV='' PROM_SRV=''

start_promtable() {
    # shellcheck disable=SC2086  # PROMTABLE_ARGS is a list of flags
    read_server promtable "$WORK/promtable.data" $PROMTABLE_ARGS
    PT_PORT=$SRV_PORT PT_SRV=$SRV_PID
}

start_prometheus() {
    read_server prometheus "$WORK/prometheus.data" --web.enable-remote-write-receiver --storage.tsdb.retention.time=30d
    PROM_PORT=$SRV_PORT PROM_SRV=$SRV_PID
}

# load URL NAME: the same series and samples into one server.
load() {
    local r
    log "+ loadgen --url $1 --series $SERIES --requests $REQS --start-ms $START_MS"
    r=$(taskset -c "$CLIENT_CPU" "$LOADGEN" --url "$1" --series "$SERIES" --connections 1 \
        --requests "$REQS" --warmup 0 --start-ms "$START_MS" --interval-ms "$INTERVAL" \
        --pool-mb 8192 2>"$WORK/$2.loadgen.log" | grep '^result:')
    [[ $(field errors "$r") == 0 ]] ||
        { log "loading $2 failed: $r"; tail -n 5 "$WORK/$2.loadgen.log" >&2; exit 1; }
    log "$2: $(field total_ok_samples "$r") samples at $(field samples_per_sec "$r")/s"
}

# window NAME: readbench's time flags for a query window.
window() {
    case $1 in
    1h) echo "--start-ms $((END_MS - 3600000)) --end-ms $END_MS" ;;
    all) echo "--start-ms $START_MS --end-ms $END_MS" ;;
    instant) echo "--start-ms $((END_MS - 300000)) --end-ms $END_MS" ;;
    esac
}

declare -A P50 P99 COUNT
# measure KEY PORT PID PEER SELECTOR WINDOW SIZE [--streamed]: one round; appends to
# P50/P99[KEY]. A PEER other than - (the other server, pinned to the same core) is
# stopped meanwhile, so that its background work does not land in these figures.
measure() {
    local key=$1 port=$2 pid=$3 peer=$4 sel=$5 win=$6 n=$SMALL_REQUESTS warm=20 r
    [[ $7 == large ]] && n=$REQUESTS warm=2
    shift 7
    [[ $peer != - ]] && kill -STOP "$peer"
    # shellcheck disable=SC2046,SC2086  # window flags; matchers are space-separated
    r=$(taskset -c "$CLIENT_CPU" "$READBENCH" --url "http://127.0.0.1:$port/api/v1/read" \
        $(window "$win") --requests "$n" --warmup "$warm" --server-pid "$pid" "$@" $sel \
        2>>"$WORK/readbench.log")
    [[ $peer != - ]] && kill -CONT "$peer"
    if [[ -z $r ]]; then
        log "$key: readbench failed: $(tail -n 2 "$WORK/readbench.log")"
        P50[$key]+="x "
        return
    fi
    P50[$key]+="$(field p50_ms "$r") "
    P99[$key]+="$(field p99_ms "$r") "
    COUNT[$key]="$(field series "$r") series, $(field samples "$r") samples"
}

# query_rounds PHASE: the rounds of every query. With promtable's data in its head (phase
# head) both servers are measured, alternating, and both keep running: stopping one while
# the other is measured moves the stopped one's deferred work (Prometheus' garbage
# collection and head upkeep) into its own figures (about doubling Prometheus' p50 on a
# small query). In the flushed phase only promtable is measured, and
# Prometheus is stopped meanwhile.
query_rounds() {
    local phase=$1 q name sel win peer=-
    [[ $phase == flushed ]] && peer=$PROM_SRV
    for ((round = 1; round <= ROUNDS; round++)); do
        for q in "${QUERIES[@]}"; do
            IFS=';' read -r name win sel size <<<"$q"
            measure "$phase|promtable|$name" "$PT_PORT" "$PT_SRV" "$peer" "$sel" "$win" "$size"
            [[ $STREAMED == 1 ]] &&
                measure "$phase|streamed|$name" "$PT_PORT" "$PT_SRV" "$peer" "$sel" "$win" \
                    "$size" --streamed
            [[ $phase == head ]] &&
                measure "prometheus|$name" "$PROM_PORT" "$PROM_SRV" - "$sel" "$win" "$size"
        done
    done
}

start_promtable
start_prometheus
# shellcheck disable=SC2016  # expanded at exit: the servers then running
pt_on_exit 'kill -CONT "$PT_SRV" "$PROM_SRV" 2>/dev/null'
load "http://127.0.0.1:$PT_PORT/api/v1/write" promtable
load "http://127.0.0.1:$PROM_PORT/api/v1/write" prometheus
log "rounds with promtable's data in its head"
query_rounds head
log "restarting promtable (graceful stop flushes the head into RocksDB)"
pt_stop "$PT_SRV" 300
start_promtable
query_rounds flushed

printf '\n%s series x %s samples (15 s apart), each server on CPU %s; p50 / p99 in ms, ' \
    "$SERIES" "$SAMPLES" "$SERVER_CPU"
printf 'median of %s rounds of %s requests (%s for each large query)\n\n' "$ROUNDS" \
    "$SMALL_REQUESTS" "$REQUESTS"
printf '| query | answer | promtable head | promtable flushed | Prometheus 2.42 | head / Prometheus (p50) | flushed / Prometheus |\n'
printf '| --- | --- | --- | --- | --- | --- | --- |\n'
for q in "${QUERIES[@]}"; do
    IFS=';' read -r name win sel _ <<<"$q"
    h50=$(median "${P50[head|promtable|$name]:-}") h99=$(median "${P99[head|promtable|$name]:-}")
    f50=$(median "${P50[flushed|promtable|$name]:-}") f99=$(median "${P99[flushed|promtable|$name]:-}")
    p50=$(median "${P50[prometheus|$name]:-}") p99=$(median "${P99[prometheus|$name]:-}")
    ratio=$(awk -v a="$h50" -v b="$p50" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    fratio=$(awk -v a="$f50" -v b="$p50" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    printf '| %s | %s | %s / %s | %s / %s | %s / %s | %s | %s |\n' "$name" \
        "${COUNT[head|promtable|$name]:-?}" "$h50" "$h99" "$f50" "$f99" "$p50" "$p99" "$ratio" \
        "$fratio"
    if [[ ${COUNT[head|promtable|$name]:-} != "${COUNT[prometheus|$name]:-}" ]]; then
        printf '|   (Prometheus answered %s) | | | | | | |\n' "${COUNT[prometheus|$name]:-?}"
    fi
done
if [[ $STREAMED == 1 ]]; then
    printf '\nSTREAMED_XOR_CHUNKS (promtable, head): '
    for q in "${QUERIES[@]}"; do
        IFS=';' read -r name win sel _ <<<"$q"
        printf '%s: %s ms; ' "$name" "$(median "${P50[head|streamed|$name]:-}")"
    done
    printf '\n'
fi
