#!/usr/bin/env bash
# Remote write receiver compliance against the real promtable binary: the cases of the
# public suite prometheus/compliance (remotewrite/receiver: request, metric, metadata,
# exemplar, rw1_compat tests), every MUST and SHOULD with exact status codes and the
# X-Prometheus-Remote-Write-*-Written counts, plus what the suite does not check: valid data
# is answered 2xx and stored, and what was acknowledged reads back bit-exact through remote
# read. Bodies are made by tests/tools/rwtool, carried by curl. 2.0 label refs come in the
# order given, unsorted as the suite's Go map order makes them.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl
b=${PT_BUILD_DIR:-$here/build}
PROMTABLE=$b/promtable RWTOOL=$b/tests/rwtool
pt_built "$PROMTABLE" "$RWTOOL"

pt_mktemp DIR rw-compliance
pt_free_port PORT
URL=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/store"
PID=$PT_PID
pt_wait_http "$URL/-/ready" 30 "$PID" || tap_bail "promtable did not start: $(tail -n 3 "$DIR/promtable.log")"

V2='application/x-protobuf;proto=io.prometheus.write.v2.Request'
T=$(($(date +%s) * 1000 - 600000)) # every case its own millisecond from here on
EXPECT=$DIR/expected
: >"$EXPECT"

# is_ DESC WANT GOT
is_() { tap_is "$3" "$2" "$1"; }

# post FILE CONTENT-TYPE [ENCODING]: the status code; headers in $DIR/hdr, body in $DIR/body.
post() {
    curl -s -o "$DIR/body" -D "$DIR/hdr" -w '%{http_code}' -H "Content-Type: $2" \
        -H "Content-Encoding: ${3:-snappy}" -H 'X-Prometheus-Remote-Write-Version: 2.0.0' \
        -H 'User-Agent: rw_compliance' --data-binary @"$1" "$URL/api/v1/write"
}
# written KIND: the X-Prometheus-Remote-Write-KIND-Written value, "-" when absent.
written() {
    local v
    v=$(tr -d '\r' <"$DIR/hdr" | awk -v h="x-prometheus-remote-write-$1-written:" \
        'tolower($1) == h { print $2 }')
    echo "${v:--}"
}

# case2 NAME CODE SAMPLES SPEC...: a 2.0 request answered CODE with SAMPLES written, HW
# histograms and XW exemplars (0 unless set).
case2() {
    local name=$1 code=$2 samples=$3 got
    shift 3
    "$RWTOOL" write 2 "$DIR/req.bin" "$@" || tap_bail "rwtool: $*"
    got=$(post "$DIR/req.bin" "$V2")
    is_ "$name: $code" "$code" "$got"
    is_ "$name: Samples-Written $samples" "$samples" "$(written samples)"
    if [ "$(written histograms)" != "${HW:-0}" ] || [ "$(written exemplars)" != "${XW:-0}" ]; then
        tap_not_ok "$name: Histograms-Written ${HW:-0} and Exemplars-Written ${XW:-0}"
    fi
    [ "$got" = "$code" ] || tap_diag_file "$DIR/body"
}

# ---- request_test.go: content types, encodings, corrupt bodies (MUST)
"$RWTOOL" write 2 "$DIR/up.bin" s l __name__ up v 1 $T || tap_bail rwtool
head -c 1 "$DIR/up.bin" >/dev/null
{ printf 0; tail -c +2 "$DIR/up.bin"; } >"$DIR/corrupt.bin"
for ct in application/json image/png; do
    is_ "Content-Type $ct: 415" 415 "$(post "$DIR/corrupt.bin" "$ct")"
done
grep -q 'application/x-protobuf' "$DIR/body" || tap_not_ok "the 415 says what is accepted"
for enc in gzip deflate; do
    is_ "Content-Encoding $enc: 415" 415 "$(post "$DIR/corrupt.bin" "$V2" "$enc")"
done
is_ "corrupt body: 400" 400 "$(post "$DIR/corrupt.bin" "$V2")"
is_ "unknown proto=: 415" 415 "$(post "$DIR/up.bin" 'application/x-protobuf;proto=io.prometheus.write.v9.Request')"
grep -q 'io.prometheus.write.v2.Request' "$DIR/body" || tap_not_ok "the 415 names 2.0"

# ---- metric_test.go TestSingleMetric: five values x seven label sets (MUST)
# name bits: the values of the suite, as float64 bit patterns
VALUES="1.0:3ff0000000000000 StaleNaN:7ff0000000000002 NaN:7ff8000000000001 Inf:7ff0000000000000 -Inf:fff0000000000000"
for nv in $VALUES; do
    n=${nv%%:*} bits=${nv#*:}
    T=$((T + 1))
    case2 "$n simple metric" 204 1 s l __name__ up v 0x$bits $T
    echo "{__name__=\"up\"} $T $bits" >>"$EXPECT.up"
    T=$((T + 1))
    case2 "$n multiple labels" 204 1 s l job test l __name__ up l instance localhost:9090 v 0x$bits $T
    echo "{__name__=\"up\",instance=\"localhost:9090\",job=\"test\"} $T $bits" >>"$EXPECT.up"
    T=$((T + 1))
    case2 "$n newlines in a value" 204 1 s l __name__ up l job $'test\njob\n' l instance localhost:9090 v 0x$bits $T
    echo "{__name__=\"up\",instance=\"localhost:9090\",job=\"test"$'\n'"job"$'\n'"\"} $T $bits" >>"$EXPECT.up"
    T=$((T + 1))
    case2 "$n dots" 204 1 s l job.name testjob l __name__ resource.cpu.usage l instance.name localhost:9090 v 0x$bits $T
    echo "{__name__=\"resource.cpu.usage\",instance.name=\"localhost:9090\",job.name=\"testjob\"} $T $bits" >>"$EXPECT.dots"
    T=$((T + 1))
    case2 "$n spaces" 204 1 s l 'job name' testjob l __name__ 'resource cpu usage' l 'instance name' localhost:9090 v 0x$bits $T
    echo "{__name__=\"resource cpu usage\",instance name=\"localhost:9090\",job name=\"testjob\"} $T $bits" >>"$EXPECT.spaces"
    T=$((T + 1))
    case2 "$n without a name label" 400 0 s l job testjob l instance localhost:9090 v 0x$bits $T
    case2 "$n empty label set" 400 0 s v 0x$bits $T
done

# ---- metric_test.go TestMultipleMetrics (SHOULD: partial writes say what was written)
T=$((T + 1))
case2 "four metrics" 204 4 s l __name__ multi l instance a v 1 $T s l __name__ multi l instance b v 1 $T \
    s l __name__ multi l instance c v 1 $T s l __name__ multi l instance d v 1 $T
case2 "four metrics without a name" 400 0 s l job j l instance a v 1 $T s l job j l instance b v 1 $T \
    s l job j l instance c v 1 $T s l job j l instance d v 1 $T
T=$((T + 1))
case2 "one of four without a name" 400 3 s l job j l instance a v 1 $T s l __name__ multi l instance b v 1 $T \
    s l __name__ multi l instance c v 1 $T s l __name__ multi l instance d v 1 $T
grep -q 'stored 3 samples' "$DIR/body" || tap_not_ok "the 400 counts what was stored"

# ---- start timestamps (SHOULD): Sample field 3 and the older TimeSeries field 6
T=$((T + 1))
case2 "counter with a start timestamp" 204 1 s l __name__ http_requests_total l job api v 100 $T st $((T - 3600000))
case2 "counter with created_timestamp (field 6)" 204 1 s l __name__ http_requests_total l job api2 v 100 $T ct $((T - 3600000))

# ---- metadata_test.go (MUST / SHOULD)
T=$((T + 1))
for m in "1:Total number of HTTP requests:requests" "2:Current CPU usage percentage:percent" \
    "1::" "0:Unknown metric type:" "6:Build information:" "7:Node state information:" \
    "5:Request latency summary:seconds" "4:Temperature distribution gauge histogram:celsius"; do
    IFS=: read -r typ help unit <<<"$m"
    case2 "metadata type $typ, help \"$help\"" 204 1 s l __name__ meta_m l job "t$typ$help" v 1 $T m "$typ" "$help" "$unit"
done
case2 "metadata help with a newline and quotes" 204 1 s l __name__ test_metric l job test v 1 $T \
    m 2 $'Test metric with\nnewlines and "quotes"' bytes/sec
HW=1 case2 "histogram with metadata: stored, 204" 204 0 s l __name__ request_duration_seconds h $T m 3 'Request duration' seconds
HIST="h 3 4012000000000000 0 255bba08cf8c979d 0 pos:0/2 d:1,1 hint:0" # what rwtool's h sends
echo "{__name__=\"request_duration_seconds\"} $T $HIST" >>"$EXPECT.hist"
case2 "metadata without a name label" 400 0 s l job test v 1 $T m 1 'Test help' unit
case2 "metadata with an empty name" 400 0 s l __name__ '' v 1 $T m 2 'Test help' unit
case2 "metadata with a valid name" 204 1 s l __name__ valid_metric_name v 1 $T m 1 'Test help' unit
case2 "three samples with metadata" 204 3 s l __name__ cpu_usage v 85.5 $T m 2 CPU percent \
    s l __name__ memory_usage v 4096000000 $T m 2 Memory bytes \
    s l device sda1 l __name__ disk_usage v 75.2 $T m 2 Disk percent

# ---- exemplar_test.go: exemplars stored (one per series per 16.384 s window) and read
# back; invalid ones refused with 400, the rest stored
T=$((T + 1))
XW=1 case2 "sample with an exemplar: 204, both stored" 204 1 s l __name__ ex_m l job api v 1 $T x trace_id abc123 1 $T
echo "{__name__=\"ex_m\",job=\"api\"} $T 3ff0000000000000" >>"$EXPECT.ex"
echo "{__name__=\"ex_m\",job=\"api\"} $T x trace_id=abc123 3ff0000000000000" >>"$EXPECT.ex"
XW=1 case2 "exemplar without labels, NaN value: 204" 204 1 s l __name__ ex_m l job nolabels v 2 $T x - - 0x7ff8000000000001 $T
echo "{__name__=\"ex_m\",job=\"nolabels\"} $T 4000000000000000" >>"$EXPECT.ex"
echo "{__name__=\"ex_m\",job=\"nolabels\"} $T x 7ff8000000000001" >>"$EXPECT.ex"
case2 "exemplar without a name label: 400" 400 0 s l job test v 1 $T x trace_id t 1 $T
long=$(printf 'a%.0s' $(seq 1 121)) # trace_id + 121 runes: over the 128 of OpenMetrics
case2 "exemplar labels over 128 runes: 400, the sample stored" 400 1 s l __name__ ex_m l job long v 1 $T x trace_id "$long" 1 $T
grep -q '128 UTF-8 runes' "$DIR/body" || tap_not_ok "the 400 names the rune limit"
echo "{__name__=\"ex_m\",job=\"long\"} $T 3ff0000000000000" >>"$EXPECT.ex"
# Out of order (older than the series' newest stored exemplar): dropped and counted, the
# sample stored and the request answered 204 with Exemplars-Written 0, as Prometheus'
# receivers do; the same time again is no problem (a retried request). Timestamp 0: 2.0
# requires an exemplar's timestamp.
XW=1 case2 "exemplar at T: 204" 204 1 s l __name__ ex_m l job ooo v 1 $T x trace_id new 1 $T
echo "{__name__=\"ex_m\",job=\"ooo\"} $T 3ff0000000000000" >>"$EXPECT.ex"
echo "{__name__=\"ex_m\",job=\"ooo\"} $T x trace_id=new 3ff0000000000000" >>"$EXPECT.ex"
case2 "exemplar older than the series' newest: 204, dropped, the sample stored" 204 1 s l __name__ ex_m l job ooo v 2 $((T + 1)) x trace_id old 2 $((T - 5))
echo "{__name__=\"ex_m\",job=\"ooo\"} $((T + 1)) 4000000000000000" >>"$EXPECT.ex"
XW=1 case2 "exemplar at the series' newest time again: 204" 204 1 s l __name__ ex_m l job ooo v 3 $((T + 2)) x trace_id new 1 $T
echo "{__name__=\"ex_m\",job=\"ooo\"} $((T + 2)) 4008000000000000" >>"$EXPECT.ex"
case2 "exemplar with timestamp 0: 400, the sample stored" 400 1 s l __name__ ex_m l job zero v 1 $T x trace_id z 1 0
grep -q 'timestamp is 0' "$DIR/body" || tap_not_ok "the 400 says the timestamp is 0"
echo "{__name__=\"ex_m\",job=\"zero\"} $T 3ff0000000000000" >>"$EXPECT.ex"

# ---- symbols and refs (MUST)
case2 "symbols[0] not empty: 400" 400 0 sym0 x s l __name__ up v 1 $T
case2 "a ref out of range: 400" 400 0 s l __name__ up v 1 $T ref 999 ref 1
grep -q 'reference 999' "$DIR/body" || tap_not_ok "the 400 names the ref"
case2 "an odd labels_refs: 400" 400 0 s l __name__ up v 1 $T ref 1
case2 "a series without samples or histograms: 400" 400 0 s l __name__ up
case2 "duplicate label names: 400" 400 0 s l __name__ up l a 1 l a 2 v 1 $T
# Label limits (write.max_label_value_length, 16 KiB by default): the 400 names the
# limit, the label and the length; a value at the limit is stored.
case2 "a 16385-byte label value: 400" 400 0 s l __name__ up l big "$(printf 'v%.0s' $(seq 16385))" v 1 $T
grep -q 'value of label "big" is 16385 bytes long, more than write.max_label_value_length (16384)' \
    "$DIR/body" || tap_not_ok "the 400 names the limit, the label and the length"
case2 "a 16384-byte label value: 204" 204 1 s l __name__ up_big l big "$(printf 'v%.0s' $(seq 16384))" v 1 $T
case2 "an empty request: 204" 204 0

# ---- rw1_compat_test.go (MAY): 1.0 requests, no written headers
T=$((T + 1))
"$RWTOOL" write 1 "$DIR/v1.bin" s l job test l __name__ rw1 l instance i v 1 $T s l __name__ rw1_total v 100 $T
is_ "1.0 request, unsorted labels: 204" 204 "$(post "$DIR/v1.bin" application/x-protobuf)"
is_ "1.0 answer without Samples-Written" - "$(written samples)"
echo "{__name__=\"rw1\",instance=\"i\",job=\"test\"} $T 3ff0000000000000" >>"$EXPECT.rw1"
"$RWTOOL" write 1 "$DIR/v1h.bin" s l __name__ rw1_hist l job test h $T h $((T + 1)) v 2 $((T + 2)) || tap_bail rwtool
is_ "1.0 request with native histograms beside a float: 204" 204 "$(post "$DIR/v1h.bin" application/x-protobuf)"
for t in $T $((T + 1)); do
    echo "{__name__=\"rw1_hist\",job=\"test\"} $t $HIST" >>"$EXPECT.rw1h"
done
echo "{__name__=\"rw1_hist\",job=\"test\"} $((T + 2)) 4000000000000000" >>"$EXPECT.rw1h"
{ printf '\377'; tail -c +2 "$DIR/v1.bin"; } >"$DIR/v1bad.bin"
is_ "1.0 with a corrupt snappy header: 400" 400 "$(post "$DIR/v1bad.bin" application/x-protobuf)"

# ---- what was acknowledged reads back bit-exact (remote read, SAMPLES)
readback() { # NAME EXPECTFILE
    "$RWTOOL" readreq "$DIR/rr.bin" $((T - 86400000)) $((T + 1000)) "__name__=$1" || tap_bail rwtool
    curl -s -o "$DIR/rr.out" -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
        -H 'X-Prometheus-Remote-Read-Version: 0.1.0' --data-binary @"$DIR/rr.bin" "$URL/api/v1/read"
    "$RWTOOL" readresp "$DIR/rr.out" | sort >"$DIR/got"
    sort "$2" >"$DIR/want"
    if cmp -s "$DIR/got" "$DIR/want"; then
        tap_ok "$1: $(wc -l <"$DIR/want") acknowledged samples read back bit-exact"
    else
        tap_not_ok "$1: acknowledged samples read back bit-exact"
        diff "$DIR/want" "$DIR/got" | sed 's/^/# /'
    fi
}
readback up "$EXPECT.up"
readback resource.cpu.usage "$EXPECT.dots"
readback 'resource cpu usage' "$EXPECT.spaces"
readback rw1 "$EXPECT.rw1"
readback request_duration_seconds "$EXPECT.hist"
readback rw1_hist "$EXPECT.rw1h"
readback ex_m "$EXPECT.ex"

# ---- `promtable check` on the store all of the above wrote (samples, histograms,
# exemplars, metadata rows): healthy, exemplar rows counted as such
pt_stop "$PID"
"$PROMTABLE" check --storage.embedded.path="$DIR/store" >"$DIR/check.out" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -Eq '^points: .* [1-9][0-9]* exemplars' "$DIR/check.out"; then
    tap_ok "promtable check: the store is healthy (exit 0), exemplar rows counted"
else
    tap_not_ok "promtable check: the store is healthy (exit $rc, want 0), exemplar rows counted"
    tap_diag_file "$DIR/check.out"
fi

tap_done
