#!/usr/bin/env bash
# shellcheck disable=SC2317  # bench_<target> run from run_rounds (bench/lib.sh)
# Disk benchmark: bytes on disk per sample. Each server gets a fresh data directory and
# exactly SERIES series x SCRAPES scrapes of build/bench/loadgen (counters and gauges,
# every series scraped every INTERVAL_MS, 2 h of 15-s samples by default), is stopped
# gracefully (both flush), and `du` measures its data directory.
#
# Usage: bench/disk.sh            (environment variables below change the load)
#        BASELINE=/other/build/promtable TARGETS="baseline promtable victoriametrics"
#        also measures another build of promtable, in the same rounds.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TARGETS=${TARGETS:-"promtable victoriametrics"}
SERIES=${SERIES:-20000}
SCRAPES=${SCRAPES:-480}                      # samples per series
INTERVAL_MS=${INTERVAL_MS:-15000}
SAMPLES_PER_REQUEST=${SAMPLES_PER_REQUEST:-2000}
CONNECTIONS=${CONNECTIONS:-2}
LABELS=${LABELS:-10}
POOL_MB=${POOL_MB:-4096}                     # must hold every body: nothing is sent twice
VM_BIN=${VM_BIN:-$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)}
PROMTABLE=${PROMTABLE:-$BUILD_DIR/promtable}
BASELINE=${BASELINE:-}                       # target "baseline": this promtable binary
PROMTABLE_ARGS=${PROMTABLE_ARGS:-}
VM_ARGS=${VM_ARGS:-}
KEEP=${KEEP:-0}
ROUNDS=${ROUNDS:-3}

bench_work promtable-disk

bench_build loadgen promtable
LOADGEN=$BUILD_DIR/bench/loadgen
bench_need "$LOADGEN"

TOTAL=$((SERIES * SCRAPES))
if ((TOTAL % SAMPLES_PER_REQUEST)); then
    log "SERIES x SCRAPES must be a multiple of SAMPLES_PER_REQUEST"
    exit 2
fi
LOADGEN_ARGS=(--series "$SERIES" --connections "$CONNECTIONS" --warmup 0
    --requests $((TOTAL / SAMPLES_PER_REQUEST)) --samples-per-request "$SAMPLES_PER_REQUEST"
    --labels "$LABELS" --interval-ms "$INTERVAL_MS" --pool-mb "$POOL_MB")

# shellcheck disable=SC2034  # run_load (bench/lib.sh) sets P99 and UTIL too
declare -A RATE P99 ERRS UTIL OTHER BYTES PERSAMPLE CHECK CMD SRV
LOAD_FIGURES=()
FAILED=0

# measure NAME DIR: after the graceful stop, the directory's size and bytes per sample.
measure() {
    stop_server
    BYTES[$1]=$(du -sb "$2" | cut -f1)
    PERSAMPLE[$1]=$(awk -v b="${BYTES[$1]}" -v n="$TOTAL" 'BEGIN {printf "%.3f", b / n}')
    local sent passes
    sent=$(field total_ok_samples "$RESULT")
    passes=$(field pool_passes "$RESULT")
    if [[ ${ERRS[$1]} != 0 || $sent != "$TOTAL" ]] || awk -v p="$passes" 'BEGIN {exit p <= 1}'; then
        CHECK[$1]="FAILED: ${ERRS[$1]} errors, $sent of $TOTAL samples acknowledged, $passes pool passes"
        return 1
    fi
    CHECK[$1]="ok: $sent samples acknowledged"
}

# promtable_load NAME BINARY
promtable_load() {
    local port dir base
    port=$(free_port)
    dir=$WORK/$1-data
    rm -rf "$dir" && mkdir -p "$dir"
    base=http://127.0.0.1:$port
    # shellcheck disable=SC2086  # PROMTABLE_ARGS is a list of flags
    start_server "$1" "$base/-/ready" "$2" --web.listen-address="127.0.0.1:$port" \
        --storage.embedded.path="$dir" $PROMTABLE_ARGS || { CHECK[$1]="did not start"; return 1; }
    run_load "$1" "$base/api/v1/write" || { stop_server; CHECK[$1]="no result"; return 1; }
    measure "$1" "$dir"
}

bench_promtable() { promtable_load promtable "$PROMTABLE"; }
bench_baseline() { promtable_load baseline "$BASELINE"; }

bench_victoriametrics() {
    vm_load "$(free_port)" $((SERIES * 2 + 1000)) || return 1
    measure victoriametrics "$VM_DIR"
}

log "work directory: $WORK"
run_rounds BYTES PERSAMPLE
print_header "disk benchmark: $SERIES series x $SCRAPES samples every ${INTERVAL_MS} ms" \
    "($TOTAL samples, $LABELS labels/series), graceful stop, du -sb of the data directory," \
    "$ROUNDS round(s), medians"
FMT='%-16s %12s %12s %13s  %s\n'
# shellcheck disable=SC2059  # the format is a variable on purpose
printf "$FMT" target samples "disk bytes" bytes/sample check
for t in $TARGETS; do
    # shellcheck disable=SC2059
    printf "$FMT" "$t" "$TOTAL" "${BYTES[$t]:--}" "${PERSAMPLE[$t]:--}" "${CHECK[$t]:-}"
    if ((ROUNDS > 1)); then echo "  bytes/sample by round:${ROUND_VALUES[PERSAMPLE|$t]}"; fi
done
print_footer PERSAMPLE "bytes per sample"
exit "$FAILED"
