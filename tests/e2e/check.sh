#!/usr/bin/env bash
# `promtable check` on real stores: a store written through the daemon passes (and its
# graceful stop, like one right after a start, leaves no points log); a store in use by a
# running daemon is refused (exit 2); each kind of damage fails (exit 1) with its own
# message: a deleted points row, a deleted series row, a deleted postings cell, a chunk
# that does not decode, a flipped byte in a table file, a damaged last log record and a
# damaged record in the middle of the log, which a start skips (the store is then not
# opened, so the log stays as it was); the check's account of a damaged record matches
# what a start then logs and does. On Bigtable (the emulator, when installed, and cbt) the
# index/data comparison: a healthy store passes, a deleted points row and a deleted series
# row fail.
#
# Environment: PT_BUILD_DIR (build tree with promtable and tests/ptdamage).
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require curl
pt_programs PROMTABLE=promtable DAMAGE=tests/ptdamage
pt_mktemp T check

# serve LOG ARGS... : starts promtable on a free port, sets SRV_PID and URL.
serve() { pt_serve SRV_PID URL "$@"; }

write_golden() {
    curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H 'Content-Encoding: snappy' \
        -H 'Content-Type: application/x-protobuf' \
        --data-binary @"$PT_ROOT/tests/data/prom-2.42-write.bin" "$URL/api/v1/write"
}

# check NAME ARGS... : runs promtable check, output in $T/NAME.out, status in RC.
check() {
    local name=$1
    shift
    "$PROMTABLE" check "$@" >"$T/$name.out" 2>&1
    RC=$?
}

# expect NAME WANT_RC REGEX DESC : the last check exited WANT_RC and printed REGEX.
expect() {
    if [ "$RC" = "$2" ] && grep -Eq -- "$3" "$T/$1.out"; then
        tap_ok "$4"
    else
        tap_not_ok "$4 (exit $RC, want $2)"
        tap_diag_file "$T/$1.out"
    fi
}

# logs DIR : the points logs in DIR, one a line.
logs() { find "$1" -name 'points.*.wal' -printf '%f\n'; }

# ------------------------------------------------------------- a stop right after a start
# A new store's first record is its index format row (index cells only, no points).
serve "$T/empty.log" --storage.embedded.path="$T/empty" || tap_bail "promtable did not start"
pt_stop "$SRV_PID" 10
tap_is "$?" 0 "a graceful stop right after a start"
tap_is "$(logs "$T/empty")" "" "... leaves no points log"

# ---------------------------------------------------------------------- a healthy store
serve "$T/emb.log" --storage.embedded.path="$T/data" || tap_bail "promtable did not start"
tap_is "$(write_golden)" 204 "377 series written through the daemon"
check running --storage.embedded.path="$T/data"
expect running 2 "in use by process $SRV_PID" "a store a running daemon holds is refused (exit 2)"
pt_stop "$SRV_PID" 10
tap_is "$(logs "$T/data")" "" "a graceful stop after writes leaves no points log"
check nostore --storage.embedded.path="$T/nothing"
expect nostore 2 "no embedded store at $T/nothing" "a path without a store is refused, not created (exit 2)"
tap_check "  and nothing was created there" test ! -e "$T/nothing"
check healthy --storage.embedded.path="$T/data"
expect healthy 0 '^ok: no problems found' "the healthy store passes (exit 0)"
tap_check "the report counts what it read" grep -q '^points: 377 rows, 377 samples' "$T/healthy.out"

# damaged NAME ACTION PREFIX : a copy of the store with ptdamage's change; the row it
# changed in DAMAGED_ROW.
damaged() {
    rm -rf "$T/$1"
    cp -a "$T/data" "$T/$1"
    DAMAGED_ROW=$("$DAMAGE" "$T/$1" "$2" "$3")
}

damaged nopoints delete-points 'go_goroutines,'
POINTS_ROW=$DAMAGED_ROW
check nopoints --storage.embedded.path="$T/nopoints"
expect nopoints 1 "series row .*go_goroutines,.*has no samples in its bucket" \
    "a deleted points row: its series row has no samples (exit 1)"

damaged noseries delete-index '=='
SERIES_ROW=$DAMAGED_ROW
sid=${SERIES_ROW#*,@*,}
check noseries --storage.embedded.path="$T/noseries"
expect noseries 1 "points row \"$sid,@[0-9]+\" has samples in index bucket .* but no series row" \
    "a deleted series row: the points row's series is not indexed (exit 1)"

damaged nopostings delete-index '~job=self'
check nopostings --storage.embedded.path="$T/nopostings"
expect nopostings 1 'its postings cell "~job=self,@[0-9]+,[0-9a-f]{16}" is missing' \
    "a deleted postings cell is named (exit 1)"

damaged badchunk corrupt-chunk 'go_info,'
check badchunk --storage.embedded.path="$T/badchunk"
expect badchunk 1 'chunk "go_info,.*": the chunk does not decode' \
    "a chunk that does not decode is named (exit 1)"

rm -rf "$T/flipped"
cp -a "$T/data" "$T/flipped"
sst=$("$DAMAGE" "$T/flipped" points-sst | head -1)
printf '\xa5' | dd of="$T/flipped/$sst" bs=1 seek=20 conv=notrunc 2>/dev/null
check flipped --storage.embedded.path="$T/flipped"
expect flipped 1 'points table: RocksDB stopped reading .*block checksum mismatch' \
    "a flipped byte in a points table file fails its block checksum (exit 1)"

# ------------------------------------------------------------------------------- the log
# Acknowledged writes are in the points log (points.<n>.wal; the one after it is made
# ahead, empty) until a flush; kill -9 leaves them there: four records, the index format
# row the new store got at start and the three writes.
serve "$T/wal.log" --storage.embedded.path="$T/wal" || tap_bail "promtable did not start"
codes=$(write_golden; write_golden; write_golden)
kill -9 "$SRV_PID"
pt_stop "$SRV_PID" 1
tap_is "$codes" 204204204 "three writes acknowledged, then kill -9"
log=$(find "$T/wal" -name 'points.*.wal' -size +0 -printf '%f\n')
tap_check "one points log holds the records ($log)" test "$(printf '%s\n' "$log" | wc -l)" = 1
size=$(stat -c %s "$T/wal/$log")
# logcopy NAME OFFSET : a copy of the killed store with one byte of its log changed.
logcopy() {
    rm -rf "$T/$1"
    cp -a "$T/wal" "$T/$1"
    [ "$2" -lt 0 ] || printf '\x5a' | dd of="$T/$1/$log" bs=1 seek="$2" conv=notrunc 2>/dev/null
    cp "$T/$1/$log" "$T/$1.wal.before"
}
logcopy waltail $((size - 3))
check waltail --storage.embedded.path="$T/waltail"
expect waltail 1 "$log"': the last [0-9]+ bytes \(from byte [0-9]+\) are damaged: checksum mismatch; no intact record follows, so a start drops them as a torn or stale tail after replaying the 3 records before them' \
    "a damaged last log record is reported as the tail (exit 1)"
tap_check "the store with a damaged log is not opened: the log is as it was" \
    cmp -s "$T/waltail/$log" "$T/waltail.wal.before"
# Record 0 is the format row (index cells only): skipping it loses no sample.
rec0=$((20 + $(od -An -tu4 -j8 -N4 "$T/wal/$log" | tr -d ' ')))
logcopy walmid 30
check walmid --storage.embedded.path="$T/walmid"
expect walmid 1 "$log: bytes 0 to $rec0 \\($rec0 bytes\\) are damaged in the middle of the log: checksum mismatch; a start skips them and replays the intact records after them" \
    "a damaged record in the middle of the log is reported as skipped by a start (exit 1)"
expect walmid 1 "^not opening the store: a start replays its logs as said above" \
    "  and the store is not opened"
tap_is "$(grep -c 'samples after the damaged' "$T/walmid.out")" 0 "  nor is a sample said to be lost"
tap_check "not opened either" cmp -s "$T/walmid/$log" "$T/walmid.wal.before"
# Record 1, the first write, defines the rows of all 377 series; records 2 and 3 have
# samples of the same rows only.
logcopy walrow $((rec0 + 30))
check walrow --storage.embedded.path="$T/walrow"
expect walrow 1 "$log: bytes $rec0 to [0-9]+ \\([0-9]+ bytes\\) are damaged in the middle of the log: checksum mismatch; a start skips them" \
    "a damaged record defining rows is reported as skipped (exit 1)"
expect walrow 1 "$log: [0-9]+ samples after the damaged bytes belong to series only the damaged bytes defined: a start loses them" \
    "  with the samples a start loses"
range=$(grep -o "bytes $rec0 to [0-9]* ([0-9]* bytes)" "$T/walrow.out")
lost=$(grep -o '[0-9]* samples after the damaged bytes' "$T/walrow.out")
serve "$T/walrow.log" --storage.embedded.path="$T/walrow" || tap_bail "promtable did not start"
pt_stop "$SRV_PID" 10
tap_check "a start logs the same damaged range ($range)" \
    grep -qF "$log: $range are damaged; skipped, replay goes on" "$T/walrow.log"
tap_check "  and the same lost samples ($lost)" grep -qF "$log: $lost" "$T/walrow.log"
check walrow2 --storage.embedded.path="$T/walrow"
expect walrow2 0 '^ok: no problems found' "the store that start made passes the check (exit 0)"
logcopy walok -1
check walok --storage.embedded.path="$T/walok"
expect walok 0 "$log: 4 records, $size bytes, checksums good" \
    "the killed store's intact log passes, then replays and the store passes (exit 0)"

# ------------------------------------------------------------------------------ Bigtable
if ! pt_cbtemulator_found || ! command -v cbt >/dev/null; then
    for d in "healthy Bigtable store passes" "deleted points row fails" "deleted series row fails"; do
        tap_skip "Bigtable: $d" "the Bigtable emulator or cbt is not installed"
    done
    tap_done
    exit $?
fi
pt_bigtable_store "$T" check c_
serve "$T/bt.log" "${BT[@]}" || tap_bail "promtable (bigtable) did not start"
write_golden >/dev/null
pt_stop "$SRV_PID" 10
CBT=(env BIGTABLE_EMULATOR_HOST="127.0.0.1:$EMU_PORT" cbt -project check -instance check)
# The compaction lease row (docs/bigtable.md) is no series row.
"${CBT[@]}" set c_index ==compact "p:l=0 00000000000000ff" >"$T/cbt0.log" 2>&1
check bthealthy "${BT[@]}"
expect bthealthy 0 '^ok: no problems found' "Bigtable: healthy Bigtable store passes"
"${CBT[@]}" deleterow c_points "$POINTS_ROW" >"$T/cbt1.log" 2>&1
check btnopoints "${BT[@]}"
expect btnopoints 1 "series row .*go_goroutines,.*has no samples in its bucket" \
    "Bigtable: deleted points row fails"
"${CBT[@]}" deleterow c_index "$SERIES_ROW" >"$T/cbt2.log" 2>&1
check btnoseries "${BT[@]}"
expect btnoseries 1 "points row \"$sid,@[0-9]+\" has samples in index bucket .* but no series row" \
    "Bigtable: deleted series row fails"
tap_done
