#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each one briefly over the
# golden payloads, so the targets stay buildable and the decoders survive a few hundred
# thousand mutated inputs on every run. Longer campaigns: docs/testing.md, "Fuzzing, measured".
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/tests/e2e/lib.sh"

if [ -n "${PT_SANITIZED:-}" ]; then
    tap_skip_all "the fuzz build already runs under the sanitizers in the first pass"
    exit 0
fi
if ! command -v clang >/dev/null; then
    tap_skip_all "clang is not installed"
    exit 0
fi
bdir="${PT_BUILD_DIR:-$here/build}-fuzz"
targets="fuzz_write fuzz_wire_diff fuzz_read fuzz_config fuzz_labels fuzz_http fuzz_bt_merge fuzz_wal fuzz_chunk fuzz_api fuzz_histogram"
echo "1..12"
if CC=clang cmake -S "$here" -B "$bdir" -DPT_FUZZ=ON -DPT_SANITIZE=address,undefined \
        -DCMAKE_BUILD_TYPE=Debug >"$bdir.log" 2>&1 &&
   cmake --build "$bdir" -j2 --target $targets >>"$bdir.log" 2>&1; then
    echo "ok 1 - fuzz targets build with clang"
else
    echo "not ok 1 - fuzz targets build with clang"
    sed 's/^/# /' "$bdir.log" | tail -30
    exit 1
fi
pt_mktemp corpus fuzz
n=2
for t in $targets; do
    mkdir -p "$corpus/$t"
    case $t in
    fuzz_write) cp "$here"/tests/data/prom-2.42-write.bin "$here"/tests/data/prom-2.42-metadata.bin "$here"/tests/data/fuzz/write-hist-v*.bin "$corpus/$t/" ;;
    fuzz_wire_diff) cp "$here"/tests/data/fuzz/wire-*.bin "$corpus/$t/" ;;
    fuzz_read) cp "$here"/tests/data/prom-2.42-read*.bin "$corpus/$t/" ;;
    fuzz_config) cp "$here"/configs/promtable*.yml "$corpus/$t/" ;;
    fuzz_http) cp "$here"/tests/data/http/* "$corpus/$t/" ;;
    fuzz_bt_merge) cp "$here"/tests/data/fuzz/readrows-*.bin "$corpus/$t/" ;;
    fuzz_wal) cp "$here"/tests/data/fuzz/wal-*.bin "$corpus/$t/" ;;
    fuzz_chunk) cp "$here"/tests/data/fuzz/chunk-*.bin "$corpus/$t/" ;;
    fuzz_api) printf '%s' 'm{a="b\\x41",c!~`d`,"e.f"=~"g|h"}' >"$corpus/$t/selector"
        printf '%s' '2023-11-14T22:13:20.5+01:00' >"$corpus/$t/time" ;;
    fuzz_histogram) cp "$here"/tests/data/fuzz/hist-*.bin "$corpus/$t/" ;;
    esac
    # fuzz_wal keeps one RocksDB store open: its per-input leak check would scan RocksDB's
    # heap after nearly every input (see tests/fuzz/long.sh); LSan still checks at exit.
    leaks=
    [ "$t" = fuzz_wal ] && leaks=-detect_leaks=0
    if "$bdir/fuzz/$t" -max_total_time="${PT_FUZZ_SECONDS:-10}" -rss_limit_mb=2048 $leaks \
            -artifact_prefix="$bdir/$t-" "$corpus/$t" >"$corpus/$t.log" 2>&1; then
        echo "ok $n - $t: $(grep -E '^Done' "$corpus/$t.log")"
    else
        # On stderr, which prove shows: the CI log is all there is of a crash found once.
        echo "not ok $n - $t found a crash (input kept as $bdir/$t-*)"
        sed 's/^/# /' "$corpus/$t.log" | grep -v -E '^# #[0-9]+' | tail -60 >&2
        for f in "$bdir/$t"-crash-* "$bdir/$t"-leak-* "$bdir/$t"-oom-* "$bdir/$t"-timeout-*; do
            [ -f "$f" ] && echo "# $f: $(od -An -tx1 -v "$f" | head -c 3000 | tr -s ' \n' ' ')" >&2
        done
    fi
    n=$((n + 1))
done
