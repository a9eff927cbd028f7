#!/usr/bin/env bash
# The local stack (docker-compose.yml: Bigtable emulator, promtable-init, promtable,
# Prometheus, Grafana), checked without a Docker engine:
#
#   - docker-compose accepts the file, and its normalized output (`docker-compose config`)
#     is itself a valid compose file;
#   - the five services have the expected images, commands, ports, depends_on conditions
#     and healthchecks, and agree with each other (emulator port = promtable's endpoint,
#     promtable's listen port = published port = healthcheck = Prometheus' URLs; Grafana's
#     data source = the Prometheus service, its dashboard provider = the mounted
#     configs/grafana/dashboards);
#   - the Dockerfile the promtable services build matches (entrypoint, configs in
#     /etc/promtable, curl for the healthcheck, a non-root USER owning /data), and every
#     file the stack mounts or names exists;
#   - promtool accepts configs/prometheus-compose.yml;
#   - promtable accepts configs/promtable-compose.yml: it starts on it (the Bigtable
#     backend opens without talking to the server) with the endpoint pointed at a dead
#     loopback port, answers /-/ready and exits 0 on SIGTERM. Skipped when the build has
#     no Bigtable backend.
#
# Environment: PT_BUILD_DIR (build tree with promtable; default ../../build).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PT_BUILD_DIR:-$ROOT/build}

command -v docker-compose >/dev/null 2>&1 || tap_skip_all "docker-compose not installed"
cd "$ROOT" || tap_bail "cannot cd to $ROOT"
pt_mktemp T compose

# flatten FILE : prints a block-style YAML file as one `path=value` line per scalar, e.g.
#   services.promtable.depends_on.promtable-init.condition=service_completed_successfully
#   services.prometheus.command[0]=--config.file=/etc/prometheus/prometheus-compose.yml
#   services.promtable.ports[0].published=9201
# Enough for what docker-compose prints (both PyYAML's indentless lists in 1.x and the
# indented lists of Compose v2) and for our hand-written configs: block mappings and
# sequences, plain or quoted scalars; flow collections stay one scalar, and block scalars
# (| and >) are not used here.
flatten() {
    awk '
    function unq(v) {
        sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v)
        if (v ~ /^".*"$/ || v ~ /^'\''.*'\''$/) v = substr(v, 2, length(v) - 2)
        return v
    }
    function path(   p, i) {
        p = ""
        for (i = 1; i <= n; i++)
            p = p (kind[i] == "item" || p == "" ? "" : ".") name[i]
        return p
    }
    # content at column ind: "key: value", "key:" or a scalar (sequence items only)
    function entry(ind, c,   k, v, p) {
        if (match(c, /^[^ "'\''#][^ :]*:( |$)/) || match(c, /^"[^"]*":( |$)/)) {
            k = unq(substr(c, 1, RLENGTH - (substr(c, RLENGTH, 1) == " " ? 2 : 1)))
            v = substr(c, RLENGTH + 1)
            p = path()
            if (unq(v) == "") {
                n++; ind_[n] = ind; name[n] = k; kind[n] = "key"
            } else {
                print (p == "" ? "" : p ".") k "=" unq(v)
            }
        } else {
            print path() "=" unq(c)
        }
    }
    {
        line = $0
        if (line ~ /^[ \t]*(#|$)/ || line ~ /^(---|\.\.\.)/) next
        sub(/[ \t]+#.*$/, "", line)
        match(line, /^ */); ind = RLENGTH; c = substr(line, ind + 1)
        if (c == "-" || substr(c, 1, 2) == "- ") {
            while (n > 0 && (ind_[n] > ind || (ind_[n] == ind && kind[n] == "item"))) n--
            p = path()
            idx = cnt[p]++
            n++; ind_[n] = ind; name[n] = "[" idx "]"; kind[n] = "item"
            c = substr(c, 3)
            if (c != "") entry(ind + 2, c)
        } else {
            while (n > 0 && ind_[n] >= ind) n--
            entry(ind, c)
        }
    }' "$1"
}

# get FLAT PATH : the value at PATH (first one), empty when absent.
get() {
    awk -v k="$2=" 'index($0, k) == 1 { print substr($0, length(k) + 1); exit }' "$1"
}

# list FLAT PATH : the scalar items of the sequence at PATH, joined by spaces.
list() {
    awk -v k="$2[" 'index($0, k) == 1 {
        r = substr($0, length(k) + 1)
        if (r ~ /^[0-9]+\]=/) { sub(/^[0-9]+\]=/, "", r); out = out (out == "" ? "" : " ") r }
    } END { print out }' "$1"
}

# items FLAT PATH A B : one line per item of the sequence at PATH, in order: "a b" for an
# item in long form (its fields A and B), the scalar itself for one in short form.
items() {
    awk -v k="$2[" -v a=".$3" -v b=".$4" 'index($0, k) == 1 {
        r = substr($0, length(k) + 1)
        i = r; sub(/\].*/, "", i)
        f = r; sub(/^[0-9]+\]/, "", f); sub(/=.*/, "", f)
        v = r; sub(/^[^=]*=/, "", v)
        if (f == a) x[i] = v
        else if (f == b) y[i] = v
        else if (f == "") s[i] = v
        if (i + 1 > m) m = i + 1
    } END { for (i = 0; i < m; i++) print (i in s ? s[i] : x[i] " " y[i]) }' "$1"
}

# ports FLAT SERVICE : "published:target" for each port of SERVICE, space separated.
ports() {
    items "$1" "services.$2.ports" published target | awk '{
        if (NF == 1) { s = $1; sub(/\/tcp$/, "", s); x = x " " s }
        else x = x " " $1 ":" $2
    } END { sub(/^ /, "", x); print x }'
}

# mounts FLAT SERVICE : "source target" per volume of SERVICE, one per line (short
# "src:dst[:mode]" form of docker-compose 1.x and long form of Compose v2).
mounts() {
    items "$1" "services.$2.volumes" source target |
        awk 'NF == 1 { split($1, f, ":"); print f[1] " " f[2]; next } { print }'
}

# flag_value "ARGS" NAME : the value of --NAME=V in a space-joined argument list.
flag_value() {
    local a
    for a in $1; do
        case $a in --"$2"=*) printf '%s\n' "${a#--"$2"=}"; return 0 ;; esac
    done
    return 1
}

# ------------------------------------------------------------------ docker-compose config

dc_version=$(docker-compose version --short 2>/dev/null)
if docker-compose -f docker-compose.yml config -q 2>"$T/config.err"; then
    tap_ok "docker-compose config -q accepts docker-compose.yml (docker-compose $dc_version)"
else
    tap_not_ok "docker-compose config -q accepts docker-compose.yml"
    tap_diag_file "$T/config.err"
fi
NORM=$T/normalized.yml
if docker-compose -f docker-compose.yml config >"$NORM" 2>"$T/config.err" && [ -s "$NORM" ] &&
    docker-compose -f "$NORM" --project-directory "$ROOT" config -q 2>>"$T/config.err"; then
    tap_ok "the normalized config parses and is itself a valid compose file"
else
    tap_not_ok "the normalized config parses and is itself a valid compose file"
    tap_diag_file "$T/config.err"
fi
F=$T/compose.flat
flatten "$NORM" >"$F"

services=$(docker-compose -f docker-compose.yml config --services 2>/dev/null | sort | tr '\n' ' ')
tap_is "$services" "bigtable grafana prometheus promtable promtable-init " \
    "services: bigtable, promtable-init, promtable, prometheus, grafana"

# ------------------------------------------------------------------------------ services

tap_is "$(get "$F" services.bigtable.image)" \
    "gcr.io/google.com/cloudsdktool/google-cloud-cli:emulators" \
    "bigtable: the Cloud SDK emulators image"
bt_cmd=$(list "$F" services.bigtable.command)
case $bt_cmd in
"gcloud beta emulators bigtable start "*)
    tap_ok "bigtable: runs gcloud beta emulators bigtable start" ;;
*) tap_not_ok "bigtable: runs gcloud beta emulators bigtable start"; tap_diag "command: $bt_cmd" ;;
esac
bt_hostport=$(flag_value "$bt_cmd" host-port)
case $bt_hostport in
0.0.0.0:[0-9]*) tap_ok "bigtable: emulator listens on all interfaces ($bt_hostport)" ;;
*) tap_not_ok "bigtable: emulator listens on all interfaces"; tap_diag "command: $bt_cmd" ;;
esac
bt_port=${bt_hostport##*:}
if [ -n "$(list "$F" services.bigtable.healthcheck.test)" ]; then
    tap_ok "bigtable: has a healthcheck"
else
    tap_not_ok "bigtable: has a healthcheck"
fi

for s in promtable-init promtable; do
    tap_is "$(get "$F" "services.$s.build.context")" "$ROOT" \
        "$s: built from the repository's Dockerfile"
done
img=$(get "$F" services.promtable.image)
if [ -n "$img" ] && [ "$(get "$F" services.promtable-init.image)" = "$img" ]; then
    tap_ok "promtable-init and promtable build the same named image ($img)"
else
    tap_not_ok "promtable-init and promtable build the same named image"
fi
tap_is "$(list "$F" services.promtable-init.command)" \
    "init --config.file=/etc/promtable/promtable-compose.yml" "promtable-init: runs promtable init"
tap_is "$(get "$F" services.promtable-init.depends_on.bigtable.condition)" service_healthy \
    "promtable-init: waits for a healthy emulator"
tap_is "$(list "$F" services.promtable.command)" \
    "--config.file=/etc/promtable/promtable-compose.yml" \
    "promtable: runs on configs/promtable-compose.yml"
tap_is "$(get "$F" services.promtable.depends_on.promtable-init.condition)" \
    service_completed_successfully "promtable: starts after promtable-init exited 0"
tap_is "$(ports "$F" promtable)" "9201:9201" "promtable: publishes 9201"
pt_hc=$(list "$F" services.promtable.healthcheck.test)
case $pt_hc in
*"curl "*"http://127.0.0.1:9201/-/ready"*) tap_ok "promtable: healthcheck curls /-/ready" ;;
*) tap_not_ok "promtable: healthcheck curls /-/ready"; tap_diag "test: $pt_hc" ;;
esac

tap_is "$(get "$F" services.prometheus.image)" "prom/prometheus:v2.42.0" \
    "prometheus: prom/prometheus:v2.42.0"
tap_is "$(ports "$F" prometheus)" "9090:9090" "prometheus: publishes 9090"
tap_is "$(get "$F" services.prometheus.depends_on.promtable.condition)" service_healthy \
    "prometheus: starts once promtable is ready"
prom_cmd=$(list "$F" services.prometheus.command)
prom_cfg=$(flag_value "$prom_cmd" config.file)
prom_src=$(mounts "$F" prometheus | awk -v d="$prom_cfg" '$2 == d { print $1 }')
tap_is "$prom_src" "$ROOT/configs/prometheus-compose.yml" \
    "prometheus: --config.file ($prom_cfg) is configs/prometheus-compose.yml, mounted"

case $(get "$F" services.grafana.image) in
grafana/grafana:[0-9]*) tap_ok "grafana: a pinned grafana/grafana image" ;;
*) tap_not_ok "grafana: a pinned grafana/grafana image" ;;
esac
tap_is "$(ports "$F" grafana)" "3000:3000" "grafana: publishes 3000"
tap_is "$(get "$F" services.grafana.depends_on.prometheus.condition)" service_healthy \
    "grafana: starts once Prometheus is ready"
tap_is "$(mounts "$F" grafana | awk '$2 == "/etc/grafana/provisioning" { print $1 }')" \
    "$ROOT/configs/grafana/provisioning" \
    "grafana: configs/grafana/provisioning mounted on /etc/grafana/provisioning"
G=$T/grafana-ds.flat
flatten configs/grafana/provisioning/datasources/prometheus.yml >"$G" 2>/dev/null
prom_port=$(ports "$F" prometheus)
tap_is "$(get "$G" 'datasources[0].url')" "http://prometheus:${prom_port##*:}" \
    "grafana: the data source is the prometheus service (http://prometheus:${prom_port##*:})"
D=$T/grafana-dash.flat
flatten configs/grafana/provisioning/dashboards/promtable.yml >"$D" 2>/dev/null
dash_path=$(get "$D" 'providers[0].options.path')
tap_is "$(mounts "$F" grafana | awk -v d="$dash_path" '$2 == d { print $1 }')" \
    "$ROOT/configs/grafana/dashboards" \
    "grafana: the dashboard provider's path ($dash_path) is configs/grafana/dashboards, mounted"
gf_home=$(get "$F" services.grafana.environment.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH)
if [ -n "$gf_home" ] && [ "${gf_home%/*}" = "$dash_path" ] &&
    [ -f "configs/grafana/dashboards/${gf_home##*/}" ]; then
    tap_ok "grafana: the home dashboard is a provisioned file (${gf_home##*/})"
else
    tap_not_ok "grafana: the home dashboard is a provisioned file"
    tap_diag "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=$gf_home, provider path $dash_path"
fi

# ------------------------------------------------------------------- files and Dockerfile

missing=()
while read -r src _; do
    [ -n "$src" ] && [ ! -e "$src" ] && missing+=("$src")
done < <(for s in $services; do mounts "$F" "$s"; done)
# The promtable services name files in /etc/promtable, which the Dockerfile fills from configs/.
for a in $(list "$F" services.promtable-init.command) $(list "$F" services.promtable.command); do
    case $a in --config.file=/etc/promtable/*)
        f=configs/${a#--config.file=/etc/promtable/}
        [ -f "$f" ] || missing+=("$f") ;;
    esac
done
[ -f Dockerfile ] || missing+=(Dockerfile)
tap_is "$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//')" "" \
    "every file the stack mounts or names exists"

# Only the last stage ends up in the image.
final_stage=$(awk '/^FROM /{ buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' \
    Dockerfile 2>/dev/null)
problems=()
grep -Eq '^ENTRYPOINT \[ *"/usr/local/bin/promtable" *\]' <<<"$final_stage" ||
    problems+=('the ENTRYPOINT is not ["/usr/local/bin/promtable"]: compose passes only arguments')
grep -Eq '^COPY +(--[^ ]+ +)*\.?/?configs/? +/etc/promtable/? *$' <<<"$final_stage" ||
    problems+=("configs/ is not copied to /etc/promtable")
grep -Eq '^EXPOSE +(.* )?9201( |$)' <<<"$final_stage" || problems+=("no EXPOSE 9201")
grep -Eq '(^|[ \\])curl( |\\|$)' <<<"$final_stage" ||
    problems+=("the runtime stage does not install curl (the healthcheck runs it)")
# Not root: the last USER names a uid/user other than 0/root, and /data, the volume, is
# made and handed to that user before the VOLUME line (which freezes its ownership).
user=$(sed -n 's/^USER \+\([^ ]*\) *$/\1/p' <<<"$final_stage" | tail -1)
case ${user%%:*} in
'' | 0 | root) problems+=("the image runs as root (no USER with another uid)") ;;
esac
grep -Eq 'chown +[^ ]+ +/data( |$)' <<<"$final_stage" ||
    problems+=("/data is not handed to the unprivileged user before VOLUME")
if [ -f .dockerignore ] && grep -Eq '^/?configs/?$|^\*$' .dockerignore; then
    problems+=(".dockerignore leaves configs/ out of the build context")
fi
if [ ${#problems[@]} -eq 0 ]; then
    tap_ok "Dockerfile: promtable entrypoint, configs in /etc/promtable, port 9201, curl, non-root"
else
    tap_not_ok "Dockerfile: promtable entrypoint, configs in /etc/promtable, port 9201, curl, non-root"
    for p in "${problems[@]}"; do tap_diag "$p"; done
fi

# ------------------------------------------------------- the configs agree with the stack

P=$T/promtable.flat
flatten configs/promtable-compose.yml >"$P" 2>/dev/null
tap_is "$(get "$P" storage.backend)" bigtable "promtable-compose.yml: storage.backend is bigtable"
tap_is "$(get "$P" storage.bigtable.endpoint)" "bigtable:$bt_port" \
    "promtable-compose.yml: endpoint is the emulator service (bigtable:$bt_port)"
listen=$(get "$P" web.listen_address)
tap_is "${listen##*:}" 9201 "promtable-compose.yml: listens on 9201, the published port"

M=$T/prometheus.flat
flatten configs/prometheus-compose.yml >"$M" 2>/dev/null
tap_is "$(get "$M" 'remote_write[0].url')" "http://promtable:9201/api/v1/write" \
    "prometheus-compose.yml: remote_write to http://promtable:9201/api/v1/write"
tap_is "$(get "$M" 'remote_read[0].url') $(get "$M" 'remote_read[0].read_recent')" \
    "http://promtable:9201/api/v1/read true" \
    "prometheus-compose.yml: remote_read from http://promtable:9201/api/v1/read, read_recent"
targets=$(grep -E '^scrape_configs\[[0-9]+\]\.static_configs\[[0-9]+\]\.targets' "$M" | tr '\n' ' ')
case $targets in
*localhost:9090*promtable:9201* | *promtable:9201*localhost:9090*)
    tap_ok "prometheus-compose.yml: scrapes itself and promtable" ;;
*)
    tap_not_ok "prometheus-compose.yml: scrapes itself and promtable"
    tap_diag "targets: $targets" ;;
esac

if command -v promtool >/dev/null 2>&1; then
    if promtool check config configs/prometheus-compose.yml >"$T/promtool.log" 2>&1; then
        tap_ok "promtool check config configs/prometheus-compose.yml"
    else
        tap_not_ok "promtool check config configs/prometheus-compose.yml"
        tap_diag_file "$T/promtool.log"
    fi
else
    tap_skip "promtool check config configs/prometheus-compose.yml" "promtool not installed"
fi

# ------------------------------------------------ promtable starts on promtable-compose.yml

PROMTABLE=$BUILD/promtable
desc="promtable starts on configs/promtable-compose.yml and answers /-/ready"
pt_built "$PROMTABLE"
if ! "$PROMTABLE" --help 2>/dev/null | grep -q bigtable; then
    tap_skip "$desc" "this build of promtable has no bigtable backend"
else
    web_port='' dead_port=''
    pt_free_port web_port
    # Nothing listens there: opening the backend must not need the server.
    pt_free_port dead_port
    pt_spawn "$T/promtable.log" env -u BIGTABLE_EMULATOR_HOST "$PROMTABLE" \
        --config.file="$ROOT/configs/promtable-compose.yml" \
        --web.listen-address="127.0.0.1:$web_port" \
        --storage.bigtable.endpoint="127.0.0.1:$dead_port" \
        --storage.bigtable.buffer-path="$T/buffer"
    pid=$PT_PID
    if pt_wait_http "http://127.0.0.1:$web_port/-/ready" 20 "$pid"; then
        tap_ok "$desc"
        pt_stop "$pid" 15
        tap_is "$?" 0 "promtable on the compose config exits 0 on SIGTERM"
    else
        tap_not_ok "$desc"
        tap_diag_file "$T/promtable.log"
        pt_stop "$pid" 5
    fi
fi

tap_done
