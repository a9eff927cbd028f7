#!/usr/bin/env bash
# HA pairs (docs/operations.md, "HA pairs") against the real binary: remote-write bodies from two
# replicas of one cluster (tests/tools/rwtool, 1.0 and 2.0), carried by curl.
#
#   1. Embedded store, --ha.failover-timeout=2s: the first replica to write (a) is elected;
#      b's samples get 202 and are not stored; what is stored has the cluster label and no
#      replica label; series without the cluster label are stored as they are. After a is
#      silent for longer than the timeout, b's next write elects b and a's are dropped. The
#      counters in /metrics say so, and without --ha.enabled nothing is deduplicated.
#   2. Two real Prometheus 2.42 writers (skipped without prometheus), external labels
#      cluster=pair and __replica__=a / b, scraping the same target: a elected, b's samples
#      deduplicated (and counted successful by b), one stored series without __replica__;
#      a stopped, b elected after the timeout and stored from then on.
#   3. Bigtable emulator (skipped without it): two promtables on one table agree on one
#      replica through the lease row: a elected through the first, b dropped by the second
#      (which never saw a write of a's until then), a's writes accepted by both; after the
#      timeout b takes over through the second and the first drops a. `promtable check`
#      passes with the lease row in the index table.
#
# Failover is waited for (sleep past the configured timeout), never timed.
# Environment: PT_BUILD_DIR (build tree), PT_CBTEMULATOR, PT_KEEP_TMP=1 keeps logs.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PT_BUILD_DIR:-$ROOT/build}
PROMTABLE=$BUILD/promtable RWTOOL=$BUILD/tests/rwtool
pt_require curl awk
pt_built "$PROMTABLE" "$RWTOOL"

pt_mktemp DIR ha
V2='application/x-protobuf;proto=io.prometheus.write.v2.Request'
T=$(($(date +%s) * 1000 - 600000))

# post URL VERSION REPLICA TS VALUE [CLUSTER]: one sample of ha_test from REPLICA; prints
# the status code; headers in $DIR/hdr, body in $DIR/body.
post() {
    local url=$1 v=$2 replica=$3 ts=$4 value=$5 cluster=${6:-c1} ct=application/x-protobuf
    "$RWTOOL" write "$v" "$DIR/req.bin" s l __name__ ha_test l cluster "$cluster" \
        l __replica__ "$replica" l job j v "$value" "$ts" || tap_bail "rwtool write"
    [ "$v" = 2 ] && ct=$V2
    curl -s -o "$DIR/body" -D "$DIR/hdr" -w '%{http_code}' -H "Content-Type: $ct" \
        -H 'Content-Encoding: snappy' -H "X-Prometheus-Remote-Write-Version: $v.0.0" \
        ${TENANT:+-H "X-Scope-OrgID: $TENANT"} --data-binary @"$DIR/req.bin" "$url/api/v1/write"
}

# stored URL METRIC: every sample of METRIC as "{labels} TS VALUE-BITS", sorted.
stored() {
    "$RWTOOL" readreq "$DIR/read.bin" $((T - 60000)) $((T + 60000)) "__name__=$2" ||
        tap_bail "rwtool readreq"
    curl -fsS -o "$DIR/answer.bin" -H 'Content-Type: application/x-protobuf' \
        -H 'Content-Encoding: snappy' -H 'X-Prometheus-Remote-Read-Version: 0.1.0' \
        --data-binary @"$DIR/read.bin" "$1/api/v1/read" || return 1
    "$RWTOOL" readresp "$DIR/answer.bin" | sort
}

# metric URL NAME [FILTER...]: the sum of a metric's series in /metrics.
metric() {
    local url=$1
    shift
    curl -fsS -o "$DIR/metrics" "$url/metrics" || { echo -1; return; }
    pt_metric_sum "$DIR/metrics" "$@"
}

bits() { # the float64 bits of a small integer, as rwtool readresp prints them
    case $1 in
    1) echo 3ff0000000000000 ;; 2) echo 4000000000000000 ;; 3) echo 4008000000000000 ;;
    4) echo 4010000000000000 ;; 5) echo 4014000000000000 ;; 6) echo 4018000000000000 ;;
    esac
}

start() { # start LOG PORTVAR ARGS...: starts promtable on a free port; sets PT_PID
    local log=$1 var=$2
    shift 2
    pt_free_port "$var"
    pt_spawn "$log" "$PROMTABLE" --web.listen-address="127.0.0.1:${!var}" "$@"
    pt_wait_http "http://127.0.0.1:${!var}/-/ready" 30 "$PT_PID" ||
        tap_bail "promtable did not start: $(tail -n 3 "$log")"
}

# ------------------------------------------------------------------- 1. embedded store

start "$DIR/emb.log" PORT --storage.embedded.path="$DIR/store" --ha.enabled \
    --ha.failover-timeout=2s --ha.update-interval=500ms
EMB_PID=$PT_PID
URL=http://127.0.0.1:$PORT
L='{__name__="ha_test",cluster="c1",job="j"}'

tap_is "$(post "$URL" 1 a $T 1)" 204 "replica a (1.0), first to write: 204, elected"
tap_is "$(post "$URL" 2 b $((T + 1)) 2)" 202 "replica b (2.0): 202, acknowledged and dropped"
grep -qi '^x-prometheus-remote-write-samples-written: 0' "$DIR/hdr" &&
    tap_ok "b's 2.0 answer: Samples-Written 0" || tap_not_ok "b's 2.0 answer: Samples-Written 0"
grep -q 'not elected' "$DIR/body" && tap_ok "the 202 says why" || tap_not_ok "the 202 says why"
tap_is "$(post "$URL" 2 a $((T + 2)) 3)" 204 "replica a (2.0): 204"
tap_is "$(post "$URL" 1 b $((T + 3)) 4)" 202 "replica b (1.0): 202"
tap_is "$(stored "$URL" ha_test)" "$(printf '%s %s %s\n' "$L" $T "$(bits 1)" "$L" $((T + 2)) "$(bits 3)")" \
    "only a's samples are stored, with the cluster label and without __replica__"

# A series with a replica label but no cluster label, and one with a cluster label only.
"$RWTOOL" write 1 "$DIR/req.bin" s l __name__ ha_plain l __replica__ b v 1 $T \
    s l __name__ ha_plain2 l cluster c1 v 1 $T || tap_bail rwtool
code=$(curl -s -o "$DIR/body" -w "%{http_code}" -H "Content-Encoding: snappy" \
    -H "Content-Type: application/x-protobuf" \
    --data-binary @"$DIR/req.bin" "$URL/api/v1/write")
tap_is "$code" 204 "series without the cluster or the replica label: 204"
tap_is "$(stored "$URL" ha_plain | cut -d' ' -f1)" '{__name__="ha_plain",__replica__="b"}' \
    "... the one without a cluster label is stored as it is"
tap_is "$(stored "$URL" ha_plain2 | cut -d' ' -f1)" '{__name__="ha_plain2",cluster="c1"}' \
    "... the one without a replica label is stored as it is"

# Failover: a stays silent for longer than the 2 s timeout.
sleep 2.5
tap_is "$(post "$URL" 1 b $((T + 4)) 5)" 204 "after a is silent > 2 s, b's write elects b: 204"
tap_is "$(post "$URL" 1 a $((T + 5)) 6)" 202 "... and a's is now dropped: 202"
tap_is "$(stored "$URL" ha_test | cut -d' ' -f2 | tr '\n' ' ')" "$T $((T + 2)) $((T + 4)) " \
    "stored: a's two samples, then b's after the failover"
tap_is "$(metric "$URL" promtable_ha_samples_accepted_total 'cluster="c1"')" 3 \
    "promtable_ha_samples_accepted_total{cluster=\"c1\"} 3"
tap_is "$(metric "$URL" promtable_ha_samples_deduplicated_total 'cluster="c1"')" 3 \
    "promtable_ha_samples_deduplicated_total{cluster=\"c1\"} 3"
tap_is "$(metric "$URL" promtable_ha_elections_total 'cluster="c1"')" 2 \
    "promtable_ha_elections_total{cluster=\"c1\"} 2 (a, then b)"
tap_is "$(metric "$URL" promtable_ha_lease_operations_total)" 0 \
    "the embedded store: no lease row (the election is in memory)"
pt_stop "$EMB_PID" >/dev/null

# HA off (the default): both replicas stored, labels untouched.
start "$DIR/off.log" PORT2 --storage.embedded.path="$DIR/store-off"
OFF_PID=$PT_PID
URL2=http://127.0.0.1:$PORT2
post "$URL2" 1 a $T 1 >/dev/null
tap_is "$(post "$URL2" 1 b $((T + 1)) 2)" 204 "HA off: b's write is stored too (204)"
tap_is "$(stored "$URL2" ha_test | wc -l | tr -d ' ')" 2 "HA off: two series, replica labels kept"
pt_stop "$OFF_PID" >/dev/null

# With tenancy on, an election is per (tenant, cluster): the same cluster value under two
# tenants elects a replica in each.
start "$DIR/tenants.log" PORT3 --storage.embedded.path="$DIR/store-tenants" --ha.enabled \
    --tenancy.enabled
TN_PID=$PT_PID
URL3=http://127.0.0.1:$PORT3
tap_is "$(TENANT=ta post "$URL3" 1 a $T 1)" 204 "tenancy: tenant ta's replica a elected for c1"
tap_is "$(TENANT=tb post "$URL3" 1 b $((T + 1)) 2)" 204 \
    "tenancy: tenant tb's replica b elected for its own c1"
tap_is "$(TENANT=ta post "$URL3" 1 b $((T + 2)) 3)" 202 "tenancy: b under ta is not elected: 202"
tap_is "$(TENANT=tb post "$URL3" 1 a $((T + 3)) 4)" 202 "tenancy: a under tb is not elected: 202"
pt_stop "$TN_PID" >/dev/null

# ------------------------------------------- 2. two real Prometheus 2.42 writers, one pair

# Both scrape promtable's /metrics every second (the same series) with external labels
# cluster=pair and __replica__=a or b, as Cortex's HA docs configure them.
prom_writer() { # prom_writer NAME REPLICA
    cat >"$DIR/$1.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  external_labels:
    cluster: pair
    __replica__: $2
scrape_configs:
  - job_name: pt
    static_configs:
      - targets: ['127.0.0.1:$PORT3']
remote_write:
  - url: http://127.0.0.1:$PORT3/api/v1/write
    queue_config: {batch_send_deadline: 1s, min_backoff: 50ms, max_backoff: 1s}
EOF
    pt_free_port "${1}_PORT"
    local port_var=${1}_PORT
    pt_start_prometheus "$DIR" "$1" "${!port_var}"
}

# wait_for URL SECONDS METRIC FILTER MIN: polls until the metric reaches MIN; 1 if not.
wait_for() {
    local url=$1 end=$((SECONDS + $2)) v
    while :; do
        v=$(metric "$url" "$3" "$4")
        awk -v v="$v" -v m="$5" 'BEGIN { exit !(v >= m) }' && return 0
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.5
    done
}

if command -v prometheus >/dev/null; then
    start "$DIR/prom-pt.log" PORT3 --storage.embedded.path="$DIR/store-prom" --ha.enabled=true \
        --ha.failover-timeout=3s --ha.update-interval=1s
    PT3_PID=$PT_PID
    URL3=http://127.0.0.1:$PORT3
    prom_writer wa a || tap_bail "Prometheus a did not start: $(tail -n 3 "$DIR/wa.log")"
    WA_PID=$PT_PID
    wait_for "$URL3" 60 promtable_ha_samples_accepted_total 'cluster="pair"' 1
    tap_check "Prometheus a's samples are accepted (a elected)" \
        [ "$(metric "$URL3" promtable_ha_elections_total 'cluster="pair"')" = 1 ]
    prom_writer wb b || tap_bail "Prometheus b did not start: $(tail -n 3 "$DIR/wb.log")"
    WB_PID=$PT_PID
    wait_for "$URL3" 60 promtable_ha_samples_deduplicated_total 'cluster="pair"' 1 &&
        tap_ok "Prometheus b's samples are deduplicated" ||
        tap_not_ok "Prometheus b's samples are deduplicated"
    "$RWTOOL" readreq "$DIR/read.bin" 0 $(($(date +%s) * 1000 + 60000)) __name__=up cluster=pair ||
        tap_bail rwtool
    curl -fsS -o "$DIR/answer.bin" -H 'Content-Type: application/x-protobuf' \
        -H 'Content-Encoding: snappy' -H 'X-Prometheus-Remote-Read-Version: 0.1.0' \
        --data-binary @"$DIR/read.bin" "$URL3/api/v1/read"
    tap_is "$("$RWTOOL" readresp "$DIR/answer.bin" | cut -d' ' -f1 | sort -u)" \
        "{__name__=\"up\",cluster=\"pair\",instance=\"127.0.0.1:$PORT3\",job=\"pt\"}" \
        "one up series for the pair, without __replica__"
    pt_stop "$WA_PID" >/dev/null
    wait_for "$URL3" 60 promtable_ha_elections_total 'cluster="pair"' 2 &&
        tap_ok "Prometheus a stopped: b is elected after the 3 s timeout" ||
        tap_not_ok "Prometheus a stopped: b is elected after the 3 s timeout"
    before=$(metric "$URL3" promtable_ha_samples_accepted_total 'cluster="pair"')
    wait_for "$URL3" 30 promtable_ha_samples_accepted_total 'cluster="pair"' $((before + 1)) &&
        tap_ok "b's samples are stored from then on" || tap_not_ok "b's samples are stored from then on"
    curl -fsS -o "$DIR/wb.metrics" "http://127.0.0.1:$wb_PORT/metrics"
    tap_is "$(pt_metric_sum "$DIR/wb.metrics" prometheus_remote_storage_samples_failed_total)" 0 \
        "Prometheus b counts none of its samples failed (202 is success)"
    pt_stop "$WB_PID" >/dev/null
    pt_stop "$PT3_PID" >/dev/null
else
    tap_skip "two real Prometheus writers as an HA pair" "prometheus is not installed"
fi

# ----------------------------------------------------- 3. Bigtable: two promtables, one lease

if ! pt_cbtemulator_found; then
    tap_skip "two promtables on one Bigtable table share the election" \
        "Bigtable emulator not installed ($PT_CBTEMULATOR)"
    tap_done
    exit $?
fi
pt_bigtable_store "$DIR" ha ha_
HA=(--ha.enabled=true --ha.failover-timeout=3s --ha.update-interval=1s)
start "$DIR/p1.log" P1 "${BT[@]}" "${HA[@]}"
start "$DIR/p2.log" P2 "${BT[@]}" "${HA[@]}"
U1=http://127.0.0.1:$P1 U2=http://127.0.0.1:$P2
T=$((T + 100))

tap_is "$(post "$U1" 1 a $T 1)" 204 "promtable 1: replica a elected (204)"
tap_is "$(post "$U2" 2 b $((T + 1)) 2)" 202 "promtable 2: b dropped (202): it read a's lease"
tap_is "$(post "$U2" 1 a $((T + 2)) 3)" 204 "promtable 2: a accepted (204)"
tap_is "$(post "$U1" 2 b $((T + 3)) 4)" 202 "promtable 1: b dropped (202)"
tap_is "$(stored "$U2" ha_test | cut -d' ' -f2 | tr '\n' ' ')" "$T $((T + 2)) " \
    "stored: a's samples only, through either promtable"
e1=$(metric "$U1" promtable_ha_elections_total 'cluster="c1"')
e2=$(metric "$U2" promtable_ha_elections_total 'cluster="c1"')
tap_is "$e1+$e2" "1+0" "one election in all, made by promtable 1"
tap_check "promtable 2 read the lease row" \
    [ "$(metric "$U2" promtable_ha_lease_operations_total 'op="read"')" -ge 1 ]

sleep 3.5 # a silent for longer than the 3 s failover timeout
tap_is "$(post "$U2" 1 b $((T + 4)) 5)" 204 "after the timeout, b takes over through promtable 2"
tap_is "$(post "$U1" 1 a $((T + 5)) 6)" 202 "promtable 1 reads the new lease: a dropped"
tap_is "$(post "$U1" 2 b $((T + 6)) 6)" 204 "promtable 1: b accepted"
tap_is "$(stored "$U1" ha_test | cut -d' ' -f2 | tr '\n' ' ')" "$T $((T + 2)) $((T + 4)) $((T + 6)) " \
    "stored: a's samples, then b's"
tap_is "$(metric "$U2" promtable_ha_elections_total 'cluster="c1"')" 1 "promtable 2 made the failover"
tap_is "$(metric "$U1" promtable_ha_lease_errors_total)" 0 "no lease errors"

if "$PROMTABLE" check "${BT[@]}" >"$DIR/check.log" 2>&1; then
    tap_ok "promtable check passes with the lease row in the index table"
else
    tap_not_ok "promtable check passes with the lease row in the index table"
    tap_diag_file "$DIR/check.log" 20
fi

# The emulator gone: an election needs the store, so the write is 503, never dropped.
pt_kill_cbtemulator
sleep 1.2 # past the 1 s update interval: promtable 1 must ask the store again
code=$(post "$U1" 1 a $((T + 7)) 7)
tap_is "$code" 503 "store outage during an election: 503 (retry), nothing acknowledged"
tap_check "... counted in promtable_ha_lease_errors_total" \
    [ "$(metric "$U1" promtable_ha_lease_errors_total)" -ge 1 ]

for f in emb off tenants prom-pt p1 p2; do
    [ -f "$DIR/$f.log" ] || continue
    if grep -qi 'segfault\|sanitizer\|assert' "$DIR/$f.log"; then
        tap_not_ok "promtable $f ran clean"
        tap_diag_file "$DIR/$f.log" 20
    fi
done
tap_done
