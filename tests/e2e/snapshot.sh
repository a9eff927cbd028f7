#!/usr/bin/env bash
# Snapshots of the embedded store (POST /api/v1/admin/tsdb/snapshot) with the real
# promtable binary:
#   - without web.enable_admin_api: 403; without the write credentials: 401;
#   - a snapshot taken while the head holds the samples opens as a store of its own
#     (storage.embedded.path pointed at it) and remote-reads back exactly what was
#     acknowledged before it, and nothing written after;
#   - promtable killed (SIGKILL) while snapshots are being made under a steady writer: it
#     starts again on its store and reads back every acknowledged sample, and every
#     snapshot directory left is either complete (it opens and reads back the first
#     samples) or named *.tmp (RocksDB's checkpoint in the making).
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl jq
B=${PT_BUILD_DIR:-$here/build}
PROMTABLE=$B/promtable RWTOOL=$B/tests/rwtool
pt_built "$PROMTABLE" "$RWTOOL"
pt_mktemp T snapshot

T0=$(($(date +%s) * 1000 - 600000))
echo "snap-token" >"$T/token"
AUTH=(-H "Authorization: Bearer snap-token")
H=(-H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy')
serve() { pt_serve PID URL "$@"; }
# write URL FILE: the status of a remote write of FILE
write() {
    curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" "${H[@]}" --data-binary @"$2" "$1/api/v1/write"
}
# readall URL NAME: NAME's samples as rwtool prints them, sorted
readall() {
    "$RWTOOL" readreq "$T/rr.bin" $((T0 - 60000)) $((T0 + 3600000)) "__name__=$2" || return 1
    curl -s -o "$T/rr.out" "${AUTH[@]}" "${H[@]}" --data-binary @"$T/rr.bin" "$1/api/v1/read"
    "$RWTOOL" readresp "$T/rr.out" | sort
}
# batch FILE NAME I: a write of 20 series of NAME, one sample each at T0 + I s
batch() {
    local spec=() s
    for s in $(seq 0 19); do spec+=(s l __name__ "$2" l shard "s$s" v "$3" $((T0 + $3 * 1000))); done
    "$RWTOOL" write 1 "$1" "${spec[@]}"
}
snapshot() { curl -s -w ' %{http_code}' -X POST "${AUTH[@]}" "$1/api/v1/admin/tsdb/snapshot"; }

for i in 1 2 3; do batch "$T/first.$i.bin" first "$i" || tap_bail "rwtool write failed"; done
batch "$T/later.bin" later 1 || tap_bail "rwtool write failed"

serve "$T/pt0.log" --storage.embedded.path="$T/store" --web.bearer-token-file="$T/token" ||
    tap_bail "promtable did not start"
r=$(snapshot "$URL")
tap_is "${r##* } $(jq -r .errorType <<<"${r% *}")" "403 bad_data" \
    "without web.enable_admin_api: 403 ($(jq -r .error <<<"${r% *}"))"
pt_stop "$PID" 15

serve "$T/pt1.log" --storage.embedded.path="$T/store" --web.bearer-token-file="$T/token" \
    --web.enable-admin-api || tap_bail "promtable did not start"
tap_is "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/api/v1/admin/tsdb/snapshot")" 401 \
    "without the token: 401"
for i in 1 2 3; do tap_is "$(write "$URL" "$T/first.$i.bin")" 204 "first samples, write $i"; done
want=$(readall "$URL" first)
tap_is "$(wc -l <<<"$want")" 60 "60 samples of first read back"
r=$(snapshot "$URL")
name=$(jq -r .data.name <<<"${r% *}")
tap_check "a snapshot: ${r}" test "${r##* }" = 200 -a -d "$T/store/snapshots/$name"
tap_is "$(write "$URL" "$T/later.bin")" 204 "later samples written after it"
pt_stop "$PID" 15

serve "$T/pt2.log" --storage.embedded.path="$T/store/snapshots/$name" --web.bearer-token-file="$T/token" ||
    tap_bail "promtable did not start on the snapshot"
tap_is "$(readall "$URL" first)" "$want" "the snapshot as a store: the first samples, exactly"
tap_is "$(readall "$URL" later)" "" "... and none written after it"
pt_stop "$PID" 15

# A kill while snapshots are made: a writer keeps writing, snapshots follow each other,
# and the process is killed wherever it is (between or inside snapshots).
serve "$T/pt3.log" --storage.embedded.path="$T/store" --web.bearer-token-file="$T/token" \
    --web.enable-admin-api || tap_bail "promtable did not start"
(
    for i in $(seq 10 400); do
        batch "$T/w.bin" busy "$i" || exit 1
        [ "$(write "$URL" "$T/w.bin")" = 204 ] || exit 0
        echo "$i" >"$T/acked"
    done
) &
wpid=$!
(for _ in $(seq 1 50); do snapshot "$URL" >/dev/null || exit 0; done) &
spid=$!
# Killed once two more snapshots are complete, while the next is being made.
for _ in $(seq 1 300); do
    [ "$(ls "$T/store/snapshots" | grep -cv '\.tmp$')" -ge 3 ] && break
    pt_sleep 0.1
done
kill -KILL "$PID"
wait "$wpid" "$spid" 2>/dev/null
pt_stop "$PID" 1
acked=$(cat "$T/acked" 2>/dev/null || echo 9)

serve "$T/pt4.log" --storage.embedded.path="$T/store" --web.bearer-token-file="$T/token" ||
    tap_bail "promtable did not start after the kill"
got=$(readall "$URL" busy | awk '{print $2}' | sort -un | awk -v t0="$T0" '{print ($1 - t0) / 1000}' | tail -n 1)
n=$(readall "$URL" busy | wc -l)
tap_check "after the kill: every acknowledged write is there (up to $acked: $n samples, last $got)" \
    test "${got:-0}" -ge "$acked" -a "$n" -ge $(((acked - 9) * 20))
tap_is "$(readall "$URL" first)" "$want" "after the kill: the first samples, exactly"
pt_stop "$PID" 15
complete=0 partial=0 bad=0
for d in "$T"/store/snapshots/*; do
    case $d in
    *.tmp) partial=$((partial + 1)) ;;
    *)
        if serve "$T/pt5.log" --storage.embedded.path="$d" && [ "$(readall "$URL" first)" = "$want" ]; then
            complete=$((complete + 1))
        else
            bad=$((bad + 1))
            tap_diag "$d: $(readall "$URL" first | wc -l) samples of first" "$(tail -n 5 "$T/pt5.log")"
        fi
        pt_stop "$PID" 15
        ;;
    esac
done
# `promtable snapshot DIR` on a stopped store; refused while a promtable holds it.
out=$("$PROMTABLE" snapshot "$T/offline" --storage.embedded.path="$T/store" 2>&1)
tap_is "$?" 0 "promtable snapshot DIR on a stopped store: $out"
serve "$T/pt6.log" --storage.embedded.path="$T/offline" || tap_bail "promtable did not start on it"
tap_is "$(readall "$URL" first)" "$want" "that snapshot as a store: the first samples, exactly"
out=$("$PROMTABLE" snapshot "$T/offline2" --storage.embedded.path="$T/offline" 2>&1)
tap_check "promtable snapshot of a store a promtable holds: refused ($out)" \
    test $? != 0 -a ! -e "$T/offline2"
pt_stop "$PID" 15
tap_check "snapshots left by the kill: $complete complete (each reads back), $partial in the making (.tmp), $bad bad" \
    test "$bad" = 0 -a "$complete" -ge 3
tap_done
