#!/usr/bin/env bash
# storage.retention through the daemon: samples older than the retention are accepted
# (backfill) but a remote read never returns them, whatever window it asks for; recent
# ones read back. The compaction side is tested in tests/unit/t_retention.c.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl
pt_tools

pt_mktemp DIR retention
pt_free_port PORT
URL=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/store" --storage.retention=1h
PID=$PT_PID
if ! pt_wait_http "$URL/-/ready" 30 "$PID"; then
    tap_bail "promtable did not start: $(tail -n 3 "$DIR/promtable.log")"
fi

NOW=$(($(date +%s) * 1000))
# load START: 200 series x 20 samples, 15 s apart from START on.
load() {
    "$LOADGEN" --url "$URL/api/v1/write" --series 200 --connections 1 --requests 2 \
        --warmup 0 --start-ms "$1" --interval-ms 15000 2>>"$DIR/loadgen.log" | grep '^result:'
}
# read START END: "series=N samples=M" of a read of every series.
read_back() {
    "$READBENCH" --url "$URL/api/v1/read" --start-ms "$1" --end-ms "$2" --requests 1 \
        --warmup 0 '__name__=~.+' 2>>"$DIR/readbench.log" | grep -o 'series=[0-9]* samples=[0-9]*'
}

OLD=$((NOW - 3 * 3600000))
tap_check "samples 3 h old accepted" grep -q ' errors=0 ' <<<"$(load $OLD)"
tap_is "$(read_back $((OLD - 60000)) $((OLD + 3600000)))" "series=0 samples=0" \
    "a read of their window gets nothing"
tap_is "$(read_back 0 "$NOW")" "series=0 samples=0" "nor does a read of everything"

RECENT=$((NOW - 600000))
tap_check "recent samples accepted" grep -q ' errors=0 ' <<<"$(load $RECENT)"
tap_is "$(read_back $((OLD - 60000)) $((NOW + 3600000)))" "series=200 samples=4000" \
    "a read from before the retention returns exactly the recent samples"

m=$(curl -s "$URL/metrics")
tap_check "/metrics has promtable_retention_dropped_total" \
    grep -q '^promtable_retention_dropped_total ' <<<"$m"
pt_stop "$PID" 15
tap_is "$?" 0 "promtable exits 0 on SIGTERM"
tap_done
