#!/usr/bin/env bash
# Exemplars end to end: a real Prometheus 2.42 (--enable-feature=exemplar-storage) scrapes
# the test exporter in exemplars mode (tests/tools/exporter.c `exporter exemplars`:
# OpenMetrics text, a new exemplar on four series every scrape, with and without their own
# timestamp, a UTF-8 label value, negative values) and remote-writes to promtable with
# `send_exemplars: true` (remote write 1.0: each exemplar in a TimeSeries entry of its own).
#
# What promtable returns (remote read SAMPLES, TimeSeries.exemplars, printed by
# tests/tools/rwtool readresp) must be what the writer answers at /api/v1/query_exemplars,
# after promtable's documented cap (docs/storage-format.md, "Exemplars"): per series, the
# newest exemplar of each 16.384 s window. Series labels, exemplar labels, timestamps (ms)
# and value bits are compared exactly. Only windows the writer has closed are compared:
# exemplars arrive in time order, so the newest of a closed window is final. Also: the
# writer counts no failed or dropped exemplars, and promtable none out of order.
# Synchronisation is by polling (the writer's exemplar storage, then promtable's answer).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require prometheus curl jq awk
B=${PT_BUILD_DIR:-$here/build}
PROMTABLE=$B/promtable EXPORTER=$B/tests/exporter RWTOOL=$B/tests/rwtool
pt_built "$PROMTABLE" "$EXPORTER" "$RWTOOL"
W=16384 # promtable's exemplar window, ms
WINDOWS=${PT_EX_WINDOWS:-2} # closed windows to compare

pt_mktemp DIR exemplars
pt_free_port PTPORT
pt_free_port EXPORT_PORT
pt_free_port PROMPORT

pt_start_promtable "$DIR/promtable.log" "$PTPORT" --storage.embedded.path="$DIR/store"
pt_start_exporter "$DIR/exporter.log" exemplars "$EXPORT_PORT"

pt_start_writer "$DIR" "$PROMPORT" exemplars "$EXPORT_PORT" "$PTPORT" send_exemplars exemplar-storage
API=http://127.0.0.1:$PROMPORT/api/v1

# exemplars FILE: the writer's exemplars of every test_exemplar series of the last hour.
exemplars() {
    local now
    now=$(date +%s)
    curl -fsS --max-time 10 -o "$1" "$API/query_exemplars" \
        --data-urlencode 'query={__name__=~"test_exemplar_.+"}' \
        --data-urlencode "start=$((now - 3600))" --data-urlencode "end=$((now + 60))"
}

# A window is closed once no later scrape can add to it: a scrape's exemplars are at its
# time or (those the exporter stamps) 1.5 s before, and later scrapes come after the newest
# exemplar seen, so the windows that end 2 s before that are closed.
CLOSED='((([.data[].exemplars[].timestamp | . * 1000 | round] | max) // 2000) - 2000) / $w | floor'
# Wait until the writer has exemplars of all 4 series, each in WINDOWS closed windows.
kept_windows() {
    exemplars "$DIR/poll.json" &&
        jq -e --argjson w "$W" --argjson n "$WINDOWS" "($CLOSED) as \$last | [.data[]
            | [.exemplars[].timestamp | . * 1000 | round | ./\$w | floor]]
            | length == 4 and all(.[]; length > 0 and \$last - min >= \$n)" \
            "$DIR/poll.json" >/dev/null
}
pt_wait_writer $(((WINDOWS + 2) * W / 1000 + 60)) "keep exemplars over $WINDOWS windows" \
    kept_windows
NSERIES=$(jq '[.data[] | select((.exemplars | length) > 0)] | length' "$DIR/poll.json")
tap_is "$NSERIES" 4 "the writer scraped exemplars of 4 series"

# The windows before WEND are closed; TSTART is the oldest exemplar.
WEND=$(jq --argjson w "$W" "($CLOSED) * \$w" "$DIR/poll.json")
TSTART=$(jq '[.data[].exemplars[].timestamp | . * 1000 | round] | min' "$DIR/poll.json")
# In rwtool readresp's form, the value as the writer wrote it (turned into bits below).
jq -r --argjson w "$W" --argjson wend "$WEND" '.data[] |
    ("{" + (.seriesLabels | to_entries | sort_by(.key) | map("\(.key)=\"\(.value)\"")
        | join(",")) + "}") as $ls |
    .exemplars | map(. + {t: (.timestamp * 1000 | round)}) | map(select(.t < $wend)) |
    group_by(.t / $w | floor) | map(max_by(.t))[] |
    [$ls, (.t | tostring), "x", (.labels | to_entries | sort_by(.key)
        | map("\(.key)=\(.value)") | join(",")), .value] | join(" ")' \
    "$DIR/poll.json" >"$DIR/writer.raw" || tap_bail "jq failed on the writer's answer"
: >"$DIR/want"
while IFS= read -r line; do
    bits=$("$RWTOOL" bits "${line##* }") || tap_bail "rwtool bits ${line##* }"
    echo "${line% *} $bits" >>"$DIR/want"
done <"$DIR/writer.raw"
sort -o "$DIR/want" "$DIR/want"
WANT=$(wc -l <"$DIR/want")
if [ "$WANT" -ge $((NSERIES * WINDOWS)) ]; then
    tap_ok "the writer's newest exemplar of each closed window: $WANT (series x windows)"
else
    tap_not_ok "the writer's newest exemplar of each closed window: $WANT, want >= $((NSERIES * WINDOWS))"
fi
# How many the writer has in those windows before the cap: at least one a scrape.
ALL=$(jq --argjson wend "$WEND" '[.data[].exemplars[].timestamp | . * 1000 | round
    | select(. < $wend)] | length' "$DIR/poll.json")
tap_diag "the writer holds $ALL exemplars in the compared windows; promtable keeps $WANT"

# readback: every exemplar promtable returns for the test series in [TSTART, WEND).
readback() {
    : >"$DIR/got"
    for name in test_exemplar_requests_total test_exemplar_latency_seconds_bucket; do
        "$RWTOOL" readreq "$DIR/read.bin" "$TSTART" $((WEND - 1)) "__name__=$name" ||
            tap_bail "rwtool readreq failed"
        curl -fsS --max-time 10 -o "$DIR/answer.bin" -X POST --data-binary @"$DIR/read.bin" \
            -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
            -H 'X-Prometheus-Remote-Read-Version: 0.1.0' \
            "http://127.0.0.1:$PTPORT/api/v1/read" || return 1
        "$RWTOOL" readresp "$DIR/answer.bin" | awk '$3 == "x"' >>"$DIR/got" || return 1
    done
    sort -o "$DIR/got" "$DIR/got"
}
deadline=$((SECONDS + 60))
while :; do
    readback && cmp -s "$DIR/got" "$DIR/want" && break
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.5
done
if cmp -s "$DIR/got" "$DIR/want"; then
    tap_ok "promtable returns exactly those $WANT exemplars: labels, times and value bits"
else
    tap_not_ok "promtable returns exactly the writer's newest exemplar of each window"
    diff "$DIR/want" "$DIR/got" | head -n 20 | sed 's/^/# /'
fi
if grep -q 'user=é✓' "$DIR/got" && grep -Eq ' (bff|c0)[0-9a-f]{13,14}$' "$DIR/got"; then
    tap_ok "among them a UTF-8 label value and negative values"
else
    tap_not_ok "among them a UTF-8 label value and negative values"
fi

curl -fsS --max-time 10 -o "$DIR/metrics.txt" "http://127.0.0.1:$PROMPORT/metrics" ||
    tap_bail "writer /metrics failed"
for m in exemplars_failed_total exemplars_dropped_total; do
    tap_is "$(pt_metric_sum "$DIR/metrics.txt" "prometheus_remote_storage_$m")" 0 \
        "the writer counts no prometheus_remote_storage_$m"
done
sent=$(pt_metric_sum "$DIR/metrics.txt" prometheus_remote_storage_exemplars_total)
if awk -v s="$sent" -v a="$ALL" 'BEGIN { exit !(s >= a) }'; then
    tap_ok "the writer sent its exemplars by remote write ($sent)"
else
    tap_not_ok "the writer sent its exemplars by remote write ($sent, want >= $ALL)"
fi
curl -fsS --max-time 10 -o "$DIR/ptmetrics.txt" "http://127.0.0.1:$PTPORT/metrics" ||
    tap_bail "promtable /metrics failed"
tap_is "$(pt_metric_sum "$DIR/ptmetrics.txt" promtable_exemplars_out_of_order_total)" 0 \
    "promtable found none of them out of order"
[ "$TAP_FAILED" -eq 0 ] || { tap_diag_file "$DIR/prom.log" 20; tap_diag_file "$DIR/promtable.log" 20; }
tap_done
