#!/usr/bin/env bash
# Native histograms end to end: a real Prometheus 2.42 (--enable-feature=native-histograms)
# scrapes the test exporter in native mode (tests/tools/exporter.c `exporter native`:
# integer native histograms in the protobuf exposition format, schemas -2, 0, 1, 3 and 8,
# zero bucket, negative and positive buckets in several spans, observations added every
# scrape, a counter reset) and remote-writes them to promtable with
# `send_native_histograms: true` (remote write 1.0 TimeSeries.histograms).
#
# Prometheus 2.42's remote-read client ignores histograms, so the test reads them back
# itself: a remote read SAMPLES request (tests/tools/rwtool.c readreq) answered with
# TimeSeries.histograms, checked by tests/tools/nhcheck.c against the writer's own query
# API at fixed instants in the past:
#   - every raw sample of `test_native_seconds[1h]` (timestamp, count, sum, and each bucket
#     as [boundary rule, lower, upper, count]) equals what promtable returns, bucket for
#     bucket from its spans, deltas and schema;
#   - histogram_count, histogram_sum, histogram_quantile(0.5) and (0.9) evaluated on the
#     read-back histograms equal the writer's answers at one instant per scrape.
# Also: the writer counted no failed or dropped samples or histograms.
# Synchronisation is by polling (the writer's TSDB, then promtable's answer), never by sleeps.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require prometheus curl jq awk
B=${PT_BUILD_DIR:-$here/build}
PROMTABLE=$B/promtable EXPORTER=$B/tests/exporter RWTOOL=$B/tests/rwtool NHCHECK=$B/tests/nhcheck
pt_built "$PROMTABLE" "$EXPORTER" "$RWTOOL" "$NHCHECK"
SCRAPES=${PT_NH_SCRAPES:-14} # the exporter resets case="reset" at scrape 6
CASES=5

pt_mktemp DIR native-hist
pt_free_port PTPORT
pt_free_port EXPORT_PORT
pt_free_port PROMPORT

pt_start_promtable "$DIR/promtable.log" "$PTPORT" --storage.embedded.path="$DIR/store"
pt_start_exporter "$DIR/exporter.log" native "$EXPORT_PORT"

# The exporter speaks protobuf only to a scraper that asks for it.
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$EXPORT_PORT/metrics")
tap_is "$code" 406 "the native exporter refuses a scraper that does not accept protobuf"

pt_start_writer "$DIR" "$PROMPORT" native "$EXPORT_PORT" "$PTPORT" send_native_histograms native-histograms
API=http://127.0.0.1:$PROMPORT/api/v1

# query FILE EXPR [TIME] : the writer's answer to an instant query.
query() {
    local t=()
    [ -n "${3:-}" ] && t=(--data-urlencode "time=$3")
    curl -fsS --max-time 10 -o "$1" "$API/query" --data-urlencode "query=$2" "${t[@]}"
}

# Wait until the writer's TSDB holds SCRAPES samples of every case.
scraped_all() {
    query "$DIR/poll.json" 'test_native_seconds[1h]' &&
        jq -e --argjson n "$SCRAPES" --argjson c "$CASES" \
            '.data.result | length == $c and all(.[]; (.histograms // []) | length >= $n)' \
            "$DIR/poll.json" >/dev/null
}
pt_wait_writer $((SCRAPES * 3 + 60)) "store $SCRAPES native histograms per series" scraped_all
tap_ok "the writer scraped $CASES native histogram series $SCRAPES times"

# Everything is compared as of TEND, the newest sample the poll saw; PromQL only looks back,
# so the writer's later scrapes change no answer.
TEND=$(jq '[.data.result[].histograms[][0]] | max * 1000 | round' "$DIR/poll.json")
TEND_S=$(awk -v t="$TEND" 'BEGIN { printf "%.3f", t / 1000 }')
query "$DIR/raw.json" 'test_native_seconds[1h]' "$TEND_S" || tap_bail "raw query failed"
jq -r '.data.result[] | .metric.case as $c | .histograms[] |
    ["raw", $c, (.[0] * 1000 | round), .[1].count, .[1].sum, ((.[1].buckets // []) | length)]
    + [(.[1].buckets // [])[][] | tostring] | join(" ")' "$DIR/raw.json" >"$DIR/writer.txt"
WANT=$(grep -c '^raw ' "$DIR/writer.txt")
# The counter reset happened between two scrapes the comparison covers.
drops=$(jq '[.data.result[] | select(.metric.case == "reset") | .histograms[][1].count
    | tonumber] | [range(1; length) as $i | select(.[$i] < .[$i - 1])] | length' "$DIR/raw.json")
tap_is "$drops" 1 "the writer saw case=\"reset\" start over (its count drops once)"

# One instant half a second after every scrape (every case is scraped at the same time).
for t in $(jq -r '.data.result[0].histograms[][0] * 1000 | round' "$DIR/raw.json"); do
    ts=$(awk -v t="$t" 'BEGIN { printf "%.3f", (t + 500) / 1000 }')
    for f in count sum q0.5 q0.9; do
        case $f in
        count) e='histogram_count(test_native_seconds)' ;;
        sum) e='histogram_sum(test_native_seconds)' ;;
        q*) e="histogram_quantile(${f#q}, test_native_seconds)" ;;
        esac
        query "$DIR/at.json" "$e" "$ts" || tap_bail "query $e failed"
        jq -r --arg f "$f" --arg t "$((t + 500))" \
            '.data.result[] | ["at", .metric.case, $t, $f, .value[1]] | join(" ")' \
            "$DIR/at.json" >>"$DIR/writer.txt"
    done
done

# Poll promtable until its answer holds every histogram the writer has up to TEND.
"$RWTOOL" readreq "$DIR/read.bin" $((TEND - 3600000)) "$TEND" __name__=test_native_seconds ||
    tap_bail "rwtool readreq failed"
deadline=$((SECONDS + 60))
got=0
while :; do
    if curl -fsS --max-time 10 -o "$DIR/answer.bin" -X POST --data-binary @"$DIR/read.bin" \
        -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
        -H 'X-Prometheus-Remote-Read-Version: 0.1.0' "http://127.0.0.1:$PTPORT/api/v1/read"; then
        got=$("$NHCHECK" count "$DIR/answer.bin")
        [ "${got:-0}" -ge "$WANT" ] && break
    fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.5
done
tap_is "$got" "$WANT" "promtable's remote read returns every native histogram the writer has"

while IFS= read -r line; do
    case $line in
    "ok "*) tap_ok "${line#ok * - }" ;;
    "not ok "*) tap_not_ok "${line#not ok * - }" ;;
    "#"*) tap_diag "${line#\# }" ;;
    esac
done < <("$NHCHECK" compare "$DIR/answer.bin" "$DIR/writer.txt")

curl -fsS --max-time 10 -o "$DIR/metrics.txt" "http://127.0.0.1:$PROMPORT/metrics" ||
    tap_bail "writer /metrics failed"
for m in samples_failed_total samples_dropped_total histograms_failed_total \
    histograms_dropped_total; do
    tap_is "$(pt_metric_sum "$DIR/metrics.txt" "prometheus_remote_storage_$m")" 0 \
        "the writer counts no prometheus_remote_storage_$m"
done
sent=$(pt_metric_sum "$DIR/metrics.txt" prometheus_remote_storage_histograms_total)
if awk -v s="$sent" 'BEGIN { exit !(s >= 0 + ENVIRON["WANT"]) }' WANT="$WANT"; then
    tap_ok "the writer sent the histograms by remote write ($sent)"
else
    tap_not_ok "the writer sent the histograms by remote write ($sent, want >= $WANT)"
fi
[ "$TAP_FAILED" -eq 0 ] || { tap_diag_file "$DIR/prom.log" 20; tap_diag_file "$DIR/promtable.log" 20; }
tap_done
