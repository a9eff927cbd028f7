#!/usr/bin/env bash
# Cost of the browsing API on a store of 100,000 series (bench/loadgen's 10-label model,
# two samples each): for each request, the median time of five and the index rows the
# storage visited (promtable_read_rows_scanned_total); the answer's entries (the
# cardinality view: its series). Run it under the bench lock:
#   flock /tmp/pt-bench.lock bench/api_browse.sh [BUILD_DIR]
set -u -o pipefail
B=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
DIR=$(mktemp -d /tmp/pt-api-bench.XXXXXX)
trap 'kill $P 2>/dev/null; wait $P 2>/dev/null; rm -rf "$DIR"' EXIT
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
U=http://127.0.0.1:$PORT
"$B/promtable" --web.listen-address="127.0.0.1:$PORT" --storage.embedded.path="$DIR/store" \
    --log.level=warn 2>"$DIR/log" &
P=$!
for _ in $(seq 50); do curl -sf "$U/-/ready" >/dev/null && break; sleep 0.2; done
"$B/bench/loadgen" --url "$U/api/v1/write" --series 100000 --requests 100 --connections 2 \
    --warmup 0 2>"$DIR/loadgen.log" | grep -o 'errors=[0-9]* .*new_series=[0-9]*'
# The day the samples are in (loadgen's first scrape, ms), for /api/v1/status/tsdb.
T=$(sed -n 's/.*first scrape \([0-9]*\).*/\1/p' "$DIR/loadgen.log" | head -n 1)
rows() { curl -s "$U/metrics" | awk '/^promtable_read_rows_scanned_total /{print $2}'; }
echo "| request | answer (entries) | median of 5 | index rows visited |"
echo "| --- | --- | --- | --- |"
for q in '/api/v1/labels' '/api/v1/label/__name__/values' '/api/v1/label/instance/values' \
    '/api/v1/label/pod/values' '/api/v1/series?match[]=up' '/api/v1/labels?match[]=up' \
    '/api/v1/label/pod/values?match[]=up' \
    '/api/v1/series?match[]=node_cpu_seconds_total&limit=10' "/api/v1/status/tsdb?time=$((T / 1000))"; do
    r0=$(rows)
    t=$(for _ in 1 2 3 4 5; do curl -s -o "$DIR/out" -w '%{time_total}\n' "$U$q"; done | sort -n | sed -n 3p)
    r1=$(rows)
    echo "| \`$q\` | $(jq 'if (.data|type) == "object" then .data.headStats.numSeries else (.data|length) end' "$DIR/out") | $(awk -v t="$t" 'BEGIN{printf "%.1f ms", t*1000}') | $(((r1 - r0) / 5)) |"
done
