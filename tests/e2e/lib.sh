#!/usr/bin/env bash
# Shared helpers for promtable's shell tests (bash). Source it, do not run it:
#
#   . "$(dirname "$0")/lib.sh"
#
# It lives next to the tests, so `prove --exec '' tests/e2e/*.sh` runs it too: run as a
# program it only reports itself skipped.
# TAP output          tap_plan N | tap_ok DESC | tap_not_ok DESC | tap_check DESC CMD...
#                     tap_is GOT WANT DESC | tap_skip DESC REASON | tap_diag MSG...
#                     tap_diag_file FILE [MAXLINES] | tap_skip_all REASON | tap_bail REASON
#                     tap_done  (prints the plan if none was given; returns 1 if a test failed)
# processes           pt_spawn LOG CMD...   (sets PT_PID; killed on exit)
#                     pt_stop PID [SECONDS] (TERM, then KILL; returns the exit status)
#                     pt_alive PID
#                     pt_sleep SECONDS      (a sleep that INT/TERM interrupt at once)
# ports, readiness    pt_free_port VAR      (stores a free loopback TCP port in VAR)
#                     pt_wait_http URL SECONDS [PID] [CURL ARGS...]
# temp dirs, cleanup  pt_mktemp VAR [NAME]  (new dir under ${TMPDIR:-/tmp} into VAR; removed
#                                            on exit unless PT_KEEP_TMP=1)
#                     pt_on_exit CMD        (runs CMD, via eval, at exit before the kills)
#                     pt_require CMD...     (skips the whole file when a command is missing)
#
# The library installs its own EXIT/INT/TERM traps; a test that needs extra cleanup uses
# pt_on_exit instead of setting another trap (which would replace the library's).
# Nothing here uses `set -e`: a failing check must print `not ok`, not abort the file.

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "1..0 # SKIP library for the shell tests, not a test"
    exit 0
fi

# ---------------------------------------------------------------------------------- TAP

TAP_N=0
TAP_FAILED=0
TAP_PLANNED=

tap_plan() {
    TAP_PLANNED=$1
    echo "1..$1"
}

tap_ok() {
    TAP_N=$((TAP_N + 1))
    echo "ok $TAP_N - $*"
}

tap_not_ok() {
    TAP_N=$((TAP_N + 1))
    TAP_FAILED=$((TAP_FAILED + 1))
    echo "not ok $TAP_N - $*"
}

# tap_check DESC CMD... : ok when CMD exits 0.
tap_check() {
    local desc=$1
    shift
    if "$@"; then tap_ok "$desc"; else tap_not_ok "$desc"; return 1; fi
}

# tap_is GOT WANT DESC : string equality, with both values in the diagnostics on failure.
tap_is() {
    if [ "$1" = "$2" ]; then
        tap_ok "$3"
    else
        tap_not_ok "$3"
        tap_diag "  got:      '$1'"
        tap_diag "  expected: '$2'"
        return 1
    fi
}

tap_skip() {
    TAP_N=$((TAP_N + 1))
    echo "ok $TAP_N - $1 # SKIP ${2:-}"
}

# Diagnostics go to stdout as TAP comments so they stay next to the failing line.
tap_diag() {
    local line
    printf '%s\n' "$*" | while IFS= read -r line; do printf '# %s\n' "$line"; done
}

tap_diag_file() {
    local f=$1 max=${2:-60}
    if [ -s "$f" ]; then
        tap_diag "---- last $max lines of $f"
        tail -n "$max" "$f" | while IFS= read -r line; do printf '#   %s\n' "$line"; done
    else
        tap_diag "---- $f is empty or missing"
    fi
}

tap_skip_all() {
    echo "1..0 # SKIP $*"
    exit 0
}

tap_bail() {
    echo "Bail out! $*"
    exit 255
}

tap_done() {
    [ -n "$TAP_PLANNED" ] || echo "1..$TAP_N"
    [ "$TAP_FAILED" -eq 0 ]
}

# ------------------------------------------------------------------ processes and cleanup

PT_PIDS=()
PT_TMPDIRS=()
PT_EXIT_CMDS=()

pt_alive() {
    kill -0 "$1" 2>/dev/null
}

# pt_spawn LOG CMD... : runs CMD in the background with stdin from /dev/null and stdout and
# stderr into LOG; sets PT_PID. Not meant for $(...) (the PID would be lost in the subshell).
pt_spawn() {
    local log=$1
    shift
    "$@" </dev/null >"$log" 2>&1 &
    PT_PID=$!
    PT_PIDS+=("$PT_PID")
}

# pt_stop PID [SECONDS] : SIGTERM, wait up to SECONDS (default 10) for a graceful exit, then
# SIGKILL. Returns the process's exit status (128+signal when killed, 0 when not running or
# not a child of this shell).
pt_stop() {
    local pid=$1 secs=${2:-10} i rc=0
    if pt_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < secs * 10; i++)); do
            pt_alive "$pid" || break
            sleep 0.1
        done
        if pt_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    wait "$pid" 2>/dev/null
    rc=$?
    # Forget it so the exit trap does not signal a recycled PID.
    local keep=() p
    for p in "${PT_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    PT_PIDS=("${keep[@]}")
    return "$rc"
}

# Bash runs a trap only after the foreground command returns, so a plain `sleep 30` would hold
# off Ctrl-C and the cleanup for 30 s; `wait` returns as soon as a signal arrives.
pt_sleep() {
    sleep "$1" &
    PT_SLEEP_PID=$!
    wait "$PT_SLEEP_PID"
    PT_SLEEP_PID=
}

pt_on_exit() {
    PT_EXIT_CMDS+=("$1")
}

pt__cleanup() {
    local rc=$? c p d i
    trap - EXIT INT TERM
    for c in "${PT_EXIT_CMDS[@]}"; do eval "$c"; done
    [ -n "${PT_SLEEP_PID:-}" ] && kill "$PT_SLEEP_PID" 2>/dev/null
    for p in "${PT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    # Give everyone a moment together, then force.
    for ((i = 0; i < 50; i++)); do
        local any=
        for p in "${PT_PIDS[@]}"; do pt_alive "$p" && any=1; done
        [ -n "$any" ] || break
        sleep 0.1
    done
    for p in "${PT_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    if [ "${PT_KEEP_TMP:-0}" = 1 ]; then
        for d in "${PT_TMPDIRS[@]}"; do echo "# kept $d"; done
    else
        for d in "${PT_TMPDIRS[@]}"; do rm -rf -- "$d"; done
    fi
    exit "$rc"
}
trap pt__cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# pt_mktemp VAR [NAME] : creates a directory under ${TMPDIR:-/tmp} and stores its path in VAR
# (not printed: a $(...) subshell could not register it for removal).
pt_mktemp() {
    local pt__d
    pt__d=$(mktemp -d "${TMPDIR:-/tmp}/${2:-pt}.XXXXXX") || tap_bail "mktemp failed"
    PT_TMPDIRS+=("$pt__d")
    printf -v "$1" '%s' "$pt__d"
}

pt_require() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || tap_skip_all "$c not installed"
    done
}

# -------------------------------------------------------------------------- ports, HTTP

PT_PORTS_GIVEN=" "

# A port is taken when it appears as a local port in /proc/net/tcp{,6} (any state, so
# TIME_WAIT and bound-but-not-listening count too). Ports are drawn below the kernel's
# ephemeral range so outgoing connections do not grab them between check and bind, and a
# port is never handed out twice by one test.
pt__port_used() {
    local hex
    hex=$(printf ':%04X ' "$1")
    if [ -r /proc/net/tcp ]; then
        cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{print $2" "}' | grep -q -- "$hex" &&
            return 0
        return 1
    fi
    # No /proc: fall back to "does something accept connections there".
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pt_free_port VAR : stores a free loopback port in VAR.
pt_free_port() {
    local lo=20000 hi=32000 tries p eph
    if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
        read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
        [ "$eph" -gt 11000 ] && hi=$((eph - 1)) && lo=$((hi - 12000))
    fi
    for ((tries = 0; tries < 200; tries++)); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
        case $PT_PORTS_GIVEN in *" $p "*) continue ;; esac
        pt__port_used "$p" && continue
        PT_PORTS_GIVEN="$PT_PORTS_GIVEN$p "
        printf -v "$1" '%s' "$p"
        return 0
    done
    tap_bail "no free loopback port found"
}

# pt_wait_http URL SECONDS [PID] [CURL ARGS...] : polls URL until it answers 2xx. Fails early
# when PID (if not empty) has exited. Returns 0 when ready, 1 on timeout or death.
pt_wait_http() {
    local url=$1 secs=$2 pid=${3:-} deadline
    shift 2
    [ $# -gt 0 ] && shift
    deadline=$((SECONDS + secs))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if [ -n "$pid" ] && ! pt_alive "$pid"; then
            return 1
        fi
        curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
