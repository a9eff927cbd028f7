#!/usr/bin/env bash
# Bigtable outage: promtable on the Bigtable emulator, fed by a real Prometheus, loses its
# store mid-run (kill -9 of cbtemulator) and gets it back on the same port.
#
#   1. cbtemulator on a free loopback port, `promtable init`, promtable (backend bigtable);
#      a *writer* Prometheus scrapes itself and the exporter target every second and
#      remote-writes with short backoffs (min 50 ms, max 1 s). The exporter is not running
#      yet: its target is down, so none of its test_* series exist.
#   2. A few healthy seconds once Prometheus started sending: promtable answers 204.
#   3. kill -9 the emulator and start the exporter: every exporter sample is scraped from
#      now on. While the store is gone, promtable must answer 503 (Prometheus' own requests,
#      counted in promtable_http_requests_total, and a direct POST of a captured request)
#      and stay alive and healthy.
#   4. Restart the emulator on the same port. For a second the tables are missing (the
#      emulator keeps nothing): writes must get 5xx then, never 4xx, which Prometheus would
#      drop. Then `promtable init` again; promtable reconnects by itself.
#   5. Prometheus retries everything it holds; once it has sent past TEND, a *reader*
#      Prometheus (remote_read, read_recent) must return exactly the raw samples the writer
#      has locally for every exporter series over [kill, TEND], including the samples
#      scraped during the outage, which only the retries can have delivered. The writer's
#      samples_failed_total and samples_dropped_total stay 0 (retried > 0 is expected).
#
# Which window is provable, and why only the exporter's series: the emulator keeps data in
# memory only, so everything written before the kill is gone with it, a property of the
# emulator (Cloud Bigtable keeps what it acknowledged). That includes the index rows of the
# series written before the kill; promtable's index cache still remembers them as written
# (correct for a real store), so it does not rewrite them and those series, e.g. the
# writer's own metrics, cannot be listed afterwards. The exporter's series first appear
# after the kill, so their index rows, like all their samples, can only have been stored by
# writes acknowledged after the restart: every sample of theirs the writer has must be
# readable.
#
# Environment: PT_BUILD_DIR (build tree with promtable and tests/exporter), PT_CBTEMULATOR
# (the emulator binary; the file is skipped when it is missing), PT_KEEP_TMP=1 keeps logs.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PT_BUILD_DIR:-$ROOT/build}
HEALTHY_SECONDS=3   # after the first acknowledged write, before the kill
OUTAGE_SECONDS=10   # emulator down
AFTER_SECONDS=8     # after the restart, up to TEND

pt_require prometheus curl jq awk
pt_cbtemulator_found || tap_skip_all "Bigtable emulator not installed ($PT_CBTEMULATOR)"
PROMTABLE=$BUILD/promtable
EXPORTER=$BUILD/tests/exporter
[ -x "$PROMTABLE" ] || tap_bail "$PROMTABLE not built"
[ -x "$EXPORTER" ] || tap_bail "$EXPORTER not built"
WRITE_BODY=$ROOT/tests/data/prom-2.42-write.bin
[ -r "$WRITE_BODY" ] || tap_bail "$WRITE_BODY missing"

pt_mktemp DIR promtable-bt-outage
pt_free_port PT_PORT
pt_free_port W_PORT
pt_free_port R_PORT
pt_free_port EXP_PORT
BASE=http://127.0.0.1:$PT_PORT
STARTED=$SECONDS

phase() {
    tap_diag "$* (+$((SECONDS - STARTED)) s)"
}

show_logs() {
    tap_diag_file "$DIR/emulator.log" 5
    tap_diag_file "$DIR/emulator2.log" 5
    tap_diag_file "$DIR/init.log" 5
    tap_diag_file "$DIR/store.log" 60
    tap_diag_file "$DIR/writer.log" 25
    [ -f "$DIR/reader.log" ] && tap_diag_file "$DIR/reader.log" 15
}

# fatal DESC : a step everything else depends on failed.
fatal() {
    tap_not_ok "$1"
    show_logs
    tap_done
    exit 1
}

# post_write OUTFILE : POSTs the captured Prometheus request; prints the status code.
post_write() { pt_post_write "$BASE" "$WRITE_BODY" "$1"; }

store_metrics() {
    curl -sS --max-time 5 -o "$DIR/store.metrics" "$BASE/metrics"
}

# writes_with CODE : promtable's count of /api/v1/write answers with that status.
writes_with() {
    pt_metric_sum "$DIR/store.metrics" promtable_http_requests_total \
        'route="/api/v1/write"' "code=\"$1\""
}

writer_metric() {
    pt_metric_sum "$DIR/writer.metrics" "$1" 'remote_name="promtable"'
}

gt0() {
    awk -v v="$1" 'BEGIN { exit !(v > 0) }'
}

# No write-back buffer: every write goes to Bigtable before it is acknowledged.
BT=(--storage.backend=bigtable --storage.bigtable.project=outage
    --storage.bigtable.instance=outage --storage.bigtable.table-prefix=o_
    --storage.bigtable.buffer-path=)

# ------------------------------------------------------------------- 1. start everything

pt_start_cbtemulator EMU_PORT "$DIR/emulator.log" || fatal "Bigtable emulator starts"
BT+=("--storage.bigtable.endpoint=127.0.0.1:$EMU_PORT")
"$PROMTABLE" init "${BT[@]}" >"$DIR/init.log" 2>&1 || fatal "promtable init creates the tables"
tap_ok "emulator on 127.0.0.1:$EMU_PORT, tables created"

pt_spawn "$DIR/store.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$PT_PORT" "${BT[@]}"
STORE_PID=$PT_PID
pt_wait_http "$BASE/-/ready" 30 "$STORE_PID" || fatal "promtable (bigtable) ready"
tap_ok "promtable (bigtable) ready on $BASE"

cat >"$DIR/writer.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  external_labels:
    replica: a
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ['127.0.0.1:$W_PORT']
  - job_name: exporter
    static_configs:
      - targets: ['127.0.0.1:$EXP_PORT']
remote_write:
  - url: $BASE/api/v1/write
    name: promtable
    # Longer than promtable's own retries against the store (~5 s) before it answers 503.
    remote_timeout: 10s
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
      max_backoff: 1s
EOF
# Same external label: the reader adds replica="a" to its selectors and strips it again.
cat >"$DIR/reader.yml" <<EOF
global:
  external_labels:
    replica: a
remote_read:
  - url: $BASE/api/v1/read
    name: promtable
    read_recent: true
    remote_timeout: 30s
EOF
pt_start_prometheus "$DIR" writer "$W_PORT"
up=$?
W_PID=$PT_PID
[ "$up" = 0 ] || fatal "writer Prometheus starts"
tap_ok "writer Prometheus remote-writes to $BASE/api/v1/write"

# ------------------------------------------------------------------------- 2. healthy
# Prometheus 2.42 starts sending only once its WAL watcher has "replayed" the WAL (~5 s
# after start): wait for the first acknowledged write, then a little longer.
phase "waiting for the first acknowledged writes"
deadline=$((SECONDS + 30))
OK_BEFORE=0
while [ "$SECONDS" -lt "$deadline" ]; do
    store_metrics
    OK_BEFORE=$(writes_with 204)
    gt0 "$OK_BEFORE" && break
    sleep 0.5
done
pt_sleep "$HEALTHY_SECONDS"
store_metrics
OK_BEFORE=$(writes_with 204)
if gt0 "$OK_BEFORE"; then
    tap_ok "writes acknowledged before the outage ($OK_BEFORE)"
else
    tap_not_ok "writes acknowledged before the outage ($OK_BEFORE)"
fi

# -------------------------------------------------------------------------- 3. outage
phase "kill -9 the emulator"
T_KILL=$(date +%s)
pt_kill_cbtemulator
pt_spawn "$DIR/exporter.log" "$EXPORTER" "$EXP_PORT"
EXP_PID=$PT_PID
T_DOWN_END=$((SECONDS + OUTAGE_SECONDS))

code=$(post_write "$DIR/outage.resp")
if [ "$code" = 503 ]; then
    tap_ok "a write while the store is down gets 503 ($(head -c 80 "$DIR/outage.resp"))"
else
    tap_not_ok "a write while the store is down gets 503"
    tap_diag "status $code: $(head -c 300 "$DIR/outage.resp")"
fi
code=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/-/healthy" 2>/dev/null)
tap_is "$code" 200 "/-/healthy answers 200 while the store is down"

# Prometheus' own requests: wait (within the outage) until promtable has refused some.
n503=0
while [ "$SECONDS" -lt "$T_DOWN_END" ]; do
    store_metrics
    n503=$(writes_with 503)
    [ "$n503" != 0 ] && break
    sleep 0.5
done
# Let the outage last its full length, so the retries carry several scrapes.
[ "$SECONDS" -lt "$T_DOWN_END" ] && pt_sleep $((T_DOWN_END - SECONDS))
store_metrics
n503=$(writes_with 503)
bad4=$(grep '^promtable_http_requests_total{' "$DIR/store.metrics" |
    grep 'route="/api/v1/write"' | grep 'code="4' | awk '{ s += $NF } END { print s + 0 }')
if gt0 "$n503" && [ "$bad4" = 0 ]; then
    tap_ok "promtable answered Prometheus' writes with 503 during the outage ($n503), no 4xx"
else
    tap_not_ok "promtable answered Prometheus' writes with 503 during the outage"
    tap_diag "$(grep '^promtable_http_requests_total' "$DIR/store.metrics")"
fi
if pt_alive "$STORE_PID"; then
    tap_ok "promtable is still running after the outage"
else
    fatal "promtable is still running after the outage"
fi

# ------------------------------------------------------------------------- 4. recovery
phase "restarting the emulator on port $EMU_PORT"
pt_start_cbtemulator EMU_PORT "$DIR/emulator2.log" "$EMU_PORT" ||
    fatal "emulator restarts on the same port $EMU_PORT"
T_UP=$(date +%s)
# The tables are gone with the old emulator: a write now must be retryable (5xx).
code=$(post_write "$DIR/notables.resp")
case $code in
5??) tap_ok "a write while the tables are missing gets $code (retryable)" ;;
*)
    tap_not_ok "a write while the tables are missing gets 5xx (retryable)"
    tap_diag "status $code: $(head -c 300 "$DIR/notables.resp")"
    ;;
esac
pt_sleep 1
"$PROMTABLE" init "${BT[@]}" >"$DIR/init.log" 2>&1 || fatal "promtable init after the restart"
tap_ok "emulator back on 127.0.0.1:$EMU_PORT, tables created again"
code=$(post_write "$DIR/after.resp")
tap_is "$code" 204 "a write after the restart is acknowledged"

phase "running $AFTER_SECONDS s after the restart"
pt_sleep "$AFTER_SECONDS"
TEND=$(date +%s)
pt_sleep 1
# Prometheus sends in WAL order (see pt_wait_remote_sent): its retries must get through.
if pt_wait_remote_sent "$W_PORT" "$TEND" 30; then
    tap_ok "writer caught up: sent everything up to $TEND ($((SECONDS - STARTED)) s in)"
else
    tap_not_ok "writer caught up: sent everything up to $TEND"
    tap_diag "highest sent timestamp $PT_SENT_TS, need >= $((TEND + 2))"
fi
pt_sleep 1

# ------------------------------------------------------------------- 5. nothing is lost
phase "reading back through a reader Prometheus"
pt_start_prometheus "$DIR" reader "$R_PORT"
up=$?
R_PID=$PT_PID
[ "$up" = 0 ] || fatal "reader Prometheus starts"

# A range selector returns raw samples: compare them exactly, per series, over
# [T_KILL - 1, TEND] (the exporter started after T_KILL, so that is all of them).
WINDOW=$((TEND - T_KILL + 1))
SEL="{__name__=~\"test_.+\",job=\"exporter\"}[${WINDOW}s]"
for side in "w:$W_PORT" "r:$R_PORT"; do
    curl -sS --max-time 60 -G -o "$DIR/q.${side%%:*}.json" \
        "http://127.0.0.1:${side#*:}/api/v1/query" \
        --data-urlencode "query=$SEL" --data-urlencode "time=$TEND"
done
# shellcheck disable=SC2016 # jq program
NORM='{status, warnings: (.warnings // []),
       result: (.data.result // [] | map({metric, values}) | sort_by(.metric))}'
jq -S "$NORM" "$DIR/q.w.json" >"$DIR/w.norm" 2>/dev/null
jq -S "$NORM" "$DIR/q.r.json" >"$DIR/r.norm" 2>/dev/null
# shellcheck disable=SC2016
COUNT='[.data.result[]?.values | length] | add // 0'
# shellcheck disable=SC2016
IN_OUTAGE='[.data.result[]?.values[] | select(.[0] >= $a and .[0] < $b)] | length'
w_series=$(jq '.data.result | length' "$DIR/q.w.json" 2>/dev/null)
w_samples=$(jq "$COUNT" "$DIR/q.w.json" 2>/dev/null)
r_samples=$(jq "$COUNT" "$DIR/q.r.json" 2>/dev/null)
w_outage=$(jq --argjson a "$T_KILL" --argjson b "$T_UP" "$IN_OUTAGE" "$DIR/q.w.json" 2>/dev/null)
r_outage=$(jq --argjson a "$T_KILL" --argjson b "$T_UP" "$IN_OUTAGE" "$DIR/q.r.json" 2>/dev/null)
tap_diag "writer: ${w_series:-?} exporter series, ${w_samples:-?} samples in the window," \
    "${w_outage:-?} scraped while the store was down; reader: ${r_samples:-?}, ${r_outage:-?}"
if gt0 "${w_outage:-0}" && gt0 "${w_series:-0}"; then
    tap_ok "the writer scraped exporter samples during the outage ($w_outage)"
else
    tap_not_ok "the writer scraped exporter samples during the outage"
fi
if [ -s "$DIR/w.norm" ] && cmp -s "$DIR/w.norm" "$DIR/r.norm" &&
    [ "$(jq -r .status "$DIR/r.norm")" = success ] &&
    [ "$(jq '.warnings | length' "$DIR/r.norm")" = 0 ]; then
    tap_ok "every exporter sample since the kill reads back exactly ($r_samples samples," \
        "$r_outage of them retried after the outage)"
else
    tap_not_ok "every exporter sample since the kill reads back exactly"
    tap_diag "$(diff "$DIR/w.norm" "$DIR/r.norm" | cut -c1-200 | head -n 30)"
fi

# The writer's view: nothing failed or dropped, and it did retry.
curl -sS --max-time 5 -o "$DIR/writer.metrics" "http://127.0.0.1:$W_PORT/metrics"
tap_is "$(writer_metric prometheus_remote_storage_samples_failed_total)" 0 \
    "writer prometheus_remote_storage_samples_failed_total"
tap_is "$(writer_metric prometheus_remote_storage_samples_dropped_total)" 0 \
    "writer prometheus_remote_storage_samples_dropped_total"
v=$(writer_metric prometheus_remote_storage_samples_retried_total)
if gt0 "$v"; then
    tap_ok "writer retried samples ($v)"
else
    tap_not_ok "writer retried samples ($v)"
fi
store_metrics
v=$(writes_with 204)
if awk -v a="$v" -v b="$OK_BEFORE" 'BEGIN { exit !(a > b) }'; then
    tap_ok "promtable acknowledged writes after the restart ($OK_BEFORE before, $v now)"
else
    tap_not_ok "promtable acknowledged writes after the restart ($OK_BEFORE before, $v now)"
fi

# Clients first, then promtable must still shut down cleanly.
pt_stop "$R_PID" 10
pt_stop "$W_PID" 10
pt_stop "$EXP_PID" 5
pt_stop "$STORE_PID" 20
tap_is "$?" 0 "promtable exits with status 0 on SIGTERM"

[ "$TAP_FAILED" -gt 0 ] && show_logs
tap_diag "runtime $((SECONDS - STARTED)) s"
tap_done
