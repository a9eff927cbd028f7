#!/usr/bin/env bash
# Bigtable traffic per sample with Prometheus' own values: a real Prometheus 2.42 scrapes
# itself under $JOBS job names every second and remote-writes to promtable on the Bigtable
# emulator with its write-back buffer at the default settings; after $SECONDS_RUN seconds
# (about as many samples a series as the default 30-minute flush_interval gives at 15 s
# scrapes: 120) the writer stops, then promtable (SIGTERM: the buffer is flushed), and the
# line promtable logs at its stop ("bigtable writes") gives row mutations, cells and
# MutateRows bytes per sample received, for the points table and for both tables.
#
# Usage: bench/bigtable_prometheus.sh   (JOBS, SECONDS_RUN, KEEP=1 from the environment)
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
JOBS=${JOBS:-2}
SECONDS_RUN=${SECONDS_RUN:-125}
[[ ${KEEP:-0} == 1 ]] && PT_KEEP_TMP=1

command -v prometheus >/dev/null || { log "prometheus is not installed"; exit 1; }
pt_cbtemulator_found || { log "the Bigtable emulator is not installed ($PT_CBTEMULATOR)"; exit 1; }
pt_mktemp WORK promtable-btprom
bench_build promtable
PROMTABLE=$BUILD_DIR/promtable
bench_need "$PROMTABLE"

pt_bigtable_store "$WORK" bench b_
pt_free_port P_PORT
pt_free_port W_PORT
pt_start_promtable "$WORK/promtable.log" "$P_PORT" "${BT[@]}" \
    --storage.bigtable.buffer-path="$WORK/buffer"
P_PID=$PT_PID
pt_self_writer_config "$JOBS" "$W_PORT" "http://127.0.0.1:$P_PORT/api/v1/write" \
    >"$WORK/writer.yml"
pt_start_prometheus "$WORK" writer "$W_PORT" || { log "the writer did not start"; exit 1; }
W_PID=$PT_PID
log "writing for $SECONDS_RUN s"
sleep "$SECONDS_RUN"
pt_stop "$W_PID" 20
curl -sS "http://127.0.0.1:$P_PORT/metrics" -o "$WORK/promtable.metrics"
samples=$(pt_metric_sum "$WORK/promtable.metrics" promtable_samples_received_total)
pt_stop "$P_PID" 120
line=$(grep 'msg="bigtable writes"' "$WORK/promtable.log" | tail -n 1)
[[ -n $line ]] || { log "promtable logged no Bigtable writes"; exit 1; }
echo "$("$PROMTABLE" --version) (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null))"
echo "writer: Prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}'), $JOBS jobs" \
    "of its own metrics, 1 s scrapes, $SECONDS_RUN s; $samples samples received"
awk -v n="$samples" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        printf "per sample, points table / both tables: %.4f / %.4f row mutations, " \
            "%.4f / %.4f cells, %.2f / %.2f bytes\n",
            v["points_rows"] / n, v["rows"] / n, v["points_cells"] / n, v["cells"] / n,
            v["points_bytes"] / n, v["bytes"] / n }' <<<"$line"
