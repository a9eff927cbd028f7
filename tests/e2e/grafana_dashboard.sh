#!/usr/bin/env bash
# The Grafana dashboard (configs/grafana/dashboards/promtable.json), checked without Grafana
# or network:
#
#   - it is valid JSON, and a dashboard Grafana provisions: uid, title, panels with unique
#     ids on the 24-column grid, every query on the $datasource variable, which defaults
#     to the data source configs/grafana/provisioning/datasources provisions;
#   - every promtable_* metric its queries (and variables) use is one that a running
#     promtable exposes on /metrics: started here (tenancy on, for the tenant metrics) on a free loopback port with a temp
#     data dir; a histogram's name_bucket, name_sum and name_count count as its name;
#   - the checker itself refuses a name that does not exist and a _bucket of a counter,
#     so a typo cannot pass.
#
# Environment: PT_BUILD_DIR (build tree with promtable; default ../../build).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PT_BUILD_DIR:-$ROOT/build}
DASH=$ROOT/configs/grafana/dashboards/promtable.json
PROV=$ROOT/configs/grafana/provisioning

pt_require python3 curl
pt_mktemp T grafana

# ------------------------------------------------------------------------ the JSON itself

if python3 -m json.tool "$DASH" >/dev/null 2>"$T/json.err"; then
    tap_ok "configs/grafana/dashboards/promtable.json is valid JSON"
else
    tap_not_ok "configs/grafana/dashboards/promtable.json is valid JSON"
    tap_diag_file "$T/json.err"
fi

# Structure problems, one per line (none: the dashboard is fine); the metric names the
# queries use go to $T/used, one per line.
python3 - "$DASH" "$T/used" >"$T/structure" 2>&1 <<'EOF'
import json, re, sys

dash = json.load(open(sys.argv[1]))
problems = []
names = set()
for k in ("uid", "title", "panels", "schemaVersion"):
    if k not in dash:
        problems.append("no %s" % k)
variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
ds = variables.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    problems.append("no $datasource variable of type datasource for prometheus")
for v in variables.values():
    q = v.get("query")
    text = q.get("query", "") if isinstance(q, dict) else str(q or "")
    names.update(re.findall(r"promtable_[A-Za-z0-9_]+", text + " " + v.get("definition", "")))

ids = set()
panels = []
for p in dash.get("panels", []):
    panels.append(p)
    panels.extend(p.get("panels", []))
queries = 0
for p in panels:
    pid, title = p.get("id"), p.get("title", "?")
    if pid in ids or not isinstance(pid, int):
        problems.append("panel %r: id %r missing or not unique" % (title, pid))
    ids.add(pid)
    g = p.get("gridPos", {})
    if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] + g["w"] > 24:
        problems.append("panel %r: gridPos %r off the 24-column grid" % (title, g))
    if p.get("type") == "row":
        continue
    if p.get("datasource", {}).get("uid") != "${datasource}":
        problems.append("panel %r: not on the $datasource variable" % title)
    targets = p.get("targets", [])
    if not targets:
        problems.append("panel %r: no queries" % title)
    refs = [t.get("refId") for t in targets]
    if len(set(refs)) != len(refs):
        problems.append("panel %r: refIds not unique" % title)
    for t in targets:
        expr = t.get("expr", "")
        queries += 1
        used = re.findall(r"promtable_[A-Za-z0-9_]+", expr)
        if not used:
            problems.append("panel %r %s: no promtable metric in %r" % (title, t.get("refId"), expr))
        if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
            problems.append("panel %r %s: unbalanced brackets" % (title, t.get("refId")))
        names.update(used)
if queries < 10:
    problems.append("only %d queries" % queries)
with open(sys.argv[2], "w") as f:
    f.write("".join(n + "\n" for n in sorted(names)))
if problems:
    print("\n".join(problems))
EOF
if [ $? -eq 0 ] && [ ! -s "$T/structure" ]; then
    tap_ok "the dashboard: uid, title, unique panel ids on the grid, every query on \$datasource"
else
    tap_not_ok "the dashboard: uid, title, unique panel ids on the grid, every query on \$datasource"
    tap_diag_file "$T/structure"
fi
nused=$(wc -l <"$T/used" 2>/dev/null || echo 0)
if [ "$nused" -ge 15 ]; then
    tap_ok "the queries use $nused promtable metric names"
else
    tap_not_ok "the queries use at least 15 promtable metric names (found $nused)"
fi

# ------------------------------------------------------------------ provisioning files

ds_file=$PROV/datasources/prometheus.yml
ds_default=$(python3 -c 'import json,sys; v=[x for x in json.load(open(sys.argv[1]))["templating"]["list"] if x["name"]=="datasource"][0]; print(v["current"]["value"])' "$DASH" 2>/dev/null)
if grep -Eq "^ +uid: *$ds_default *$" "$ds_file" 2>/dev/null &&
    grep -Eq '^ +type: *prometheus *$' "$ds_file"; then
    tap_ok "provisioning: a Prometheus data source with uid $ds_default, the dashboard's default"
else
    tap_not_ok "provisioning: a Prometheus data source with uid '$ds_default', the dashboard's default"
fi
if grep -Eq '^ +path: */' "$PROV/dashboards/promtable.yml" 2>/dev/null; then
    tap_ok "provisioning: a file provider for the dashboards"
else
    tap_not_ok "provisioning: a file provider for the dashboards"
fi

# --------------------------------------------------- the names against a running promtable

# allowed_names METRICS : every name a query may use: each metric's name from its # TYPE
# line, plus _bucket, _sum and _count of histograms (and _sum, _count of summaries).
allowed_names() {
    awk '$1 == "#" && $2 == "TYPE" {
        print $3
        if ($4 == "histogram") { print $3 "_bucket"; print $3 "_sum"; print $3 "_count" }
        if ($4 == "summary") { print $3 "_sum"; print $3 "_count" }
    }' "$1" | sort -u
}

# missing_names USED ALLOWED : the names of USED that ALLOWED lacks.
missing_names() {
    comm -23 <(sort -u "$1") "$2"
}

PROMTABLE=$BUILD/promtable
pt_built "$PROMTABLE"
port=''
pt_free_port port
pt_spawn "$T/promtable.log" "$PROMTABLE" --web.listen-address="127.0.0.1:$port" \
    --storage.backend=embedded --storage.embedded.path="$T/data" --tenancy.enabled=true
pid=$PT_PID
if pt_wait_http "http://127.0.0.1:$port/-/ready" 20 "$pid" &&
    curl -fsS --max-time 5 -o "$T/metrics" "http://127.0.0.1:$port/metrics"; then
    tap_ok "promtable started on 127.0.0.1:$port and served /metrics"
else
    tap_not_ok "promtable started on 127.0.0.1:$port and served /metrics"
    tap_diag_file "$T/promtable.log"
fi
pt_stop "$pid" 10
allowed_names "$T/metrics" >"$T/allowed"

printf 'promtable_no_such_metric_total\npromtable_samples_received_total_bucket\n' >"$T/bogus"
tap_is "$(missing_names "$T/bogus" "$T/allowed" | tr '\n' ' ')" \
    "promtable_no_such_metric_total promtable_samples_received_total_bucket " \
    "the check refuses an unknown name and a _bucket of a counter"
if grep -q '_bucket$' "$T/allowed"; then
    tap_ok "histograms on /metrics map their _bucket/_sum/_count to the base name"
else
    tap_not_ok "histograms on /metrics map their _bucket/_sum/_count to the base name"
fi

while read -r name; do
    if grep -qx -- "$name" "$T/allowed"; then
        tap_ok "$name is on /metrics"
    else
        tap_not_ok "$name is on /metrics"
    fi
done <"$T/used"

# Not a failure: a metric added later and not on the dashboard yet.
unshown=$(awk '$1 == "#" && $2 == "TYPE" { print $3 }' "$T/metrics" | sort -u |
    while read -r m; do grep -q "^$m" "$T/used" || printf '%s ' "$m"; done)
[ -z "$unshown" ] || tap_diag "on /metrics but not on the dashboard: $unshown"

tap_done
