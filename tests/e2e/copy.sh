#!/usr/bin/env bash
# `promtable copy` (docs/operations.md, "Copying a store") with the real binary:
#   1. an embedded store A gets 2,000 loadgen series x 500 float samples (1,000,000), plus
#      native histograms, floats with exemplars and metadata through rwtool (remote write
#      2.0); promtable is stopped;
#   2. copy A -> Bigtable emulator (BT), then BT -> a fresh embedded store C with
#      --checkpoint, killed with SIGKILL once its checkpoint shows progress and rerun: the
#      rerun resumes, and `--verify-only` finds 0 mismatches between BT and C and between
#      A and C; a whole copy BT -> F shows on its terminal line how far it is;
#   3. promtable on A and on C answer remote reads of several selectors (floats,
#      histograms, exemplars, regex and negative matchers) identically;
#   4. --match copies exactly the selected series (A -> D), --start/--end exactly the
#      window's samples (A -> E), each read back identically through promtable;
#   5. a cell changed at C through the API (a sample rewritten with another value):
#      --verify-only reports the mismatch and exits 1; copying again repairs it.
# Skipped when the Bigtable emulator is not installed (PT_CBTEMULATOR).
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl
pt_cbtemulator_found || tap_skip_all "Bigtable emulator not installed ($PT_CBTEMULATOR)"
pt_tools RWTOOL=tests/rwtool
pt_mktemp T copy

SERIES=2000 PER_SERIES=500
[ -n "${PT_SANITIZED:-}" ] && SERIES=400 # a fifth under the sanitizers
NOW=$(($(date +%s) * 1000))
# loadgen's first scrape: now - 24 h rounded down to the hour; 500 x 15 s follow.
L0=$(((NOW - 86400000) / 3600000 * 3600000))
X0=$((NOW - 3600000)) # rwtool's samples
H=(-H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy')
V2=(-H 'Content-Type: application/x-protobuf;proto=io.prometheus.write.v2.Request')

embedded_cfg() { # NAME: T/NAME.yml for an embedded store in T/NAME
    printf 'storage:\n  backend: embedded\n  embedded:\n    path: %s\n' "$T/$1" >"$T/$1.yml"
}
for s in A C D E; do embedded_cfg "$s"; done

# start NAME: promtable on store NAME; sets PID_NAME, URL_NAME
start() {
    local p u
    pt_serve p u "$T/$1.log" --config.file="$T/$1.yml" || tap_bail "promtable on $1 did not start"
    printf -v "PID_$1" '%s' "$p"
    printf -v "URL_$1" '%s' "$u"
}

# ---- 1. the source
start A
"$LOADGEN" --url "$URL_A/api/v1/write" --series $SERIES --samples-per-series 10 \
    --samples-per-request 2000 --requests $((SERIES * PER_SERIES / 2000)) --connections 2 \
    --pool-mb 256 >"$T/loadgen.out" 2>"$T/loadgen.err"
tap_check "loadgen wrote $((SERIES * PER_SERIES)) samples into A" \
    grep -q "errors=0 requests=$((SERIES * PER_SERIES / 2000)) samples=$((SERIES * PER_SERIES))" \
    "$T/loadgen.out"
codes=
for r in 0 1 2 3; do
    spec=()
    for s in 0 1 2 3 4 5 6 7; do
        spec+=(s l __name__ copy_hist l job j$r l n "$s")
        for i in 0 1 2 3 4 5 6 7; do spec+=(hb $((X0 + (r * 8 + i) * 15000)) $((1 + i % 4))); done
        spec+=(s l __name__ copy_float l job j$r l n "$s" m counter "a help" bytes)
        for i in 0 1 2 3 4 5 6 7; do
            t=$((X0 + (r * 8 + i) * 20000))
            spec+=(v "$((s * 100 + i)).25" "$t" x trace_id "t$r$s$i" "$i.5" "$t")
        done
    done
    "$RWTOOL" write 2 "$T/x$r.bin" "${spec[@]}" || tap_bail "rwtool write failed"
    codes+=$(curl -s -o /dev/null -w '%{http_code} ' "${H[@]}" "${V2[@]}" \
        --data-binary @"$T/x$r.bin" "$URL_A/api/v1/write")
done
tap_is "$codes" "204 204 204 204 " "histograms, exemplars and metadata written into A"
pt_stop "$PID_A"

# ---- 2. A -> Bigtable emulator -> C, C's copy killed and resumed
pt_start_cbtemulator EMU_PORT "$T/emulator.log" || tap_bail "the Bigtable emulator did not start"
cat >"$T/BT.yml" <<EOF
storage:
  backend: bigtable
  bigtable:
    project: p
    instance: i
    table_prefix: "cp_"
    endpoint: "127.0.0.1:$EMU_PORT"
EOF

# On a terminal (script(1) gives it one): the progress line rewritten in place.
script -qec "$PROMTABLE copy --from=$T/A.yml --to=$T/BT.yml" /dev/null >"$T/copy1.tty" 2>&1
tap_is "$?" 0 "copy embedded -> Bigtable emulator" || tap_diag_file "$T/copy1.tty" 5
tr '\r' '\n' <"$T/copy1.tty" | tr -d '\033' >"$T/copy1.out"
tap_diag "$(grep '^copy:' "$T/copy1.out") [embedded -> emulator]"
# The points table's lines: "copy points: S series, N samples, R samples/s, P %[, ETA T], ..."
grep '^copy points: ' "$T/copy1.out" | awk -v want_series="$SERIES" -v want_samples=$((SERIES * PER_SERIES)) '
    { n++; split($0, f, ", "); split(f[1], a, " "); split(f[2], b, " "); pct = f[4] + 0
      if (f[4] !~ / %$/) bad = bad " no percent: " $0
      if (pct < last) bad = bad " percent went down: " $0
      last = pct; series = a[3]; samples = b[1]
      if (f[5] ~ /^ETA [0-9hms]+$/ && pct < 100) eta++ }
    END { if (n < 3) bad = bad " only " n " progress lines"
          if (last != 100) bad = bad " ends at " last " %"
          if (!eta) bad = bad " no ETA shown"
          if (series < want_series || samples < want_samples)
              bad = bad " counted " series " series, " samples " samples"
          print (bad == "" ? "ok " n " lines, " eta " with an ETA, " series " series, " samples " samples" : "bad:" bad) }' >"$T/progress"
tap_check "the progress line: series, samples, percent rising to 100, an ETA ($(cat "$T/progress"))" \
    grep -q '^ok' "$T/progress"

pt_spawn "$T/copy2.log" "$PROMTABLE" copy --from="$T/BT.yml" --to="$T/C.yml" \
    --checkpoint="$T/ckpt"
CP=$PT_PID
for ((i = 0; i < 600; i++)); do
    grep -q '^row [0-9a-f]' "$T/ckpt" 2>/dev/null && break
    pt_alive "$CP" || break
    sleep 0.05
done
state=$(grep '^table' "$T/ckpt" 2>/dev/null)
alive=$(pt_alive "$CP" && echo alive)
kill -KILL "$CP" 2>/dev/null
pt_stop "$CP" 1 2>/dev/null
tap_ok "checkpoint before the kill: '$state' (copy $alive)"
[ "$alive" = alive ] && grep -q '^row [0-9a-f]' "$T/ckpt" ||
    tap_not_ok "the copy was killed midway with a checkpoint in a table"
script -qec "$PROMTABLE copy --from=$T/BT.yml --to=$T/C.yml --checkpoint=$T/ckpt" /dev/null \
    >"$T/copy3.tty" 2>&1
tap_is "$?" 0 "the rerun completes" || tap_diag_file "$T/copy3.tty" 5
tr '\r' '\n' <"$T/copy3.tty" | tr -d '\033' >"$T/copy3.err"
cp "$T/copy3.err" "$T/copy3.out"
tap_check "the rerun resumed after the checkpoint" grep -q 'resuming after the checkpoint' \
    "$T/copy3.err"
tap_diag "$(grep '^copy:' "$T/copy3.out") [emulator -> embedded, resumed part]"
tap_check "the checkpoint says done" grep -q '^table done' "$T/ckpt"

# A whole copy out of Bigtable: the terminal's line moves at every whole percent of the
# table's bytes that SampleRowKeys places before the scan.
embedded_cfg F
script -qec "$PROMTABLE copy --from=$T/BT.yml --to=$T/F.yml" /dev/null >"$T/copy7.tty" 2>&1
pcts=$(tr '\r' '\n' <"$T/copy7.tty" | grep '^copy points: ' | grep -o '[0-9.]* %' | tr -d ' %' |
    tr '\n' ' ')
tap_check "reading Bigtable, the line says how far (SampleRowKeys): ${pcts:0:60}..." \
    awk -v p="$pcts" 'BEGIN { n = split(p, v, " "); for (i = 1; i <= n; i++) if (v[i] > 0 && v[i] < 100) m++; exit !(m > 0 && v[n] == 100) }'

verify() { # FROM TO: --verify-only; its exit status in VRC, its report line in VOUT
    "$PROMTABLE" copy --from="$T/$1.yml" --to="$T/$2.yml" --verify-only >"$T/v.out" 2>"$T/v.err"
    VRC=$?
    VOUT=$(grep '^verify:' "$T/v.out")
}
verify BT C
tap_is "$VRC ${VOUT##*, }" "0 0 mismatches" "verify emulator vs C: $VOUT"
verify A C
tap_is "$VRC ${VOUT##*, }" "0 0 mismatches" "verify A vs C: $VOUT"

# ---- 3. remote reads of A and C
start A
start C
# read URL START END MATCHER...: the answer as rwtool prints it
read_at() {
    local url=$1
    shift
    "$RWTOOL" readreq "$T/rq.bin" "$@" || return 1
    curl -s -o "$T/rr.out" "${H[@]}" --data-binary @"$T/rq.bin" "$url/api/v1/read" || return 1
    "$RWTOOL" readresp "$T/rr.out"
}
# same DESC URL1 URL2 START END MATCHER...: both answers identical and not empty
same() {
    local desc=$1 u1=$2 u2=$3 a b
    shift 3
    a=$(read_at "$u1" "$@")
    b=$(read_at "$u2" "$@")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        tap_ok "$desc ($(printf '%s\n' "$a" | wc -l) lines)"
    else
        tap_not_ok "$desc"
        tap_diag "$(diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") | head -5)"
    fi
}
W=($((L0 - 60000)) $((NOW + 60000)))
same "A and C: one metric" "$URL_A" "$URL_C" "${W[@]}" __name__=node_load1
same "A and C: a regex over metric names" "$URL_A" "$URL_C" "${W[@]}" \
    '__name__=~node_(cpu|memory).*'
same "A and C: by a label, with a negative matcher" "$URL_A" "$URL_C" "${W[@]}" \
    job=kube-state-metrics '__name__!=kube_pod_info'
same "A and C: native histograms" "$URL_A" "$URL_C" "${W[@]}" __name__=copy_hist
same "A and C: floats with exemplars" "$URL_A" "$URL_C" "${W[@]}" __name__=copy_float
tap_check "the exemplars are in the answer" \
    grep -q ' x trace_id=' <(read_at "$URL_C" "${W[@]}" __name__=copy_float)
pt_stop "$PID_C"
pt_stop "$PID_A"

# ---- 4. --match and --start/--end
"$PROMTABLE" copy --from="$T/A.yml" --to="$T/D.yml" --match='{__name__=~"copy_.*",job="j1"}' \
    --match=node_load1 --verify >"$T/copy4.out" 2>"$T/copy4.err"
tap_is "$?" 0 "copy --match --verify" || tap_diag_file "$T/copy4.err" 5
tap_diag "$(grep -E '^(copy|verify):' "$T/copy4.out" | tr '\n' ' ')"
WS=$((X0 + 8 * 15000)) WE=$((X0 + 16 * 15000 - 1))
"$PROMTABLE" copy --from="$T/A.yml" --to="$T/E.yml" --start=$((WS / 1000)) \
    --end="$(date -u -d @$((WE / 1000)).999 +%Y-%m-%dT%H:%M:%S.%3NZ)" --verify \
    >"$T/copy5.out" 2>"$T/copy5.err"
tap_is "$?" 0 "copy --start --end --verify" || tap_diag_file "$T/copy5.err" 5
start A
start D
start E
same "--match: a selected metric" "$URL_A" "$URL_D" "${W[@]}" __name__=node_load1
same "--match: selected histograms and exemplars" "$URL_A" "$URL_D" "${W[@]}" \
    '__name__=~copy_.*' job=j1
tap_is "$(read_at "$URL_D" "${W[@]}" '__name__=~copy_.*' job=j2)" "" \
    "--match: a series not selected is not there"
tap_is "$(read_at "$URL_D" "${W[@]}" __name__=node_load15)" "" \
    "--match: a metric not selected is not there"
same "--start/--end: the window's histograms" "$URL_A" "$URL_E" "$WS" "$WE" __name__=copy_hist
tap_is "$(read_at "$URL_E" "${W[@]}" __name__=copy_hist | wc -l)" \
    "$(read_at "$URL_A" "$WS" "$WE" __name__=copy_hist | wc -l)" \
    "--start/--end: nothing outside the window"
pt_stop "$PID_A"
pt_stop "$PID_D"
pt_stop "$PID_E"

# ---- 5. a changed cell at the destination
start C
"$RWTOOL" write 2 "$T/alter.bin" s l __name__ copy_float l job j0 l n 0 v 7777 "$X0"
curl -s -o /dev/null "${H[@]}" "${V2[@]}" --data-binary @"$T/alter.bin" "$URL_C/api/v1/write"
pt_stop "$PID_C"
verify BT C
tap_is "$VRC ${VOUT##*, }" "1 1 mismatches" "verify finds the changed cell: $VOUT"
tap_check "and names its row" grep -q 'mismatch: points row "copy_float,job=j0,n=0,@' "$T/v.out"
"$PROMTABLE" copy --from="$T/BT.yml" --to="$T/C.yml" --verify >"$T/copy6.out" 2>"$T/copy6.err"
tap_is "$?" 0 "copying again repairs it (and verifies)" || tap_diag_file "$T/copy6.out" 5
tap_done
