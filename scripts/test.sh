#!/usr/bin/env bash
# Installs dependencies, builds dsv41 and runs every test. The README's test command.
#   scripts/test.sh              release build (warnings as errors) + all tests
#   scripts/test.sh --sanitize   the fast subset (ctest -LE slow) under ASan + UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
# Compiler cache hits across clones: paths below the repository are hashed relative to it.
export CCACHE_BASEDIR="$PWD"
mode=release
[[ "${1:-}" == "--sanitize" ]] && mode=sanitize
if [[ $(id -u) -eq 0 ]] || command -v sudo >/dev/null; then bash scripts/setup.sh; fi
jobs=$(nproc)
# The sanitizer job leaves out the tests labelled `slow` (the model goldens, the bf16 twins of the
# forward and engine suites, the bench CLI, the capped-SIMD runs): the same code runs in their
# siblings. It does not build the programs whose tests are all slow (DSV41_SLOW_TESTS=OFF).
case "$mode" in
  release) dir=build/release; flags=(-DCMAKE_BUILD_TYPE=Release -DDSV41_WERROR=ON); select=() ;;
  # -g1: line tables are all the sanitizer reports need, and compile and link faster than -g.
  sanitize) dir=build/sanitize
    flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DDSV41_SANITIZE=ON -DDSV41_BENCHMARKS=OFF
           -DDSV41_SLOW_TESTS=OFF)
    select=(-LE slow) ;;
esac
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The sanitizer job also fills fresh arena and KV cache memory with NaN bytes (base/poison.h): a
# read of memory nobody wrote changes a result.
if [[ "$mode" == sanitize ]]; then export DSV41_POISON_MEMORY=1; fi
# A hung test (a lost rank, a stuck server) fails after 25 minutes instead of stalling the job.
ctest --test-dir "$dir" --output-on-failure --timeout 1500 -j "$jobs" "${select[@]}"
