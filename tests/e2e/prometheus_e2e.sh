#!/usr/bin/env bash
# End-to-end test with the real Prometheus server (Debian package `prometheus`, 2.42).
#
# Per backend (the embedded store, then Cloud Bigtable as the emulator, written straight and
# through a write-back buffer) and per scheme (http:// = HTTP/1.1, then https:// = HTTP/2
# via ALPN):
#   1. start promtable on a free loopback port with an empty store (bigtable: start
#      cbtemulator on a free loopback port and create the tables with `promtable init`);
#   2. start the test exporter and a *writer* Prometheus that scrapes it and itself every
#      second and remote-writes to promtable (configs/prometheus-e2e-writer.yml);
#   3. let it run RUN_SECONDS (test_vanishing disappears on the way), stop the exporter
#      (every exporter series goes stale) and wait until the writer has sent it all;
#   4. start a *reader* Prometheus with an empty TSDB that remote-reads from promtable with
#      read_recent (configs/prometheus-e2e-reader.yml);
#   5. evaluate the same PromQL on both at the same fixed times (instant and range queries)
#      and require identical answers: one TAP line per expression;
#   6. check the writer's remote-write counters and promtable's request counters (including
#      the HTTP protocol version) and that promtable exits cleanly on SIGTERM.
#
# Why the answers can be compared exactly: the writer's local TSDB holds the same samples it
# sent, but never its external label replica="a"; promtable stores that label with every
# series. The reader declares the same external label and keeps filter_external_labels at its
# default (true), so it adds replica="a" to every remote-read selector and strips it from the
# answers. Evaluation times lie in the past and before the last sample known to be sent, so
# the writer's still-running scrapes do not matter (PromQL only looks back in time).
# Prometheus' own remote-write encoder cannot carry -0 (proto3 omits a zero double), so the
# exporter never produces it.
#
# Environment:
#   PT_BUILD_DIR         build tree with promtable and tests/exporter (default ../../build)
#   PT_E2E_BACKENDS      which backends, default "embedded bigtable bigtable-buffered" (the
#                        last: storage.bigtable.buffer_path set, flushed every few seconds,
#                        so reads merge the buffer with Bigtable); the bigtable runs are
#                        reported skipped when the emulator ($PT_CBTEMULATOR, default the
#                        gcloud SDK's cbtemulator) is not installed
#   PT_E2E_SCHEMES       which schemes, default "http https"
#   PT_E2E_BIGTABLE_SCHEMES  schemes for the bigtable backend, default "http https". The
#                        transport code is the same for every backend; bigtable with both
#                        schemes keeps the whole file under ~4 min on 2 cores.
#   PT_E2E_BUFFERED_SCHEMES  schemes for bigtable-buffered, default "http"
#   PT_E2E_RUN_SECONDS   how long the writer scrapes before the exporter stops (default 24)
#   PT_E2E_TARGET        "promtable" (default) or "prometheus": a third Prometheus with
#                        --web.enable-remote-write-receiver plays the remote storage. That is
#                        only for debugging this script; promtable-specific checks are skipped.
#   PT_KEEP_TMP=1        keep the temp dirs (configs, logs, data) for inspection
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PT_BUILD_DIR:-$ROOT/build}
TARGET=${PT_E2E_TARGET:-promtable}
SCHEMES=${PT_E2E_SCHEMES:-http https}
BACKENDS=${PT_E2E_BACKENDS:-embedded bigtable bigtable-buffered}
BT_SCHEMES=${PT_E2E_BIGTABLE_SCHEMES:-$SCHEMES}
BUF_SCHEMES=${PT_E2E_BUFFERED_SCHEMES:-http}
# Prometheus as the store has no backends: one pass per scheme.
[ "$TARGET" = prometheus ] && BACKENDS=embedded
for b in $BACKENDS; do
    case $b in
    embedded | bigtable | bigtable-buffered) ;;
    *) tap_bail "PT_E2E_BACKENDS: unknown backend '$b' (embedded, bigtable, bigtable-buffered)" ;;
    esac
done
RUN_SECONDS=${PT_E2E_RUN_SECONDS:-24}
VANISH_AFTER=10 # exporter scrapes before test_vanishing disappears
# The staleness checks need test_vanishing gone well before the exporter stops.
[ "$RUN_SECONDS" -ge $((VANISH_AFTER + 10)) ] ||
    tap_bail "PT_E2E_RUN_SECONDS must be at least $((VANISH_AFTER + 10))"

pt_require prometheus curl jq openssl awk sed
EXPORTER=$BUILD/tests/exporter
[ -x "$EXPORTER" ] || tap_bail "$EXPORTER not built"
case $TARGET in
promtable) [ -x "$BUILD/promtable" ] || tap_bail "$BUILD/promtable not built" ;;
prometheus) ;;
*) tap_bail "PT_E2E_TARGET must be promtable or prometheus" ;;
esac

pt_mktemp TOP promtable-e2e

# One self-signed certificate for 127.0.0.1 serves as server cert and CA. Generated even for
# the http run: the config templates always name a CA file, and Prometheus loads it at start.
CERT=$TOP/cert.pem
KEY=$TOP/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$KEY" -out "$CERT" >"$TOP/openssl.log" 2>&1 ||
    tap_bail "openssl could not make a test certificate: $(cat "$TOP/openssl.log")"

# ------------------------------------------------------------------------------ helpers

# render TEMPLATE OUT NAME=VALUE... : replaces @NAME@ with VALUE outside comments; fails when
# a placeholder is left.
render() {
    local tpl=$1 out=$2 kv name val script=''
    shift 2
    for kv in "$@"; do
        name=${kv%%=*}
        val=${kv#*=}
        val=$(printf '%s' "$val" | sed -e 's/[\\|&]/\\&/g')
        script+="s|@${name}@|${val}|g;"
    done
    sed -e "/^[[:space:]]*#/!{$script}" "$tpl" >"$out"
    ! grep -v '^[[:space:]]*#' "$out" | grep -q '@[A-Z_]*@'
}

# Reduce a query API answer to what must match: status, warnings, result type and the
# result with series sorted by labels. Values stay strings; timestamps are the same JSON
# numbers on both sides, so jq turns them into the same doubles.
NORM='def norm: {status, error: (.error // null), warnings: (.warnings // []),
                 type: .data.resultType,
                 result: ((.data.result // []) | map({metric, value, values}) | sort_by(.metric))};'

# shellcheck disable=SC2016 # $w and $r are jq variables
# Verdict on one evaluation from the raw writer ($w) and reader ($r) answers; one jq process
# per evaluation keeps the ~300 evaluations of a run fast.
VERDICT=$NORM'($w[0] | norm) as $w | ($r[0] | norm) as $r |
  if $w.status != "success" then "writer: \($w.status) \($w.error)"
  elif $r.status != "success" then "reader: \($r.status) \($r.error)"
  elif ($r.warnings | length) > 0 then "reader warnings: \($r.warnings | join("; "))"
  elif $w != $r then "differ"
  elif ($w.result | length) == 0 then "same-empty"
  else "same" end'

# api PORT ENDPOINT OUTFILE PARAM... : GET /api/v1/ENDPOINT with url-encoded params.
api() {
    local port=$1 ep=$2 out=$3 kv args=()
    shift 3
    for kv in "$@"; do args+=(--data-urlencode "$kv"); done
    curl -sS --max-time 60 -G -o "$out" "http://127.0.0.1:$port/api/v1/$ep" "${args[@]}"
}

# Shorten long lines (the 5000-byte label) so a diff in the TAP output stays readable.
clip() {
    cut -c1-240
}

# compare DESC EXPR [MODE [WRITER_EXPR]] : evaluates EXPR on the reader and WRITER_EXPR
# (default EXPR) on the writer at every instant in INSTANTS and, unless MODE is "instant", as
# range queries over RANGES; one TAP line.
compare() {
    local desc=$1 expr=$2 mode=${3:-} wexpr=${4:-$2} ev ep rest verdict seen='' bad='' n=0
    local evals=()
    for ev in "${INSTANTS[@]}"; do evals+=("query time=$ev"); done
    if [ "$mode" != instant ]; then
        for ev in "${RANGES[@]}"; do evals+=("query_range $ev"); done
    fi
    for ev in "${evals[@]}"; do
        local params=() p
        read -r ep rest <<<"$ev"
        for p in $rest; do params+=(--data-urlencode "$p"); done
        n=$((n + 1))
        rm -f "$DIR/q.w.raw" "$DIR/q.r.raw"
        # One curl process for both servers (--next): process start-up dominates here.
        if ! curl -sS --max-time 60 -G -o "$DIR/q.w.raw" "http://127.0.0.1:$W_PORT/api/v1/$ep" \
            --data-urlencode "query=$wexpr" "${params[@]}" \
            --next -sS --max-time 60 -G -o "$DIR/q.r.raw" "http://127.0.0.1:$R_PORT/api/v1/$ep" \
            --data-urlencode "query=$expr" "${params[@]}" ||
            [ ! -s "$DIR/q.w.raw" ] || [ ! -s "$DIR/q.r.raw" ]; then
            bad="curl failed ($ep $rest)"
            break
        fi
        if ! verdict=$(jq -rn --slurpfile w "$DIR/q.w.raw" --slurpfile r "$DIR/q.r.raw" \
            "$VERDICT" 2>&1); then
            bad="unparsable answer ($ep $rest): $(head -c 300 <<<"$verdict")"
            break
        fi
        case $verdict in
        same) seen=1 ;;
        same-empty) ;;
        *)
            bad="$verdict ($ep $rest)"
            break
            ;;
        esac
    done
    if [ -z "$bad" ] && [ -z "$seen" ]; then
        bad="writer returned no data in any of $n evaluations: the comparison proves nothing"
    fi
    if [ -z "$bad" ]; then
        tap_ok "$NAME: $desc: $expr ($n evaluations)"
        return 0
    fi
    tap_not_ok "$NAME: $desc: $expr"
    tap_diag "$bad"
    if [ "${bad%% *}" = differ ]; then
        tap_diag "diff writer reader (first 40 lines, clipped):"
        tap_diag "$(diff <(jq -S "${NORM}norm" "$DIR/q.w.raw" | clip) \
            <(jq -S "${NORM}norm" "$DIR/q.r.raw" | clip) | head -n 40)"
    fi
    return 1
}

# writer_range_last EXPR : the timestamp of the last sample the writer returns for EXPR over
# the main range (0 when none).
writer_range_last() {
    api "$W_PORT" query_range "$DIR/last.raw" "query=$1" "start=$T0" "end=$TEND" "step=1" &&
        jq -r '[.data.result[].values[-1][0]] | max // 0' "$DIR/last.raw"
}

# Progress notes with the elapsed time, so a slow phase is visible in the TAP output.
phase() {
    tap_diag "$NAME: $* (+$((SECONDS - STARTED)) s)"
}

show_logs() {
    [ -f "$DIR/emulator.log" ] && tap_diag_file "$DIR/emulator.log" 10
    [ -f "$DIR/init.log" ] && tap_diag_file "$DIR/init.log" 10
    tap_diag_file "$DIR/store.log" 100
    tap_diag_file "$DIR/writer.log" 25
    [ -f "$DIR/reader.log" ] && tap_diag_file "$DIR/reader.log" 25
    tap_diag_file "$DIR/exporter.log" 10
}

# Stop whatever this scenario still runs (after an early failure), clients first.
stop_all() {
    local p
    for p in "$R_PID" "$W_PID" "$EXP_PID" "$STORE_PID" "$EMU_PID"; do
        [ -n "$p" ] && pt_stop "$p" 10
    done
    R_PID='' W_PID='' EXP_PID='' STORE_PID='' EMU_PID=''
}

# -------------------------------------------------------------------------- one scenario

scenario() {
    BACKEND=$1
    SCHEME=$2
    NAME=$SCHEME
    [ "$TARGET" = promtable ] && NAME="$BACKEND/$SCHEME"
    R_PID='' W_PID='' EXP_PID='' STORE_PID='' EMU_PID=''
    local fails_before=$TAP_FAILED curl_tls=() t_ready t_kill v
    pt_mktemp DIR "promtable-e2e-$BACKEND-$SCHEME"
    [ "$SCHEME" = https ] && curl_tls=(--cacert "$CERT")
    pt_free_port PT_PORT
    pt_free_port EXP_PORT
    pt_free_port W_PORT
    pt_free_port R_PORT
    local base="$SCHEME://127.0.0.1:$PT_PORT"

    # 1. remote storage
    if [ "$TARGET" = promtable ]; then
        local tls=() storage=(--storage.embedded.path="$DIR/store")
        [ "$SCHEME" = https ] && tls=(--web.tls-cert-file="$CERT" --web.tls-key-file="$KEY")
        if [ "$BACKEND" != embedded ]; then
            if ! pt_start_cbtemulator EMU_PORT "$DIR/emulator.log"; then
                tap_not_ok "$NAME: Bigtable emulator starts"
                show_logs
                stop_all
                return
            fi
            EMU_PID=$PT_EMU_PID
            # A table prefix, so promtable must use the tables init made, not defaults.
            storage=(--storage.backend=bigtable --storage.bigtable.project=e2e
                --storage.bigtable.instance=e2e "--storage.bigtable.endpoint=127.0.0.1:$EMU_PORT"
                --storage.bigtable.table-prefix=e2e_ --storage.bigtable.buffer-path=)
            if ! "$BUILD/promtable" init "${storage[@]}" >"$DIR/init.log" 2>&1; then
                tap_not_ok "$NAME: promtable init creates the tables on the emulator"
                show_logs
                stop_all
                return
            fi
            # Flushed every 4 s (an eighth of the series every 0.5 s): the reads merge the
            # samples still buffered with those already in Bigtable.
            [ "$BACKEND" = bigtable-buffered ] &&
                storage+=(--storage.bigtable.buffer-path="$DIR/buffer"
                    --storage.bigtable.flush-interval=4s)
        fi
        pt_spawn "$DIR/store.log" "$BUILD/promtable" --web.listen-address="127.0.0.1:$PT_PORT" \
            "${storage[@]}" "${tls[@]}"
    else
        printf 'global:\n  scrape_interval: 1m\n' >"$DIR/store.yml"
        local web=()
        if [ "$SCHEME" = https ]; then
            printf 'tls_server_config:\n  cert_file: %s\n  key_file: %s\n' "$CERT" "$KEY" \
                >"$DIR/store-web.yml"
            web=(--web.config.file="$DIR/store-web.yml")
        fi
        pt_spawn "$DIR/store.log" prometheus --config.file="$DIR/store.yml" \
            --storage.tsdb.path="$DIR/store" --web.listen-address="127.0.0.1:$PT_PORT" \
            --web.enable-remote-write-receiver "${web[@]}"
    fi
    STORE_PID=$PT_PID
    if ! pt_wait_http "$base/-/ready" 30 "$STORE_PID" "${curl_tls[@]}"; then
        tap_not_ok "$NAME: $TARGET answers $base/-/ready"
        show_logs
        stop_all
        return
    fi
    tap_ok "$NAME: $TARGET answers $base/-/ready"

    # 2. exporter and writer
    pt_spawn "$DIR/exporter.log" "$EXPORTER" "$EXP_PORT" "$VANISH_AFTER"
    EXP_PID=$PT_PID
    render "$ROOT/configs/prometheus-e2e-writer.yml" "$DIR/writer.yml" \
        WRITER_ADDR="127.0.0.1:$W_PORT" EXPORTER_ADDR="127.0.0.1:$EXP_PORT" \
        REMOTE_WRITE_URL="$base/api/v1/write" CA_FILE="$CERT" ||
        tap_bail "could not render the writer config"
    render "$ROOT/configs/prometheus-e2e-reader.yml" "$DIR/reader.yml" \
        REMOTE_READ_URL="$base/api/v1/read" CA_FILE="$CERT" ||
        tap_bail "could not render the reader config"
    if ! pt_wait_http "http://127.0.0.1:$EXP_PORT/ready" 10 "$EXP_PID"; then
        tap_not_ok "$NAME: exporter starts"
        show_logs
        stop_all
        return
    fi
    pt_start_prometheus "$DIR" writer "$W_PORT"
    local up=$?
    W_PID=$PT_PID
    if [ "$up" != 0 ]; then
        tap_not_ok "$NAME: writer Prometheus starts"
        show_logs
        stop_all
        return
    fi
    t_ready=$(date +%s)
    tap_ok "$NAME: writer Prometheus starts, remote-writing to $base/api/v1/write"

    # 3. run, then make every exporter series go stale and let the queue drain
    phase "writing for $RUN_SECONDS s"
    pt_sleep "$RUN_SECONDS"
    pt_stop "$EXP_PID" 5
    EXP_PID=''
    t_kill=$(date +%s)
    pt_sleep 3
    T0=$((t_ready + 3))
    TEND=$((t_kill + 3))
    if pt_wait_remote_sent "$W_PORT" "$TEND" 30; then
        tap_ok "$NAME: writer has sent everything up to the end of the test range"
    else
        tap_not_ok "$NAME: writer has sent everything up to the end of the test range"
        tap_diag "highest sent timestamp $PT_SENT_TS, need >= $((TEND + 2))"
    fi
    pt_sleep 1.5

    # 4. reader
    phase "starting the reader"
    pt_start_prometheus "$DIR" reader "$R_PORT"
    up=$?
    R_PID=$PT_PID
    if [ "$up" != 0 ]; then
        tap_not_ok "$NAME: reader Prometheus starts"
        show_logs
        stop_all
        return
    fi

    # 5. the same PromQL on both, at fixed times. Fractional times and a step that is not a
    # divisor of the scrape interval keep evaluations off the scrape grid.
    INSTANTS=("$((T0 + 2)).5" "$((T0 + 6))" "$((T0 + 9)).75" "$((T0 + 13))" "$((T0 + 17)).5"
        "$((t_kill - 1)).25" "$TEND")
    RANGES=("start=$T0 end=$TEND step=1" "start=$T0.3 end=$TEND step=3.7")

    phase "comparing queries"
    compare "plain selector" 'test_gauge'
    compare "regex matcher" 'test_gauge{kind=~"a|c"}'
    compare "negative matcher (includes the series without kind)" 'test_gauge{kind!="a"}'
    compare "negative regex" 'test_gauge{kind!~"a|b"}'
    compare "absent label equals empty" 'test_gauge{kind=""}'
    compare "empty regex: series without the label" 'test_gauge{kind=~""}'
    compare "negated empty regex: series with the label" 'test_gauge{kind!~""}'
    compare "not empty: series with the label" 'test_gauge{kind!=""}'
    compare "regex that also matches empty" 'test_gauge{kind=~"a|"}'
    compare "empty regex without __name__" '{job="exporter",kind=~""}'
    compare "negated empty regex without __name__" '{job="exporter",kind!~""}'
    compare "upper-case label name sorts before __name__" 'test_gauge{Zone="z1"}'
    compare "selector without __name__" '{job="exporter"}'
    compare "__name__ regex" '{__name__=~"test_.*"}'
    compare "__name__ regex plus label" '{__name__=~"test_(gauge|counter_total)",kind="a"}'
    compare "metric name with a colon" 'test_ns:colon_gauge'
    compare "sample timestamps" 'timestamp(test_counter_total)'
    compare "rate" 'rate(test_counter_total[10s])'
    compare "sum by" 'sum by (kind) (test_gauge)'
    compare "sum by over both jobs" 'sum by (job) (up)'
    compare "histogram_quantile" 'histogram_quantile(0.9, rate(test_latency_seconds_bucket[10s]))'
    compare "histogram_quantile by le" \
        'histogram_quantile(0.5, sum by (le) (rate(test_latency_seconds_bucket[10s])))'
    compare "tricky label values" 'test_tricky'
    compare "5000-byte label value" 'test_tricky{case="long"}'
    compare "label value injection does not collide" 'test_tricky{case="inject"}'
    compare "empty label value dropped" 'test_tricky{v=""}'
    compare "regex on escaped values" 'test_tricky{v=~"a,b|a=b|C:\\\\dir\\\\|say \"hi\""}'
    compare "regex dot does not match newline (2.x)" 'test_tricky{v=~"line1.*|a@b.*"}'
    compare "regex dot matches one unicode character" 'test_tricky{v=~"\u00fc."}'
    compare "special float values (NaN, Inf, -0, subnormal)" 'test_special'
    compare "staleness of a vanished series" 'test_vanishing'
    compare "staleness after the target went down" 'test_counter_total{kind="a"}'
    # A selector that names the external label keeps it in the answer (nothing is stripped):
    # the writer's local TSDB never had it, so add it there for the comparison.
    compare "external label stored" 'test_gauge{replica="a"}' range \
        'label_replace(test_gauge, "replica", "a", "", "")'
    compare "every series of both jobs" '{__name__=~".+"}' instant
    compare "series count per job" 'count by (job) ({__name__=~".+"})'

    phase "checking counters"
    # The staleness lines above prove nothing if the writer itself shows 5 m of lookback.
    v=$(writer_range_last 'test_vanishing')
    if awk -v v="$v" -v t="$t_kill" 'BEGIN { exit !(v > 0 && v < t - 5) }'; then
        tap_ok "$NAME: writer: test_vanishing ends (stale marker) long before the range end"
    else
        tap_not_ok "$NAME: writer: test_vanishing ends (stale marker) long before the range end"
        tap_diag "last sample at $v, exporter stopped at $t_kill"
    fi
    v=$(writer_range_last 'test_gauge{kind="a"}')
    if awk -v v="$v" -v t="$t_kill" -v e="$TEND" 'BEGIN { exit !(v > t - 3 && v < e) }'; then
        tap_ok "$NAME: writer: exporter series end when the exporter stops"
    else
        tap_not_ok "$NAME: writer: exporter series end when the exporter stops"
        tap_diag "last sample at $v, exporter stopped at $t_kill, range end $TEND"
    fi
    # Labels survive byte for byte: check the long one explicitly, not only as "same".
    api "$R_PORT" query "$DIR/long.raw" 'query=test_tricky{case="long"}' "time=$((T0 + 6))"
    v=$(jq -r '.data.result[0].metric.v | length' "$DIR/long.raw" 2>/dev/null)
    tap_is "$v" 5000 "$NAME: reader: the long label value has 5000 characters"

    # 6. the writer's remote-write counters
    curl -sS --max-time 5 -o "$DIR/writer.metrics" "http://127.0.0.1:$W_PORT/metrics"
    local m rn='remote_name="promtable"'
    v=$(pt_metric_sum "$DIR/writer.metrics" prometheus_remote_storage_samples_total "$rn")
    if awk -v v="$v" 'BEGIN { exit !(v > 0) }'; then
        tap_ok "$NAME: writer sent samples ($v)"
    else
        tap_not_ok "$NAME: writer sent samples ($v)"
    fi
    v=$(pt_metric_sum "$DIR/writer.metrics" prometheus_remote_storage_metadata_total "$rn")
    if awk -v v="$v" 'BEGIN { exit !(v > 0) }'; then
        tap_ok "$NAME: writer sent metadata ($v)"
    else
        tap_not_ok "$NAME: writer sent metadata ($v)"
    fi
    for m in samples_failed_total samples_retried_total samples_dropped_total \
        metadata_failed_total metadata_retried_total; do
        v=$(pt_metric_sum "$DIR/writer.metrics" "prometheus_remote_storage_$m" "$rn")
        tap_is "$v" 0 "$NAME: writer prometheus_remote_storage_$m"
    done

    # promtable's own view: which HTTP version carried the requests, and only 2xx answers.
    if [ "$TARGET" = promtable ]; then
        local proto=1
        [ "$SCHEME" = https ] && proto=2
        curl -sS --max-time 5 "${curl_tls[@]}" -o "$DIR/store.metrics" "$base/metrics"
        local served route code what
        for served in write:204:writes read:200:reads; do
            IFS=: read -r route code what <<<"$served"
            v=$(pt_metric_sum "$DIR/store.metrics" promtable_http_requests_total \
                "route=\"/api/v1/$route\"" "code=\"$code\"" "proto=\"$proto\"")
            if awk -v v="$v" 'BEGIN { exit !(v > 0) }'; then
                tap_ok "$NAME: promtable served $what over HTTP/$proto ($v)"
            else
                tap_not_ok "$NAME: promtable served $what over HTTP/$proto ($v)"
                tap_diag "$(grep '^promtable_http_requests_total' "$DIR/store.metrics")"
            fi
        done
        v=$(grep '^promtable_http_requests_total{' "$DIR/store.metrics" |
            grep -E 'route="/api/v1/(write|read)"' | grep -v 'code="2[0-9][0-9]"' |
            awk '{ s += $NF } END { printf "%.17g\n", s }')
        tap_is "$v" 0 "$NAME: promtable answered every write and read with 2xx"
    else
        tap_skip "$NAME: promtable served writes over the right HTTP version" "target is $TARGET"
        tap_skip "$NAME: promtable served reads over the right HTTP version" "target is $TARGET"
        tap_skip "$NAME: promtable answered every write and read with 2xx" "target is $TARGET"
    fi

    # Stop the clients first so no request is in flight, then the storage gracefully.
    pt_stop "$R_PID" 10
    pt_stop "$W_PID" 10
    pt_stop "$STORE_PID" 20
    v=$?
    R_PID='' W_PID='' STORE_PID=''
    tap_is "$v" 0 "$NAME: $TARGET exits with status 0 on SIGTERM"
    if [ -n "$EMU_PID" ]; then
        pt_stop "$EMU_PID" 5
        EMU_PID=''
    fi

    if [ "$TAP_FAILED" -gt "$fails_before" ]; then
        show_logs
    fi
}

STARTED=$SECONDS
for b in $BACKENDS; do
    schemes=$SCHEMES
    [ "$b" = bigtable ] && schemes=$BT_SCHEMES
    [ "$b" = bigtable-buffered ] && schemes=$BUF_SCHEMES
    for s in $schemes; do
        if [ "$b" != embedded ] && ! pt_cbtemulator_found; then
            tap_skip "$b/$s: end-to-end scenario" \
                "Bigtable emulator not installed ($PT_CBTEMULATOR)"
            continue
        fi
        scenario "$b" "$s"
    done
done
tap_diag "runtime $((SECONDS - STARTED)) s"
tap_done
