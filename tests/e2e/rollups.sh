#!/usr/bin/env bash
# Roll-ups (storage.rollups, read.rollups) read by real Prometheus 2.42 servers through
# remote_read: one reader on /api/v1/read (the raw data), one on
# /api/v1/read?resolution=auto, both with empty TSDBs, answering the same PromQL over 36 h
# of 20 series (monthgen: integer counters, full-mantissa gauges, one sample a minute, 7 s
# past it as scrapes with an offset: none on a window's edge, where Prometheus 2's closed
# ranges take one sample more than a window holds)
# that promtable's builder rolled up into a 5m and a 1h stage. On the embedded store and,
# when the emulator is installed, on Bigtable:
#   - ranges on the windows' edges (step and start multiples of the resolution), no
#     sample on an edge: max_over_time, min_over_time, increase, rate, sum_over_time and
#     count_over_time answer exactly what the raw data answers;
#   - a plain selector (sum(x) every hour, lookback 5m: each 5m window's last sample)
#     too;
#   - functions no stage serves (avg_over_time, count_over_time, irate) answer exactly
#     as raw;
#   - ranges off the windows' edges (7 minutes later): rate within the bound written
#     below of the raw answer, max_over_time never above it and within its bound;
#   - promtable counted the roll-up answers; a client without ?resolution=auto, or a
#     promtable without read.rollups, gets the raw data.
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl jq prometheus awk
pt_tools MONTHGEN=bench/monthgen
pt_mktemp T rollups

HOUR=3600000
NOW=$(($(date +%s) * 1000))
DATA_END=$((NOW / 60000 * 60000 - 60000))
# Queries end two whole hours before now: every stage has built them (delay 1m).
END=$((NOW / HOUR * HOUR - 2 * HOUR))
START=$((END - 36 * HOUR))
# The relative error bounds off the windows' edges (measured: docs/http-api.md).
RATE_BOUND=0.08
MAX_BOUND=0.0005

reader() { # NAME PORT URL: a Prometheus whose every answer comes from URL
    cat >"$T/$1.yml" <<EOF
global:
  scrape_interval: 1h
remote_read:
  - url: $3
    read_recent: true
    remote_timeout: 60s
EOF
    pt_start_prometheus "$T" "$1" "$2" || tap_bail "prometheus $1 did not start"
}

# q PORT QUERY START_MS END_MS STEP_S: the values of a range query, one line a series and
# step: "labels t v", sorted.
q() {
    curl -s --data-urlencode "query=$2" --data-urlencode "start=$(awk -v t="$3" 'BEGIN { printf "%.3f", t / 1000 }')" \
        --data-urlencode "end=$(awk -v t="$4" 'BEGIN { printf "%.3f", t / 1000 }')" \
        --data-urlencode "step=$5" "http://127.0.0.1:$1/api/v1/query_range" |
        jq -r 'if .status != "success" then "error \(.error)" else
               .data.result[] | (.metric | tostring) as $m | .values[] | "\($m) \(.[0]) \(.[1])" end' |
        sort
}

# worst A B: the largest |a - b| / |b| over lines paired in order (same count, else "lines").
worst() {
    paste -d' ' "$1" "$2" | awk '
        NF != 6 { bad = 1 }
        { d = $3 - $6; if (d < 0) d = -d; b = $6 < 0 ? -$6 : $6;
          r = b > 0 ? d / b : d; if (r > w) w = r }
        END { if (bad || NR == 0) print "lines"; else printf "%.6f\n", w }'
}

# never_above A B: 1 when every value of A is at most B's on the same line.
never_above() { paste -d' ' "$1" "$2" | awk '$3 > $6 { bad = 1 } END { print bad ? 0 : 1 }'; }

run_case() { # NAME FLAG...
    local name=$1
    shift
    local pid url raw auto
    pt_serve pid url "$T/$name.log" "$@" --storage.rollups=$'5m 0\n1h 0' \
        --storage.rollups-delay=1m --read.rollups --read.max-samples=0 ||
        tap_bail "$name: promtable did not start"
    tap_check "$name: 3 days of 20 series backfilled" \
        "$MONTHGEN" --series 20 --metrics 2 --days 3 --step-ms 60000 --end-ms "$DATA_END" \
        --offset-ms 7000 write "$url/api/v1/write"
    # The builder's next pass (every 10 s) builds both stages up to a minute ago.
    local lag=""
    for _ in $(seq 120); do
        curl -s "$url/metrics" >"$T/$name.metrics"
        lag=$(awk '/^promtable_rollup_lag_seconds / { print $2 }' "$T/$name.metrics")
        [ -n "$lag" ] && awk -v l="$lag" 'BEGIN { exit !(l > 0 && l < 2 * 3600) }' && break
        sleep 0.5
    done
    tap_check "$name: the builder caught up (lag ${lag}s)" \
        awk -v l="$lag" 'BEGIN { exit !(l > 0 && l < 2 * 3600) }'

    local praw pauto
    pt_free_port praw
    reader "raw-$name" "$praw" "$url/api/v1/read"
    raw=$PT_PID
    pt_free_port pauto
    reader "auto-$name" "$pauto" "$url/api/v1/read?resolution=auto"
    auto=$PT_PID

    local c=bench_counter_00_total g=bench_gauge_01 before
    before=$(pt_metric_sum "$T/$name.metrics" promtable_read_rollup_queries_total)
    same() { # TEXT QUERY STEP_S: the two readers answer alike on the windows' edges
        q "$praw" "$2" "$START" "$END" "$3" >"$T/a"
        q "$pauto" "$2" "$START" "$END" "$3" >"$T/b"
        if [ -s "$T/a" ] && ! grep -q '^error' "$T/a" && cmp -s "$T/a" "$T/b"; then
            tap_ok "$name: $1: the same $(wc -l <"$T/a") values as the raw data"
        else
            tap_not_ok "$name: $1: the same values as the raw data"
            diff "$T/a" "$T/b" | head -n 6 | sed 's/^/# /'
        fi
    }
    same "max_over_time[1h] every hour" "max_over_time($g[1h])" 3600
    same "min_over_time[1h] every hour" "min_over_time($g[1h])" 3600
    same "increase[2h] every hour" "increase($c[2h])" 3600
    same "rate[1h] every hour" "sum(rate($c[1h]))" 3600
    same "sum_over_time[6h] every 6 hours" "sum_over_time($c[6h])" 21600
    same "avg_over_time (raw)" "avg_over_time($g[1h])" 3600
    same "count_over_time (raw)" "count_over_time($g[1h])" 3600
    same "irate (raw)" "irate($c[5m])" 3600

    same "sum(x) every hour (each 5m window's last sample)" "sum($g)" 3600

    # Off the windows' edges: 7 minutes later.
    local off=$((7 * 60000)) w
    q "$praw" "rate($c[1h])" $((START + off)) $((END + off)) 3600 >"$T/a"
    q "$pauto" "rate($c[1h])" $((START + off)) $((END + off)) 3600 >"$T/b"
    w=$(worst "$T/b" "$T/a")
    tap_check "$name: rate[1h] 7 minutes off the edges: worst relative error $w <= $RATE_BOUND" \
        awk -v w="$w" -v b="$RATE_BOUND" 'BEGIN { exit !(w != "lines" && w + 0 <= b) }'
    q "$praw" "max_over_time($g[1h])" $((START + off)) $((END + off)) 3600 >"$T/a"
    q "$pauto" "max_over_time($g[1h])" $((START + off)) $((END + off)) 3600 >"$T/b"
    w=$(worst "$T/b" "$T/a")
    tap_check "$name: max_over_time[1h] 7 minutes off the edges: never above the raw answer, worst relative error $w <= $MAX_BOUND" \
        awk -v w="$w" -v b="$MAX_BOUND" -v n="$(never_above "$T/b" "$T/a")" \
        'BEGIN { exit !(n == 1 && w != "lines" && w + 0 <= b) }'

    curl -s "$url/metrics" >"$T/$name.metrics"
    tap_check "$name: promtable answered from roll-ups ($(pt_metric_sum "$T/$name.metrics" \
promtable_read_rollup_queries_total) queries)" \
        test "$(pt_metric_sum "$T/$name.metrics" promtable_read_rollup_queries_total)" -gt "$before"
    pt_stop "$auto" 15
    pt_stop "$raw" 15

    # Without read.rollups the same URL reads the raw data.
    pt_stop "$pid" 30
    pt_serve pid url "$T/$name.2.log" "$@" --storage.rollups=$'5m 0\n1h 0' ||
        tap_bail "$name: promtable did not start again"
    reader "off-$name" "$pauto" "$url/api/v1/read?resolution=auto"
    auto=$PT_PID
    q "$pauto" "max_over_time($g[1h])" $((START + off)) $((END + off)) 3600 >"$T/b"
    tap_check "$name: without read.rollups, ?resolution=auto reads the raw data" cmp -s "$T/a" "$T/b"
    tap_is "$(curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary x \
        "$url/api/v1/read?resolution=fine")" 400 "$name: ?resolution=fine: 400"
    pt_stop "$auto" 15
    pt_stop "$pid" 30
}

run_case embedded --storage.embedded.path="$T/store"
if pt_cbtemulator_found; then
    pt_bigtable_store "$T" rollups ru_
    run_case bigtable "${BT[@]}"
else
    tap_skip "bigtable: the Bigtable emulator is not installed ($PT_CBTEMULATOR)"
fi
tap_done
