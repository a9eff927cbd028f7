#!/usr/bin/env bash
# Disk use of the embedded store under constant load, with and without storage.retention.
#
# For each retention in RETENTIONS ("0" = keep forever), a fresh promtable (head of 1 MiB,
# so samples reach RocksDB within seconds) gets SERIES series, one sample each every
# INTERVAL_MS of wall time: every STEP seconds one loadgen run sends STEP seconds' worth,
# timestamped from the current wall time. After each step the data directory's size is
# printed: all of it (du: table files, logs, RocksDB's own files) / the table files and
# points logs alone. A stored chunk goes
# when its newest sample expires, and chunks hold 256 to 1024 samples of a series, so
# the default 10 samples a second per series lets a 30 s retention show within minutes.
#
#   flock /tmp/pt-bench.lock bench/retention.sh
#
# The word "rules" in RETENTIONS runs storage.retention 0 (forever) with one retention
# rule, RULE_RETENTION (30s) for the series RULE_MATCH selects (every series by default;
# or, say, '{__name__=~"node_.+"}' for some of them), so only the rule keeps the disk flat.
#
# Environment: PT_BUILD_DIR (default ./build), SERIES (1000), INTERVAL_MS (100), STEP
# (10 s), STEPS (24), RETENTIONS ("30s 0 rules"), RULE_MATCH, RULE_RETENTION.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/tests/e2e/lib.sh"
B=${PT_BUILD_DIR:-$ROOT/build}
PROMTABLE=$B/promtable LOADGEN=$B/bench/loadgen
SERIES=${SERIES:-1000} INTERVAL_MS=${INTERVAL_MS:-100} STEP=${STEP:-10} STEPS=${STEPS:-24}
RETENTIONS=${RETENTIONS:-30s 0 rules}
RULE_MATCH=${RULE_MATCH:-'{__name__=~".+"}'} RULE_RETENTION=${RULE_RETENTION:-30s}

pt_mktemp DIR retention-bench
# sizes DIR: "<all of DIR>/<table files and points logs>" in MiB.
sizes() {
    local all data
    all=$(du -sb "$1" | cut -f 1)
    data=$(cat "$1"/*.sst "$1"/points.*.wal 2>/dev/null | wc -c)
    awk -v a="$all" -v d="$data" 'BEGIN {printf "%.1f/%.1f", a / 1048576, d / 1048576}'
}

for keep in $RETENTIONS; do
    rm -rf "$DIR/store"
    pt_free_port PORT
    URL=http://127.0.0.1:$PORT
    how=(--storage.retention="$keep")
    if [[ $keep == rules ]]; then
        printf 'storage:\n  retention_rules:\n    - match: %s\n      retention: %s\n' \
            "'$RULE_MATCH'" "$RULE_RETENTION" >"$DIR/rules.yml"
        how=(--config.file="$DIR/rules.yml")
    fi
    pt_spawn "$DIR/promtable-$keep.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PORT" \
        --storage.embedded.path="$DIR/store" --storage.embedded.head-memory=1MiB "${how[@]}"
    PID=$PT_PID
    pt_wait_http "$URL/-/ready" 30 "$PID" || { echo "promtable did not start" >&2; exit 1; }
    line="retention=$keep MiB:"
    for ((i = 1; i <= STEPS; i++)); do
        t0=$(date +%s%3N)
        "$LOADGEN" --url "$URL/api/v1/write" --series "$SERIES" --connections 2 \
            --requests $((SERIES * STEP * 1000 / INTERVAL_MS / 2000)) --warmup 0 \
            --start-ms "$t0" --interval-ms "$INTERVAL_MS" >>"$DIR/loadgen.log" 2>&1 ||
            echo "loadgen failed" >&2
        left=$((t0 + STEP * 1000 - $(date +%s%3N)))
        ((left > 0)) && pt_sleep "$(awk -v l="$left" 'BEGIN {printf "%.3f", l / 1000}')"
        line+=" $(sizes "$DIR/store")"
    done
    dropped=$(curl -s "$URL/metrics" | pt_metric_sum /dev/stdin promtable_retention_dropped_total)
    echo "$line (dropped entries: $dropped)"
    pt_stop "$PID" 15
done
