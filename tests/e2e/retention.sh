#!/usr/bin/env bash
# storage.retention through the daemon: samples older than the retention are accepted
# (backfill) but a remote read never returns them, whatever window it asks for; recent
# ones read back. Then storage.retention_rules from a YAML file, on the embedded store and
# on the Bigtable emulator: the ruled series read back only what their rule keeps, the
# others everything, also after a restart; a rule longer than storage.retention stops the
# start with a message naming it. The compaction side is tested in
# tests/unit/t_retention.c and t_bigtable_compaction.c.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl
pt_tools

pt_mktemp DIR retention
pt_free_port PORT
URL=http://127.0.0.1:$PORT
pt_spawn "$DIR/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
    --storage.embedded.path="$DIR/store" --storage.retention=1h
PID=$PT_PID
if ! pt_wait_http "$URL/-/ready" 30 "$PID"; then
    tap_bail "promtable did not start: $(tail -n 3 "$DIR/promtable.log")"
fi

NOW=$(($(date +%s) * 1000))
# load START: 200 series x 20 samples, 15 s apart from START on.
load() {
    "$LOADGEN" --url "$URL/api/v1/write" --series 200 --connections 1 --requests 2 \
        --warmup 0 --start-ms "$1" --interval-ms 15000 2>>"$DIR/loadgen.log" | grep '^result:'
}
# read START END: "series=N samples=M" of a read of every series.
read_back() {
    "$READBENCH" --url "$URL/api/v1/read" --start-ms "$1" --end-ms "$2" --requests 1 \
        --warmup 0 '__name__=~.+' 2>>"$DIR/readbench.log" | grep -o 'series=[0-9]* samples=[0-9]*'
}

OLD=$((NOW - 3 * 3600000))
tap_check "samples 3 h old accepted" grep -q ' errors=0 ' <<<"$(load $OLD)"
tap_is "$(read_back $((OLD - 60000)) $((OLD + 3600000)))" "series=0 samples=0" \
    "a read of their window gets nothing"
tap_is "$(read_back 0 "$NOW")" "series=0 samples=0" "nor does a read of everything"

RECENT=$((NOW - 600000))
tap_check "recent samples accepted" grep -q ' errors=0 ' <<<"$(load $RECENT)"
tap_is "$(read_back $((OLD - 60000)) $((NOW + 3600000)))" "series=200 samples=4000" \
    "a read from before the retention returns exactly the recent samples"

m=$(curl -s "$URL/metrics")
tap_check "/metrics has promtable_retention_dropped_total" \
    grep -q '^promtable_retention_dropped_total ' <<<"$m"
pt_stop "$PID" 15
tap_is "$?" 0 "promtable exits 0 on SIGTERM"

# ---- storage.retention_rules: node_cpu* series keep 1 h, the others the 1 d of
# storage.retention.
cat >"$DIR/rules.yml" <<'YAML'
storage:
  retention: 1d
  retention_rules:
    - match: '{__name__=~"node_cpu.+"}'
      retention: 1h
YAML
# read_match START END MATCHER: "series=N samples=M".
read_match() {
    "$READBENCH" --url "$URL/api/v1/read" --start-ms "$1" --end-ms "$2" --requests 1 \
        --warmup 0 "$3" 2>>"$DIR/readbench.log" | grep -o 'series=[0-9]* samples=[0-9]*'
}
start_rules() { # LOG FLAGS...
    local log=$1
    shift
    pt_spawn "$log" "$PROMTABLE" --config.file="$DIR/rules.yml" \
        --web.listen-address="127.0.0.1:$PORT" "$@"
    PID=$PT_PID
    pt_wait_http "$URL/-/ready" 30 "$PID" || tap_bail "promtable did not start: $(tail -n 3 "$log")"
}
rules_case() { # NAME FLAGS...
    local name=$1
    shift
    start_rules "$DIR/$name.log" "$@"
    local old=$((NOW - 3 * 3600000)) recent=$((NOW - 600000))
    tap_check "$name: samples 3 h old and recent accepted" \
        grep -q ' errors=0 ' <<<"$(load $old; load $recent)"
    local all others
    all=$(read_match 0 $((NOW + 3600000)) '__name__=~.+')
    others=$(read_match 0 $((NOW + 3600000)) '__name__!~node_cpu.+')
    local n_all=${all#series=} n_oth=${others#series=}
    n_all=${n_all%% *} n_oth=${n_oth%% *}
    tap_check "$name: both kinds of series written ($all; $others)" \
        test "$n_all" -gt "$n_oth" -a "$n_oth" -gt 0
    for when in "" " after a restart"; do
        tap_is "$(read_match 0 $((NOW + 3600000)) '__name__=~node_cpu.+')" \
            "series=$((n_all - n_oth)) samples=$(((n_all - n_oth) * 20))" \
            "$name$when: the ruled series return their recent samples only"
        tap_is "$(read_match 0 $((NOW + 3600000)) '__name__!~node_cpu.+')" \
            "series=$n_oth samples=$((n_oth * 40))" \
            "$name$when: the other series return both windows"
        if [ -z "$when" ]; then
            pt_stop "$PID" 15
            start_rules "$DIR/$name-2.log" "$@"
        fi
    done
    pt_stop "$PID" 15
    tap_is "$?" 0 "$name: promtable exits 0 on SIGTERM"
}
rules_case embedded --storage.embedded.path="$DIR/rules-store"
if pt_cbtemulator_found; then
    pt_bigtable_store "$DIR" rules rr_
    rules_case bigtable "${BT[@]}" --storage.bigtable.buffer-path="$DIR/rules-buffer"
else
    for i in 1 2 3 4 5 6 7; do
        tap_skip "bigtable: retention rules ($i of 7)" "the Bigtable emulator is not installed"
    done
fi

sed -i 's/retention: 1h/retention: 2d/' "$DIR/rules.yml"
"$PROMTABLE" --config.file="$DIR/rules.yml" --storage.embedded.path="$DIR/rules-store" \
    >"$DIR/refused.log" 2>&1
rc=$?
tap_check "a rule longer than storage.retention: promtable does not start (exit $rc)" \
    test "$rc" -ne 0
tap_check "...saying so ($(head -c 200 "$DIR/refused.log"))" \
    grep -q 'rule 1: retention 2d is longer than storage.retention' "$DIR/refused.log"
tap_done
