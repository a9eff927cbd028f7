#!/usr/bin/env bash
# Crash safety with a real writer: a Prometheus 2.42 (Debian package) scrapes itself under
# several job names every second and remote-writes everything to promtable, whose head is
# kept small (128 KiB; in-order samples are compressed in it) so that it flushes every few
# seconds. Two stores, one after the other, each with a writer of its own:
#
#   embedded  the embedded store: the head flushes into RocksDB;
#   bigtable  Bigtable (the emulator) with a write-back buffer (storage.bigtable.buffer_path):
#             the same head and logs flush into Bigtable; skipped without the emulator.
#
# promtable is killed with SIGKILL five times and restarted on the same port:
#
#   1. the logs not synced (storage.embedded.sync / storage.bigtable.buffer_sync false),
#      between flushes
#   2. not synced, while a flush runs (promtable_embedded_frozen_bytes or
#      promtable_bigtable_buffer_frozen_bytes > 0 on /metrics right before the kill)
#   3. synced, between flushes
#   4. synced, while a flush runs
#   5. not synced, right after it is ready again (log replay just done)
#
# Prometheus retries every batch a dead promtable did not answer (one queue shard, so it
# sends in WAL order and a batch is retried until it is acknowledged before the next goes).
# Once it has sent a sample 2 s younger than T, every sample the writer's own TSDB holds in
# (T0, T] is read back from promtable with one remote read (SAMPLES, decoded by
# tests/tools/ptdump) and compared line by line with the writer's raw samples (a range
# selector through its query API): identical series, timestamps and values, none missing,
# none doubled. NaN values are left out on both sides (the writer's API hides staleness
# markers, which promtable stores like any sample). On Bigtable, promtable is then stopped
# with SIGTERM, which flushes its buffer, and a promtable without a buffer on the same
# tables must read back the same samples: Bigtable alone holds them.
#
# Conditions are polled, never slept on: the sample counts that separate the kills, the flush
# in progress, readiness, and the writer's highest sent timestamp.
#
# Environment: PT_BUILD_DIR (default ../../build); PT_CBTEMULATOR (the emulator binary);
# PT_KEEP_TMP=1 keeps logs and data.
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require prometheus curl jq awk sort
pt_tools PTDUMP=tests/ptdump

JOBS=6          # scrape jobs of the writer's own metrics: ~6 x 1000 samples per second
GAP=15000       # samples promtable takes between a (re)start and the next kill
pt_mktemp TOP crash-prom
pt_free_port P_PORT
pt_free_port W_PORT

# ----------------------------------------------------------------------------- promtable

P_PID=
BT=()
# store_flags SYNC : the flags of the store under test ($BACKEND), its logs synced or not.
store_flags() {
    if [ "$BACKEND" = embedded ]; then
        STORE=(--storage.backend=embedded --storage.embedded.path="$DATA"
            --storage.embedded.sync="$1" --storage.embedded.head-memory=128KiB)
    else
        STORE=("${BT[@]}" --storage.bigtable.buffer-path="$DATA"
            --storage.bigtable.buffer-sync="$1" --storage.bigtable.buffer-memory=128KiB)
    fi
}

start_promtable() { # SYNC [LOG]
    store_flags "$1"
    pt_spawn "${2:-$DIR/promtable.$RUN.log}" "$PROMTABLE" \
        --web.listen-address="127.0.0.1:$P_PORT" "${STORE[@]}"
    P_PID=$PT_PID
    pt_wait_http "http://127.0.0.1:$P_PORT/-/ready" 60 "$P_PID"
}

# metric NAME : the value of NAME on promtable's /metrics (empty when it does not answer).
metric() {
    curl -sS --max-time 2 "http://127.0.0.1:$P_PORT/metrics" -o "$DIR/p.metrics" 2>/dev/null &&
        pt_metric_sum "$DIR/p.metrics" "$1"
}

# wait_received N : until promtable (since its start) has taken N samples; 1 after 120 s.
wait_received() {
    local deadline=$((SECONDS + 120)) v
    while [ "$SECONDS" -lt "$deadline" ]; do
        v=$(metric promtable_samples_received_total)
        awk -v v="${v:-0}" -v n="$1" 'BEGIN { exit !(v >= n) }' && return 0
        sleep 0.1
    done
    return 1
}

# kill_now DESC : SIGKILL and reap; one TAP line.
kill_now() {
    kill -KILL "$P_PID"
    { pt_stop "$P_PID" 1; } 2>/dev/null
    tap_ok "$BACKEND run $RUN: promtable killed with SIGKILL $1"
}

# kill_in_flush : polls /metrics until a frozen head generation is being flushed, then kills
# at once. The frozen bytes are read a few milliseconds before the kill; a flush of 1 MiB
# takes longer, and the TAP line shows the figure.
kill_in_flush() {
    local deadline=$((SECONDS + 120)) f=0
    while [ "$SECONDS" -lt "$deadline" ]; do
        f=$(metric "$FROZEN_METRIC")
        [ "${f:-0}" != 0 ] && break
    done
    if [ "${f:-0}" = 0 ]; then
        tap_not_ok "$BACKEND run $RUN: no flush seen within 120 s"
        # Killed anyway: a promtable left running would hold the store's lock and answer
        # for the next one, which then cannot start.
        kill -KILL "$P_PID"
        { pt_stop "$P_PID" 1; } 2>/dev/null
        return 1
    fi
    kill_now "(sync=$sync) during a flush (frozen_bytes=$f just before)"
}

# ------------------------------------------------------------------------------- writer

# One shard: batches go out in WAL order and each is retried until acknowledged, so the
# highest sent timestamp bounds everything sent before it.
write_writer_config() {
    pt_self_writer_config "$JOBS" "$W_PORT" "http://127.0.0.1:$P_PORT/api/v1/write" \
        "remote_timeout: 5s" "queue_config:" "  min_shards: 1" "  max_shards: 1" \
        "  capacity: 20000" "  max_samples_per_send: 2000" "  batch_send_deadline: 1s" \
        "  min_backoff: 50ms" "  max_backoff: 1s" >"$DIR/writer.yml"
}

# ---------------------------------------------------------------------------------- a run

# crash_run BACKEND : the five kills and the comparison on one store.
crash_run() {
    BACKEND=$1
    DIR=$TOP/$BACKEND
    DATA=$DIR/store
    mkdir -p "$DIR"
    FROZEN_METRIC=promtable_embedded_frozen_bytes
    if [ "$BACKEND" = bigtable ]; then
        FROZEN_METRIC=promtable_bigtable_buffer_frozen_bytes
        pt_bigtable_store "$DIR" crash c_
    fi
    write_writer_config
    RUN=0
    start_promtable false ||
        tap_bail "$BACKEND: promtable does not start: $(tail -5 "$DIR/promtable.0.log")"
    T0=$(date +%s)
    pt_start_prometheus "$DIR" writer "$W_PORT" || {
        tap_diag_file "$DIR/writer.log"
        tap_bail "the writer Prometheus does not start"
    }
    W_PID=$PT_PID

    local plan=("false between" "false flush" "true between" "true flush" "false ready")
    local step sync when next
    for step in "${plan[@]}"; do
        read -r sync when <<<"$step"
        case $when in
        between)
            wait_received "$GAP" || tap_not_ok "$BACKEND run $RUN: under $GAP samples taken"
            kill_now "(sync=$sync) after $GAP samples"
            ;;
        flush)
            wait_received "$GAP" || tap_not_ok "$BACKEND run $RUN: under $GAP samples taken"
            kill_in_flush
            ;;
        ready)
            wait_received 1 || tap_not_ok "$BACKEND run $RUN: promtable took no sample"
            kill_now "(sync=$sync) at its first write after a restart"
            ;;
        esac
        RUN=$((RUN + 1))
        # The next run's sync mode: the plan's next entry (the last restart keeps false).
        next=${plan[$RUN]:-false}
        next=${next%% *}
        if ! start_promtable "$next"; then
            tap_not_ok "$BACKEND run $RUN: promtable restarts on the same store (sync=$next)"
            tap_diag_file "$DIR/promtable.$RUN.log"
            exit 1
        fi
        tap_ok "$BACKEND run $RUN: promtable restarts on the same store and port (sync=$next)"
    done
    wait_received "$GAP" || tap_not_ok "$BACKEND: the last run took under $GAP samples"

    T=$(($(date +%s) - 2))
    pt_writer_drained "$BACKEND" "$W_PORT" "$T" 180 "$DIR/w.metrics"
    local retried
    retried=$(pt_metric_sum "$DIR/w.metrics" prometheus_remote_storage_samples_retried_total)
    tap_diag "$BACKEND: writer: $retried samples retried over the kills"

    pt_writer_samples "$W_PORT" "$T0" "$T" "$DIR/writer.txt"
    local n_w
    n_w=$(wc -l <"$DIR/writer.txt")
    if awk -v n="$n_w" 'BEGIN { exit !(n > 50000) }'; then
        tap_ok "$BACKEND: the writer holds $n_w samples since T0 (enough to mean something)"
    else
        tap_not_ok "$BACKEND: the writer holds only $n_w samples since T0"
    fi
    pt_compare_read "$BACKEND" "http://127.0.0.1:$P_PORT" "$T0" "$T" "$DIR/writer.txt" "$DIR"

    pt_stop "$W_PID" 20
    pt_stop "$P_PID" 20
    tap_is "$?" 0 "$BACKEND: promtable exits cleanly on SIGTERM after all that"
    if [ "$BACKEND" = bigtable ]; then
        # The stop flushed the buffer: a promtable without one reads Bigtable alone.
        pt_spawn "$DIR/direct.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$P_PORT" \
            "${BT[@]}"
        P_PID=$PT_PID
        if pt_wait_http "http://127.0.0.1:$P_PORT/-/ready" 60 "$P_PID"; then
            pt_compare_read "bigtable, read without the buffer after the stop" \
                "http://127.0.0.1:$P_PORT" "$T0" "$T" "$DIR/writer.txt" "$DIR"
        else
            tap_not_ok "a promtable without a buffer starts on the same tables"
        fi
        pt_stop "$P_PID" 20
        pt_kill_cbtemulator
    fi
}

crash_run embedded
if pt_cbtemulator_found; then
    crash_run bigtable
else
    tap_skip "bigtable write-back" "the Bigtable emulator is not installed ($PT_CBTEMULATOR)"
fi
tap_done
