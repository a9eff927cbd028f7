#!/usr/bin/env bash
# shellcheck disable=SC2034  # figures print_table (bench/lib.sh) reads by name
# shellcheck disable=SC2317  # bench_<target> and what they call run from run_rounds (bench/lib.sh)
# Series-churn ingest benchmark: promtable on its embedded store vs VictoriaMetrics (single
# node) under Kubernetes-style pod churn, both fed the same load by build/bench/loadgen.
#
# The active set stays $SERIES series, but every $CHURN_EVERY_MS ms of *sample time* the
# next $CHURN_PERCENT % of them are replaced by new series (their pod label gets a new
# generation; see loadgen's header). loadgen sends sample time much faster than wall time
# (one scrape interval per pass over the series), so a 60 s run goes through many churn
# steps: at ~650,000 samples/s and 100,000 series, about 100 s of sample time per second,
# one 2-minute step every ~1.2 s. What a receiver pays for new series (index rows, series
# lookups, memory per series) is in the figure, which the plain benchmark (bench/run.sh)
# keeps out by warming up.
#
# Same conventions as bench/run.sh: each server runs alone on CPU $SERVER_CPU, the load
# generator on CPU $LOADGEN_CPU, on a fresh data directory and a free loopback port; the
# load generator pre-builds its bodies, warms up (one pass over the first active set),
# then runs the timed phase. Afterwards the script checks that every distinct series sent
# is stored: VictoriaMetrics's /api/v1/series/count, and for promtable one streamed remote
# read of every series over the whole sample range (build/bench/readbench) next to its
# samples counter.
#
# Memory: the pool of pre-built bodies must cover warm-up + timed phase (a run that sends
# the pool again re-sends old series, and churn stops): about 36 KiB per 1000 samples, so
# 70 s at 700,000 samples/s needs ~1.7 GiB (POOL_MB). The check fails when it wrapped.
#
# Usage: bench/churn.sh          (environment variables below change the load)
#        SERIES=20000 DURATION=20 bench/churn.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
TARGETS=${TARGETS:-"promtable victoriametrics"}
SERIES=${SERIES:-100000}                     # active series at any time
CHURN_PERCENT=${CHURN_PERCENT:-10}           # of the active series replaced per step
CHURN_EVERY_MS=${CHURN_EVERY_MS:-120000}     # sample time between churn steps
CONNECTIONS=${CONNECTIONS:-8}
DURATION=${DURATION:-60}                     # seconds, timed phase
WARMUP=${WARMUP:-10}                         # seconds, at least one pass over all series
SAMPLES_PER_REQUEST=${SAMPLES_PER_REQUEST:-2000}
LABELS=${LABELS:-10}
POOL_MB=${POOL_MB:-2048}
VM_BIN=${VM_BIN:-$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)}
PROMTABLE_ARGS=${PROMTABLE_ARGS:-}           # extra flags for promtable
VM_ARGS=${VM_ARGS:-}                         # extra flags for VictoriaMetrics
READ_CHECK=${READ_CHECK:-1}                  # 0: skip promtable's remote read count
KEEP=${KEEP:-0}                              # 1: keep the work directory (logs, data)
ROUNDS=${ROUNDS:-1}                          # runs of every target, alternating; medians
                                             # are reported (other columns: last round)
export PT_KEEP_TMP=$KEEP

pt_mktemp WORK promtable-churn
bench_build promtable loadgen readbench
LOADGEN=$BUILD_DIR/bench/loadgen
READBENCH=$BUILD_DIR/bench/readbench
PROMTABLE=$BUILD_DIR/promtable
bench_need "$LOADGEN"
if [[ $(nproc) -lt 2 ]]; then
    log "warning: fewer than 2 CPUs; server and load generator share a core"
fi

# The first scrape, as loadgen would pick it (now - 24 h, on the hour), given explicitly
# so the read check knows the range every series lies in.
# shellcheck disable=SC2017  # truncating to the hour is the point
START_MS=$((($(date +%s) - 86400) / 3600 * 3600000))
LOADGEN_ARGS=(--series "$SERIES" --connections "$CONNECTIONS" --duration "$DURATION"
    --warmup "$WARMUP" --samples-per-request "$SAMPLES_PER_REQUEST" --labels "$LABELS"
    --pool-mb "$POOL_MB" --start-ms "$START_MS" --churn-percent "$CHURN_PERCENT"
    --churn-every-ms "$CHURN_EVERY_MS")

declare -A RATE P99 ERRS NEWS DISTINCT UTIL OTHER PEAK DISK CHECK CMD SRV
FAILED=0
LOAD_FIGURES=(NEWS=new_series_per_sec DISTINCT=series_total)
SERVER_PID=

# start_server NAME URL-TO-POLL CMD... ; sets SERVER_PID, returns 1 if it never got ready.
start_server() {
    local name=$1 ready=$2
    shift 2
    SRV[$name]="taskset -c $SERVER_CPU $*"
    log "+ ${SRV[$name]}"
    pt_spawn "$WORK/$name.log" taskset -c "$SERVER_CPU" "$@"
    SERVER_PID=$PT_PID
    pt_wait_http "$ready" 30 "$SERVER_PID" && return 0
    log "$name did not get ready; its log:"
    tail -n 20 "$WORK/$name.log" >&2 || true
    stop_server
    return 1
}

# Graceful stop (SIGTERM: both servers flush), then SIGKILL after 60 s.
stop_server() {
    pt_stop "$SERVER_PID" 60 || true
    SERVER_PID=
}

bench_promtable() {
    local port dir base
    if [[ ! -x $PROMTABLE ]]; then
        CHECK[promtable]="not built ($PROMTABLE)"
        return 1
    fi
    pt_free_port port
    dir=$WORK/promtable-data
    rm -rf "$dir" && mkdir -p "$dir"
    base=http://127.0.0.1:$port
    # The read limits are lifted only so the check below can read every series (over
    # 700,000 of them in 60 s: more than the default request memory holds).
    # shellcheck disable=SC2086  # PROMTABLE_ARGS is a list of flags
    start_server promtable "$base/-/ready" "$PROMTABLE" --web.listen-address="127.0.0.1:$port" \
        --storage.embedded.path="$dir" --read.max-series=0 --read.max-samples=0 \
        --web.max-request-memory=4GiB $PROMTABLE_ARGS || { CHECK[promtable]="did not start"; return 1; }
    run_load promtable "$base/api/v1/write" ||
        { stop_server; CHECK[promtable]="no result"; return 1; }
    PEAK[promtable]=$(peak_rss_mib)

    # promtable answers 2xx only after the store acknowledged the batch; its counter must
    # agree, and a remote read of the whole range must find every distinct series.
    local sent got want r series=-
    sent=$(field total_ok_samples "$RESULT")
    want=${DISTINCT[promtable]}
    curl -s "$base/metrics" >"$WORK/promtable.metrics"
    got=$(pt_metric_sum "$WORK/promtable.metrics" promtable_samples_received_total)
    if [[ $READ_CHECK == 1 && -x $READBENCH ]]; then
        log "+ $READBENCH --streamed --requests 1 --warmup 0 (every series, whole range)"
        r=$(taskset -c "$LOADGEN_CPU" "$READBENCH" --url "$base/api/v1/read" --streamed \
            --requests 1 --warmup 0 --start-ms "$START_MS" --end-ms "$(($(date +%s) * 1000))" \
            '__name__=~.+' 2>>"$WORK/readbench.log") || true
        series=$(field series "$r")
        log "  ${r:-readbench failed: $(tail -n 2 "$WORK/readbench.log")}"
    fi
    if ! load_check promtable; then
        :
    elif awk -v g="$got" -v s="$sent" 'BEGIN {exit !(g < s)}'; then
        CHECK[promtable]="FAILED: promtable_samples_received_total=$got < sent $sent"
    elif [[ $series != - && $series != "$want" ]]; then
        CHECK[promtable]="FAILED: remote read found ${series:-no} series, sent $want"
    else
        CHECK[promtable]="ok: samples_received_total=$got, sent $sent"
        [[ $series == - ]] || CHECK[promtable]+="; remote read: $series series, sent $want"
    fi
    finish_target promtable "$dir"
}

bench_victoriametrics() {
    local port dir
    pt_free_port port
    # churn makes many times $SERIES series
    vm_load "$port" $((SERIES * 200 + 1000)) || return 1
    dir=$VM_DIR
    PEAK[victoriametrics]=$(peak_rss_mib)

    vm_check "$(field total_ok_samples "$RESULT")" "${DISTINCT[victoriametrics]}"
    finish_target victoriametrics "$dir"
}

# ---------------------------------------------------------------------------------------
log "work directory: $WORK"
run_rounds RATE NEWS P99 PEAK
print_header "churn benchmark: $SERIES active series, $CHURN_PERCENT % replaced every" \
    "${CHURN_EVERY_MS} ms of sample time, $LABELS labels/series, $SAMPLES_PER_REQUEST" \
    "samples/request, $CONNECTIONS connections, ${WARMUP}s warm-up + ${DURATION}s timed," \
    "$ROUNDS round(s), medians"
# new series/s: series sent for the first time per second of the timed phase; distinct:
# every series sent (warm-up included), what the server must now hold; srv CPU: server
# cores busy; other CPU: cores busy with neither server nor loadgen; peak: VmHWM.
FMT='%-16s %11s %8s %6s %13s %9s %7s %9s %9s %8s  %s\n'
print_table "$FMT" target "$TARGETS" samples/s=RATE "p99 ms=P99" errors=ERRS "new series/s=NEWS" \
    distinct=DISTINCT "srv CPU=UTIL" "other CPU=OTHER" "peak MiB=PEAK" "disk MiB=DISK" check=CHECK
if ((ROUNDS > 1)); then
    for t in $TARGETS; do
        echo "$t by round: samples/s${ROUND_VALUES[RATE|$t]};" \
            "new series/s${ROUND_VALUES[NEWS|$t]}; p99 ms${ROUND_VALUES[P99|$t]};" \
            "peak MiB${ROUND_VALUES[PEAK|$t]}"
    done
fi
print_footer PEAK "peak RSS"
exit "$FAILED"
