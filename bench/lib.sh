# shellcheck shell=bash
# Shared by the benchmark scripts (sourced): medians over rounds, the rounds loop over the
# targets, and the header naming versions and host. Uses the caller's ROUNDS, TARGETS,
# PROMTABLE, VM_BIN, ROOT, SERVER_CPU, LOADGEN_CPU and log().

# median LIST: the median of whitespace-separated numbers (the lower middle for an even
# count).
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# The running server's peak resident memory (VmHWM), MiB; SERVER_PID is the caller's.
peak_rss_mib() { awk '/^VmHWM:/ {printf "%d", $2 / 1024}' "/proc/$SERVER_PID/status" 2>/dev/null || echo -; }

# run_rounds FIGURE...: ROUNDS rounds, each running bench_<target> for every target in
# TARGETS in turn (so a slow spell of the host hits all of them); sets FAILED=1 when one
# fails. Each FIGURE names an associative array of per-target figures; with several rounds
# it ends holding their medians, and ROUND_VALUES["FIGURE|target"] every round's value.
declare -A ROUND_VALUES
run_rounds() {
    local round t v
    for ((round = 1; round <= ROUNDS; round++)); do
        for t in $TARGETS; do
            log ""
            log "=== $t (round $round of $ROUNDS)"
            # shellcheck disable=SC2034  # FAILED is the caller's
            if declare -F "bench_$t" >/dev/null; then
                "bench_$t" || FAILED=1
            else
                log "unknown target $t"
                FAILED=1
            fi
            for v in "$@"; do
                local -n fig=$v
                ROUND_VALUES[$v|$t]+=" ${fig[$t]:-}"
                unset -n fig
            done
        done
    done
    ((ROUNDS > 1)) || return 0
    for t in $TARGETS; do
        for v in "$@"; do
            local -n fig=$v
            # shellcheck disable=SC2004  # fig names an associative array
            fig[$t]=$(median "${ROUND_VALUES[$v|$t]}")
            unset -n fig
        done
    done
}

# print_header WORDS...: a blank line, the description (one line), the versions of
# promtable and VictoriaMetrics, the host and the CPUs used, a blank line.
print_header() {
    local vm pt commit cpu
    # The Debian build prints an empty -version; the package version says it.
    vm=$("$VM_BIN" -version 2>/dev/null | head -n 1 || true)
    [[ -n $vm ]] || vm=$(dpkg-query -W -f '${Version}' victoria-metrics 2>/dev/null || echo unknown)
    pt=$("$PROMTABLE" --version 2>/dev/null || echo "promtable (not built)")
    commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
    echo
    echo "$*"
    echo "$pt (commit $commit), VictoriaMetrics $vm"
    echo "host: $(nproc) CPUs ($cpu), $(uname -sr); server on CPU $SERVER_CPU," \
        "load generator on CPU $LOADGEN_CPU"
    echo
}
