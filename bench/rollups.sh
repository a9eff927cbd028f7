#!/usr/bin/env bash
# Roll-ups benchmark: long-range remote reads from the raw data against a 5m and a 1h
# stage (storage.rollups), on the embedded store.
#
# Data (build/bench/monthgen): $SERIES series under $METRICS metric names (half integer
# counters, half full-mantissa gauges), one sample every $STEP_MS ms for $DAYS days, 7 s
# past the minute as scrapes with an offset. promtable gets it as a remote-write backfill
# with stages of 5m and 1h (storage.rollups_delay 1m); the builder's time to catch up and
# the cells it wrote are reported, then bytes on disk after a graceful stop, then the
# reads on a restarted promtable (everything flushed).
#
# Reads (build/bench/readbench on CPU $CLIENT_CPU, promtable on CPU $SERVER_CPU): each
# shape over the last $READ_DAYS whole days as Prometheus asks for max_over_time(x[R])
# every hour: raw (no ?resolution=auto), R = 20m (the 5m stage) and R = 1h (the 1h stage).
# Reported per shape and source: the median over $ROUNDS rounds of each round's p50 of
# $REQUESTS requests, samples and bytes of the answer, and the rows the store visited a
# request (promtable_read_rows_scanned_total).
#
# Usage: bench/rollups.sh                  (about 5 minutes on 2 cores at the defaults)
#        SERIES=200 DAYS=7 bench/rollups.sh
set -u

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
SERIES=${SERIES:-2000}
METRICS=${METRICS:-20}
DAYS=${DAYS:-30}
READ_DAYS=${READ_DAYS:-$((DAYS - 1))}
STEP_MS=${STEP_MS:-60000}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-5}
CLIENT_CPU=${CLIENT_CPU:-1}
export PT_KEEP_TMP=${KEEP:-0}

bench_work rollups
bench_build promtable monthgen readbench
PROMTABLE=$BUILD_DIR/promtable MONTHGEN=$BUILD_DIR/bench/monthgen READBENCH=$BUILD_DIR/bench/readbench
bench_need "$PROMTABLE" "$MONTHGEN" "$READBENCH"

HOUR=3600000
DAY=86400000
NOW=$(($(date +%s) * 1000))
END=$((NOW / HOUR * HOUR - 2 * HOUR))
START=$((END - READ_DAYS * DAY))
TOTAL=$((SERIES * DAYS * DAY / STEP_MS))
STAGES=$'5m 0\n1h 0'
ARGS=(--storage.rollups="$STAGES" --storage.rollups-delay=1m --read.rollups)

metric() { curl -s "http://127.0.0.1:$SRV_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

log "$SERIES series x $DAYS days at $STEP_MS ms ($TOTAL samples), stages 5m and 1h"
read_server promtable "$WORK/data" "${ARGS[@]}"
t0=$(date +%s.%N)
r=$(taskset -c "$CLIENT_CPU" "$MONTHGEN" --series "$SERIES" --metrics "$METRICS" --days "$DAYS" \
    --step-ms "$STEP_MS" --offset-ms 7000 write "http://127.0.0.1:$SRV_PORT/api/v1/write" \
    2>"$WORK/monthgen.log" | grep '^result:')
[[ $(field failed "$r") == 0 ]] || { log "backfill failed: $r"; exit 1; }
t1=$(date +%s.%N)
# The builder passes every 10 s; caught up when both stages are within 2 h of now.
for _ in $(seq 1800); do
    lag=$(metric promtable_rollup_lag_seconds)
    awk -v l="${lag:-0}" 'BEGIN { exit !(l > 0 && l < 7200) }' && break
    sleep 1
done
t2=$(date +%s.%N)
cells=$(metric promtable_rollup_cells_written_total)
pt_stop "$SRV_PID" 600
disk=$(du -sb "$WORK/data" | cut -f1)

# The stages' own bytes: the same data without them, for the difference.
read_server promtable "$WORK/raw" --storage.rollups-delay=1m
taskset -c "$CLIENT_CPU" "$MONTHGEN" --series "$SERIES" --metrics "$METRICS" --days "$DAYS" \
    --step-ms "$STEP_MS" --offset-ms 7000 write "http://127.0.0.1:$SRV_PORT/api/v1/write" \
    >/dev/null 2>&1
pt_stop "$SRV_PID" 600
raw_disk=$(du -sb "$WORK/raw" | cut -f1)
rm -rf "$WORK/raw"

read_server promtable "$WORK/data" "${ARGS[@]}"
SHAPES=(
    "1 series x ${READ_DAYS} days|__name__=bench_gauge_$(printf %02d $((METRICS / 2))) instance=host-0000:9100"
    "200 series (one job) x ${READ_DAYS} days|job=job-00"
)
SOURCES=("raw|" "5m|3600000,1200000,max_over_time" "1h|3600000,3600000,max_over_time")
declare -A P50 SAMPLES BYTES ROWS
for ((round = 1; round <= ROUNDS; round++)); do
    for shape in "${SHAPES[@]}"; do
        name=${shape%%|*}
        read -r -a ms <<<"${shape#*|}"
        for src in "${SOURCES[@]}"; do
            s=${src%%|*} h=${src#*|} url="http://127.0.0.1:$SRV_PORT/api/v1/read"
            extra=()
            [[ -n $h ]] && extra=(--hints "$h") && url+="?resolution=auto"
            before=$(metric promtable_read_rows_scanned_total)
            R=$(taskset -c "$CLIENT_CPU" "$READBENCH" --url "$url" --start-ms "$START" \
                --end-ms "$END" --requests "$REQUESTS" --warmup 1 "${extra[@]}" "${ms[@]}" \
                2>>"$WORK/readbench.log" | grep '^result:')
            after=$(metric promtable_read_rows_scanned_total)
            key="$name|$s"
            P50[$key]+=" $(field p50_ms "$R")"
            SAMPLES[$key]=$(field samples "$R")
            BYTES[$key]=$(field answer_bytes "$R")
            ROWS[$key]=$(((after - before) / (REQUESTS + 1)))
            log "round $round: $key: $R"
        done
    done
done
pt_stop "$SRV_PID" 600

awk_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
echo
echo "Roll-ups: $SERIES series x $DAYS days at $STEP_MS ms, stages 5m and 1h ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null))"
echo "backfill: $(field samples_per_s "$r") samples/s; builder caught up $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", b - a }') s after it, $cells cells"
echo "disk: $(awk_ratio "$disk" "$TOTAL") bytes a raw sample with the stages, $(awk_ratio "$raw_disk" "$TOTAL") without (stages $(awk -v a="$disk" -v b="$raw_disk" 'BEGIN { printf "%.1f", (a - b) * 100 / b }') %)"
echo
printf '| %s | %s | %s | %s | %s | %s |\n' query source "p50 ms" samples "answer bytes" "rows visited"
printf '| --- | --- | --- | --- | --- | --- |\n'
for shape in "${SHAPES[@]}"; do
    name=${shape%%|*}
    for src in "${SOURCES[@]}"; do
        s=${src%%|*} key="$name|${src%%|*}"
        printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$s" "$(median "${P50[$key]}")" \
            "${SAMPLES[$key]}" "${BYTES[$key]}" "${ROWS[$key]}"
    done
done
