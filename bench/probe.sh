#!/usr/bin/env bash
# Where promtable's memory goes under a load: promtable alone (embedded store, CPU
# $SERVER_CPU) fed by build-bench/bench/loadgen (CPU $LOADGEN_CPU), with its /metrics and
# resident memory sampled every $INTERVAL s. Prints loadgen's result line, the peak RSS and
# the samples as a table (MB): RSS, the head and its rows, the frozen shard, RocksDB's
# memtables and block cache, the index cache, the pending index cells, the request block
# pool, and head flushes and evicted rows so far. The memory figures of docs/benchmarks.md
# ("Why the embedded store's settings") come from this; the comparisons with VictoriaMetrics
# come from run.sh and churn.sh, which run both servers.
#
# Usage: bench/probe.sh [loadgen options...]
#        bench/probe.sh --series 100000 --duration 60 --churn-percent 10 --churn-every-ms 120000
#        PROMTABLE_ARGS=--storage.embedded.head-memory=64MiB bench/probe.sh --series 300000
# Without options: 100,000 series, 8 connections, 10 s warm-up, 60 s timed. Options given
# are added after those defaults (loadgen takes the last of a repeated option).
# PERF=1 also records a CPU profile of the server (perf record -g) over $PERF_SECONDS (30)
# s of the timed phase, from $PERF_DELAY (0) s into it, into $OUT/perf.data. OUT (default:
# a temporary directory, removed unless KEEP=1) keeps the server log, loadgen's output and
# the samples.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
SERVER_CPU=${SERVER_CPU:-0}
LOADGEN_CPU=${LOADGEN_CPU:-1}
INTERVAL=${INTERVAL:-2}
PROMTABLE_ARGS=${PROMTABLE_ARGS:-}
PERF=${PERF:-0}
PERF_SECONDS=${PERF_SECONDS:-30}
PERF_DELAY=${PERF_DELAY:-0}
export PT_KEEP_TMP=${KEEP:-0}

PROMTABLE=$BUILD_DIR/promtable
LOADGEN=$BUILD_DIR/bench/loadgen
for b in "$PROMTABLE" "$LOADGEN"; do
    [[ -x $b ]] || { echo "missing $b (cmake --build $BUILD_DIR --target promtable loadgen)" >&2; exit 1; }
done
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT"; else pt_mktemp OUT promtable-probe; fi

PORT=
pt_free_port PORT
# shellcheck disable=SC2086  # PROMTABLE_ARGS is a list of flags
pt_spawn "$OUT/promtable.log" taskset -c "$SERVER_CPU" "$PROMTABLE" \
    --web.listen-address="127.0.0.1:$PORT" --storage.embedded.path="$OUT/data" $PROMTABLE_ARGS
SERVER=$PT_PID
pt_wait_http "http://127.0.0.1:$PORT/-/ready" 30 "$SERVER" ||
    { tail -n 20 "$OUT/promtable.log" >&2; exit 1; }

# One line per sample: seconds since start, then name=value for each figure kept.
sample() {
    local t0=$SECONDS rss m
    while pt_alive "$SERVER"; do
        rss=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$SERVER/status" 2>/dev/null) || break
        m=$(curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" | awk '
            /^promtable_embedded_(head_bytes|head_rows|frozen_bytes|memtable_bytes|block_cache_bytes|index_pending_bytes|flushes_total|head_rows_evicted_total) / ||
            /^promtable_(index_cache_bytes|arena_pool_bytes) / {
                sub(/^promtable_(embedded_)?/, "", $1); printf " %s=%.0f", $1, $2 }')
        echo "$((SECONDS - t0)) rss=$rss$m"
        sleep "$INTERVAL"
    done
}
sample >"$OUT/samples" &
SAMPLER=$!
pt_on_exit "kill $SAMPLER 2>/dev/null || true"

# Waits (at most 600 s) until loadgen's timed phase starts: it prints "warmup: ..." when
# its warm-up ends, or has none when it announces "warm-up 0s".
timed_phase_started() {
    local i
    for ((i = 0; i < 6000; i++)); do
        grep -qE '^warmup:|^loadgen: POST .* warm-up 0s,' "$OUT/loadgen.err" 2>/dev/null &&
            return 0
        sleep 0.1
    done
    return 1
}

PERF_PID=
if [[ $PERF == 1 ]]; then
    # $PERF_SECONDS of the timed phase (not the body building or the warm-up).
    ( timed_phase_started && sleep "$PERF_DELAY" &&
        perf record -g -p "$SERVER" -o "$OUT/perf.data" -- sleep "$PERF_SECONDS" ) \
        >"$OUT/perf.log" 2>&1 &
    PERF_PID=$!
fi
taskset -c "$LOADGEN_CPU" "$LOADGEN" --url "http://127.0.0.1:$PORT/api/v1/write" \
    --series 100000 --connections 8 --warmup 10 --duration 60 --samples-per-request 2000 \
    --labels 10 --server-pid "$SERVER" "$@" >"$OUT/loadgen.out" 2>"$OUT/loadgen.err" ||
    { tail -n 20 "$OUT/loadgen.err" >&2; exit 1; }
peak=$(awk '/^VmHWM:/ {printf "%d", $2 / 1024}' "/proc/$SERVER/status")
kill "$SAMPLER" 2>/dev/null || true
[[ -z $PERF_PID ]] || wait "$PERF_PID" || true
pt_stop "$SERVER" 60 || true

grep '^result:' "$OUT/loadgen.out" || true
echo "peak RSS: $peak MiB"
awk '
    function f(k) { return (k in v) ? sprintf("%8.1f", v[k] / 1e6) : "       -" }
    BEGIN {
        printf "%5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %7s %8s\n", "s", "rss", "head",
            "rows(k)", "frozen", "memtab", "bcache", "ixcache", "ixpend", "arenas",
            "flushes", "evicted"
    }
    {
        delete v
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        printf "%5d %s %s %8.0f %s %s %s %s %s %s %7d %8d\n", $1, f("rss"), f("head_bytes"),
            v["head_rows"] / 1e3, f("frozen_bytes"), f("memtable_bytes"),
            f("block_cache_bytes"), f("index_cache_bytes"), f("index_pending_bytes"),
            f("arena_pool_bytes"), v["flushes_total"], v["head_rows_evicted_total"]
    }' "$OUT/samples"
