#!/usr/bin/env bash
# End-to-end test of the HTTP front end (adapter/http/) through
# tests/tools/httpecho, with real clients: curl, nghttp, h2load (Debian nghttp2-client) and
# bash's /dev/tcp for hand-written bytes.
#
# Servers: a plain one (HTTP/1.1 and h2c), one with a 1000-byte body limit, one with TLS (a
# self-signed certificate made here) and one with a short idle timeout. Each is stopped
# with SIGTERM at the end and must exit 0.
#
# Environment: PT_BUILD_DIR (build tree with tests/httpecho; default ../../build).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PT_BUILD_DIR:-$ROOT/build}
ECHO=$BUILD/tests/httpecho

pt_require curl nghttp h2load openssl timeout
[ -x "$ECHO" ] || tap_bail "$ECHO not built"

pt_mktemp T httpsrv

# start_echo NAME ARGS... : starts httpecho, sets NAME_PID and NAME_PORT.
start_echo() {
    local name=$1 log i port=
    shift
    log=$T/$name.log
    pt_spawn "$log" "$ECHO" "$@"
    for ((i = 0; i < 100; i++)); do
        port=$(head -n 1 "$log" 2>/dev/null)
        [[ $port =~ ^[0-9]+$ ]] && break
        port=
        pt_alive "$PT_PID" || break
        sleep 0.05
    done
    if [ -z "$port" ]; then
        tap_diag_file "$log"
        tap_bail "httpecho $name did not start"
    fi
    printf -v "${name}_PID" '%s' "$PT_PID"
    printf -v "${name}_PORT" '%s' "$port"
}

# raw PORT BYTES : sends BYTES (printf format) on a fresh connection, prints the answer.
raw() {
    timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "$2" >&3; cat <&3' _ "$1" "$2" 2>/dev/null
}

# stops_cleanly NAME : SIGTERM, then the exit status must be 0.
stops_cleanly() {
    local pid_var=${1}_PID rc
    pt_stop "${!pid_var}" 15
    rc=$?
    tap_is "$rc" 0 "$1 server exits 0 on SIGTERM"
}

# Produced bodies (/stream?bytes=N): N bytes of the line "promtable stream" repeated. Big
# enough that a server buffering the whole body would outgrow the memory bound below.
BIG=200000000
[ -n "${PT_SANITIZED:-}" ] && BIG=50000000
want_sum=$(yes 'promtable stream' | head -c "$BIG" | sha256sum | cut -d' ' -f1)
MEM_BOUND_KB=65536

# status_kb PID FIELD : a field of /proc/PID/status in KiB (VmHWM: peak resident, VmRSS).
status_kb() {
    awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"
}

# streamed NAME PID CURLARGS... : fetches a produced body of $BIG bytes, checks its sha256
# and that the server's peak resident memory grew by less than MEM_BOUND_KB.
streamed() {
    local name=$1 pid=$2 hwm0 rss0 hwm1 rss1 sum
    shift 2
    hwm0=$(status_kb "$pid" VmHWM)
    rss0=$(status_kb "$pid" VmRSS)
    sum=$(curl -sS "$@" | sha256sum | cut -d' ' -f1)
    hwm1=$(status_kb "$pid" VmHWM)
    rss1=$(status_kb "$pid" VmRSS)
    tap_is "$sum" "$want_sum" "$name: a produced body of $BIG bytes arrives exactly"
    tap_check "$name: ... in bounded memory (VmHWM $hwm0 -> $hwm1 KiB, VmRSS $rss0 -> $rss1 KiB)" \
        test $((hwm1 - hwm0)) -lt "$MEM_BOUND_KB"
}

# stream_cancelled NAME LOG CURLARGS... : a client that reads 1 MB of an endless body and
# disconnects; the producer must see done(cancelled=1) (httpecho logs it).
stream_cancelled() {
    local name=$1 log=$2 before i n
    shift 2
    before=$(grep -c 'stream done cancelled=1' "$log")
    curl -sS "$@" 2>/dev/null | head -c 1000000 >/dev/null
    for ((i = 0; i < 100; i++)); do
        n=$(grep -c 'stream done cancelled=1' "$log")
        [ "$n" -gt "$before" ] && break
        sleep 0.05
    done
    tap_is "$((n - before))" 1 "$name: a client leaving mid-stream cancels the producer once"
}

head -c 200000 /dev/urandom >"$T/200k.bin"
head -c 900 /dev/urandom >"$T/900.bin"
head -c 5000 /dev/urandom >"$T/5k.bin"

# ------------------------------------------------------------------------ plain server
start_echo PLAIN --workers 8
U=http://127.0.0.1:$PLAIN_PORT
tap_ok "httpecho listens on $PLAIN_PORT"

tap_is "$(curl -sS "$U/hello")" "hello" "HTTP/1.1 GET /hello"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' "$U/nope")" 404 "unknown path is 404"

curl -sS --data-binary @"$T/200k.bin" -H 'Content-Type: application/x-test' \
    "$U/echo" -o "$T/echo.out"
tap_check "HTTP/1.1 POST /echo returns the 200 KB body" cmp -s "$T/echo.out" "$T/200k.bin"

info=$(curl -sS -H 'Content-Type: a/b' -H 'Content-Encoding: snappy' -H 'Authorization: Bearer x' \
    -H 'X-Prometheus-Remote-Write-Version: 0.1.0' "$U/info?a=1&b=2")
tap_check "request fields reach the handler" \
    grep -qz 'path=/info.query=a=1&b=2.content_type=a/b.content_encoding=snappy.authorization=Bearer x.user_agent=curl/[^\n]*.rw_version=0.1.0' <<<"$info"

out=$(curl -sS -v "$U/hello" "$U/hello" 2>&1)
tap_check "keep-alive: the second request re-uses the connection" \
    grep -q "Re-using existing connection" <<<"$out"

curl -sS -H 'Transfer-Encoding: chunked' --data-binary @"$T/200k.bin" "$U/echo" -o "$T/chunked.out"
tap_check "chunked request body is reassembled" cmp -s "$T/chunked.out" "$T/200k.bin"

out=$(curl -sS -I "$U/hello")
tap_check "HEAD has Content-Length and no body" grep -qi '^content-length: 6' <<<"$out"

out=$(raw "$PLAIN_PORT" 'GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
n200=$(grep -c '^HTTP/1.1 200' <<<"$out")
n404=$(grep -c '^HTTP/1.1 404' <<<"$out")
tap_is "$n200/$n404" "1/1" "two pipelined requests get two answers, in order"
tap_check "pipelined answers are in request order" \
    bash -c '[ "$(grep -o "^HTTP/1.1 [0-9]*" <<<"$1" | tr "\n" " ")" = "HTTP/1.1 200 HTTP/1.1 404 " ]' _ "$out"

out=$(raw "$PLAIN_PORT" 'GET /hello HTTP/1.0\r\n\r\n')
tap_check "HTTP/1.0 request is answered with Connection: close" \
    grep -qi '^Connection: close' <<<"$out"

out=$(raw "$PLAIN_PORT" 'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\nhello')
tap_check "Expect: 100-continue gets 100 Continue, then the answer" \
    bash -c 'grep -q "^HTTP/1.1 100 Continue" <<<"$1" && grep -q "^HTTP/1.1 200" <<<"$1"' _ "$out"

out=$(raw "$PLAIN_PORT" 'garbage\r\n\r\n')
tap_check "a garbage request gets 400" grep -q '^HTTP/1.1 400' <<<"$out"

# raw_split PORT BYTES1 BYTES2 : like raw, with a pause between the two parts, so the server
# reads them separately.
raw_split() {
    timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "$2" >&3; sleep 0.2; printf "$3" >&3; cat <&3' \
        _ "$1" "$2" "$3" 2>/dev/null
}

# refused DESC MESSAGE BYTES [BYTES2] : the request is answered 400 with MESSAGE in the body and
# Connection: close, and the server closes the connection (raw's cat ends before its timeout).
refused() {
    local desc=$1 msg=$2 out rc
    if [ $# -gt 3 ]; then out=$(raw_split "$PLAIN_PORT" "$3" "$4"); else out=$(raw "$PLAIN_PORT" "$3"); fi
    rc=$?
    tap_check "$desc: 400 '$msg', Connection: close, closed" \
        bash -c '[ "$3" = 0 ] && grep -q "^HTTP/1.1 400 " <<<"$1" && grep -qi "^Connection: close" <<<"$1" && grep -qF "$2" <<<"$1"' \
        _ "$out" "$msg" "$rc" || tap_diag "rc=$rc: $out"
}

# accepted DESC WANT BYTES : answered 200 with body WANT (the request asks to close).
accepted() {
    local out
    out=$(raw "$PLAIN_PORT" "$3")
    tap_check "$1: 200 '$2'" bash -c 'grep -q "^HTTP/1.1 200 " <<<"$1" && [ "${1##*$'"'\r\n\r\n'"'}" = "$2" ]' \
        _ "$out" "$2" || tap_diag "$out"
}

# RFC 9112 framing that Debian's non-strict libhttp-parser lets through (the request smuggling
# class), and what must still pass.
H='POST /echo HTTP/1.1\r\nHost: x\r\n'
TE_ONLY='Transfer-Encoding other than one chunked is not supported'
refused "two Transfer-Encoding: chunked lines" "$TE_ONLY" \
    "${H}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
refused "Transfer-Encoding: gzip, chunked" "$TE_ONLY" \
    "${H}Transfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
refused "Transfer-Encoding: gzip" "$TE_ONLY" "${H}Transfer-Encoding: gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
refused "Transfer-Encoding: chunked, chunked" "$TE_ONLY" \
    "${H}Transfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
refused "Content-Length with chunked" "content-length" \
    "${H}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
refused "Host : x" "whitespace in a header field name" 'GET /hello HTTP/1.1\r\nHost : x\r\n\r\n'
refused "Transfer-Encoding : chunked" "whitespace in a header field name" \
    "${H}Transfer-Encoding : chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
for v in 9.9 2.0 1.2; do
    refused "HTTP/$v" "HTTP version not supported" "GET /hello HTTP/$v\r\nHost: x\r\n\r\n"
done
refused "chunk data followed by XX" "chunk data not followed by CRLF" \
    "${H}Transfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n"
refused "chunk data, then XX in the next read" "chunk data not followed by CRLF" \
    "${H}Transfer-Encoding: chunked\r\n\r\n3\r\nabc" "XX0\r\n\r\n"
refused "HTTP/1.1 without Host" "an HTTP/1.1 request needs a Host header" 'GET /hello HTTP/1.1\r\n\r\n'
refused "two Host lines" "more than one Host header" 'GET /hello HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n'
accepted "bare LF line ends" hello 'GET /hello HTTP/1.1\nHost: x\nConnection: close\n\n'
accepted "chunk extensions, Transfer-Encoding: Chunked" abcde \
    "${H}Connection: close\r\nTransfer-Encoding: Chunked\r\n\r\n3;a=b\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
out=$(raw_split "$PLAIN_PORT" "${H}Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc" '\r\n0\r\n\r\n')
tap_check "chunk data with its CRLF in the next read: 200 'abc'" \
    bash -c 'grep -q "^HTTP/1.1 200 " <<<"$1" && [ "${1##*$'"'\r\n\r\n'"'}" = abc ]' _ "$out" || tap_diag "$out"

big=$(head -c 20000 /dev/zero | tr '\0' a)
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' -H "X-Big: $big" "$U/hello")" 431 \
    "oversized request headers get 431"

out=$(curl -sS -v --http2-prior-knowledge "$U/info" 2>&1)
tap_check "h2c with prior knowledge answers over HTTP/2" grep -q '^< HTTP/2 200' <<<"$out"
tap_check "h2c request is seen as proto 2" grep -q '^proto=2' <<<"$out"

curl -sS --http2-prior-knowledge --data-binary @"$T/200k.bin" "$U/echo" -o "$T/h2echo.out"
tap_check "h2c POST /echo returns the body" cmp -s "$T/h2echo.out" "$T/200k.bin"

out=$(h2load -n 200 -c 4 -m 10 "$U/hello" 2>&1)
tap_check "h2load: 200 requests on 4 h2c connections x 10 streams all succeed" \
    grep -q '200 succeeded, 0 failed, 0 errored' <<<"$out" || tap_diag "$out"

out=$(h2load -n 200 -c 4 -m 10 -d "$T/5k.bin" "$U/echo" 2>&1)
tap_check "h2load: 200 concurrent h2c uploads all succeed" \
    grep -q '200 succeeded, 0 failed, 0 errored' <<<"$out" || tap_diag "$out"

out=$(h2load -n 200 -c 4 --h1 "$U/hello" 2>&1)
tap_check "h2load --h1: 200 keep-alive HTTP/1.1 requests all succeed" \
    grep -q '200 succeeded, 0 failed, 0 errored' <<<"$out" || tap_diag "$out"

# 16 requests of 200 ms on ONE connection with 8 workers: ~0.4 s when streams run in
# parallel, 3.2 s if they were serialised.
start=$(date +%s%N)
out=$(h2load -n 16 -c 1 -m 16 "$U/slow" 2>&1)
ms=$((($(date +%s%N) - start) / 1000000))
tap_check "16 slow h2 streams on one connection all succeed" \
    grep -q '16 succeeded, 0 failed' <<<"$out" || tap_diag "$out"
tap_check "... and run in parallel (${ms} ms < 2500 ms)" test "$ms" -lt 2500

out=$(curl -sS -D - -o /dev/null "$U/stream?bytes=10")
tap_check "HTTP/1.1 produced body: Transfer-Encoding: chunked, no Content-Length" \
    bash -c 'grep -qi "^transfer-encoding: chunked" <<<"$1" && ! grep -qi "^content-length" <<<"$1"' _ "$out"
tap_is "$(raw "$PLAIN_PORT" 'GET /stream?bytes=20 HTTP/1.0\r\n\r\n' | tail -c 20)" \
    "$(yes 'promtable stream' | head -c 20)" "HTTP/1.0 produced body: the bytes, then close"
streamed "HTTP/1.1" "$PLAIN_PID" "$U/stream?bytes=$BIG"
streamed "h2c" "$PLAIN_PID" --http2-prior-knowledge "$U/stream?bytes=$BIG"
stream_cancelled "HTTP/1.1" "$T/PLAIN.log" "$U/stream?bytes=100000000000"
stream_cancelled "h2c" "$T/PLAIN.log" --http2-prior-knowledge "$U/stream?bytes=100000000000"
tap_is "$(curl -sS "$U/hello")" "hello" "the server keeps serving after cancelled streams"

# Graceful stop: a request in flight when SIGTERM arrives is still answered.
curl -sS -o "$T/slow.out" -w '%{http_code}' "$U/slow" >"$T/slow.code" 2>&1 &
cpid=$!
sleep 0.1
kill -TERM "$PLAIN_PID"
wait "$cpid"
tap_is "$(cat "$T/slow.code")" 200 "request in flight at SIGTERM is answered"
stops_cleanly PLAIN

# ------------------------------------------------- routes answered on the event loop
# One worker, busy with eight queued 200 ms requests (1.6 s of work): a route the dispatcher
# marks on_loop (like promtable's health, readiness and metrics) is answered before the
# queue has drained, not behind it.
start_echo ONE --workers 1
U=http://127.0.0.1:$ONE_PORT
slow_pids=()
for i in 1 2 3 4 5 6 7 8; do
    { curl -sS -o /dev/null "$U/slow" && echo "slow" >>"$T/order"; } &
    slow_pids+=($!)
done
sleep 0.3
curl -sS "$U/loop" >>"$T/order.loop" && echo "loop" >>"$T/order"
wait "${slow_pids[@]}"
tap_is "$(cat "$T/order.loop")" "loop" "an on_loop route answers while the only worker is busy"
before=$(sed -n '/^loop$/q;p' "$T/order" | wc -l)
tap_check "... before the queued worker requests finished ($before of 8 done)" test "$before" -lt 8
tap_is "$(grep -c -x slow "$T/order")" 8 "the queued worker requests are all answered"
stops_cleanly ONE

# ------------------------------------------------------------------ small body limit
start_echo SMALL --max-body 1000
U=http://127.0.0.1:$SMALL_PORT
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --data-binary @"$T/900.bin" "$U/echo")" 200 \
    "a body under the limit passes"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --data-binary @"$T/5k.bin" "$U/echo")" 413 \
    "Content-Length over --max-body gets 413"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' -H 'Expect:' --data-binary @"$T/200k.bin" "$U/echo")" 413 \
    "413 also reaches a client that sends the whole body without Expect"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' -H 'Transfer-Encoding: chunked' \
    --data-binary @"$T/5k.bin" "$U/echo")" 413 "chunked body over --max-body gets 413"
out=$(nghttp -v -d "$T/5k.bin" "$U/echo" 2>&1)
tap_check "h2c body over --max-body gets 413 on the stream" grep -q ':status: 413' <<<"$out"
tap_is "$(curl -sS --http2-prior-knowledge "$U/hello")" "hello" \
    "the server keeps serving after refusing bodies"
stops_cleanly SMALL

# --------------------------------------------------------- memory of all bodies at once
# 100000 bytes for every body together: a half-sent 90000-byte body holds most of it, so a
# second upload gets 503 (retryable), and once the first is answered there is room again.
# The second upload arrives in two parts, so the server has grown a buffer for it before it
# refuses it: that buffer, kept for reuse, must give way to the first body's last bytes.
start_echo TOTAL --max-body 100000 --max-body-total 100000
U=http://127.0.0.1:$TOTAL_PORT
head -c 60000 /dev/zero >"$T/60k.bin"

# held_at_least N : waits (at most 10 s) until the server holds N or more body bytes.
held_at_least() {
    local i held=
    for ((i = 0; i < 200; i++)); do
        held=$(curl -sS "$U/body-bytes")
        [ "${held:-0}" -ge "$1" ] && return 0
        sleep 0.05
    done
    tap_diag "the server holds ${held:-?} body bytes, not $1 or more"
    return 1
}

exec 3<>"/dev/tcp/127.0.0.1/$TOTAL_PORT"
printf 'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 90000\r\n\r\n' >&3
head -c 60000 /dev/zero >&3
tap_check "the first body's 60000 bytes are held" held_at_least 60000
exec 4<>"/dev/tcp/127.0.0.1/$TOTAL_PORT"
printf 'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n' >&4
head -c 20000 /dev/zero >&4
held_at_least 80000 || true
head -c 40000 /dev/zero >&4 2>/dev/null
timeout 10 cat <&4 | tr -d '\r' >"$T/busy.out"
exec 4<&-
tap_is "$(head -n 1 "$T/busy.out")" "HTTP/1.1 503 Service Unavailable" \
    "a body past the memory of all bodies gets 503 ($(tail -n 1 "$T/busy.out" | head -c 60))"
head -c 30000 /dev/zero >&3
timeout 10 head -c 200 <&3 | tr -d '\r' >"$T/first.out"
exec 3<&-
tap_is "$(head -n 1 "$T/first.out")" "HTTP/1.1 200 OK" "the body holding the memory completes"
tap_is "$(curl -sS -o /dev/null -w '%{http_code}' --data-binary @"$T/60k.bin" "$U/echo")" 200 \
    "then the next upload fits again"
stops_cleanly TOTAL

# ------------------------------------------------------------------------------- TLS
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
    -days 2 -subj /CN=localhost >/dev/null 2>&1 || tap_bail "openssl cannot make a certificate"
start_echo TLS --tls-cert "$T/cert.pem" --tls-key "$T/key.pem"
U=https://127.0.0.1:$TLS_PORT

out=$(curl -sS -v -k --http2 "$U/info" 2>&1)
tap_check "TLS: ALPN selects h2" grep -q 'ALPN: server accepted h2' <<<"$out"
tap_check "TLS + h2: answered over HTTP/2 with tls=1" \
    bash -c 'grep -q "^< HTTP/2 200" <<<"$1" && grep -q "^tls=1" <<<"$1"' _ "$out"

out=$(curl -sS -v -k --http1.1 "$U/info" 2>&1)
tap_check "TLS: ALPN selects http/1.1 when asked" grep -q 'ALPN: server accepted http/1.1' <<<"$out"
tap_check "TLS + HTTP/1.1: answered with tls=1" \
    bash -c 'grep -q "^< HTTP/1.1 200" <<<"$1" && grep -q "^tls=1" <<<"$1"' _ "$out"

curl -sS -k --http2 --data-binary @"$T/200k.bin" "$U/echo" -o "$T/tls2.out"
tap_check "TLS + h2 POST /echo returns the body" cmp -s "$T/tls2.out" "$T/200k.bin"
curl -sS -k --http1.1 --data-binary @"$T/200k.bin" "$U/echo" -o "$T/tls1.out"
tap_check "TLS + HTTP/1.1 POST /echo returns the body" cmp -s "$T/tls1.out" "$T/200k.bin"

streamed "TLS + h2" "$TLS_PID" -k --http2 "$U/stream?bytes=$BIG"
stream_cancelled "TLS + h2" "$T/TLS.log" -k --http2 "$U/stream?bytes=100000000000"

out=$(h2load -n 200 -c 4 -m 10 "$U/hello" 2>&1)
tap_check "h2load over TLS: 200 requests all succeed" \
    grep -q '200 succeeded, 0 failed, 0 errored' <<<"$out" || tap_diag "$out"

tap_isnt_200=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$TLS_PORT/hello" 2>/dev/null)
tap_check "the TLS port does not answer plain HTTP" test "$tap_isnt_200" != 200
tap_is "$(curl -sS -k "$U/hello")" "hello" "TLS port still serves after a plain-text client"
stops_cleanly TLS

# ---------------------------------------------------------------------- idle timeout
start_echo IDLE --idle-timeout 300
start=$(date +%s%N)
timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; cat <&3 >/dev/null' _ "$IDLE_PORT"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
tap_check "an idle connection is closed by the server (after ${ms} ms)" \
    test "$rc" -eq 0 -a "$ms" -ge 250 -a "$ms" -lt 5000
stops_cleanly IDLE

tap_done
