#!/usr/bin/env bash
# Compaction killed halfway: rows of one-sample chunk cells (what writes without the
# write-back buffer leave, one per remote-write request) on the Bigtable emulator, then a
# promtable whose compaction runs every second, killed with SIGKILL while its first pass is
# rewriting the rows. Each row is rewritten in one MutateRows entry (its new chunk and the
# deletion of what it replaces, applied by Bigtable at once), so a read afterwards must
# return exactly what it returned before: nothing lost, nothing doubled; and the rows the
# pass finished are stored in fewer cells.
#
#   1. 2,000 series × 120 samples, 15 s apart, two hours old (past compaction's one-hour
#      guard), written by bench/loadgen one sample a series a request through a promtable
#      without buffer or compaction; one remote read of everything, decoded (before).
#   2. A promtable with storage.bigtable.compaction_interval=1s: as soon as
#      promtable_bigtable_compacted_rows_total moves, SIGKILL.
#   3. A promtable without compaction reads everything again: identical to before, and
#      fewer Bigtable cells read (the compacted rows' chunks).
#
# Environment: PT_BUILD_DIR (default ../../build); PT_CBTEMULATOR (skipped without it);
# PT_KEEP_TMP=1 keeps logs and data.
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require curl awk sort
pt_cbtemulator_found || tap_skip_all "Bigtable emulator not installed ($PT_CBTEMULATOR)"
pt_tools PTDUMP=tests/ptdump

SERIES=2000
SAMPLES=120
pt_mktemp DIR bt-compaction
pt_free_port P_PORT
URL=http://127.0.0.1:$P_PORT
pt_bigtable_store "$DIR" compaction k_
NOCOMPACT=(--storage.bigtable.compaction-interval=0)

# metric NAME : promtable's figure now (empty when it does not answer).
metric() {
    curl -sS --max-time 2 -o "$DIR/p.metrics" "$URL/metrics" 2>/dev/null &&
        pt_metric_sum "$DIR/p.metrics" "$1"
}

# read_all OUT : one remote read of every series over the window, decoded and sorted.
read_all() {
    "$READBENCH" --request-out "$DIR/read.req" --start-ms "$START_MS" \
        --end-ms $((START_MS + SAMPLES * 15000)) '__name__=~.+' >/dev/null 2>&1
    curl -sS --max-time 120 -o "$DIR/read.answer" -w '%{http_code}' \
        -H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy' \
        -H 'X-Prometheus-Remote-Read-Version: 0.1.0' --data-binary @"$DIR/read.req" \
        "$URL/api/v1/read" >"$DIR/read.code"
    "$PTDUMP" answer "$DIR/read.answer" | LC_ALL=C sort >"$1"
}

# ----------------------------------------------------------------- 1. one-sample chunks
pt_start_promtable "$DIR/p0.log" "$P_PORT" "${BT[@]}" "${NOCOMPACT[@]}"
PID=$PT_PID
START_MS=$((($(date +%s) - 7200) * 1000))
"$LOADGEN" --url "$URL/api/v1/write" --series "$SERIES" --labels 4 --samples-per-request 2000 \
    --connections 2 --warmup 0 --start-ms "$START_MS" --requests $((SERIES * SAMPLES / 2000)) \
    >"$DIR/load.result" 2>"$DIR/load.log" || tap_bail "loadgen failed: $(tail -n 3 "$DIR/load.log")"
read_all "$DIR/before.txt"
tap_is "$(cat "$DIR/read.code") $(wc -l <"$DIR/before.txt")" "200 $((SERIES * SAMPLES))" \
    "the samples read back before compaction"
metric promtable_bigtable_points_cells_read_total >/dev/null
cells_before=$(pt_metric_sum "$DIR/p.metrics" promtable_bigtable_points_cells_read_total)
pt_stop "$PID" 30

# ------------------------------------------------------------ 2. a pass, killed halfway
pt_start_promtable "$DIR/p1.log" "$P_PORT" "${BT[@]}" --storage.bigtable.compaction-interval=1s
PID=$PT_PID
rows=0
deadline=$((SECONDS + 90))
while [ "$SECONDS" -lt "$deadline" ]; do
    rows=$(metric promtable_bigtable_compacted_rows_total)
    [ "${rows:-0}" != 0 ] && break
    sleep 0.05
done
kill -KILL "$PID"
{ pt_stop "$PID" 1; } 2>/dev/null
tap_check "promtable killed with SIGKILL while compacting (${rows:-0} of $SERIES rows done)" \
    awk -v r="${rows:-0}" -v n="$SERIES" 'BEGIN { exit !(r > 0 && r < n) }'

# ------------------------------------------------------------------ 3. the same answer
pt_start_promtable "$DIR/p2.log" "$P_PORT" "${BT[@]}" "${NOCOMPACT[@]}"
PID=$PT_PID
read_all "$DIR/after.txt"
tap_is "$(cat "$DIR/read.code")" 200 "the read after the kill answers 200"
if cmp -s "$DIR/before.txt" "$DIR/after.txt"; then
    tap_ok "every sample reads back as before ($(wc -l <"$DIR/after.txt")): none lost or doubled"
else
    tap_not_ok "the samples differ after the killed pass"
    tap_diag "$(diff "$DIR/before.txt" "$DIR/after.txt" | head -n 10 | cut -c1-200)"
fi
cells_after=$(metric promtable_bigtable_points_cells_read_total)
tap_check "the compacted rows are stored in fewer cells ($cells_before cells read before, $cells_after after)" \
    awk -v b="${cells_before:-0}" -v a="${cells_after:-0}" 'BEGIN { exit !(a > 0 && a < b) }'
pt_stop "$PID" 30
tap_is "$?" 0 "promtable exits cleanly on SIGTERM"
tap_done
