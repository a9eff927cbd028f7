#!/usr/bin/env bash
# Many writers, one table: two promtables on the same Bigtable tables (the emulator), each
# with a write-back buffer of its own (storage.bigtable.buffer_path, flushed every 2 s),
# behind nginx, which hands the requests to them in turn (round robin). A real Prometheus
# 2.42 scrapes itself under several job names every second and remote-writes through nginx,
# so every series' samples arrive at both promtables, interleaved in time, and each flushes
# its own part of every row into Bigtable.
#
#   1. Both promtables take a share of the samples (nginx alternated).
#   2. Once the writer has sent everything up to T and stopped, and both buffers are empty
#      (flushed), a remote read through each promtable returns exactly the writer's raw
#      samples in (T0, T]: same series, timestamps and values, none missing, none doubled.
#   3. Both stop cleanly on SIGTERM.
#
# Environment: PT_BUILD_DIR (default ../../build); PT_CBTEMULATOR (the emulator binary; the
# file is skipped without it); PT_KEEP_TMP=1 keeps logs and data.
set -u -o pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require prometheus curl jq awk sort nginx
pt_cbtemulator_found || tap_skip_all "Bigtable emulator not installed ($PT_CBTEMULATOR)"
pt_tools PTDUMP=tests/ptdump

JOBS=4          # scrape jobs of the writer's own metrics: ~4 x 1000 samples per second
WANT=40000      # samples the two promtables take together before T
pt_mktemp DIR bt-writers
pt_free_port A_PORT
pt_free_port B_PORT
pt_free_port N_PORT
pt_free_port W_PORT

pt_bigtable_store "$DIR" writers w_

# ------------------------------------------------------------- two promtables, one table

pids=()
for w in a b; do
    port=$A_PORT
    [ "$w" = b ] && port=$B_PORT
    pt_start_promtable "$DIR/$w.log" "$port" "${BT[@]}" \
        --storage.bigtable.buffer-path="$DIR/$w" --storage.bigtable.flush-interval=2s
    pids+=("$PT_PID")
done

# --------------------------------------------------------------------- nginx in front

mkdir -p "$DIR/nginx"
{
    [ "$(id -u)" = 0 ] && echo "user root;"
    cat <<EOF
worker_processes 1;
daemon off;
pid $DIR/nginx/nginx.pid;
error_log $DIR/nginx/error.log;
events {}
http {
    access_log $DIR/nginx/access.log;
    client_body_temp_path $DIR/nginx/body;
    proxy_temp_path $DIR/nginx/proxy;
    client_max_body_size 64m;
    upstream promtables {
        server 127.0.0.1:$A_PORT;
        server 127.0.0.1:$B_PORT;
    }
    server {
        listen 127.0.0.1:$N_PORT;
        location / {
            proxy_pass http://promtables;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # A request one promtable refused goes back to Prometheus, not to the other.
            proxy_next_upstream off;
        }
    }
}
EOF
} >"$DIR/nginx/nginx.conf"
pt_spawn "$DIR/nginx/stdout.log" nginx -p "$DIR/nginx" -c "$DIR/nginx/nginx.conf"
NGINX_PID=$PT_PID
pt_wait_http "http://127.0.0.1:$N_PORT/-/ready" 30 "$NGINX_PID" || {
    tap_diag_file "$DIR/nginx/error.log"
    tap_bail "nginx does not start"
}

# ------------------------------------------------------------------------------ writer

pt_self_writer_config "$JOBS" "$W_PORT" "http://127.0.0.1:$N_PORT/api/v1/write" \
    "remote_timeout: 5s" "queue_config:" "  max_samples_per_send: 500" \
    "  batch_send_deadline: 1s" "  min_backoff: 50ms" "  max_backoff: 1s" >"$DIR/writer.yml"

T0=$(date +%s)
pt_start_prometheus "$DIR" writer "$W_PORT" || {
    tap_diag_file "$DIR/writer.log"
    tap_bail "the writer Prometheus does not start"
}
W_PID=$PT_PID

# received PORT : samples the promtable on PORT took since its start.
received() {
    curl -sS --max-time 2 -o "$DIR/m.$1" "http://127.0.0.1:$1/metrics" 2>/dev/null &&
        pt_metric_sum "$DIR/m.$1" "$2"
}

deadline=$((SECONDS + 120))
while [ "$SECONDS" -lt "$deadline" ]; do
    a=$(received "$A_PORT" promtable_samples_received_total)
    b=$(received "$B_PORT" promtable_samples_received_total)
    awk -v a="${a:-0}" -v b="${b:-0}" -v n="$WANT" 'BEGIN { exit !(a + b >= n) }' && break
    sleep 0.5
done
tap_check "nginx alternated: each promtable took a share ($a and $b samples)" \
    awk -v a="${a:-0}" -v b="${b:-0}" -v n="$WANT" \
    'BEGIN { exit !(a + b >= n && a > n / 10 && b > n / 10) }'

T=$(($(date +%s) - 2))
pt_writer_drained "two writers" "$W_PORT" "$T" 120 "$DIR/w.metrics"
pt_writer_samples "$W_PORT" "$T0" "$T" "$DIR/writer.txt"
n_w=$(wc -l <"$DIR/writer.txt")
tap_check "the writer holds $n_w samples in (T0, T]" test "$n_w" -gt 20000
pt_stop "$W_PID" 20

# ------------------------------------------------------------- flushed, then read back

# Both buffers empty: everything either promtable took is in Bigtable.
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
    a=$(received "$A_PORT" promtable_bigtable_buffer_samples)
    b=$(received "$B_PORT" promtable_bigtable_buffer_samples)
    [ "${a:-x}" = 0 ] && [ "${b:-x}" = 0 ] && break
    sleep 0.2
done
tap_is "${a:-?} ${b:-?}" "0 0" "both buffers are flushed into Bigtable once the writes stop"

pt_compare_read "read through promtable a" "http://127.0.0.1:$A_PORT" "$T0" "$T" \
    "$DIR/writer.txt" "$DIR"
pt_compare_read "read through promtable b" "http://127.0.0.1:$B_PORT" "$T0" "$T" \
    "$DIR/writer.txt" "$DIR"

pt_stop "$NGINX_PID" 10
for i in 0 1; do
    pt_stop "${pids[$i]}" 20
    tap_is "$?" 0 "promtable $((i + 1)) exits cleanly on SIGTERM"
done
tap_done
