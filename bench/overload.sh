#!/usr/bin/env bash
# Overload benchmark: promtable on its embedded store offered 4x the remote-write load it
# sustains, with the overload limits on (web.max_inflight_requests and the body memory
# limits answer 503 + Retry-After past them).
#
#   1. Sustainable load: a fresh promtable (pinned to $SERVER_CPU) takes closed-loop load
#      from build/bench/loadgen on $CONNECTIONS connections (pinned to $LOADGEN_CPU); its
#      requests/s is the sustainable rate R.
#   2. Overload: a fresh promtable, then open-loop load at $FACTOR x R requests/s on
#      $OVER_CONNECTIONS connections (request i starts at i / rate s; a warm-up that
#      creates every series, then the timed phase). A body answered 503 is sent again at
#      its connection's next turn, as Prometheus retries it. Meanwhile /metrics is polled
#      for the in-flight and body-memory gauges.
#   3. Reports peak RSS (VmHWM), admitted (2xx) latency p50/p99/max, the 503 count, the
#      highest gauges seen against their limits, and reads everything back with one
#      streamed remote read (build/bench/readbench): the samples stored must equal the
#      samples acknowledged with 2xx (warm-up + timed phase): nothing acknowledged is lost,
#      nothing refused is stored.
#
# Run it under the benchmark lock: flock /tmp/pt-bench.lock bench/overload.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SERIES=${SERIES:-20000}
CONNECTIONS=${CONNECTIONS:-8}                # phase 1 (closed loop)
OVER_CONNECTIONS=${OVER_CONNECTIONS:-64}     # phase 2 (open loop)
FACTOR=${FACTOR:-4}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-2}
SAMPLES_PER_REQUEST=${SAMPLES_PER_REQUEST:-2000}
POOL_MB=${POOL_MB:-1024}
WORKERS=${WORKERS:-2}
MAX_INFLIGHT=${MAX_INFLIGHT:-8}
MAX_BODY_MEMORY=${MAX_BODY_MEMORY:-64MiB}
KEEP=${KEEP:-0}
TARGETS=promtable                            # for print_header (bench/lib.sh)
VM_BIN=${VM_BIN:-/usr/bin/victoria-metrics}
declare -A SRV CMD

bench_work promtable-overload

bench_build loadgen readbench promtable
LOADGEN=$BUILD_DIR/bench/loadgen
READBENCH=$BUILD_DIR/bench/readbench
PROMTABLE=$BUILD_DIR/promtable
bench_need "$LOADGEN" "$READBENCH" "$PROMTABLE"

# First scrape: a day ago, on the hour (loadgen's own default, fixed here for the read-back).
START_MS=$((($(date +%s) - 86400) / 3600 * 3600 * 1000))

# start_promtable NAME: a fresh store, the overload limits, the server pinned.
start_promtable() {
    PORT=$(free_port)
    rm -rf "$WORK/$1-data"
    start_server "$1" "http://127.0.0.1:$PORT/-/ready" "$PROMTABLE" \
        --web.listen-address="127.0.0.1:$PORT" --storage.embedded.path="$WORK/$1-data" \
        --web.workers="$WORKERS" --web.max-inflight-requests="$MAX_INFLIGHT" \
        --web.max-body-memory="$MAX_BODY_MEMORY"
}

# load NAME ARGS...: loadgen against the running server; RESULT gets its result line.
load() {
    local name=$1
    shift
    local args=(--url "http://127.0.0.1:$PORT/api/v1/write" --series "$SERIES"
        --samples-per-request "$SAMPLES_PER_REQUEST" --duration "$DURATION" --warmup "$WARMUP"
        --pool-mb "$POOL_MB" --start-ms "$START_MS" --server-pid "$SERVER_PID" "$@")
    CMD[$name]="taskset -c $LOADGEN_CPU $LOADGEN ${args[*]}"
    log "+ ${CMD[$name]}"
    taskset -c "$LOADGEN_CPU" "$LOADGEN" "${args[@]}" 2>"$WORK/$name.loadgen.log" \
        >"$WORK/$name.result" || true
    RESULT=$(grep '^result:' "$WORK/$name.result" || true)
    [[ -n $RESULT ]] || { tail -n 20 "$WORK/$name.loadgen.log" >&2; exit 1; }
    log "$RESULT"
}

# ------------------------------------------------------------------ 1. sustainable rate
start_promtable sustain
load sustain --connections "$CONNECTIONS"
RATE=$(field requests_per_sec "$RESULT")
SUSTAIN_P99=$(field p99_ms "$RESULT")
SUSTAIN_SPS=$(field samples_per_sec "$RESULT")
SUSTAIN_RSS=$(peak_rss_mib)
stop_server
OFFER=$(awk -v r="$RATE" -v f="$FACTOR" 'BEGIN { printf "%.1f", r * f }')

# -------------------------------------------------------------------------- 2. overload
start_promtable overload
# The gauges, polled while the load runs: the highest values seen.
(
    while kill -0 "$SERVER_PID" 2>/dev/null; do
        curl -s --max-time 1 "http://127.0.0.1:$PORT/metrics" |
            awk '/^promtable_http_inflight_requests / {i = $2}
                 /^promtable_http_body_bytes / {b = $2}
                 END {if (i != "") print i, b}'
        sleep 0.1
    done
) >"$WORK/gauges.txt" 2>/dev/null &
POLL_PID=$!
load overload --connections "$OVER_CONNECTIONS" --rate "$OFFER" --retry-503
OVER_RSS=$(peak_rss_mib)
curl -s "http://127.0.0.1:$PORT/metrics" >"$WORK/overload.metrics"

# ------------------------------------------------------------------------ 3. read back
ACKED=$(field total_ok_samples "$RESULT")
PASSES=$(field pool_passes "$RESULT")
"$READBENCH" --url "http://127.0.0.1:$PORT/api/v1/read" --streamed --requests 1 --warmup 0 \
    --start-ms "$START_MS" --end-ms $((START_MS + 400 * 86400000)) '__name__=~.+' \
    >"$WORK/read.result" 2>"$WORK/read.log" || true
STORED=$(field samples "$(grep '^result:' "$WORK/read.result" || true)")
kill "$POLL_PID" 2>/dev/null || true
wait "$POLL_PID" 2>/dev/null || true
stop_server

read -r MAX_INFLIGHT_SEEN MAX_BODY_SEEN < <(awk '$1 > i {i = $1} $2 > b {b = $2}
    END {printf "%d %d\n", i, b}' "$WORK/gauges.txt")
REJECTED=$(awk '/^promtable_http_overload_rejected_total/ {s += $NF} END {printf "%d", s}' \
    "$WORK/overload.metrics")
if awk -v p="$PASSES" 'BEGIN { exit !(p > 1) }'; then
    VERDICT="inconclusive: the pool was sent again ($PASSES passes); raise POOL_MB"
elif [[ -z $STORED ]]; then
    VERDICT="FAILED: the read-back did not answer ($(tail -n 1 "$WORK/read.log"))"
elif [[ $STORED == "$ACKED" ]]; then
    VERDICT="ok: $STORED samples stored = $ACKED acknowledged"
else
    VERDICT="FAILED: $STORED samples stored, $ACKED acknowledged"
fi

print_header "overload benchmark: $SERIES series, $SAMPLES_PER_REQUEST samples/request," \
    "$WORKERS workers, web.max_inflight_requests=$MAX_INFLIGHT," \
    "web.max_body_memory=$MAX_BODY_MEMORY, ${WARMUP}s warm-up + ${DURATION}s"
printf '%-28s %s\n' \
    "sustainable (closed, $CONNECTIONS conn)" \
    "$RATE req/s = $SUSTAIN_SPS samples/s, p99 $SUSTAIN_P99 ms, peak RSS $SUSTAIN_RSS MiB" \
    "offered (open, $OVER_CONNECTIONS conn)" \
    "$OFFER req/s asked, $(field offered_per_sec "$RESULT") req/s sent" \
    "admitted" \
    "$(field requests_per_sec "$RESULT") req/s = $(field samples_per_sec "$RESULT") samples/s" \
    "admitted latency" \
    "p50 $(field ok_p50_ms "$RESULT") ms, p99 $(field ok_p99_ms "$RESULT") ms, max $(field ok_max_ms "$RESULT") ms" \
    "refused" \
    "$(field rejected_503 "$RESULT") x 503 (loadgen), $REJECTED on /metrics, other errors $(($(field errors "$RESULT") - $(field rejected_503 "$RESULT")))" \
    "peak RSS" "$OVER_RSS MiB" \
    "highest gauges seen" \
    "in flight $MAX_INFLIGHT_SEEN (limit $MAX_INFLIGHT), body bytes $MAX_BODY_SEEN (limit $MAX_BODY_MEMORY)" \
    "read-back" "$VERDICT"
echo
echo "commands:"
echo "  server:  ${SRV[overload]}"
echo "  phase 1: ${CMD[sustain]}"
echo "  phase 2: ${CMD[overload]}"
[[ $VERDICT == ok* ]]
