#!/usr/bin/env bash
# The layers (docs/architecture.md, "Code map") are enforced by the build: base <- backends;
# base <- adapter/http; base <- adapter/proto <- adapter/store (with backends) <-
# adapter/daemon. A file of a layer is compiled with that layer's include path, which holds
# nothing of the layers above it. Here probe files are compiled with the real flags of a
# file in each layer (from compile_commands.json): an include of a higher layer, of a
# Prometheus .pb-c.h from a backend, or of another backend's internals must fail to compile;
# includes within the layer must compile. And no source escapes its include path with a
# relative "../" include.
set -u
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
pt_require jq
here=$PT_ROOT bdir=$PT_BUILD
db="$bdir/compile_commands.json"
# Every configured build tree has it (CMAKE_EXPORT_COMPILE_COMMANDS): missing is a failure.
[ -f "$db" ] || tap_bail "no $db (PT_BUILD_DIR=${PT_BUILD_DIR:-unset} is not a configured build)"
pt_mktemp tmp layers

# flags_of FILE: the compile command of FILE without its output and input.
flags_of() {
    jq -r --arg f "$here/$1" '.[] | select(.file == $f) | .command' "$db" | head -n 1 |
        sed -e 's/ -o [^ ]*//' -e 's/ -c [^ ]*$//'
}

# probe LAYER_FILE HEADER WANT: compiles '#include "HEADER"' with LAYER_FILE's flags;
# WANT is "fails" or "compiles".
probe() {
    local flags out
    flags=$(flags_of "$1")
    if [ -z "$flags" ]; then
        tap_not_ok "$1 is in compile_commands.json"
        return
    fi
    printf '#include "%s"\nint pt_probe;\n' "$2" >"$tmp/probe.c"
    if (cd "$bdir" && eval "$flags -fsyntax-only $tmp/probe.c") >"$tmp/out" 2>&1; then
        out=compiles
    else
        out=fails
    fi
    tap_is "$out" "$3" "$(dirname "$1")/: #include \"$2\" $3"
    [ "$out" = "$3" ] || tap_diag_file "$tmp/out" 5
}

for h in backend.h http.h app.h remote.pb-c.h bigtable.pb-c.h embedded_int.h; do
    probe base/arena.c "$h" fails
done
probe base/arena.c buf.h compiles

for h in app.h config.h store.h decode.h http.h remote.pb-c.h types.pb-c.h; do
    probe backends/registry.c "$h" fails
done
probe backends/registry.c backend.h compiles
probe backends/registry.c arena.h compiles

# One backend cannot reach into another's internals.
probe backends/embedded/embedded.c bigtable_int.h fails
probe backends/embedded/embedded.c bigtable.pb-c.h fails
probe backends/bigtable/bigtable.c embedded_int.h fails

# The HTTP server sees base/ and its own folder: no Prometheus, storage or daemon header.
for h in metrics.h app.h store.h config.h backend.h remote.pb-c.h; do
    probe adapter/http/server.c "$h" fails
done
probe adapter/http/server.c error.h compiles
probe adapter/http/server.c server_int.h compiles

# The protocol sees base/ and its own folder (and, privately, the Prometheus messages).
for h in store.h rowkey.h backend.h metrics.h app.h http.h; do
    probe adapter/proto/samples.c "$h" fails
done
probe adapter/proto/samples.c model.h compiles
probe adapter/proto/decode.c remote.pb-c.h compiles

# The store sees the protocol's plain types and the backends, no Prometheus message and
# nothing of the daemon.
for h in remote.pb-c.h types.pb-c.h histpb.h readpb.h metrics.h ha.h tenant.h config.h \
    app.h http.h embedded_int.h; do
    probe adapter/store/read.c "$h" fails
done
for h in model.h wire.h backend.h store_stats.h; do
    probe adapter/store/read.c "$h" compiles
done

# The daemon sees every layer's public headers, but no Prometheus message either (the
# protocol turns them into plain types) and no backend's internals.
for h in remote.pb-c.h embedded_int.h bigtable_int.h; do
    probe adapter/daemon/app.c "$h" fails
done
for h in store.h decode.h http.h backend.h; do
    probe adapter/daemon/app.c "$h" compiles
done

rel=$(cd "$here" && grep -rnE '^#[[:space:]]*include[[:space:]]*"(\.\./|/)' base adapter backends)
tap_is "$rel" "" "no source includes through a relative or absolute path"
tap_done
