#!/usr/bin/env bash
# Streamed remote reads (STREAMED_XOR_CHUNKS) through a real socket: a large answer comes
# back complete while promtable's memory stays bounded (the answer is produced a group of
# series at a time as the client takes it), a SAMPLES answer of the same data for
# contrast, and a client that goes away mid-stream (HTTP/1.1 close, HTTP/2 reset) stops
# the read.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl
pt_tools

SERIES=2000
SAMPLES=1000 # 2 M samples
[ -n "${PT_SANITIZED:-}" ] && SAMPLES=250
pt_mktemp DIR read-stream
pt_free_port PORT
URL=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/store" --read.max-samples=0
PID=$PT_PID
if ! pt_wait_http "$URL/-/ready" 30 "$PID"; then
    tap_bail "promtable did not start: $(tail -n 3 "$DIR/promtable.log")"
fi

END=$(($(date +%s) * 1000 / 60000 * 60000))
START=$((END - (SAMPLES + 1) * 15000))
r=$("$LOADGEN" --url "$URL/api/v1/write" --series $SERIES --connections 1 \
    --requests $((SERIES * SAMPLES / 2000)) --warmup 0 --start-ms $START --interval-ms 15000 \
    2>"$DIR/loadgen.log" | grep '^result:')
tap_check "loaded $SERIES series x $SAMPLES samples" grep -q ' errors=0 ' <<<"$r"

kib() { awk -v k="$2" '$1 == k ":" { print $2 }' "/proc/$1/status"; }
# read_growth ARGS...: one read with readbench; prints "<peak RSS growth in KiB> <result>".
read_growth() {
    local before out
    echo 5 >"/proc/$PID/clear_refs" # the peak (VmHWM) starts again from the current RSS
    before=$(kib "$PID" VmRSS)
    out=$("$READBENCH" --url "$URL/api/v1/read" --start-ms "$START" --end-ms "$END" \
        --requests 1 --warmup 0 "$@" '__name__=~.+' 2>>"$DIR/readbench.log")
    echo "$(($(kib "$PID" VmHWM) - before)) $out"
}

read_growth --streamed >/dev/null # first touches: caches, allocator arenas, thread stacks
read -r grow_stream res_stream <<<"$(read_growth --streamed)"
want="series=$SERIES samples=$((SERIES * SAMPLES))"
tap_check "streamed: every series and sample comes back ($want)" \
    grep -q "$want" <<<"$res_stream"
read -r grow_samples res_samples <<<"$(read_growth)"
tap_check "SAMPLES: the same answer" grep -q "$want" <<<"$res_samples"
tap_diag "peak RSS growth during the read: streamed $((grow_stream / 1024)) MiB," \
    "SAMPLES $((grow_samples / 1024)) MiB"
if [ -n "${PT_SANITIZED:-}" ]; then
    tap_skip "streamed read memory bound" "sanitizer allocators keep freed memory"
else
    tap_check "a streamed read of $((SERIES * SAMPLES)) samples grows promtable by < 24 MiB" \
        test "$grow_stream" -lt $((24 * 1024))
    tap_check "... while one SAMPLES message of them grows it by more than twice that" \
        test "$grow_samples" -gt $((2 * grow_stream))
fi

# Clients that go away after the first bytes of a large streamed answer.
"$READBENCH" --streamed --request-out "$DIR/read.bin" --start-ms "$START" --end-ms "$END" \
    '__name__=~.+' 2>>"$DIR/readbench.log"
cancelled() { curl -s "$URL/metrics" | pt_metric_sum /dev/stdin promtable_read_cancelled_total; }
post_and_hang_up() {
    curl -s "$@" --data-binary @"$DIR/read.bin" -H 'Content-Type: application/x-protobuf' \
        -H 'Content-Encoding: snappy' -H 'X-Prometheus-Remote-Read-Version: 0.1.0' \
        "$URL/api/v1/read" | head -c 1000 >/dev/null
}
# await_cancelled N: the counter reaches N within 10 s.
await_cancelled() {
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(cancelled)" -ge "$1" ] 2>/dev/null && return 0
        pt_sleep 0.1
    done
    return 1
}
c0=$(cancelled)
post_and_hang_up --http1.1
tap_check "an HTTP/1.1 client that closes mid-stream stops the read" await_cancelled $((c0 + 1))
post_and_hang_up --http2-prior-knowledge
tap_check "an HTTP/2 client that goes away mid-stream stops the read" await_cancelled $((c0 + 2))
tap_check "promtable still answers" pt_wait_http "$URL/-/healthy" 5 "$PID"
tap_done
