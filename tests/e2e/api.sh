#!/usr/bin/env bash
# The browsing API (/api/v1/labels, /api/v1/label/<name>/values, /api/v1/series,
# /api/v1/metadata, /api/v1/status/tsdb) of the real promtable binary, fed by a real Prometheus 2.42 that
# scrapes itself and promtable every second and remote-writes samples and metadata
# (metadata_config send_interval 1s) with a bearer token. Where Prometheus has the same
# endpoint, its own answer over its TSDB is the expected one (the same series were
# written to both); the rest is checked against fixed answers: start/end, limits, POST
# forms, bad input (400 in Prometheus' error shape), auth, the request counters.
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl jq prometheus
pt_tools

pt_mktemp DIR api
pt_free_port PORT
pt_free_port PPORT
URL=http://127.0.0.1:$PORT
PURL=http://127.0.0.1:$PPORT
echo "s3cret-token" >"$DIR/token"
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/store" --web.bearer-token-file="$DIR/token"
PID=$PT_PID
pt_wait_http "$URL/-/ready" 30 "$PID" || tap_bail "promtable did not start: $(tail -n 3 "$DIR/promtable.log")"

cat >"$DIR/prom.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: ['127.0.0.1:$PPORT']}]
  - job_name: promtable
    static_configs: [{targets: ['127.0.0.1:$PORT']}]
remote_write:
  - url: $URL/api/v1/write
    authorization:
      credentials_file: $DIR/token
    queue_config: {batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}
    metadata_config: {send: true, send_interval: 1s}
YML
pt_start_prometheus "$DIR" prom "$PPORT" || tap_bail "prometheus did not start: $(tail -n 3 "$DIR/prom.log")"
PROM=$PT_PID

AUTH=(-H "Authorization: Bearer s3cret-token")
# get PATH?QUERY from promtable (with the token): the body
get() { curl -s "${AUTH[@]}" "$URL$1"; }
# status PATH?QUERY [CURL ARGS]: the HTTP status only
status() { local p=$1; shift; curl -s -o /dev/null -w '%{http_code}' "$@" "$URL$p"; }
# same PATH?QUERY JQ DESC: promtable's and Prometheus' answers agree after JQ
same() {
    local a b
    a=$(get "$1" | jq -cS "$2")
    b=$(curl -s "$PURL$1" | jq -cS "$2")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        tap_ok "$3"
    else
        tap_not_ok "$3"
        tap_diag "promtable: $a" "prometheus: $b"
    fi
}

# Wait until both targets' up series and Prometheus' metadata have arrived.
ok=
for _ in $(seq 1 120); do
    if [ "$(get '/api/v1/series?match[]=up' | jq '.data|length')" = 2 ] &&
        [ "$(get '/api/v1/metadata?metric=prometheus_build_info' | jq '.data|length')" = 1 ] &&
        [ "$(get '/api/v1/metadata?metric=promtable_build_info' | jq '.data|length')" = 1 ]; then
        ok=1
        break
    fi
    pt_sleep 0.5
done
tap_check "Prometheus' series and metadata arrive through remote write" test -n "$ok"

same '/api/v1/series?match[]=up' '.data|sort_by(.job)' "series of up: as Prometheus answers"
same '/api/v1/series?match[]=prometheus_build_info&match[]=promtable_build_info' \
    '.data|map(del(.version,.revision,.branch,.buildUser,.buildDate,.goversion,.goarch,.goos,.tags))|sort_by(.__name__)' \
    "series of two match[]: as Prometheus answers"
same '/api/v1/labels?match[]=up' '.' "labels of up: as Prometheus answers"
same '/api/v1/labels?match[]=prometheus_build_info' '.' "labels of prometheus_build_info: as Prometheus answers"
same '/api/v1/label/job/values' '.' "values of job: as Prometheus answers"
same '/api/v1/label/job/values?match[]=%7B__name__%3D~%22promtable_.*%22%7D' '.' \
    "values of job for {__name__=~\"promtable_.*\"}: as Prometheus answers"
same '/api/v1/label/instance/values?match[]=up%7Bjob!%3D%22prometheus%22%7D' '.' \
    "values of instance for up{job!=\"prometheus\"}: as Prometheus answers"
same '/api/v1/metadata?metric=prometheus_build_info' '.' "metadata of prometheus_build_info: as Prometheus answers"
same '/api/v1/metadata?metric=promtable_samples_received_total' '.' \
    "metadata of promtable_samples_received_total: as Prometheus answers"
same '/api/v1/metadata?metric=prometheus_http_request_duration_seconds' '.' \
    "metadata of a histogram family: as Prometheus answers"
same '/api/v1/metadata?limit=0' '.' "metadata limit=0: as Prometheus answers"
same '/api/v1/metadata?metric=up&limit_per_metric=0' '.' "metadata limit_per_metric=0: as Prometheus answers"
same '/api/v1/metadata?limit=x' '.' "metadata limit=x: the same 400 answer"
same '/api/v1/series' '.' "series without match[]: the same 400 answer"
same '/api/v1/series?match[]=up&start=nope' '.status, .errorType' "a bad start: bad_data as in Prometheus"

NOW=$(date +%s)
tap_is "$(get "/api/v1/series?match[]=up&start=$((NOW + 3 * 86400))" | jq -c .data)" "[]" \
    "series starting in 3 days: none"
tap_is "$(get "/api/v1/series?match[]=up&end=$(date -u -d @$((NOW - 3 * 86400)) +%Y-%m-%dT%H:%M:%SZ)" | jq -c .data)" \
    "[]" "series ending 3 days ago (RFC 3339): none"
tap_is "$(get "/api/v1/labels?start=$((NOW - 60)).5&end=$((NOW + 60))&limit=2" | jq -c '[(.data|length), .warnings]')" \
    '[2,["results truncated due to limit"]]' "labels with a window and limit=2: two and the warning"
tap_is "$(get '/api/v1/label/__name__/values?limit=3' | jq -c '.data|length')" 3 "metric names limit=3"
tap_is "$(get '/api/v1/metadata?limit=2&limit_per_metric=1' | jq -c '[(.data|length), ([.data[]|length]|max)]')" \
    "[2,1]" "metadata limit=2 limit_per_metric=1"
tap_is "$(curl -s "${AUTH[@]}" --data-urlencode 'match[]=up' "$URL/api/v1/series" | jq -cS '.data|sort_by(.job)')" \
    "$(get '/api/v1/series?match[]=up' | jq -cS '.data|sort_by(.job)')" "POST series with a form body = GET"
tap_is "$(curl -s "${AUTH[@]}" --data-urlencode 'match[]={job="promtable"}' "$URL/api/v1/labels" | jq -c '.data|index("job") != null')" \
    true "POST labels with a form body"

tap_is "$(status '/api/v1/labels')" 401 "no token: 401"
tap_is "$(status '/api/v1/metadata' -H 'Authorization: Bearer wrong')" 401 "wrong token: 401"
r=$(curl -s -w ' %{http_code}' "${AUTH[@]}" "$URL/api/v1/series?match[]=%7Bjob%3D%22%22%7D")
tap_is "$r" '{"status":"error","errorType":"bad_data","error":"invalid parameter \"match[]\": vector selector must contain at least one non-empty matcher"} 400' \
    "a selector of empty matchers: 400 in Prometheus' shape"
r=$(curl -s -w ' %{http_code}' "${AUTH[@]}" "$URL/api/v1/labels?match[]=up%7Bjob%3D")
tap_is "$(jq -r .errorType <<<"${r% *}") ${r##* }" "bad_data 400" "an unterminated selector: 400 bad_data"
tap_is "$(status '/api/v1/labels?limit=x' "${AUTH[@]}")" 400 "limit=x: 400"
tap_is "$(status '/api/v1/metadata' "${AUTH[@]}" -X DELETE)" 405 "DELETE: 405"
tap_is "$(status '/api/v1/label/job/values' "${AUTH[@]}" -I)" 200 "HEAD of label values: 200"

m=$(curl -s "$URL/metrics")
tap_check "request counters per route" grep -q 'promtable_http_requests_total{route="/api/v1/label/:name/values",code="200"' <<<"$m"
# Prometheus sends every family's metadata each second: received grows, and each
# distinct entry is written once (once a day: a run across midnight UTC is not judged).
day1=$(date -u +%F)
r1=$(pt_metric_sum <(echo "$m") promtable_metadata_received_total)
pt_sleep 3
curl -s "$URL/metrics" >"$DIR/m2"
stored=$(get '/api/v1/metadata' | jq '[.data[]|length]|add')
r2=$(pt_metric_sum "$DIR/m2" promtable_metadata_received_total)
w2=$(pt_metric_sum "$DIR/m2" promtable_metadata_written_total)
if [ "$day1" = "$(date -u +%F)" ]; then
    tap_check "metadata sent again is received ($r1 -> $r2), each entry written once ($w2 cells for $stored entries)" \
        test "$r2" -gt "$r1" -a "$w2" -gt 0 -a "$w2" -le "$stored"
else
    tap_skip "metadata written once" "the day changed during the test"
fi
# A regex that backtracks exponentially on these values ends with 422 naming the matcher
# and its limit, for =~ and !~, on the browsing API and on remote read; never a silent
# non-match (which !~ would turn into a match).
RWTOOL=${PT_BUILD_DIR:-$here/build}/tests/rwtool
T=$((NOW * 1000))
spec=()
for i in 1 2 3; do spec+=(s l __name__ patho l v "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa${i}c" v 1 "$T"); done
"$RWTOOL" write 1 "$DIR/patho.bin" "${spec[@]}" || tap_bail "rwtool write failed"
tap_is "$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" -H 'Content-Encoding: snappy' \
    -H 'Content-Type: application/x-protobuf' --data-binary @"$DIR/patho.bin" "$URL/api/v1/write")" \
    204 "pathological label values written"
for sel in '{v=~"(a|a)*c"}' '{__name__="patho",v!~"(a|a)*c"}'; do
    r=$(curl -s -w ' %{http_code}' "${AUTH[@]}" -G "$URL/api/v1/series" --data-urlencode "match[]=$sel")
    tap_check "series $sel: 422 naming the matcher and read.regex_match_limit ($r)" \
        grep -q '"errorType":"execution".*(a|a)\*c.*read.regex_match_limit.* 422$' <<<"$r"
done
"$RWTOOL" readreq "$DIR/patho-read.bin" $((T - 60000)) $((T + 60000)) __name__=patho 'v!~(a|a)*c' ||
    tap_bail "rwtool readreq failed"
r=$(curl -s -w ' %{http_code}' "${AUTH[@]}" -H 'Content-Type: application/x-protobuf' \
    -H 'Content-Encoding: snappy' -H 'X-Prometheus-Remote-Read-Version: 0.1.0' \
    --data-binary @"$DIR/patho-read.bin" "$URL/api/v1/read" | tr -d '\n')
tap_check "remote read v!~\"(a|a)*c\": 422 naming the limit ($r)" \
    grep -q 'read.regex_match_limit.* 422$' <<<"$r"

# The cardinality view: Prometheus' shape; known series counted; with Prometheus stopped
# (nothing written any more), the day's series as many as /api/v1/series lists for it.
same '/api/v1/status/tsdb' '[.status, (.data|keys), (.data.headStats|keys)]' \
    "status/tsdb: the keys of Prometheus' answer"
spec=()
for i in $(seq 0 11); do spec+=(s l __name__ card_test l shard "s$i" l zone "z$((i % 2))" v 1 "$T"); done
"$RWTOOL" write 1 "$DIR/card.bin" "${spec[@]}" || tap_bail "rwtool write failed"
tap_is "$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" -H 'Content-Encoding: snappy' \
    -H 'Content-Type: application/x-protobuf' --data-binary @"$DIR/card.bin" "$URL/api/v1/write")" \
    204 "12 series of card_test written"
pt_stop "$PROM" 15
st=$(get "/api/v1/status/tsdb?limit=10000&time=$NOW")
tap_is "$(jq -c '[(.data.seriesCountByMetricName[]|select(.name=="card_test").value),
    (.data.seriesCountByLabelValuePair[]|select(.name=="zone=z1" or .name=="shard=s7")|[.name,.value]),
    (.data.labelValueCountByLabelName[]|select(.name=="shard").value),
    (.data.memoryInBytesByLabelName[]|select(.name=="shard").value)]' <<<"$st")" \
    '[12,["zone=z1",6],["shard=s7",1],12,26]' "status/tsdb: card_test's series, pairs, values and bytes"
day0=$((NOW - NOW % 86400))
n=$(get "/api/v1/series?match[]=%7B__name__%3D~%22.%2B%22%7D&start=$day0&end=$((day0 + 86399))" | jq '.data|length')
tap_is "$(jq -c '[.data.headStats.numSeries, ([.data.seriesCountByMetricName[].value]|add)]' <<<"$st")" \
    "[$n,$n]" "status/tsdb: the day's $n series, as /api/v1/series lists them"
tap_is "$(jq -c '[(.data.seriesCountByMetricName|length), .data.seriesCountByMetricName[0].value >= .data.seriesCountByMetricName[1].value]' \
    <<<"$(get '/api/v1/status/tsdb?limit=2')")" '[2,true]' "status/tsdb?limit=2: the two largest"
tap_is "$(status '/api/v1/status/tsdb')" 401 "status/tsdb without a token: 401"
tap_is "$(status '/api/v1/status/tsdb?time=soon' "${AUTH[@]}")" 400 "status/tsdb with a bad time: 400"

pt_stop "$PID" 15
tap_is "$?" 0 "promtable exits 0 on SIGTERM"
tap_done
