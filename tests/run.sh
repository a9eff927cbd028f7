#!/usr/bin/env bash
# The whole test suite, as CI runs it: a -Werror build and every test under prove, then the
# same again built with AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${PT_JOBS:-2}

suite() {
    local dir=$1
    shift
    cmake -S . -B "$dir" -DPT_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j"$jobs"
    local shell_tests
    shell_tests=$(ls tests/e2e/*.sh | grep -v '/lib\.sh$')
    PT_BUILD_DIR="$PWD/$dir" prove --exec '' "$dir"/tests/*.t $shell_tests
}

suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
PT_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    suite build-asan -DCMAKE_BUILD_TYPE=Debug -DPT_SANITIZE=address,undefined
