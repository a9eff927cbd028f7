#!/usr/bin/env bash
# shellcheck disable=SC2034  # figures print_table (bench/lib.sh) reads by name
# shellcheck disable=SC2317  # bench_<target> and what they call run from run_rounds (bench/lib.sh)
# Ingest benchmark: promtable on its embedded store vs VictoriaMetrics (single node), both
# fed the same Prometheus remote_write load by build/bench/loadgen.
#
# Each server runs alone on CPU $SERVER_CPU, the load generator on CPU $LOADGEN_CPU, on a
# fresh data directory and a free loopback port. The load generator pre-builds its request
# bodies, warms up (at least one pass over every series, so series creation is not in the
# figure), then runs the timed phase. Afterwards the script checks the samples were really
# stored, so the figure cannot come from fast rejects.
#
# Usage: bench/run.sh            (environment variables below change the load)
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TARGETS=${TARGETS:-"promtable victoriametrics"}
SERIES=${SERIES:-100000}
CONNECTIONS=${CONNECTIONS:-8}
DURATION=${DURATION:-30}                     # seconds, timed phase
WARMUP=${WARMUP:-10}                         # seconds, at least one pass over all series
SAMPLES_PER_REQUEST=${SAMPLES_PER_REQUEST:-2000}
SAMPLES_PER_SERIES=${SAMPLES_PER_SERIES:-1}  # samples per TimeSeries entry (Prometheus: 1)
LABELS=${LABELS:-10}
PROTOCOL=${PROTOCOL:-1}                      # remote write version promtable is sent (1 or 2);
                                             # VictoriaMetrics 1.79 takes 1.0 only and always gets it
POOL_MB=${POOL_MB:-2048}                     # must hold warm-up + timed phase: a run that
                                             # outruns it re-sends old timestamps (rewrites)
VM_BIN=${VM_BIN:-$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)}
PROMTABLE_ARGS=${PROMTABLE_ARGS:-}           # extra flags for promtable
VM_ARGS=${VM_ARGS:-}                         # extra flags for VictoriaMetrics
KEEP=${KEEP:-0}                              # 1: keep the work directory (logs, data)
ROUNDS=${ROUNDS:-1}                          # runs of every target, alternating; medians
                                             # are reported (other columns: last round)

bench_work promtable-bench

# ---------------------------------------------------------------------------------------
BUILD_TARGETS=(loadgen)
[[ " $TARGETS " == *" promtable "* ]] && BUILD_TARGETS+=(promtable)
bench_build "${BUILD_TARGETS[@]}"
LOADGEN=$BUILD_DIR/bench/loadgen
PROMTABLE=$BUILD_DIR/promtable
bench_need "$LOADGEN"

if [[ $(nproc) -lt 2 ]]; then
    log "warning: fewer than 2 CPUs; server and load generator share a core"
fi

LOADGEN_ARGS=(--series "$SERIES" --connections "$CONNECTIONS" --duration "$DURATION"
    --warmup "$WARMUP" --samples-per-request "$SAMPLES_PER_REQUEST"
    --samples-per-series "$SAMPLES_PER_SERIES" --labels "$LABELS" --pool-mb "$POOL_MB")

declare -A RATE P99 MAXMS ERRS PERCPU UTIL OTHER DISK PEAK CHECK CMD SRV
FAILED=0
LOAD_FIGURES=(PERCPU=samples_per_server_cpu_s MAXMS=max_ms)


# finish_checked NAME DIR: load_check's verdict over CHECK[NAME], then PEAK[NAME] and
# finish_target.
finish_checked() {
    load_check "$1" || true
    PEAK[$1]=$(peak_rss_mib)
    finish_target "$1" "$2"
}

bench_promtable() {
    local port dir base
    if [[ ! -x $PROMTABLE ]]; then
        CHECK[promtable]="not built ($PROMTABLE)"
        return 1
    fi
    port=$(free_port)
    dir=$WORK/promtable-data
    rm -rf "$dir" && mkdir -p "$dir"
    base=http://127.0.0.1:$port
    # shellcheck disable=SC2086  # PROMTABLE_ARGS is a list of flags
    start_server promtable "$base/-/ready" "$PROMTABLE" --web.listen-address="127.0.0.1:$port" \
        --storage.embedded.path="$dir" $PROMTABLE_ARGS || { CHECK[promtable]="did not start"; return 1; }
    local v1_args=("${LOADGEN_ARGS[@]}")
    LOADGEN_ARGS+=(--protocol "$PROTOCOL")
    run_load promtable "$base/api/v1/write" ||
        { LOADGEN_ARGS=("${v1_args[@]}"); stop_server; CHECK[promtable]="no result"; return 1; }
    LOADGEN_ARGS=("${v1_args[@]}")

    # promtable answers 2xx only after the store acknowledged the batch, so zero errors
    # means every sample was stored; its own counter, when it has one, must agree.
    local sent got
    sent=$(field total_ok_samples "$RESULT")
    got=$(curl -s "$base/metrics" |
        awk '/^promtable_samples_received_total[ {]/ {s += $NF; n++} END {if (n) printf "%.0f", s}')
    if [[ -z $got ]]; then
        CHECK[promtable]="ok: 0 errors ($sent samples acknowledged; no samples counter)"
    elif [[ $got -ge $sent ]]; then
        CHECK[promtable]="ok: promtable_samples_received_total=$got, sent $sent"
    else
        CHECK[promtable]="FAILED: promtable_samples_received_total=$got < sent $sent"
    fi
    finish_checked promtable "$dir"
}

bench_victoriametrics() {
    local port dir
    port=$(free_port)
    vm_load "$port" $((SERIES * 2 + 1000)) || return 1
    dir=$VM_DIR

    local sent want_series
    sent=$(field total_ok_samples "$RESULT")
    # Every series was sent at least once unless the run was shorter than one pass.
    want_series=$((sent / SAMPLES_PER_SERIES < SERIES ? sent / SAMPLES_PER_SERIES : SERIES))
    vm_check "$sent" "$want_series"
    PEAK[victoriametrics]=$(peak_rss_mib)
    finish_target victoriametrics "$dir"
}

# ---------------------------------------------------------------------------------------
log "work directory: $WORK"
run_rounds RATE PERCPU P99 MAXMS
print_header "ingest benchmark (promtable sent remote write $PROTOCOL.0): $SERIES series, $LABELS labels/series, $SAMPLES_PER_REQUEST" \
    "samples/request, $CONNECTIONS connections, ${WARMUP}s warm-up + ${DURATION}s timed," \
    "$ROUNDS round(s), medians"
# samples/CPU-s: samples per second of server CPU time (all its threads) in the timed
# phase; p99/max ms: write latency (with ROUNDS > 1 the medians of the rounds' figures);
# srv CPU: server cores busy; other CPU: cores busy with neither server nor loadgen.
FMT='%-16s %11s %8s %8s %6s %13s %7s %9s %8s %8s  %s\n'
print_table "$FMT" target "$TARGETS" samples/s=RATE "p99 ms=P99" "max ms=MAXMS" errors=ERRS \
    samples/CPU-s=PERCPU "srv CPU=UTIL" "other CPU=OTHER" "disk MiB=DISK" "peak RSS=PEAK" \
    check=CHECK
if ((ROUNDS > 1)); then
    for t in $TARGETS; do
        echo "$t samples/s by round:${ROUND_VALUES[RATE|$t]}"
        echo "$t p99 / max ms by round:${ROUND_VALUES[P99|$t]} /${ROUND_VALUES[MAXMS|$t]}"
    done
fi
print_footer PERCPU "samples per server CPU-second"
exit "$FAILED"
