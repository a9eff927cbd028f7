#!/usr/bin/env bash
# Overload limits through the real daemon (flags -> server -> /metrics): promtable with
# 1 MiB for all request bodies together. One client starts a 1 MiB upload and stops one
# byte short (its body buffer has grown to 1 MiB with the bytes); then a second upload, over HTTP/1.1 and
# over h2c, gets 503 with Retry-After and nothing of it is stored; /metrics counts both
# refusals and its body gauge never passes the limit; once the first upload completes it
# is answered, and the next upload is admitted and stored.
set -u -o pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/tests/e2e/lib.sh"
pt_require curl awk head
pt_tools

pt_mktemp DIR overload
pt_free_port PORT
# shellcheck disable=SC2153 # pt_free_port set PORT
U=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/data" --web.max-body-bytes=1MiB \
    --web.max-body-memory=1MiB --web.max-connection-body-memory=1MiB \
    --web.max-inflight-requests=4 --web.overload-retry-after=3s
PID=$PT_PID
pt_wait_http "$U/-/ready" 30 "$PID" || {
    tap_diag_file "$DIR/promtable.log"
    tap_bail "promtable does not start"
}

# An empty WriteRequest, snappy-compressed (a zero length), is a valid remote write.
printf '\x00' >"$DIR/empty.snappy"

metric() { # NAME [FILTER]
    curl -sS --max-time 5 "$U/metrics" -o "$DIR/m.txt" && pt_metric_sum "$DIR/m.txt" "$@"
}

# The first upload: headers declaring 1 MiB, then all of it but one byte, the socket kept
# open. Body memory follows the bytes that arrived, never the declared length.
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nContent-Length: 1048576\r\n\r\n' >&3
head -c 1048575 /dev/zero >&3
held=0
for ((i = 0; i < 100; i++)); do
    held=$(metric promtable_http_body_bytes)
    [ "${held%.*}" -ge 1048576 ] && break
    sleep 0.05
done
tap_is "${held%.*}" 1048576 "a 1 MiB upload one byte short holds all of web.max_body_memory"

# HTTP/1.1: refused at once, with Retry-After.
curl -sS -D "$DIR/h1.hdr" -o "$DIR/h1.body" -H 'Content-Type: application/x-protobuf' \
    -H 'Content-Encoding: snappy' -H 'Expect:' --data-binary @"$DIR/empty.snappy" \
    "$U/api/v1/write" 2>/dev/null
tap_check "HTTP/1.1: a second upload gets 503" grep -q '^HTTP/1.1 503 ' "$DIR/h1.hdr"
tap_check "... with Retry-After: 3" grep -qi '^Retry-After: 3' "$DIR/h1.hdr"
tap_check "... and a body naming the limit" grep -q 'web.max_body_memory' "$DIR/h1.body"

# h2c: the same on the stream.
curl -sS --http2-prior-knowledge -D "$DIR/h2.hdr" -o "$DIR/h2.body" \
    -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
    --data-binary @"$DIR/empty.snappy" "$U/api/v1/write" 2>/dev/null
tap_check "HTTP/2: a second upload gets 503 on its stream" grep -q '^HTTP/2 503' "$DIR/h2.hdr"
tap_check "... with retry-after: 3" grep -qi '^retry-after: 3' "$DIR/h2.hdr"

tap_is "$(metric promtable_http_overload_rejected_total 'limit="body_memory"')" 2 \
    "/metrics counts both refusals as body_memory"
tap_is "$(metric promtable_http_body_bytes)" 1048576 "... and the body gauge stays at the limit"
tap_is "$(metric promtable_http_requests_total 'route="write"')" 0 \
    "nothing refused reached the write handler"

# The first upload completes: it is answered (400: zeros are not snappy) and frees the memory.
head -c 1 /dev/zero >&3
status=$(timeout 10 head -n 1 <&3 | tr -d '\r')
exec 3<&-
tap_is "$status" "HTTP/1.1 400 Bad Request" "the admitted upload is processed and answered"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' -H 'Content-Type: application/x-protobuf' \
    -H 'Content-Encoding: snappy' --data-binary @"$DIR/empty.snappy" "$U/api/v1/write")" 204 \
    "then the next upload is admitted and acknowledged"
tap_is "$(metric promtable_http_inflight_requests)" 0 "nothing stays in flight"
tap_is "$(grep -cE '^promtable_http_(inflight_requests|body_bytes|overload_rejected_total)' \
    "$DIR/m.txt")" 9 "the overload metrics are on /metrics (2 gauges, 7 limits)"

pt_stop "$PID" 10
tap_is "$?" 0 "promtable exits cleanly"
tap_done
