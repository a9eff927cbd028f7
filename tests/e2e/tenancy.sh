#!/usr/bin/env bash
# Multi-tenancy (docs/operations.md, "Tenants") with the real promtable binary:
#   - tenancy off: the X-Scope-OrgID header is ignored and rows keep their shared keys;
#   - tenancy on (embedded store): two tenants write the same series with different values
#     and each reads back only its own, by remote read and through the browsing API
#     (series, label names and values, metadata); the shared space written before is
#     seen by neither; a missing header is 401 on write, read and the API; bad ids and
#     two headers are 400;
#   - limits: tenancy.max_series and tenancy.max_samples_per_second answer 429 with a
#     message naming the limit and the tenant, other tenants unaffected; tenancy.header
#     renames the header; the per-tenant counters are on /metrics;
#   - reads (remote read, the browsing API) of made-up ids answer empty and make no tenant:
#     they do not fill tenancy.max_tenants for a real tenant's write;
#   - `promtable check` walks every tenant's space and passes;
#   - the same isolation on the Bigtable emulator (skipped when it is not installed);
#   - HTTP/2 over TLS: 401 without the header, 400 for a bad id, 204 with a good one.
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"
pt_require curl jq openssl
B=${PT_BUILD_DIR:-$here/build}
PROMTABLE=$B/promtable RWTOOL=$B/tests/rwtool
pt_built "$PROMTABLE" "$RWTOOL"
pt_mktemp T tenancy

T0=$(($(date +%s) * 1000 - 60000))
ONE=3ff0000000000000 TWO=4000000000000000 FIVE=4014000000000000

# serve LOG ARGS...: promtable on a free port; sets PID and URL (0 when it did not start)
serve() { pt_serve PID URL "$@"; }
H=(-H 'Content-Type: application/x-protobuf' -H 'Content-Encoding: snappy')
# tenant_args TENANT: the header for TENANT ("" = none)
tenant_args() { [ -n "$1" ] && printf '%s\n' -H "${HDR:-X-Scope-OrgID}: $1"; }
# write TENANT FILE [2]: the status of a remote write (1.0, or 2.0) of FILE
write() {
    local a=()
    mapfile -t a < <(tenant_args "$1")
    [ "${3:-1}" = 2 ] && a+=(-H 'Content-Type: application/x-protobuf;proto=io.prometheus.write.v2.Request')
    curl -s -o "$T/last.body" -w '%{http_code}' "${H[@]}" "${a[@]}" --data-binary @"$2" \
        "$URL/api/v1/write"
}
# readall TENANT NAME: the samples of NAME as rwtool prints them, sorted
readall() {
    local a=()
    mapfile -t a < <(tenant_args "$1")
    "$RWTOOL" readreq "$T/rr.bin" $((T0 - 60000)) $((T0 + 60000)) "__name__=$2" || return 1
    curl -s -o "$T/rr.out" "${H[@]}" "${a[@]}" --data-binary @"$T/rr.bin" "$URL/api/v1/read"
    "$RWTOOL" readresp "$T/rr.out" | sort
}
# api TENANT PATH: the body of a browsing API GET
api() {
    local a=()
    mapfile -t a < <(tenant_args "$1")
    curl -s "${a[@]}" "$URL$2"
}
# status TENANT PATH [CURL ARGS]: the status of a GET (or of what the args make)
status() {
    local a=() p=$2
    mapfile -t a < <(tenant_args "$1")
    shift 2
    curl -s -o /dev/null -w '%{http_code}' "${a[@]}" "$@" "$URL$p"
}

"$RWTOOL" write 1 "$T/a.bin" s l __name__ shared_m l job x v 1 "$T0" \
    s l __name__ only_a l job x l team red v 1 "$T0" || tap_bail "rwtool write failed"
"$RWTOOL" write 1 "$T/b.bin" s l __name__ shared_m l job x v 2 "$T0" \
    s l __name__ only_b l job x l team blue v 2 "$T0" || tap_bail "rwtool write failed"
"$RWTOOL" write 1 "$T/none.bin" s l __name__ shared_m l job x v 5 "$T0" || tap_bail rwtool
"$RWTOOL" write 2 "$T/meta.bin" s l __name__ meta_a_total v 1 "$T0" m counter "help of a" "" ||
    tap_bail "rwtool write failed"

# isolation WHAT ARGS...: the isolation checks on a promtable started with ARGS
isolation() {
    local what=$1
    shift
    serve "$T/$what.log" --tenancy.enabled=true "$@" || tap_bail "$what: promtable did not start"
    tap_is "$(write a "$T/a.bin")" 204 "$what: tenant a writes"
    tap_is "$(write b "$T/b.bin")" 204 "$what: tenant b writes the same series, another value"
    tap_is "$(write a "$T/meta.bin" 2)" 204 "$what: tenant a writes metadata"
    tap_is "$(readall a shared_m)" "{__name__=\"shared_m\",job=\"x\"} $T0 $ONE" \
        "$what: remote read: tenant a reads its own value only"
    tap_is "$(readall b shared_m)" "{__name__=\"shared_m\",job=\"x\"} $T0 $TWO" \
        "$what: remote read: tenant b reads its own value only"
    tap_is "$(readall b only_a)" "" "$what: remote read: tenant b cannot read a's series"
    tap_is "$(readall c shared_m)" "" "$what: remote read: a tenant that wrote nothing reads nothing"
    tap_is "$(api a '/api/v1/series?match[]=\{job="x"\}' | jq -c '.data|sort_by(.__name__)')" \
        '[{"__name__":"only_a","job":"x","team":"red"},{"__name__":"shared_m","job":"x"}]' \
        "$what: series API: tenant a lists its series only"
    tap_is "$(api b '/api/v1/label/__name__/values' | jq -c .data)" '["only_b","shared_m"]' \
        "$what: label values: tenant b's metric names only"
    tap_is "$(api b '/api/v1/label/team/values' | jq -c .data)" '["blue"]' \
        "$what: label values: tenant b's values only"
    tap_is "$(api a '/api/v1/labels' | jq -c .data)" '["__name__","job","team"]' \
        "$what: label names of tenant a"
    tap_is "$(api b "/api/v1/status/tsdb?time=$((T0 / 1000))" |
        jq -c '[.data.headStats.numSeries, [.data.seriesCountByMetricName[].name]]')" \
        '[2,["only_b","shared_m"]]' "$what: cardinality view: tenant b's series only"
    tap_is "$(api a '/api/v1/metadata?metric=meta_a_total' | jq -c '.data[][].help')" '"help of a"' \
        "$what: metadata: tenant a sees its own"
    tap_is "$(api b '/api/v1/metadata' | jq -c .data)" '{}' "$what: metadata: tenant b sees none"
    tap_is "$(status '' /api/v1/labels)" 401 "$what: the browsing API without a tenant: 401"
    pt_stop "$PID" 10
}

# ------------------------------------------------------------------- tenancy off, then on
serve "$T/off.log" --storage.embedded.path="$T/store" || tap_bail "promtable did not start"
tap_is "$(write a "$T/none.bin")" 204 "tenancy off: a write with X-Scope-OrgID is taken as any other"
tap_is "$(readall '' shared_m)" "{__name__=\"shared_m\",job=\"x\"} $T0 $FIVE" \
    "tenancy off: the sample is read back without a header"
pt_stop "$PID" 10
isolation embedded --storage.embedded.path="$T/store"

serve "$T/on.log" --storage.embedded.path="$T/store" --tenancy.enabled=true ||
    tap_bail "promtable did not start"
tap_is "$(write '' "$T/a.bin")" 401 "write without X-Scope-OrgID: 401"
tap_check "the 401 says the header is missing" grep -q "has no X-Scope-OrgID header" "$T/last.body"
tap_is "$(status '' /api/v1/read "${H[@]}" --data-binary @"$T/rr.bin")" 401 "read without X-Scope-OrgID: 401"
tap_is "$(write 'a/b' "$T/a.bin")" 400 "tenant id with '/': 400"
tap_check "the 400 names the byte" grep -q "tenant id has '/' at byte 1" "$T/last.body"
tap_is "$(write '..' "$T/a.bin")" 400 "tenant id '..': 400"
tap_is "$(write "$(printf 'x%.0s' $(seq 151))" "$T/a.bin")" 400 "tenant id of 151 bytes: 400"
tap_is "$(write "$(printf 'x%.0s' $(seq 150))" "$T/a.bin")" 204 "tenant id of 150 bytes: 204"
tap_is "$(write "Az09!._*'()-" "$T/a.bin")" 204 "tenant id of every allowed punctuation: 204"
tap_is "$(curl -s -o "$T/last.body" -w '%{http_code}' "${H[@]}" -H 'X-Scope-OrgID: a' \
    -H 'X-Scope-OrgID: b' --data-binary @"$T/a.bin" "$URL/api/v1/write")" 400 "two X-Scope-OrgID headers: 400"
pt_stop "$PID" 10

serve "$T/off2.log" --storage.embedded.path="$T/store" || tap_bail "promtable did not start"
tap_is "$(readall '' shared_m)" "{__name__=\"shared_m\",job=\"x\"} $T0 $FIVE" \
    "tenancy off again: the shared sample only, no tenant's"
tap_is "$(api '' '/api/v1/label/__name__/values' | jq -c .data)" '["shared_m"]' \
    "tenancy off again: no tenant's metric name is listed"
pt_stop "$PID" 10

"$PROMTABLE" check --storage.embedded.path="$T/store" >"$T/check.out" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -q '^tenant a:' "$T/check.out" && grep -q '^tenant b:' "$T/check.out"; then
    tap_ok "promtable check walks each tenant's space and passes"
else
    tap_not_ok "promtable check walks each tenant's space and passes"
    tap_diag_file "$T/check.out" 20
fi

# ------------------------------------------------------------------------------- limits
HDR=X-Tenant
serve "$T/limits.log" --storage.embedded.path="$T/store2" --tenancy.enabled=true \
    --tenancy.header=X-Tenant --tenancy.max-series=2 --tenancy.max-samples-per-second=1 ||
    tap_bail "promtable did not start"
"$RWTOOL" write 1 "$T/three.bin" s l __name__ s1 v 1 "$T0" s l __name__ s2 v 1 "$T0" \
    s l __name__ s3 v 1 "$T0" || tap_bail rwtool
tap_is "$(write lim "$T/three.bin")" 429 "three new series over tenancy.max_series=2: 429"
tap_check "the 429 names the limit and the tenant" \
    grep -q 'tenant "lim": limit tenancy.max_series (2 active series) reached: 1 new series refused' \
    "$T/last.body"
n=0
for s in s1 s2 s3; do [ -n "$(readall lim $s)" ] && n=$((n + 1)); done
tap_is "$n" 2 "the two series within the limit are stored"
tap_is "$(api lim /api/v1/label/__name__/values | jq -c .data)" '["s1","s2"]' \
    "the refused series is not indexed"
"$RWTOOL" write 1 "$T/ten.bin" s l __name__ r v 1 $((T0 + 1)) v 1 $((T0 + 2)) v 1 $((T0 + 3)) \
    v 1 $((T0 + 4)) v 1 $((T0 + 5)) v 1 $((T0 + 6)) v 1 $((T0 + 7)) v 1 $((T0 + 8)) \
    v 1 $((T0 + 9)) v 1 $((T0 + 10)) || tap_bail rwtool
tap_is "$(write rate "$T/ten.bin")" 204 "a request larger than a second's worth passes on a full bucket"
tap_is "$(write rate "$T/ten.bin")" 429 "the next one within 10 s: 429 (tenancy.max_samples_per_second=1)"
tap_check "the 429 names the limit and the tenant" \
    grep -q 'tenant "rate": limit tenancy.max_samples_per_second (1) exceeded' "$T/last.body"
tap_is "$(write other "$T/a.bin")" 204 "another tenant is not limited by them"
tap_is "$(HDR=X-Scope-OrgID write lim "$T/a.bin")" 401 "tenancy.header=X-Tenant: X-Scope-OrgID is not read"
curl -s "$URL/metrics" >"$T/metrics"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenant_samples_accepted_total 'tenant="lim"')" 2 \
    "metrics: samples accepted of tenant lim"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenant_samples_rejected_total 'tenant="lim"')" 1 \
    "metrics: samples rejected of tenant lim"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenant_active_series 'tenant="lim"')" 2 \
    "metrics: active series of tenant lim"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenant_limit_rejections_total 'tenant="lim"' \
    'limit="max_series"')" 1 "metrics: max_series rejections of tenant lim"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenant_limit_rejections_total 'tenant="rate"' \
    'limit="max_samples_per_second"')" 1 "metrics: rate rejections of tenant rate"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenants)" 3 "metrics: three tenants kept"
pt_stop "$PID" 10
unset HDR

# ------------------------------------------------------------ reads make no tenant
serve "$T/reads.log" --storage.embedded.path="$T/store4" --tenancy.enabled=true \
    --tenancy.max-tenants=2 || tap_bail "promtable did not start"
bad=0
for i in $(seq 1 30); do
    c1=$(status "made-up-$i" /api/v1/labels)
    c2=$(status "made-up-$i" /api/v1/read "${H[@]}" --data-binary @"$T/rr.bin")
    [ "$c1" = 200 ] && [ "$c2" = 200 ] || bad=$((bad + 1))
done
tap_is "$bad" 0 "30 made-up tenant ids read the labels API and remote read: 200 each"
tap_is "$(api made-up-1 /api/v1/labels | jq -c .data)" '[]' "a made-up id reads as empty"
tap_is "$(write real "$T/a.bin")" 204 \
    "then a real tenant's write (tenancy.max_tenants=2): 204, the reads made no tenant"
tap_is "$(readall real shared_m)" "{__name__=\"shared_m\",job=\"x\"} $T0 $ONE" \
    "the real tenant reads its sample back"
curl -s "$URL/metrics" >"$T/metrics"
tap_is "$(pt_metric_sum "$T/metrics" promtable_tenants)" 1 "metrics: one tenant kept"
pt_stop "$PID" 10

# ----------------------------------------------------------------------- HTTP/2 over TLS
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" -days 2 \
    -subj /CN=localhost -addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' >/dev/null 2>&1 ||
    tap_bail "openssl cannot make a certificate"
port=''
pt_free_port port
pt_spawn "$T/tls.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$port" --tenancy.enabled=true \
    --storage.embedded.path="$T/store3" --web.tls-cert-file="$T/cert.pem" --web.tls-key-file="$T/key.pem"
PID=$PT_PID
TU=https://localhost:$port
TC=(curl -s --http2 --cacert "$T/cert.pem" --resolve "localhost:$port:127.0.0.1" -o /dev/null
    -w '%{http_version} %{http_code}' "${H[@]}" --data-binary @"$T/a.bin")
pt_wait_http "$TU/-/ready" 30 "$PID" --cacert "$T/cert.pem" --resolve "localhost:$port:127.0.0.1" ||
    tap_bail "promtable (TLS) did not start"
tap_is "$("${TC[@]}" "$TU/api/v1/write")" "2 401" "HTTP/2: write without a tenant: 401"
tap_is "$("${TC[@]}" -H 'X-Scope-OrgID: a b' "$TU/api/v1/write")" "2 400" "HTTP/2: bad tenant id: 400"
tap_is "$("${TC[@]}" -H 'x-scope-orgid: a' "$TU/api/v1/write")" "2 204" "HTTP/2: with a tenant: 204"
pt_stop "$PID" 10

# ------------------------------------------------------------------------------ Bigtable
if ! pt_cbtemulator_found; then
    tap_skip "Bigtable: tenant isolation" "the Bigtable emulator is not installed ($PT_CBTEMULATOR)"
    tap_done
    exit $?
fi
pt_bigtable_store "$T" ten t_
isolation bigtable "${BT[@]}"
"$PROMTABLE" check "${BT[@]}" >"$T/btcheck.out" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -q '^tenant b:' "$T/btcheck.out"; then
    tap_ok "Bigtable: promtable check walks each tenant's space and passes"
else
    tap_not_ok "Bigtable: promtable check walks each tenant's space and passes"
    tap_diag_file "$T/btcheck.out" 20
fi
tap_done
