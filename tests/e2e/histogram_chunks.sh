#!/usr/bin/env bash
# Prometheus as the oracle for promtable's histogram chunk codec (base/hchunk.c): a real
# Prometheus 2.42 (--enable-feature=native-histograms, remote-write receiver) is sent 100
# integer native histograms by remote write 1.0, answers a STREAMED_XOR_CHUNKS remote read
# with the HISTOGRAM chunks its TSDB built, and tests/tools/historacle.c checks that
# promtable's encoder writes the same bytes from the same samples and that promtable's
# decoder reads Prometheus' chunks back to those samples. Then the same write and read go
# to the promtable binary: its streamed answer must pass the same checks (its chunks are
# Prometheus' bytes) and carry the same chunk data as Prometheus' answer.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl prometheus
ORACLE=${PT_BUILD_DIR:-$here/build}/tests/historacle
PROMTABLE=${PT_BUILD_DIR:-$here/build}/promtable
pt_built "$ORACLE" "$PROMTABLE"

pt_mktemp DIR hist-chunks
pt_free_port PORT
printf 'global:\n  scrape_interval: 1h\n' >"$DIR/prom.yml"
pt_spawn "$DIR/prom.log" prometheus --config.file="$DIR/prom.yml" \
    --storage.tsdb.path="$DIR/data" --web.listen-address="127.0.0.1:$PORT" \
    --web.enable-remote-write-receiver --enable-feature=native-histograms
pt_wait_http "http://127.0.0.1:$PORT/-/ready" 30 "$PT_PID" ||
    tap_bail "prometheus did not start: $(tail -n 3 "$DIR/prom.log")"

# The samples sit inside one 2-hour block range (the one before now), so the TSDB head
# does not cut a chunk at a block boundary.
T0=$(( ($(date +%s) * 1000 / 7200000 - 1) * 7200000 + 60000 ))
"$ORACLE" write "$DIR/write.bin" "$T0" || tap_bail "historacle write failed"
"$ORACLE" read "$DIR/read.bin" "$T0" || tap_bail "historacle read failed"

# write_read WHO PORT PREFIX WRITTEN : WHO, on PORT, takes write.bin by remote write (a check
# that says WRITTEN; the answer in PREFIXwrite.out) and answers read.bin, a streamed remote
# read, into PREFIXanswer.bin.
write_read() {
    tap_check "$4" \
        curl -fsS -o "$DIR/$3write.out" -X POST --data-binary @"$DIR/write.bin" \
        -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
        -H 'X-Prometheus-Remote-Write-Version: 0.1.0' "http://127.0.0.1:$2/api/v1/write"
    tap_check "$1 answers the streamed remote read" \
        curl -fsS -o "$DIR/$3answer.bin" -X POST --data-binary @"$DIR/read.bin" \
        -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
        -H 'X-Prometheus-Remote-Read-Version: 0.1.0' "http://127.0.0.1:$2/api/v1/read"
}
write_read Prometheus "$PORT" "" "Prometheus accepts the native histograms by remote write"

# check WHO ANSWER: historacle's TAP lines, renumbered into this file's.
check() {
    while IFS= read -r line; do
        case $line in
        "ok "*) tap_ok "$1: ${line#ok * - }" ;;
        "not ok "*) tap_not_ok "$1: ${line#not ok * - }" ;;
        "#"*) tap_diag "${line#\# }" ;;
        esac
    done < <("$ORACLE" check "$2" "$T0")
}
check prometheus "$DIR/answer.bin"

pt_free_port PTPORT
pt_start_promtable "$DIR/promtable.log" "$PTPORT" --storage.embedded.path="$DIR/store"
write_read promtable "$PTPORT" pt- "promtable stores the native histograms"
check promtable "$DIR/pt-answer.bin"
if cmp -s "$DIR/answer.bin" "$DIR/pt-answer.bin"; then
    tap_ok "promtable's streamed answer is Prometheus' answer, byte for byte"
else
    tap_not_ok "promtable's streamed answer is Prometheus' answer, byte for byte"
    tap_diag "sizes: prometheus $(wc -c <"$DIR/answer.bin"), promtable $(wc -c <"$DIR/pt-answer.bin")"
fi
tap_done
