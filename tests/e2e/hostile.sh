#!/usr/bin/env bash
# Hostile clients against the real daemon (bearer token, tenancy, small limits, short
# deadlines), over plain sockets:
#   - an upload without credentials is answered 401 on its headers, with none of its body
#     read and no body memory taken; an admitted upload's memory follows the bytes sent,
#     not its Content-Length, and a body that stops is answered 408 (web.body_timeout);
#   - slowloris: every client slot taken by connections trickling headers, /-/healthy and
#     /metrics still answer (reserved connections); web.header_timeout ends the trickles
#     with 408, and writes go through again;
#   - a tenant header sent as a chunked trailer is not the request's tenant;
#   - CONNECT with a body gets one answer (405); its body is never a second request;
#   - web.metrics_auth puts /metrics behind the read credentials.
#
# Environment: PT_BUILD_DIR (build tree with promtable; default ../../build).
set -u -o pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/tests/e2e/lib.sh"
pt_require curl timeout
pt_tools

pt_mktemp DIR hostile
TOKEN=token-$RANDOM$RANDOM
printf '%s\n' "$TOKEN" >"$DIR/token"
pt_free_port PORT
# shellcheck disable=SC2153 # pt_free_port set PORT
U=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/data" --web.bearer-token-file="$DIR/token" \
    --tenancy.enabled=true --web.metrics-auth=true \
    --web.max-body-bytes=4MiB --web.max-body-memory=16MiB --web.max-connections=8 \
    --web.header-timeout=3s --web.body-timeout=3s --web.idle-timeout=30s
PID=$PT_PID
pt_wait_http "$U/-/ready" 30 "$PID" || {
    tap_diag_file "$DIR/promtable.log"
    tap_bail "promtable does not start"
}
AUTH="Authorization: Bearer $TOKEN"

metric() { # NAME [FILTER]
    curl -sS --max-time 5 -H "$AUTH" "$U/metrics" -o "$DIR/m.txt" &&
        pt_metric_sum "$DIR/m.txt" "$@"
}

# first_line FD : the status line the server sent on FD (empty after 10 s of nothing).
first_line() {
    local line=''
    IFS= read -r -t 10 line <&"$1"
    printf '%s' "${line%$'\r'}"
}

# ----------------------------------------------------------------------------- admission
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /api/v1/write HTTP/1.1\r\nHost: x\r\nX-Scope-OrgID: a\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nContent-Length: 4000000\r\n\r\n' >&3
tap_is "$(first_line 3)" "HTTP/1.1 401 Unauthorized" \
    "an upload without credentials: 401 on its headers, before any body byte"
exec 3<&-
tap_is "$(metric promtable_http_body_bytes)" 0 "... no body memory was taken for it"

exec 4<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /api/v1/write HTTP/1.1\r\nHost: x\r\n%s\r\nX-Scope-OrgID: a\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nContent-Length: 4000000\r\n\r\nx' "$AUTH" >&4
held=-1
for ((i = 0; i < 50; i++)); do
    held=$(metric promtable_http_body_bytes)
    [ "${held%.*}" -gt 0 ] && break
    sleep 0.1
done
tap_check "an admitted upload that sent 1 byte of 4,000,000 holds ${held%.*} bytes, not 4 MB" \
    test "${held%.*}" -gt 0 -a "${held%.*}" -le 65536
tap_is "$(first_line 4)" "HTTP/1.1 408 Request Timeout" \
    "... and once its body stops for web.body_timeout it is answered 408"
exec 4<&-
tap_is "$(metric promtable_http_timeouts_total 'deadline="body"')" 1 "... counted as a body timeout"

# ----------------------------------------------------------------------------- slowloris
# Eight connections (web.max_connections) each with half a request line.
for fd in 10 11 12 13 14 15 16 17; do
    eval "exec $fd<>/dev/tcp/127.0.0.1/$PORT"
    printf 'POST /api/v1/write HTTP/1.1\r\nHo' >&"$fd"
done
for ((i = 0; i < 50; i++)); do
    [ "$(metric promtable_http_connections)" -ge 9 ] && break # the trickles and metric()'s
    sleep 0.05
done
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$U/-/healthy")" 200 \
    "every client slot taken by trickling headers: /-/healthy still answers"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 -H "$AUTH" "$U/metrics")" 200 \
    "... and /metrics"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 -H "$AUTH" -H 'X-Scope-OrgID: a' \
    -H 'Content-Encoding: snappy' -H 'Content-Type: application/x-protobuf' \
    --data-binary @"$here/tests/data/prom-2.42-write.bin" "$U/api/v1/write")" 503 \
    "... a write on a reserved connection is told to retry (503)"
got408=0
for fd in 10 11 12 13 14 15 16 17; do
    [ "$(first_line "$fd")" = "HTTP/1.1 408 Request Timeout" ] && got408=$((got408 + 1))
    eval "exec $fd<&-"
done
tap_is "$got408" 8 "web.header_timeout answers every trickle 408 and closes it"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -H "$AUTH" -H 'X-Scope-OrgID: a' \
    -H 'Content-Encoding: snappy' -H 'Content-Type: application/x-protobuf' \
    --data-binary @"$here/tests/data/prom-2.42-write.bin" "$U/api/v1/write")" 204 \
    "then writes go through again"
tap_check "the header timeouts are counted" \
    test "$(metric promtable_http_timeouts_total 'deadline="header"')" -ge 8

# ------------------------------------------------------------------------------ trailers
exec 5<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /api/v1/write HTTP/1.1\r\nHost: x\r\n%s\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\x00\r\n0\r\nX-Scope-OrgID: alice\r\n\r\n' "$AUTH" >&5
tap_is "$(first_line 5)" "HTTP/1.1 401 Unauthorized" \
    "a tenant id sent only as a chunked trailer is no tenant: 401"
exec 5<&-

# ------------------------------------------------------------------------------- CONNECT
exec 6<>"/dev/tcp/127.0.0.1/$PORT"
printf 'CONNECT x:80 HTTP/1.1\r\nHost: x:80\r\nContent-Length: 35\r\n\r\nGET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n' >&6
timeout 10 cat <&6 >"$DIR/connect.out"
exec 6<&-
tap_is "$(grep -c '^HTTP/1.1 ' "$DIR/connect.out")" 1 "CONNECT with a body: one answer"
tap_check "... 405" grep -q '^HTTP/1.1 405 ' "$DIR/connect.out"

# ------------------------------------------------------------------------- /metrics auth
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$U/metrics")" 401 \
    "web.metrics_auth: /metrics without credentials: 401"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 -H "$AUTH" "$U/metrics")" 200 \
    "... with them: 200"

pt_stop "$PID" 10
tap_is "$?" 0 "promtable exits cleanly"
tap_done
