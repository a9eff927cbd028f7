#!/usr/bin/env bash
# What deleting series costs: a fresh embedded store gets SERIES series (bench/loadgen's
# model, 10 labels) with SAMPLES samples each 15 s apart, ending now; then, one after the
# other, each of DELETES (match[] selectors) is deleted over all time through
# POST /api/v1/admin/tsdb/delete_series, and last the first half of the window is deleted
# from every series of METRIC. Per delete: the series it selected (counted with
# /api/v1/series before), its wall time, and the series left.
#
#   flock /tmp/pt-bench.lock bench/delete.sh
#
# Environment: PT_BUILD_DIR (default ./build), SERIES (100000), SAMPLES (240),
# DELETES ('{__name__="node_cpu_seconds_total"} {__name__=~"node_disk_.+"}': the first
# delete flushes the head, the second finds it empty), METRIC (node_network_receive_bytes_total).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/tests/e2e/lib.sh"
B=${PT_BUILD_DIR:-$ROOT/build}
PROMTABLE=$B/promtable LOADGEN=$B/bench/loadgen
SERIES=${SERIES:-100000} SAMPLES=${SAMPLES:-240}
DELETES=${DELETES:-'{__name__="node_cpu_seconds_total"} {__name__=~"node_disk_.+"}'}
METRIC=${METRIC:-node_network_receive_bytes_total}
pt_require curl jq

pt_mktemp DIR delete-bench
pt_free_port PORT
URL=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/store" --web.enable-admin-api --api.max-results=10000000
PID=$PT_PID
pt_wait_http "$URL/-/ready" 30 "$PID" || { echo "promtable did not start" >&2; exit 1; }
NOW=$(($(date +%s) * 1000))
START=$((NOW - SAMPLES * 15000))
"$LOADGEN" --url "$URL/api/v1/write" --series "$SERIES" --connections 2 --warmup 0 \
    --requests $((SERIES * SAMPLES / 2000)) --start-ms "$START" --interval-ms 15000 \
    >"$DIR/loadgen.log" 2>&1 || { echo "loadgen failed" >&2; exit 1; }
echo "loaded: $(grep '^result:' "$DIR/loadgen.log")"
# series SELECTOR: how many series it selects over the window
series() {
    curl -s --data-urlencode "match[]=$1" --data-urlencode "start=$((START / 1000))" \
        "$URL/api/v1/series" | jq '.data | length'
}
# delete SELECTOR [START END]: "<status> <seconds>"
delete() {
    local args=(--data-urlencode "match[]=$1")
    [ $# -gt 1 ] && args+=(--data-urlencode "start=$2" --data-urlencode "end=$3")
    curl -s -o /dev/null -w '%{http_code} %{time_total}' -X POST "${args[@]}" \
        "$URL/api/v1/admin/tsdb/delete_series"
}
all='{__name__=~".+"}'
echo "series before: $(series "$all")"
for sel in $DELETES; do
    n=$(series "$sel")
    echo "delete $sel over all time: $n series, $(delete "$sel") (status, s); series left: $(series "$all")"
done
sel="{__name__=\"$METRIC\"}"
n=$(series "$sel")
mid=$(((START + NOW) / 2000))
echo "delete $sel, first half of the window: $n series, $(delete "$sel" $((START / 1000)) "$mid") (status, s); its series left: $(series "$sel")"
pt_stop "$PID" 15
