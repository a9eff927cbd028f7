#!/usr/bin/env bash
# A full disk under the embedded store (root: a 16 MiB tmpfs). Writes of new series are
# acknowledged, then a file fills the disk: a write gets 503 with Retry-After and a
# message naming the disk, /-/ready says not ready, reads answer 200 or 503 (never 500),
# /metrics shows promtable_embedded_disk_full 1. Once the file is removed the store takes
# writes again by itself (RocksDB reopened if it refused a write), without crashing, and
# every acknowledged sample reads back, before and after a restart; each graceful stop
# leaves no points log.
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require curl awk dd mount umount
pt_tools RWTOOL=tests/rwtool
[ "$(id -u)" = 0 ] || tap_skip_all "needs root to mount a small tmpfs"

pt_mktemp DIR full_disk
mkdir "$DIR/mnt"
mount -t tmpfs -o size=16m tmpfs "$DIR/mnt" 2>/dev/null || tap_skip_all "cannot mount a tmpfs"
pt_on_exit "umount -l '$DIR/mnt'"
DATA=$DIR/mnt/data

pt_free_port PORT
# shellcheck disable=SC2153 # pt_free_port set PORT
U=http://127.0.0.1:$PORT
start() { # LOG
    pt_spawn "$1" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
        --storage.embedded.path="$DATA" --web.overload-retry-after=2s
    PID=$PT_PID
    pt_wait_http "$U/-/ready" 30 "$PID" || {
        tap_diag_file "$1"
        tap_bail "promtable does not start"
    }
}
start "$DIR/promtable.log"

T0=1795296000000
# write NAME TAG FILE: a body of 20 new series NAME{i=...,tag=TAG}, 3 samples each.
body() {
    local args=() i
    for ((i = 0; i < 20; i++)); do
        args+=(s l __name__ "$1" l i "$i" l tag "$2" v "$i" "$T0" v "$((i + 1))" "$((T0 + 15000))"
            v "$((i + 2))" "$((T0 + 30000))")
    done
    "$RWTOOL" write 1 "$3" "${args[@]}"
}
post() { # BODY -> prints the status; headers in $DIR/h, body in $DIR/b
    curl -sS -o "$DIR/b" -D "$DIR/h" -w '%{http_code}' -H 'Content-Type: application/x-protobuf' \
        -H 'Content-Encoding: snappy' --data-binary @"$1" "$U/api/v1/write"
}
# read NAME: the samples of NAME, one a line (sorted), into $DIR/r.txt; prints the status.
read_samples() {
    "$RWTOOL" readreq "$DIR/rq" "$T0" "$((T0 + 60000))" __name__="$1"
    local code
    code=$(curl -sS -o "$DIR/rs" -w '%{http_code}' -H 'Content-Type: application/x-protobuf' \
        -H 'Content-Encoding: snappy' --data-binary @"$DIR/rq" "$U/api/v1/read")
    if [ "$code" = 200 ]; then "$RWTOOL" readresp "$DIR/rs" | sort >"$DIR/r.txt"; fi
    echo "$code"
}
metric() { # NAME
    curl -sS --max-time 5 "$U/metrics" -o "$DIR/m.txt" && pt_metric_sum "$DIR/m.txt" "$@"
}

body a one "$DIR/a"
body b two "$DIR/b2"
body c three "$DIR/c"
tap_is "$(post "$DIR/a")" 204 "series a acknowledged"
tap_is "$(read_samples a)" 200 "series a read"
tap_is "$(wc -l <"$DIR/r.txt")" 60 "... all 60 samples"
cp "$DIR/r.txt" "$DIR/want_a"
# b's index cells wait in the index head: the next read of b writes them into RocksDB.
tap_is "$(post "$DIR/b2")" 204 "series b acknowledged"

dd if=/dev/zero of="$DIR/mnt/filler" bs=64k 2>/dev/null
tap_is "$(df --output=avail -B1 "$DIR/mnt" | tail -1 | tr -d ' ')" 0 "a file fills the disk"

tap_is "$(post "$DIR/c")" 503 "a write on the full disk: 503"
tap_check "... with Retry-After: 2" grep -qi '^Retry-After: 2' "$DIR/h"
tap_check "... naming the disk" grep -q "no space left on the disk holding $DATA" "$DIR/b"
tap_diag "$(cat "$DIR/b")"
code=$(curl -sS -o "$DIR/rb" -w '%{http_code}' "$U/-/ready")
tap_is "$code" 503 "/-/ready: not ready while the disk is full"
tap_check "... saying why" grep -q 'no space left' "$DIR/rb"
for s in a b; do
    code=$(read_samples "$s")
    tap_check "a read of $s on the full disk: 200 or 503 ($code), never 500" \
        test "$code" = 200 -o "$code" = 503
done
tap_is "$(metric promtable_embedded_disk_full)" 1 "promtable_embedded_disk_full 1"

rm -f "$DIR/mnt/filler"
ready=
for ((i = 0; i < 150; i++)); do
    if [ "$(curl -sS -o /dev/null -w '%{http_code}' "$U/-/ready")" = 200 ]; then
        ready=1
        break
    fi
    pt_sleep 0.1
done
tap_is "$ready" 1 "ready again once space is freed"
tap_is "$(post "$DIR/c")" 204 "the write is acknowledged now"
tap_is "$(metric promtable_embedded_disk_full)" 0 "promtable_embedded_disk_full 0"
tap_is "$(metric promtable_embedded_disk_full_total)" 1 "promtable_embedded_disk_full_total 1"
tap_diag "RocksDB reopens: $(metric promtable_embedded_reopens_total)"

check_all() { # WHEN
    local s
    for s in a b c; do
        tap_is "$(read_samples "$s")" 200 "$1: series $s read"
        tap_is "$(wc -l <"$DIR/r.txt")" 60 "$1: ... all 60 of its samples"
    done
    read_samples a >/dev/null
    tap_check "$1: series a as written" cmp -s "$DIR/r.txt" "$DIR/want_a"
}
check_all "after space came back"
pt_sleep 2 # past the next disk check: a late abort would show here
tap_check "promtable is still running" pt_alive "$PID"
tap_check "the log says the disk filled up" grep -q 'the disk is full' "$DIR/promtable.log"
tap_check "... and that space is free again" grep -q 'space is free again' "$DIR/promtable.log"
logs() { find "$DATA" -name 'points.*.wal' -printf '%f\n'; }
pt_stop "$PID" 20
tap_is "$?" 0 "a graceful stop"
tap_is "$(logs)" "" "... leaves no points log"
start "$DIR/promtable2.log"
check_all "after a restart"
pt_stop "$PID" 20
tap_is "$?" 0 "a graceful stop after the restart"
tap_is "$(logs)" "" "... leaves no points log"
tap_done
