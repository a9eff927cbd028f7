#!/usr/bin/env bash
# A Bigtable outage under the write-back buffer: promtable with storage.bigtable.buffer_path
# (flushed every 2 s) on the emulator, fed by a real Prometheus 2.42 that scrapes itself
# under two job names every second.
#
#   1. The emulator is killed (kill -9): its flushes fail and are retried
#      (promtable_bigtable_buffer_flush_failures_total grows), while writes of the series it
#      knows go on being acknowledged: their samples wait in the buffer and its log.
#   2. The emulator comes back on the same port, empty (it keeps nothing), and
#      `promtable init` makes the tables again, with a new store's index format row; the
#      flushes succeed again, and a series new to promtable writes its index rows there.
#   3. promtable is stopped (SIGTERM: what the buffer holds goes to Bigtable) and started
#      again, so that its next writes make the index rows again: the emulator lost those
#      written before the kill, which Cloud Bigtable would have kept.
#   4. Once the writer has sent everything up to T, a remote read of every series in
#      (kill, T] returns exactly the writer's raw samples: the samples acknowledged during
#      the outage included, none doubled; the writer counts no failed or dropped sample.
#      (kill, T] starts at the first whole second after the kill: what was flushed into the
#      emulator before it died is gone with it.
#
# Environment: PT_BUILD_DIR (default ../../build); PT_CBTEMULATOR (the emulator; skipped
# without it); PT_KEEP_TMP=1 keeps logs and data.
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require prometheus curl jq awk sort
pt_cbtemulator_found || tap_skip_all "Bigtable emulator not installed ($PT_CBTEMULATOR)"
pt_tools PTDUMP=tests/ptdump RWTOOL=tests/rwtool

pt_mktemp DIR bt-buffer-outage
pt_free_port P_PORT
pt_free_port W_PORT
URL=http://127.0.0.1:$P_PORT

pt_bigtable_store "$DIR" outage o_
BUF=(--storage.bigtable.buffer-path="$DIR/buffer" --storage.bigtable.flush-interval=2s)
start_promtable() { # LOG
    pt_start_promtable "$1" "$P_PORT" "${BT[@]}" "${BUF[@]}"
    P_PID=$PT_PID
}
start_promtable "$DIR/promtable.0.log"

# metric NAME [SUBSTRING...] : promtable's figure now (empty when it does not answer).
metric() {
    curl -sS --max-time 2 -o "$DIR/p.metrics" "$URL/metrics" 2>/dev/null &&
        pt_metric_sum "$DIR/p.metrics" "$@"
}

# wait_metric SECONDS NAME OP VALUE [SUBSTRING...] : polls until NAME OP VALUE (awk), sets
# GOT; 1 when time runs out.
wait_metric() {
    local deadline=$((SECONDS + $1)) name=$2 op=$3 want=$4
    shift 4
    while [ "$SECONDS" -lt "$deadline" ]; do
        GOT=$(metric "$name" "$@")
        awk -v g="${GOT:-0}" -v w="$want" "BEGIN { exit !(g $op w) }" && return 0
        sleep 0.2
    done
    return 1
}

pt_self_writer_config 2 "$W_PORT" "$URL/api/v1/write" "remote_timeout: 10s" "queue_config:" \
    "  batch_send_deadline: 500ms" "  min_backoff: 50ms" "  max_backoff: 1s" >"$DIR/writer.yml"
pt_start_prometheus "$DIR" writer "$W_PORT" || {
    tap_diag_file "$DIR/writer.log"
    tap_bail "the writer Prometheus does not start"
}
W_PID=$PT_PID
wait_metric 60 promtable_samples_received_total '>=' 2000 ||
    tap_bail "promtable took under 2000 samples in 60 s (${GOT:-none})"

# post NAME JOB TS_MS : one sample of NAME{job=JOB} through remote write 1.0; prints the
# HTTP status.
post() {
    "$RWTOOL" write 1 "$DIR/post.bin" s l __name__ "$1" l job "$2" v 1 "$3" ||
        tap_bail "rwtool write failed"
    pt_post_write "$URL" "$DIR/post.bin"
}
# A series promtable knows before the outage (its samples are two minutes old: outside
# the window compared below).
T_OLD=$((($(date +%s) - 120) * 1000))
[ "$(post outage_known direct "$T_OLD")" = 204 ] || tap_bail "the known series is not written"

# ---------------------------------------------------------------------------- 1. outage
pt_kill_cbtemulator
# The window compared starts after the kill: samples flushed into the emulator before it
# died are gone with it (it keeps nothing; Cloud Bigtable keeps what it acknowledged), and
# only samples younger than the kill are sure to have reached Bigtable after it.
T_KILL=$(($(date +%s) + 1))
acked=$(metric promtable_http_requests_total 'route="/api/v1/write"' 'code="204"')
if wait_metric 30 promtable_bigtable_buffer_flush_failures_total '>' 0; then
    tap_ok "flushes into the killed emulator fail and are retried ($GOT)"
else
    tap_not_ok "no flush failed within 30 s of the kill"
fi
# A write of a known series needs no index row: it waits in the buffer and is
# acknowledged. (The writer's own batches may hold a series new to promtable, whose index
# rows Bigtable must take first: those get 503 until it is back, and hold up the writer's
# queue meanwhile.)
tap_is "$(post outage_known direct $((T_OLD + 1)))" 204 \
    "a write of a series promtable knows is acknowledged during the outage"
tap_diag "writes acknowledged: ${acked:-?} before the kill, $(metric \
    promtable_http_requests_total 'route="/api/v1/write"' 'code="204"') now"
held=$(metric promtable_bigtable_buffer_samples)
tap_check "the buffer holds what Bigtable has not taken ($held samples)" \
    awk -v h="${held:-0}" 'BEGIN { exit !(h > 0) }'

# ------------------------------------------------------------------------------ 2. back
pt_start_cbtemulator EMU_PORT "$DIR/emulator2.log" "$EMU_PORT" ||
    tap_bail "the emulator does not start again on port $EMU_PORT"
"$PROMTABLE" init "${BT[@]}" >"$DIR/init2.log" 2>&1 ||
    tap_bail "promtable init after the restart: $(tail -n 3 "$DIR/init2.log")"
flushes=$(metric promtable_bigtable_buffer_flushes_total)
if wait_metric 30 promtable_bigtable_buffer_flushes_total '>' "${flushes:-0}"; then
    tap_ok "flushes succeed again once the tables are back"
else
    tap_not_ok "no flush succeeded within 30 s of the tables coming back"
fi
# A series new to promtable (its sample before the window compared) writes index rows
# into the tables made again; `promtable init` gave them a new store's format row, so the
# restart below takes them for the format they are.
tap_is "$(post outage_new after_init "$T_OLD")" 204 \
    "a series new to promtable is written into the new tables"
flushes=$(metric promtable_bigtable_buffer_flushes_total)
wait_metric 30 promtable_bigtable_buffer_flushes_total '>' "${flushes:-0}" ||
    tap_not_ok "no flush within 30 s of the new series"

# -------------------------------------------------------------------------- 3. restart
pt_stop "$P_PID" 60
tap_is "$?" 0 "promtable stops cleanly (SIGTERM flushes its buffer)"
start_promtable "$DIR/promtable.1.log"
wait_metric 60 promtable_samples_received_total '>=' 2000 ||
    tap_not_ok "promtable took under 2000 samples after its restart"

# ----------------------------------------------------------------------------- 4. read
# The window compared spans at least 30 s (the writer's thousands of samples), however
# quickly the steps above went.
while [ "$(date +%s)" -lt $((T_KILL + 32)) ]; do sleep 0.5; done
T=$(($(date +%s) - 2))
pt_writer_drained "outage" "$W_PORT" "$T" 120 "$DIR/w.metrics"
pt_writer_samples "$W_PORT" "$T_KILL" "$T" "$DIR/writer.txt"
tap_check "the writer holds $(wc -l <"$DIR/writer.txt") samples since the kill" \
    test "$(wc -l <"$DIR/writer.txt")" -gt 2000
pt_compare_read "read after the outage" "$URL" "$T_KILL" "$T" "$DIR/writer.txt" "$DIR"
pt_stop "$W_PID" 20
pt_stop "$P_PID" 60
tap_is "$?" 0 "promtable exits cleanly on SIGTERM"
tap_done
