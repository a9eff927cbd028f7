#!/usr/bin/env bash
# A measured fuzzing campaign, off CI: builds the libFuzzer targets with clang (ASan + UBSan)
# and runs each target of tests/fuzz/ in turn, one process on one core, for PT_FUZZ_RUNS
# executions (default 10 M), seeded from tests/data (with tests/data/fuzz and
# tests/data/http) and, for fuzz_config, configs/. Each target keeps its corpus across
# campaigns. Per target it prints executions, final coverage (libFuzzer's cov and ft),
# corpus size (libFuzzer's units/bytes, and the files in the corpus directory), execs/s and
# findings (crash, leak, timeout and OOM files). A corpus kept from an earlier campaign
# seeds the next one, so a campaign can be continued where a time cap stopped it.
#
#   nice -n 19 tests/fuzz/long.sh [TARGET...]
#
# Environment:
#   PT_FUZZ_RUNS      executions per target (default 10000000)
#   PT_FUZZ_SECONDS   optional wall-time cap per target (libFuzzer -max_total_time); a target
#                     stopped by it reports how many executions it reached
#   PT_FUZZ_BUILD     the fuzz build directory (default build-fuzz-long in the source tree:
#                     not tests/e2e/fuzz_smoke.sh's Debug build-fuzz)
#   PT_FUZZ_OUT       corpora, findings and logs (default $PT_FUZZ_BUILD/long)
# The summary is also written to $PT_FUZZ_OUT/summary.tsv. A target that finds something
# stops there (libFuzzer's behaviour); its input is in $PT_FUZZ_OUT/findings/TARGET/ and the
# script exits 1 after the remaining targets ran.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
runs=${PT_FUZZ_RUNS:-10000000}
bdir=${PT_FUZZ_BUILD:-$here/build-fuzz-long}
out=${PT_FUZZ_OUT:-$bdir/long}
all="fuzz_write fuzz_read fuzz_config fuzz_labels fuzz_bt_merge fuzz_wal fuzz_chunk fuzz_http
     fuzz_api fuzz_histogram fuzz_wire_diff"
targets=${*:-$all}

command -v clang >/dev/null || { echo "clang is not installed" >&2; exit 2; }
mkdir -p "$out"
echo "building $targets in $bdir (log $out/build.log)"
if ! { CC=clang cmake -S "$here" -B "$bdir" -DPT_FUZZ=ON -DPT_SANITIZE=address,undefined \
           -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$bdir" -j"${PT_FUZZ_JOBS:-2}" --target $targets; } >"$out/build.log" 2>&1; then
    tail -30 "$out/build.log" >&2
    exit 2
fi

# stat VALUE_NAME LOG : the last "stat::NAME: N" line libFuzzer printed (-print_final_stats).
stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -1; }
# last FIELD LOG : the value after "FIELD:" on libFuzzer's last status line (#N ... cov: ...).
last() { grep -E '^#[0-9]+' "$2" | tail -1 | sed -n "s/.* $1: \([^ ]*\).*/\1/p"; }

printf 'target\texecs\texecs_per_s\tseconds\tcov\tft\tcorp\tcorpus_files\tcorpus_bytes\tfindings\tstatus\n' \
    >"$out/summary.tsv"
failed=0
for t in $targets; do
    corpus="$out/corpus/$t"
    finds="$out/findings/$t"
    log="$out/$t.log"
    mkdir -p "$corpus" "$finds"
    seeds=("$here/tests/data")
    [ "$t" = fuzz_config ] && seeds+=("$here/configs")
    extra=()
    tmp=${TMPDIR:-/tmp}
    if [ "$t" = fuzz_wal ]; then
        # One RocksDB store kept open across inputs: libFuzzer's per-input leak check
        # (an LSan scan of RocksDB's heap whenever an input's mallocs and frees differ,
        # nearly every input) would take 99 % of the time; LSan still checks the whole
        # run at exit. Its store lives on tmpfs where there is one: fsync is not fuzzed.
        extra+=(-detect_leaks=0)
        [ -w /dev/shm ] && tmp=/dev/shm
    fi
    echo "== $t: $runs runs (log $log)"
    start=$(date +%s)
    TMPDIR=$tmp "$bdir/fuzz/$t" -runs="$runs" ${PT_FUZZ_SECONDS:+-max_total_time=$PT_FUZZ_SECONDS} \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$finds/" "${extra[@]}" \
        "$corpus" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    execs=$(stat number_of_executed_units "$log")
    nfind=$(find "$finds" -type f | wc -l)
    if [ "$rc" -eq 0 ] && [ "$nfind" -eq 0 ]; then
        if [ "${execs:-0}" -ge "$runs" ]; then status=done; else status=stopped-by-time-cap; fi
    else
        status="FAILED(rc=$rc)"
        failed=1
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${execs:-?}" \
        "$(stat average_exec_per_sec "$log")" "$secs" "$(last cov "$log")" "$(last ft "$log")" \
        "$(last corp "$log")" \
        "$(find "$corpus" -type f | wc -l)" "$(du -sb "$corpus" | cut -f1)" "$nfind" "$status" \
        >>"$out/summary.tsv"
    tail -1 "$out/summary.tsv"
    [ "$nfind" -eq 0 ] || find "$finds" -type f | sed 's/^/   finding: /'
done
echo
column -t -s "$(printf '\t')" "$out/summary.tsv"
exit $failed
