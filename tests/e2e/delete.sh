#!/usr/bin/env bash
# Deleting series (POST or PUT /api/v1/admin/tsdb/delete_series, `promtable delete`) with the
# real promtable binary, on the embedded store and on the Bigtable emulator (through the
# write-back buffer):
#   - without web.enable_admin_api: 403; without the write credentials: 401; without
#     match[]: 400; a bad time: 400;
#   - one series deleted whole: the others of its metric read back untouched;
#   - a metric's samples of one past day deleted: every other sample reads back, and the
#     series, label values and cardinality APIs no longer list anything for that day;
#   - after a restart the same; `promtable delete` on the stopped store deletes the same
#     way, and is refused (naming the HTTP way) while a promtable holds the store;
#   - with tenancy, a tenant's delete leaves another tenant's same series alone, also
#     through `promtable delete --tenant`.
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl jq
B=${PT_BUILD_DIR:-$here/build}
PROMTABLE=$B/promtable RWTOOL=$B/tests/rwtool
pt_built "$PROMTABLE" "$RWTOOL"
pt_mktemp T delete

DAY=86400000
NOW=$(($(date +%s) * 1000))
OLD=$(((NOW - 2 * DAY) / DAY * DAY)) # a past day, whole: its index rows can go
RECENT=$((NOW - 600000))
echo "del-token" >"$T/token"
AUTH=(-H "Authorization: Bearer del-token")
H=(-H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy')

# m{shard="s0".."s4"} and keep{shard="s0"}: samples at OLD + 1 h, OLD + 2 h and RECENT.
spec=()
for name in m keep; do
    for s in 0 1 2 3 4; do
        [ "$name" = keep ] && [ "$s" != 0 ] && continue
        spec+=(s l __name__ "$name" l shard "s$s"
            v 1 $((OLD + 3600000)) v 2 $((OLD + 7200000)) v 3 "$RECENT")
    done
done
"$RWTOOL" write 1 "$T/load.bin" "${spec[@]}" || tap_bail "rwtool write failed"

# count URL NAME: "series samples" a remote read of NAME over everything returns.
count() {
    "$RWTOOL" readreq "$T/rr.bin" $((OLD - DAY)) $((NOW + DAY)) "__name__=$2" || return 1
    curl -s -o "$T/rr.out" "${AUTH[@]}" "${H[@]}" --data-binary @"$T/rr.bin" "$1/api/v1/read"
    local out
    out=$("$RWTOOL" readresp "$T/rr.out")
    printf '%s %s\n' "$(cut -d' ' -f1 <<<"$out" | sort -u | grep -c .)" "$(grep -c . <<<"$out")"
}
# api URL PATH: the answer's data, as jq -c prints it
api() { curl -s "${AUTH[@]}" "$1$2" | jq -c .data; }
# del URL METHOD ARGS...: the status of a delete_series with the form ARGS
del() {
    local url=$1 method=$2
    shift 2
    local form=() a
    for a in "$@"; do form+=(--data-urlencode "$a"); done
    curl -s -o "$T/del.out" -w '%{http_code}' -X "$method" "${AUTH[@]}" "${form[@]}" \
        "$url/api/v1/admin/tsdb/delete_series"
}

run_case() { # NAME FLAG...
    local name=$1
    shift
    local pid url
    pt_serve pid url "$T/$name.0.log" "$@" --web.bearer-token-file="$T/token" ||
        tap_bail "$name: promtable did not start"
    tap_is "$(del "$url" POST 'match[]=m') $(jq -r .errorType "$T/del.out")" "403 bad_data" \
        "$name: without web.enable_admin_api: 403"
    pt_stop "$pid" 15
    pt_serve pid url "$T/$name.1.log" "$@" --web.bearer-token-file="$T/token" \
        --web.enable-admin-api || tap_bail "$name: promtable did not start"
    tap_is "$(curl -s -o /dev/null -w '%{http_code}' -X POST --data 'match[]=m' \
        "$url/api/v1/admin/tsdb/delete_series")" 401 "$name: without the token: 401"
    tap_is "$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" "${H[@]}" \
        --data-binary @"$T/load.bin" "$url/api/v1/write")" 204 "$name: samples written"
    tap_is "$(count "$url" m) $(count "$url" keep)" "5 15 1 3" "$name: 5 series of m, 1 of keep"
    tap_is "$(del "$url" POST) $(jq -r .error "$T/del.out")" "400 no match[] parameter provided" \
        "$name: without match[]: 400"
    tap_is "$(del "$url" POST 'match[]=m' 'start=yesterday')" 400 "$name: a bad start: 400"

    tap_is "$(del "$url" POST 'match[]={__name__="m",shard="s1"}')" 204 \
        "$name: one series deleted whole (POST)"
    tap_is "$(count "$url" m)" "4 12" "$name: the 4 others of m read back whole"
    tap_is "$(del "$url" PUT 'match[]=m' "start=$((OLD / 1000))" \
        "end=$(((OLD + DAY - 1) / 1000))")" 204 "$name: m's samples of a past day deleted (PUT)"
    local day="start=$((OLD / 1000))&end=$(((OLD + DAY - 1) / 1000))"
    check() { # WHEN
        tap_is "$(count "$url" m) $(count "$url" keep)" "4 4 1 3" \
            "$name$1: m keeps its recent samples, keep all three"
        tap_is "$(api "$url" "/api/v1/series?match[]=m&$day")" "[]" \
            "$name$1: no series of m listed for that day"
        tap_is "$(api "$url" "/api/v1/label/__name__/values?$day")" '["keep"]' \
            "$name$1: nor m among the metric names of the day"
        tap_is "$(api "$url" "/api/v1/series?match[]=m" | jq length)" 4 \
            "$name$1: 4 series of m listed over all time"
        tap_is "$(api "$url" "/api/v1/status/tsdb?time=$(((OLD + DAY / 2) / 1000))" |
            jq -c '[.headStats.numSeries, [.seriesCountByMetricName[].name]]')" '[1,["keep"]]' \
            "$name$1: the day's cardinality counts keep alone"
    }
    check ""
    pt_stop "$pid" 15
    pt_serve pid url "$T/$name.2.log" "$@" --web.bearer-token-file="$T/token" ||
        tap_bail "$name: promtable did not start again"
    check " after a restart"
    "$PROMTABLE" delete 'keep' "$@" >"$T/$name.cli.log" 2>&1
    tap_check "$name: promtable delete is refused while promtable runs" \
        grep -q 'POST /api/v1/admin/tsdb/delete_series' "$T/$name.cli.log"
    pt_stop "$pid" 15
    "$PROMTABLE" delete 'keep' --start="$((OLD / 1000))" --end="$(((OLD + DAY - 1) / 1000))" \
        "$@" >"$T/$name.cli.log" 2>"$T/$name.cli.err"
    tap_is "$?:$(cat "$T/$name.cli.log")" "0:deleted: series=1 series_days=1 index_days_erased=1" \
        "$name: promtable delete on the stopped store"
    pt_serve pid url "$T/$name.3.log" "$@" --web.bearer-token-file="$T/token" ||
        tap_bail "$name: promtable did not start again"
    tap_is "$(count "$url" keep) $(count "$url" m)" "1 1 4 4" \
        "$name: keep's past day gone, its recent sample and m unchanged"
    pt_stop "$pid" 15
}

run_case embedded --storage.embedded.path="$T/store"
if pt_cbtemulator_found; then
    pt_bigtable_store "$T" del dl_
    run_case bigtable "${BT[@]}" --storage.bigtable.buffer-path="$T/buffer"
else
    for i in $(seq 1 19); do
        tap_skip "bigtable: delete ($i of 19)" "the Bigtable emulator is not installed"
    done
fi
# Tenancy: tenants a and b write the same series; each deletes only its own.
TEN=(-H "X-Scope-OrgID: a")
pt_serve pid url "$T/tenants.log" --storage.embedded.path="$T/tstore" --tenancy.enabled=true \
    --web.enable-admin-api || tap_bail "tenants: promtable did not start"
for t in a b; do
    curl -s -o /dev/null -H "X-Scope-OrgID: $t" "${H[@]}" --data-binary @"$T/load.bin" \
        "$url/api/v1/write"
done
tcount() { # TENANT NAME
    "$RWTOOL" readreq "$T/rr.bin" $((OLD - DAY)) $((NOW + DAY)) "__name__=$2" || return 1
    curl -s -o "$T/rr.out" -H "X-Scope-OrgID: $1" "${H[@]}" --data-binary @"$T/rr.bin" \
        "$url/api/v1/read"
    "$RWTOOL" readresp "$T/rr.out" | grep -c .
}
tap_is "$(curl -s -o /dev/null -w '%{http_code}' -X POST "${TEN[@]}" --data 'match[]=m' \
    "$url/api/v1/admin/tsdb/delete_series")" 204 "tenants: a deletes m"
tap_is "$(tcount a m) $(tcount b m) $(tcount a keep)" "0 15 3" \
    "tenants: a's m gone, b's m and a's keep read back"
pt_stop "$pid" 15
"$PROMTABLE" delete keep --tenant=b --storage.embedded.path="$T/tstore" --tenancy.enabled=true \
    >"$T/tcli.log" 2>&1
tap_is "$?" 0 "tenants: promtable delete --tenant=b keep"
pt_serve pid url "$T/tenants2.log" --storage.embedded.path="$T/tstore" --tenancy.enabled=true ||
    tap_bail "tenants: promtable did not start again"
tap_is "$(tcount a keep) $(tcount b keep) $(tcount b m)" "3 0 15" \
    "tenants: b's keep gone, a's keep and b's m read back"
pt_stop "$pid" 15
tap_done
